"""The new families through the whole pipeline on the demos: export both ways (bitwise),
fused-layout loading of the export, and the inference checks."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from fusion_core import check, export, load
from fusion_core.boundary.convert import to_plain
from fusion_core.model.demo import demo_path

CASES = {
    "llama": {"qkv": True, "gate_up": True},
    "vit": {"qkv": True, "patch_embeddings_2d": True},
}


def _tensors(folder):
    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(f))
    return out


@pytest.mark.parametrize("demo", sorted(CASES))
def test_export_round_trip_is_bitwise_and_fused_export_loads(demo, tmp_path):
    families = CASES[demo]
    src = demo_path(demo)
    export(str(src), tmp_path / "fused", families, layout="fused")  # verified by the exporter too
    fused_keys = _tensors(tmp_path / "fused")
    assert any(k.endswith("qkv_proj.weight") for k in fused_keys)
    assert not any(k.endswith((".q_proj.weight", ".gate_proj.weight", ".patch_embedding.weight")) for k in fused_keys)
    export(str(tmp_path / "fused"), tmp_path / "original", families, layout="original")
    before, after = _tensors(src), _tensors(tmp_path / "original")
    assert sorted(before) == sorted(after)
    for key, tensor in before.items():
        assert tensor.dtype == after[key].dtype and torch.equal(
            tensor.view(torch.uint8), after[key].view(torch.uint8)
        ), key
    loaded = load(str(tmp_path / "fused"))
    assert loaded.layout == "fused" and loaded.plan.fusion_config == families
    assert {loaded.plan.matched_paths[p] for p in loaded.fused_modules} == set(families)


@pytest.mark.parametrize("demo", sorted(CASES))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_checks_pass_on_the_demos(demo, dtype):
    families = CASES[demo]
    result = check(str(demo_path(demo)), families, dtype=dtype, repeats=1, time_budget=0, upstream=False)
    report = to_plain(result)
    assert report["passed"], report
    assert {m["family"] for m in report["modules"]} == set(families)
    assert all(m["passed"] and m["fused_class"].startswith("Fused") for m in report["modules"])
