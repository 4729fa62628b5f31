"""Export round trips for every model family with a fusable Conv3d patch embedding.

The families are found at run time (``_fusable_families``), so a family that a later
transformers adds is covered without editing this test. For each base and task class: a
tiny model with seeded random weights, saved by ``save_pretrained``; exported to the fused
layout, which our loader must load strictly into the fused model (and, plainly, into the
source model exactly), and back to the original layout, which must reproduce the source
bitwise. (The outputs of fused vs original models, per family, are the checks' tests;
here the export's output check runs on the demo model, see test_export.py.) The families
are found inside the tests, never at collection time (that meta-initializes models).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _export_helpers import raw_bytes_of, tensors_of
from _fusable_families import fusable_families, tiny_config

from fusion_core import export, load, load_plain


def _export_round_trip(model_type: str, class_name: str, tmp_path: Path) -> None:
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


@pytest.mark.slow
def test_export_round_trip_every_family(tmp_path: Path) -> None:
    failures, checked = [], []
    for case in fusable_families():
        for class_name in case.classes:
            try:
                _export_round_trip(case.model_type, class_name, tmp_path / class_name)
            except Exception as e:  # every class is tried; the message lists each failure
                failures.append(f"{case.model_type}/{class_name}: {type(e).__name__}: {str(e)[:400]}")
            checked.append(class_name)
    assert len(checked) >= 10
    assert not failures, "\n".join(failures)


def test_families_we_cannot_test_fail_in_transformers_too() -> None:
    """A family found in the source but built by no tiny config must fail with transformers'
    own default config as well: then it is transformers' gap, not our test's."""
    import transformers
    from transformers import CONFIG_MAPPING

    untestable = [case for case in fusable_families() if case.tiny_error]
    for case in untestable:
        assert "default config" in case.tiny_error, case
        for class_name in _fusable_classes_named(case.tiny_error):
            with torch.device("meta"), pytest.raises(Exception):  # noqa: B017 - any error of transformers
                getattr(transformers, class_name)(CONFIG_MAPPING[case.model_type]())


def _fusable_classes_named(error: str) -> list[str]:
    import re

    return sorted(set(re.findall(r"(\w+) \(default config\)", error)))
