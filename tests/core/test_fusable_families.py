"""Every model family of the installed transformers with a fusable Conv3d patch embedding,
found at run time (see ``_fusable_families``): a tiny seeded checkpoint per base / task /
omni top-level class, then fused load and check (per module and end to end, float32).

A family added to transformers later is picked up without editing this file. The
families are found inside the tests (finding them meta-initializes models, which never
happens at collection time), so every class is checked in one test that lists all the
classes that fail. A family that cannot be built tiny is reported by test_export_families.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _fusable_families import FAMILY, fusable_families, tiny_config

from fusion_core import check
from fusion_core.boundary.convert import to_plain

_saved: dict[str, Path] = {}


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fusable-families")


def _checkpoint(root: Path, model_type: str, class_name: str) -> Path:
    """Seeded random weights of the tiny config, saved once per session."""
    import transformers

    folder = _saved.get(class_name)
    if folder is None:
        folder = root / class_name
        state = torch.random.get_rng_state()
        torch.manual_seed(0)
        try:
            model = getattr(transformers, class_name)(tiny_config(model_type))
        finally:
            torch.random.set_rng_state(state)
        model.save_pretrained(folder)
        _saved[class_name] = folder
    return folder


def test_family_found_at_run_time() -> None:
    found = {c.model_type for c in fusable_families() if c.classes}
    # the families the design names; more may come with newer transformers
    assert {"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v", "videomae"} <= found
    assert any(c.model_type.endswith("omni") for c in fusable_families() if c.classes)


# Mixture-of-experts language models whose tiny random router sits on near-ties for the
# check's image+text input: the fused patch embedding (exact to float rounding, verified
# alone) moves the vision features by ~1e-6, a token picks another expert, and the
# outputs part by ~1 (measured: the first module to differ is language_model.layers.1.mlp.experts,
# with every experts implementation; two original loads agree bitwise). For these the check
# must still verify every fused module exactly and run end to end; its verdict is not asserted.
ROUTING_NEAR_TIES = {"minimax_m3_vl"}


def _load_and_check(model_type: str, class_name: str, root: Path) -> None:
    folder = _checkpoint(root, model_type, class_name)
    # loads fused and original; no timing rounds beyond the first (correctness is the point here)
    result = check(folder, {FAMILY: True}, repeats=1, time_budget=0, upstream=False)
    if model_type in ROUTING_NEAR_TIES:
        assert result.end_to_end.ran and all(m.passed for m in result.modules), to_plain(result)
        return
    assert result.passed, to_plain(result)
    report = result.load
    assert report.checkpoint_layout == "original" and report.fused_modules
    assert report.missing_keys == [] and report.unexpected_keys == []
    assert [m.path for m in result.modules] == [m.module for m in report.fused_modules]
    assert all(m.fused_class.startswith("Fused") for m in result.modules)
    for module in result.modules:
        assert module.comparison.max_abs_diff <= 1e-5, to_plain(module)
    e2e = result.end_to_end.comparison
    assert e2e.max_abs_diff <= 1e-5 + 1e-5 * e2e.max_original, to_plain(e2e)


SHARDS = 4  # the classes in four tests, so that parallel workers share them (each takes about a minute)


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS))
def test_load_and_check_every_family(tiny_root: Path, shard: int) -> None:
    failures, checked = [], []
    classes = [(case.model_type, name) for case in fusable_families() for name in case.classes]
    for model_type, class_name in classes[shard::SHARDS]:
        try:
            _load_and_check(model_type, class_name, tiny_root)
        except Exception as e:  # every class is tried; the message lists each failure
            failures.append(f"{model_type}/{class_name}: {type(e).__name__}: {str(e)[:400]}")
        checked.append(class_name)
    assert len(classes) >= 10 and len(checked) >= len(classes) // SHARDS
    assert not failures, "\n".join(failures)
