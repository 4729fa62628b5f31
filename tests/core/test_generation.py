"""``check --generate N`` (issue 29, item 4): greedy decoding with the KV cache, original against
fused on one copy of the weights, compared token by token."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from fusion_core import check
from fusion_core.cli import main

ALL = {"patch_embeddings": True, "qkv": True, "gate_up": True}


def _png(folder: Path) -> Path:
    path = folder / "photo.png"
    Image.fromarray((np.indices((56, 84)).sum(0) * 5 % 256).astype("uint8")).convert("RGB").save(path)
    return path


def test_a_vlm_generates_the_same_tokens_fused(qwen2_vl_dir: Path, tmp_path: Path, capsys) -> None:
    argv = ["check", str(qwen2_vl_dir)] + [a for f in ALL for a in ("--fusion", f)]
    argv += ["--image", str(_png(tmp_path)), "--generate", "16", "--no-upstream", "--time-budget", "0", "--json"]
    assert main(argv) == 0
    answer = json.loads(capsys.readouterr().out)
    g = answer["generation"]
    assert g["identical"] is True and g["new_tokens"] == 16 and g["verdict"] == "identical"
    assert g["first_divergence"] is None and g["cache"] == "dynamic" and "without a KV cache" not in g["note"]
    assert [i["source"] for i in answer["end_to_end"]["inputs"] if i["modality"] == "image"] == ["photo.png"]


def test_static_cache_generation_and_the_text_line(llama_dir: Path, capsys) -> None:
    result = check(str(llama_dir), {"qkv": True, "gate_up": True}, upstream=False, time_budget=0, generate=8,
                   cache="static")  # fmt: skip
    g = result.generation
    assert result.passed and g.identical and g.new_tokens == 8 and g.cache == "static"
    assert g.note == "text: a batch of two, the second row left-padded by 4 token(s)"
    assert g.line == "generation (static cache): 8 new tokens identical, original and fused"


def test_a_wrong_family_diverges_or_is_caught(llama_dir: Path) -> None:
    """A fused model that computes something else does not generate the same tokens: the
    generation says where, with each side's top tokens, and the check fails."""
    from _wrong_family import scaled_gate_up

    with scaled_gate_up(50.0, "test_shifted_gate_up") as name:
        result = check(str(llama_dir), {name: True}, upstream=False, time_budget=0, generate=12)
    g = result.generation
    assert not result.passed and not g.identical and g.verdict in ("diverges", "near tie")
    if g.verdict == "diverges":
        d = g.first_divergence
        assert d is not None and len(g.original_top) == 5 and len(g.fused_top) == 5
        assert g.original_top[0][0] == d["original"]
