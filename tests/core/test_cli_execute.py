"""``fusion-core load`` and ``fusion-core check``: output, JSON, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _wrong_family import wrong_family

from fusion_core.cli.main import main

# a check whose timings no assertion reads: one round each, no budget
UNTIMED = ("--no-upstream", "--repeats", "1", "--time-budget", "0")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_load_prints_report(capsys: pytest.CaptureFixture[str], qwen2_vl_dir: Path) -> None:
    code, out, _ = _run(capsys, "load", str(qwen2_vl_dir), "--fusion", "patch_embeddings")
    assert code == 0
    assert "checkpoint layout: original" in out and "missing keys: 0, unexpected keys: 0" in out
    assert "model.visual.patch_embed" in out and "FusedPatchEmbed" in out and "conv3d_to_linear" in out


def test_load_json(capsys: pytest.CaptureFixture[str], qwen2_vl_dir: Path) -> None:
    code, out, _ = _run(
        capsys, "load", str(qwen2_vl_dir), "--fusion", "patch_embeddings", "--dtype", "bfloat16", "--json"
    )
    assert code == 0
    report = json.loads(out)
    assert report["dtype"] == "bfloat16" and report["fusion_config"] == {"patch_embeddings": True}
    assert report["fused_modules"] == [
        {"module": "model.visual.patch_embed", "family": "patch_embeddings", "class": "FusedPatchEmbed"}
    ]


@pytest.mark.slow  # the upstream parity check runs in a subprocess
def test_check_demo_shows_speedup_and_upstream_defect(capsys: pytest.CaptureFixture[str]) -> None:
    """The headline: passes within 1e-5 in float32, shows timings and the upstream finding."""
    code, out, _ = _run(capsys, "check", "demo:qwen2-vl", "--fusion", "patch_embeddings", "--repeats", "2")
    assert code == 0, out
    assert out.rstrip().endswith("PASSED")
    assert "model.visual.patch_embed" in out and "end to end (logits)" in out and "speedup" in out
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("upstream"))
    upstream = lines[start]  # with its continuation lines (the CLI fits 120 columns)
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        upstream += " " + line.strip()
    from fusion_core.run.upstream import upstream_knows

    if upstream_knows("patch_embeddings")[0]:
        import transformers

        if transformers.__version__ == "5.24.0":  # the defect measured on this version
            assert "linear_proj.weight MISSING, randomly initialized" in upstream
            assert "OUTSIDE tolerance" in upstream and "LEAK" in upstream


def test_check_json_exit_zero(capsys: pytest.CaptureFixture[str], qwen2_vl_dir: Path) -> None:
    code, out, _ = _run(capsys, "check", str(qwen2_vl_dir), "--fusion", "patch_embeddings", "--json", *UNTIMED)
    data = json.loads(out)
    assert code == 0 and data["passed"] is True and data["upstream"] is None
    assert data["modules"][0]["comparison"]["max_abs_diff"] <= 1e-5


def test_check_failure_exit_one(capsys: pytest.CaptureFixture[str], qwen2_vl_dir: Path) -> None:
    with wrong_family() as name:
        code, out, err = _run(capsys, "check", str(qwen2_vl_dir), "--fusion", name, *UNTIMED)
    assert code == 1, err
    assert out, err
    assert out.rstrip().endswith("FAILED") and "FAIL" in out


def test_check_nothing_to_check_exits_5(capsys: pytest.CaptureFixture[str], llama_dir: Path) -> None:
    """Nothing checked is not a pass (a trap in CI): exit 5, like pytest's "no tests ran"."""
    code, out, _ = _run(capsys, "check", str(llama_dir), "--fusion", "patch_embeddings")
    assert code == 5
    assert "nothing to check: no module of LlamaForCausalLM matches patch_embeddings" in out
    assert "PASSED" not in out and out.rstrip().endswith("NOTHING CHECKED")
    code, out, _ = _run(capsys, "check", str(llama_dir), "--fusion", "patch_embeddings", "--json")
    data = json.loads(out)
    assert code == 5 and data["passed"] is False and data["nothing_to_fuse"] is True


def test_errors_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, llama_dir: Path) -> None:
    code, out, err = _run(capsys, "load", str(tmp_path / "nope"), "--fusion", "patch_embeddings")
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1 and "nope" in err
    code, _, err = _run(capsys, "check", str(llama_dir))
    assert code == 2 and "--fusion" in err
    code, _, err = _run(capsys, "load", str(llama_dir), "--dtype", "int8")
    assert code == 2 and "int8" in err
    code, _, err = _run(capsys, "check", str(llama_dir), "--fusion", "no_such_family")
    assert code == 2 and "no_such_family" in err
    code, _, err = _run(capsys, "load", "arch:llama", "--fusion", "patch_embeddings")
    assert code == 1 and "no weights" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check", "MODEL", "--batch", "0"], "check: --batch must be at least 1, got 0"),
        (["check", "MODEL", "--repeats", "0"], "check: --repeats must be at least 1, got 0"),
        (["check", "MODEL", "--time-budget", "nan"], "check: --time-budget must be at least 0, got nan"),
        (["check", "MODEL", "--threads", "0"], "check: --threads must be at least 1, got 0"),
        (["export", "MODEL", "OUT", "--max-shard-size", "0"], "export: --max-shard-size '0' must be positive"),
    ],
)
def test_option_errors_name_the_flag(
    capsys: pytest.CaptureFixture[str], llama_dir: Path, tmp_path: Path, argv: list[str], message: str
) -> None:
    """The engine's option objects name the option (``min_rounds``); the CLI prints its flag."""
    from fusion_core.boundary.options import CheckOptions, OptionError

    names = {"MODEL": str(llama_dir), "OUT": str(tmp_path / "out")}
    code, out, err = _run(capsys, *[names.get(a, a) for a in argv], "--fusion", "qkv")
    assert (code, out) == (2, "") and err == f"fusion-core: error: {message}\n"
    with pytest.raises(OptionError) as info:
        CheckOptions.build(repeats=0)
    assert info.value.option == "min_rounds" and "--" not in str(info.value)
