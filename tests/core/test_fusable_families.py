"""Every model family of the installed transformers with a fusable Conv3d patch embedding,
found at run time (see ``_fusable_families``): a tiny seeded checkpoint per base / task /
omni top-level class, then fused load and check (per module and end to end, float32).

A family added to transformers later is picked up without editing this file. A family
that cannot be built tiny automatically is skipped with the reason in the skip message.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _fusable_families import FAMILY, fusable_families, tiny_config

from fusion_core import check

_saved: dict[str, Path] = {}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "family_class" not in metafunc.fixturenames:
        return
    params = []
    for case in fusable_families():
        if case.tiny_error:
            reason = f"{case.model_type}: cannot be built automatically ({case.tiny_error})"
            params.append(
                pytest.param((case.model_type, ""), id=case.model_type, marks=pytest.mark.skip(reason=reason))
            )
            continue
        for name in case.classes:
            params.append(pytest.param((case.model_type, name), id=f"{case.model_type}-{name}"))
        for i, note in enumerate(case.notes):  # classes of a found family that cannot be built tiny
            reason = f"{case.model_type}: {note}"
            params.append(
                pytest.param(
                    (case.model_type, ""), id=f"{case.model_type}-untestable{i}", marks=pytest.mark.skip(reason=reason)
                )
            )
    metafunc.parametrize("family_class", params)


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


def test_load_and_check(family_class: tuple[str, str], tiny_root: Path) -> None:
    model_type, class_name = family_class
    folder = _checkpoint(tiny_root, model_type, class_name)
    result = check(folder, {FAMILY: True}, repeats=1, upstream=False)  # loads fused and original
    assert result.passed, result.to_dict()
    report = result.load
    assert report["checkpoint_layout"] == "original" and report["fused_modules"]
    assert report["missing_keys"] == [] and report["unexpected_keys"] == []
    assert [m.path for m in result.modules] == [m["module"] for m in report["fused_modules"]]
    assert all(m.fused_class.startswith("Fused") for m in result.modules)
    for module in result.modules:
        assert module.comparison.max_abs_diff <= 1e-5, module.to_dict()
    assert result.end_to_end.comparison.max_abs_diff <= 1e-5 + 1e-5 * result.end_to_end.comparison.max_original
