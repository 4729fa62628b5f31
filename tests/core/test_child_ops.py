"""Our isolated children are asked and answer by entries of the operation table (host/ops.py):
each request and answer crosses as its own type, built and read by the same declaration."""

from __future__ import annotations

import pytest

from fusion_core.adapter.result import ProbeAnswer
from fusion_core.boundary.options import Workload
from fusion_core.export.result import Consumer, ConsumersAnswer
from fusion_core.host import ops
from fusion_core.run.results import UpstreamReport

REQUESTS = {
    ops.SERVE: ops.ServeParams("fusion_core.run.upstream"),
    ops.UPSTREAM: ops.UpstreamParams(
        "/m", "LlamaForCausalLM", {"qkv": True}, "float32", 0, ["model.layers.0.self_attn"], False, Workload()
    ),
    ops.CONSUMERS_SOURCE: ops.ConsumersSourceParams("/m", ["a.b"], False, "bfloat16", "too big", 1 << 30),
    ops.CONSUMERS_TRY: ops.ConsumersTryParams("/tmp/x", "OUT", exact=True, max_memory=None),
    ops.LOADING: ops.LoadingParams("the export with fusion_core"),
    ops.ADAPTER_BASE: ops.AdapterBaseParams("/m", {"gate_up": {"x": 1}}, ["a"], True),
    ops.ADAPTER_TRY: ops.AdapterTryParams("/a", "original", "/w", "OUT"),
    ops.COVERAGE_START: ops.CoverageStartParams(["/f.py"], True, "mod:fn", "/mod.py"),
    ops.COVERAGE_STARTED: ops.CoverageStarted("llama", 12.5),
    ops.COVERAGE_CHUNK: ops.CoverageChunkParams(["llama", "llama4"], ["qkv"], 30.0, "check"),
}
ANSWERS = {
    ops.SERVE: None,
    ops.UPSTREAM: UpstreamReport(available=True, ran=True, module_classes={"a": "FusedX"}, max_abs_diff=0.5),
    ops.CONSUMERS_SOURCE: None,
    ops.CONSUMERS_TRY: ConsumersAnswer([Consumer("ours", "loads exactly", "load()", max_abs_diff=0.0)], {"p": 1}),
    ops.LOADING: ops.LoadingParams("the source model m"),
    ops.ADAPTER_BASE: None,
    ops.ADAPTER_TRY: ProbeAnswer([Consumer("peft", "refuses to load", "x")], {"inputs": {"a": [1, 2]}}, {"ok": 1}),
    ops.COVERAGE_START: 1234,
    ops.COVERAGE_STARTED: ops.CoverageStarted("vit", 1.0),
    ops.COVERAGE_CHUNK: [{"model_type": "llama", "status": "ok", "families": {"qkv": {"matches": []}}}],
}


def test_every_child_op_is_in_the_table_and_none_is_the_windows() -> None:
    assert set(ops.CHILD_OPS.values()) == set(REQUESTS) == set(ANSWERS)
    assert not set(ops.CHILD_OPS) & set(ops.OPS)
    assert all(name.startswith("child/") for name in ops.CHILD_OPS)


@pytest.mark.parametrize("op", list(REQUESTS), ids=lambda op: op.name)
def test_a_child_request_and_answer_round_trip(op: ops.Op) -> None:
    line = op.request_line(REQUESTS[op])
    assert "\n" not in line
    assert op.read_request(line) == REQUESTS[op]
    printed = f"model code printed this\n{op.answer_line(ANSWERS[op])}\nand then this\n"
    if ANSWERS[op] is None:
        assert op.find_answer(printed) is None  # answers nothing: the same as no answer
    else:
        assert op.find_answer(printed) == ANSWERS[op]


def test_another_ops_lines_are_not_an_answer_nor_a_request() -> None:
    loading = ops.LOADING.answer_line(ops.LoadingParams("x"))
    assert ops.CONSUMERS_TRY.find_answer(loading + "\nno mark here\n") is None
    with pytest.raises(ValueError, match="child/upstream"):
        ops.UPSTREAM.read_request(ops.SERVE.request_line(ops.ServeParams("m")))
    with pytest.raises(ValueError):  # the shape is checked, not only the name
        ops.COVERAGE_STARTED.find_answer(ops.CHILD_MARK + '{"method": "child/coverage_started", "result": {}}')
