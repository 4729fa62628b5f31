"""Export round trips for every model family with a fusable Conv3d patch embedding.

The families are found at run time (``_fusable_families``), so a family that a later
transformers adds is covered without editing this test. For each base and task class: a
tiny model with seeded random weights, saved by ``save_pretrained``; exported to the fused
layout, which our loader must load strictly into the fused model (and, plainly, into the
source model exactly), and back to the original layout, which must reproduce the source
bitwise. (The outputs of fused vs original models, per family, are the checks' tests;
here the export's output check runs on the demo model, see test_export.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _export_helpers import raw_bytes_of, tensors_of
from _fusable_families import fusable_families, tiny_config

from fusion_core import export, load, load_plain

CASES = [
    pytest.param(case.model_type, cls, id=f"{case.model_type}-{cls}")
    for case in fusable_families()
    for cls in case.classes
]
BROKEN = [
    pytest.param(case.model_type, case.tiny_error, id=case.model_type) for case in fusable_families() if case.tiny_error
]


@pytest.mark.parametrize(("model_type", "class_name"), CASES)
def test_export_round_trip(model_type: str, class_name: str, tmp_path: Path) -> None:
    import transformers

    cls = getattr(transformers, class_name)
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    try:
        model = cls(tiny_config(model_type))
    finally:
        torch.random.set_rng_state(state)
    model.save_pretrained(tmp_path / "src")
    del model

    fused = export(tmp_path / "src", tmp_path / "fused", {"patch_embeddings": True}, verify_outputs=False)
    assert fused.source_layout == "original" and fused.transformed
    assert all(".linear_" in key for key in fused.transformed), fused.transformed
    assert fused.verification.transforms_inverted >= 1
    # the fused export loads strictly (no missing or unexpected key) into the fused model, and
    # a plain load of it is the source model exactly
    loaded = load(str(tmp_path / "fused"))
    assert loaded.layout == "fused" and loaded.fused_modules
    plain, source = load_plain(str(tmp_path / "fused")).state_dict(), load_plain(str(tmp_path / "src")).state_dict()
    assert list(plain) == list(source)
    assert all(torch.equal(plain[k], source[k]) for k in source)

    back = export(
        tmp_path / "fused", tmp_path / "back", {"patch_embeddings": True}, layout="original", verify_outputs=False
    )
    assert back.source_layout == "fused"
    a, b = tensors_of(tmp_path / "src"), tensors_of(tmp_path / "back")
    assert sorted(a) == sorted(b)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert raw_bytes_of(tmp_path / "src") == raw_bytes_of(tmp_path / "back")


@pytest.mark.parametrize(("model_type", "error"), BROKEN)
def test_families_transformers_cannot_build(model_type: str, error: str) -> None:
    pytest.skip(f"{model_type}: transformers cannot build it from its default config ({error})")
