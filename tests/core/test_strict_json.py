"""The ``--json`` output stays strict JSON (issue 29, item 5): no ``NaN`` or ``Infinity``,
which ``jq`` and other strict parsers reject; ``null`` instead, with the reason in a ``note``."""

from __future__ import annotations

import json

import pytest

from fusion_core.cli.output import print_json, strict_json
from fusion_core.run.results import CheckResult, Comparison, EndToEndCheck, ModuleCheck, Timing, Tolerance


def _refuse(name: str) -> None:
    raise ValueError(f"not strict JSON: {name}")


def _failing_check() -> CheckResult:
    nan = float("nan")
    differing = ModuleCheck(  # NaN in the fused outputs: the difference is NaN, and it fails
        path="model.layers.0.self_attn", family="qkv", original_class="LlamaAttention",
        fused_class="FusedLlamaAttention",
        comparison=Comparison(max_abs_diff=nan, max_rel_diff=nan, atol=1e-5, rtol=1e-5, shape=[1, 4, 8],
                              max_original=1.0),
        timing=Timing(original_ms=2.0, fused_ms=0.0, repeats=9),  # a speedup of inf
    )  # fmt: skip
    structure = Comparison(  # outputs that differ in structure: the note already says why
        max_abs_diff=nan, max_rel_diff=nan, atol=1e-5, rtol=1e-5, shape=[], note="the outputs differ in structure"
    )
    return CheckResult(
        model="demo:llama", model_class="LlamaForCausalLM", fusion_config={"qkv": True}, dtype="float32",
        device="cpu", repeats=5, seed=0, tolerance=Tolerance(1e-5, 1e-5), modules=[differing],
        end_to_end=EndToEndCheck("(model)", "logits", "text", {}, structure, None),
    )  # fmt: skip


def test_a_failing_check_prints_strict_json(capsys: pytest.CaptureFixture[str]) -> None:
    result = _failing_check()
    assert not result.passed
    print_json(result)
    data = json.loads(capsys.readouterr().out, parse_constant=_refuse)
    comp = data["modules"][0]["comparison"]
    assert comp["max_abs_diff"] is None and comp["max_rel_diff"] is None and comp["passed"] is False
    assert "max_abs_diff" in comp["note"] and "not a finite number" in comp["note"]
    assert data["modules"][0]["timing"]["speedup"] is None  # inf: no field for a reason, null alone
    e = data["end_to_end"]["comparison"]
    assert e["max_abs_diff"] is None and e["note"] == "the outputs differ in structure"  # its reason kept


def test_strict_json_nests_and_keeps_finite_numbers() -> None:
    data = {"a": [1.5, float("-inf"), {"b": float("nan"), "note": ""}], "c": 0, "d": "NaN", "e": True}
    assert strict_json(data) == {"a": [1.5, None, {"b": None, "note": "b: not a finite number (NaN or infinite), "
                                                   "written as null"}], "c": 0, "d": "NaN", "e": True}  # fmt: skip
    json.dumps(strict_json(data), allow_nan=False)
