"""One plan object flows down: load, check and export run the plan the user previewed, and a
check builds the meta model once."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fusion_core
from fusion_core import UsageError, check, inspect_model, load
from fusion_core.model import tree as tree_module
from fusion_core.model.checkpoint import read_index

PE = {"patch_embeddings": True}


@pytest.fixture
def meta_builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts real calls of build_meta_model (the real function runs; only the count is added)."""
    calls: list[str] = []
    real = tree_module.build_meta_model

    def counting(source, *args, **kwargs):
        calls.append(source.name)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(tree_module, "build_meta_model", counting)
    return calls


def test_check_of_a_plan_builds_no_meta_model(qwen2_vl_dir: Path, meta_builds: list[str]) -> None:
    plan = inspect_model(str(qwen2_vl_dir)).plan(PE)
    assert len(meta_builds) == 1
    result = check(plan, repeats=1, time_budget=0, upstream=False)
    assert result.passed and [m.path for m in result.modules] == list(plan.matched_paths)
    assert len(meta_builds) == 1  # the plan's own meta model served the fused and the original load


def test_check_of_a_spec_builds_the_meta_model_once(qwen2_vl_dir: Path, meta_builds: list[str]) -> None:
    result = check(qwen2_vl_dir, PE, repeats=1, time_budget=0, upstream=False)
    assert result.passed
    assert len(meta_builds) == 1


def test_a_plan_with_a_different_fusion_config_is_refused(qwen2_vl_dir: Path) -> None:
    plan = inspect_model(str(qwen2_vl_dir)).plan(PE)
    with pytest.raises(UsageError, match="different fusion_config"):
        load(plan, {"qkv": True})
    assert load(plan, PE).fused_modules == ["model.visual.patch_embed"]  # the same config is fine


def test_load_and_export_run_the_plan_they_are_given(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    plan = inspect_model(str(qwen2_vl_dir)).plan(PE)
    loaded = load(plan)
    assert loaded.plan is plan
    result = fusion_core.export(plan, tmp_path / "out", verify_outputs=False)
    assert result.fusion_config == PE
    written = read_index(tmp_path / "out")
    assert "visual.patch_embed.linear_proj.weight" in written.tensors
    w = loaded.model.get_submodule("model.visual.patch_embed").linear_proj.weight
    assert tuple(w.shape) == tuple(written.tensors["visual.patch_embed.linear_proj.weight"].shape)
    assert w.dtype == torch.float32
