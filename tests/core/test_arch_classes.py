"""Classes of architectures that once made ``fusion-core check`` fail on valid inputs (issue 34).

Each test uses a tiny real model of an architecture that shows the class (seeded, built from
its transformers config class and ``save_pretrained``), never the named checkpoint itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fusion_core.cli.main import main

CLI_FAST = ["--no-upstream", "--repeats", "1", "--time-budget", "0"]


def _save(model, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    return folder


def falcon_h1(folder: Path) -> Path:
    """Falcon-H1: its default ``time_step_limit=(0, inf)`` is saved as ``{"__float__": "Infinity"}``."""
    import torch
    from transformers import FalconH1Config, FalconH1ForCausalLM

    torch.manual_seed(0)
    config = FalconH1Config(
        vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, mamba_d_ssm=32, mamba_n_heads=2, mamba_d_head=16, mamba_n_groups=1,
        mamba_d_state=8, mamba_chunk_size=8, max_position_embeddings=64,
    )  # fmt: skip
    return _save(FalconH1ForCausalLM(config).eval(), folder)


@pytest.fixture(scope="module")
def falcon_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return falcon_h1(tmp_path_factory.mktemp("falcon_h1") / "model")


# -- 1. a config transformers saved with an infinite value ------------------------------------


def test_infinity_in_a_saved_config_loads(falcon_dir: Path, capsys) -> None:
    """``{"__float__": "Infinity"}`` reads back as transformers' own loader reads it: plan, tree and check run."""
    assert "__float__" in (falcon_dir / "config.json").read_text()
    from fusion_core.model.sources import config_from_dict

    config = config_from_dict(json.loads((falcon_dir / "config.json").read_text()), "config.json")
    assert tuple(config.time_step_limit) == (0.0, float("inf"))
    assert main(["plan", str(falcon_dir), "--fusion", "qkv"]) == 0
    assert main(["tree", str(falcon_dir)]) == 0
    capsys.readouterr()
    assert main(["check", str(falcon_dir), "--fusion", "qkv", "--fusion", "gate_up", *CLI_FAST]) == 0
    assert "PASSED" in capsys.readouterr().out


def test_a_rejected_config_value_keeps_its_reason(falcon_dir: Path, tmp_path: Path, capsys) -> None:
    """A value the config class truly refuses: the message says why (bounded), not only which field."""
    data = json.loads((falcon_dir / "config.json").read_text())
    data["time_step_limit"] = "soon"
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert main(["plan", str(tmp_path / "config.json"), "--fusion", "qkv"]) == 1
    err = capsys.readouterr().err.strip()
    assert "config values rejected by 'falcon_h1'" in err and "time_step_limit" in err
    reason = err.split("Validation error for field 'time_step_limit':", 1)[1]
    assert "soon" in reason and len(err) < 1_000, err
