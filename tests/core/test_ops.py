"""The engine's operations are declared once: the worker serves exactly the table, params and
results cross the wire as their own types, and a request the table does not know is answered."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys

import pytest

from fusion_core.boundary.options import AdapterOptions, CheckOptions, ExportOptions, TimingOptions, Workload
from fusion_core.host import protocol, wire
from fusion_core.host.ops import (
    ADAPTER,
    CHECK,
    CLOSE,
    EXPORT,
    LISTS,
    OPEN,
    OPS,
    AdapterParams,
    CheckParams,
    ExportParams,
    ModelLists,
    OpenParams,
)
from fusion_core.host.worker import Host
from fusion_core.plan.plan_data import PlanData, SourceIdentity

SERVED_TODAY = {
    "open",
    "adapter",
    "adapter_plan",
    "check",
    "export",
    "plan",
    "diff",
    "consumers",
    "lists",
    "devices",
    "family_file",
    "unregister",
    "close",
    "compare",
    "save_plan",
    "read_plan",
}


def _plan(fusion_config: dict) -> PlanData:
    """A plan as the window sends it (what the engine's plan operation answered)."""
    identity = SourceIdentity("demo:llama", "LlamaForCausalLM", "0" * 64)
    return PlanData(
        1, "llama", "LlamaForCausalLM", fusion_config, (), {}, {}, True, "original", (), (), identity=identity
    )


def _host() -> tuple[Host, io.BytesIO]:
    out = io.BytesIO()
    return Host(out), out


def _answers(out: io.BytesIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_table_is_what_the_worker_serves() -> None:
    host, _ = _host()
    assert set(host.handlers) == set(OPS.values())  # every op served is declared, every declared op served
    assert set(OPS) == SERVED_TODAY
    assert all(op.name == name and dataclasses.is_dataclass(op.params) for name, op in OPS.items())
    long = ["open", "check", "export", "compare", "adapter", "save_plan", "read_plan"]  # the last two hash weights
    assert [op.name for op in OPS.values() if op.long] == long


def test_params_round_trip_the_wire() -> None:
    options = CheckOptions(
        workload=Workload(batch=2, seq_len=16, image_size=56, dtype="bfloat16", device="cpu", seed=3),
        timing=TimingOptions(min_rounds=7, budget_s=0.5),
        upstream=False,
        threads=2,
        modules_only=True,
    )
    for op, params in (
        (CHECK, CheckParams("s", _plan({"qkv": True, "patch_embeddings": {"bias": False}}), options)),
        (
            EXPORT,
            ExportParams("s", _plan({"qkv": True}), "/tmp/out", ExportOptions(layout="original", max_shard_size="2GB")),
        ),
        (OPEN, OpenParams("s", "demo:llama", trust_remote_code=True)),
        (ADAPTER, AdapterParams("s", _plan({"qkv": True}), "/tmp/a", "/tmp/out", AdapterOptions(layout="original"))),
    ):
        line = wire.encode(protocol.request(op.name, wire.to_plain(params), 5))
        msg = wire.decode(line)
        assert msg["method"] == op.name and msg["id"] == 5
        back = wire.from_plain(op.params, msg["params"])
        assert back == params and type(back) is op.params


def test_a_result_decodes_to_its_type() -> None:
    lists = ModelLists(demos=[("llama", "a tiny llama")], arch=["llama"], hub=[])
    back = LISTS.decode(wire.decode(wire.encode(protocol.result(1, wire.to_plain(lists))))["result"])
    assert back == lists and isinstance(back.demos[0], tuple)


def test_an_unknown_operation_gets_an_error_answer() -> None:
    host, out = _host()
    host.dispatch("_op_close", {"session": "s"}, 7)  # a name the old getattr dispatch would have served
    host.dispatch("open", {"spec": "demo:llama"}, 8)  # no session: params of the wrong shape
    plan = wire.to_plain(_plan({}))
    host.dispatch("check", {"session": "s", "plan": plan, "options": {"workload": {"batch": 0}}}, 9)
    host.dispatch("nothing", {}, None)  # a notification: no answer, even for an error
    first, second, third = _answers(out)
    assert first["id"] == 7 and first["error"]["code"] == protocol.METHOD_NOT_FOUND
    assert "'_op_close'" in first["error"]["message"]
    assert second["id"] == 8 and second["error"]["code"] == protocol.INVALID_PARAMS
    assert third["id"] == 9 and third["error"]["code"] == protocol.REQUEST_FAILED  # the option says what is wrong
    assert third["error"]["message"].startswith("batch must be at least 1")


def test_a_quick_operation_is_answered_with_its_id() -> None:
    host, out = _host()
    host._warm_up = lambda: None  # this test needs no engine import
    requests = io.BytesIO(
        wire.encode(protocol.request(CLOSE.name, {"session": "s"}, 3))
        + wire.encode(protocol.cancel_request(99))  # nothing runs under that id: ignored
    )
    host.serve(requests)  # answers what was asked before its input closed
    ready, *answers = _answers(out)
    assert ready["method"] == protocol.READY and ready["params"]["pid"] > 0
    assert answers == [{"jsonrpc": "2.0", "id": 3, "result": None}]


def test_the_table_imports_no_torch() -> None:
    code = (
        "import json, sys; import fusion_core.host.ops, fusion_core.host.protocol; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'safetensors'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


def test_export_params_round_trip_both_shard_size_forms() -> None:
    """``max_shard_size`` is ``int | str``: both forms cross the wire as they were (the export dialog sends bytes)."""
    from fusion_core.boundary.options import ExportOptions
    from fusion_core.host.ops import ExportParams

    for size in (5_000_000_000, "2GB"):
        params = ExportParams("s", _plan({"patch_embeddings": True}), "/tmp/out", ExportOptions(max_shard_size=size))
        back = wire.from_plain(ExportParams, json.loads(json.dumps(wire.to_plain(params))))
        assert back == params and type(back.options.max_shard_size) is type(size)
    with pytest.raises(ValueError, match=r"expected int \| str"):
        wire.from_plain(ExportParams, {**wire.to_plain(params), "options": {"max_shard_size": True}})


def test_operations_that_answer_nothing_decode_null() -> None:
    """``close`` and ``unregister`` answer null: the window decodes it (an error here froze GUI tests' teardown)."""
    from fusion_core.host.ops import CLOSE, UNREGISTER

    assert CLOSE.decode(None) is None and UNREGISTER.decode(None) is None
    with pytest.raises(ValueError, match="expected null"):
        CLOSE.decode({"unexpected": 1})
