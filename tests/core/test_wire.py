"""What crosses between the window and the engine: typed results survive the trip through JSON, errors keep their class."""

from __future__ import annotations

import json
import math

import pytest

from fusion_core import errors
from fusion_core.host import wire
from fusion_core.plan.diff import PlanDiff, diff_plan
from fusion_core.plan.fusion_plan import inspect_model
from fusion_core.plan.plan_data import PlanData
from fusion_core.plan.plan_file import preview_plan, resolve_plan
from fusion_core.plan.view import inspection_data, view_from_data
from fusion_core.run.results import CheckResult, Comparison, ModuleCheck, Timing, Tolerance


def _trip(tp, value):
    """to_plain in the engine, a JSON line on the pipe, from_plain in the window."""
    return wire.from_plain(tp, wire.decode(wire.encode({"value": wire.to_plain(value)}))["value"])


@pytest.fixture(scope="module")
def llama():
    return inspect_model("demo:llama")


def test_plan_data_and_diff_round_trip(llama):
    """The plan the window shows crosses as PlanData and back, and resolves to the same live plan."""
    plan = llama.plan({"qkv": True, "gate_up": True})
    data = preview_plan(llama, {"qkv": True, "gate_up": True})
    back = _trip(PlanData, data)
    assert back == data and wire.to_plain(back) == wire.to_plain(data)
    assert back.matched == plan.matched_paths and isinstance(back.transforms[0].source_shape, tuple)
    keys = ("family", "source_key", "source_shape", "dtype", "target_key", "target_shape", "op")
    assert [{k: wire.to_plain(r)[k] for k in keys} for r in back.rows("save")] == plan.rows("save")
    assert back.patch_mapping == {a.__name__: b.__name__ for a, b in plan.patch_mapping.items()}
    assert {r.module for r in back.transforms} == {
        p for p, fam in plan.matched_paths.items() if fam in ("qkv", "gate_up")
    }
    assert resolve_plan(back, llama).matched_paths == plan.matched_paths
    diff = diff_plan(plan)
    got = _trip(PlanDiff, diff)
    assert got == diff and wire.to_plain(got) == wire.to_plain(diff) and isinstance(got.keys[0].shape, tuple)


def test_inspection_data_is_what_the_window_rebuilds(llama):
    data = json.loads(json.dumps(inspection_data("demo:llama", llama)))
    view = view_from_data(data)
    assert list(view.tree.by_path) == list(llama.tree.by_path)
    assert [m.path for m in view.discovery("qkv").matches] == llama.discovery("qkv").matched_paths
    assert view.has_checkpoint and view.checkpoint_tensors == len(llama.source.checkpoint.tensors)
    data["checkpoint_files"] = "1"
    with pytest.raises(ValueError, match="expected int"):
        view_from_data(data)


def test_check_result_keeps_nan_and_nested_types():
    result = CheckResult(
        model="m", model_class="C", fusion_config={"qkv": True}, dtype="float32", device="cpu", repeats=1, seed=0,
        tolerance=Tolerance(1e-5, 1e-5),
        modules=[ModuleCheck("a.b", "qkv", "A", "FusedA", [[1, 2]], Comparison(float("nan"), float("inf"), 1e-5, 1e-5, [1, 2]),
                             Timing(1.0, 0.5, 3))],
    )  # fmt: skip
    back = _trip(CheckResult, result)
    assert back.modules[0].timing == result.modules[0].timing and back.modules[0].timing.speedup == 2.0
    comparison = back.modules[0].comparison
    assert isinstance(comparison, Comparison) and math.isnan(comparison.max_abs_diff)
    assert comparison.max_rel_diff == math.inf and comparison.shape == [1, 2] and back.end_to_end is None
    assert back.tolerance == result.tolerance and back.workload == result.workload  # typed on both sides


def test_errors_keep_their_class_and_bugs_their_traceback():
    remote = wire.error_from_data(wire.error_data(errors.RemoteCodeError("asks for code", ["modeling_x.py"])))
    assert type(remote) is errors.RemoteCodeError and remote.files == ["modeling_x.py"]
    conflict = wire.error_from_data(wire.error_data(errors.FamilyConflictError("both replace x")))
    assert type(conflict) is errors.FamilyConflictError and str(conflict) == "both replace x"
    assert conflict.exit_code == 2
    try:
        raise KeyError("boom")
    except KeyError as e:
        bug = wire.error_from_data(wire.error_data(e))
    assert isinstance(bug, wire.EngineFailure) and bug.kind == "KeyError" and "raise KeyError" in bug.details
    # a class name that is not an engine error never becomes one
    odd = wire.error_from_data({"kind": "SystemExit", "message": "x"})
    assert isinstance(odd, wire.EngineFailure)


def test_from_plain_refuses_the_wrong_shape():
    with pytest.raises(ValueError, match="original_ms"):
        wire.from_plain(Timing, {"original_ms": "fast", "fused_ms": 1.0, "repeats": 1})
    with pytest.raises(TypeError):
        wire.to_plain(object())


def test_every_engine_error_keeps_its_class_and_the_options_it_names():
    """The lookup is total: OptionError is declared in boundary.options, not errors.py, and
    still arrives as itself, with the option and the flags its message names (issue 31)."""
    from fusion_core.boundary.options import CheckOptions, OptionError

    with pytest.raises(OptionError) as raised:
        CheckOptions.build(batch=0)
    back = wire.error_from_data(json.loads(wire.encode(wire.error_data(raised.value))))
    assert type(back) is OptionError and str(back) == str(raised.value)
    assert back.option == "batch" and back.detail == raised.value.detail and back.exit_code == 2
    named = errors.naming(errors.CheckError("the image is gone"), "image")
    back = wire.error_from_data(wire.error_data(named))
    assert type(back) is errors.CheckError and back.options == ("image",)
