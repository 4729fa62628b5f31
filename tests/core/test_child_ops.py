"""Our isolated children (and the zygote that forks them) are asked and answer by entries of the
operation table (host/ops.py's CHILD_OPS, each declared where it is served): each request and
answer crosses as its own type, built and read by the same declaration."""

from __future__ import annotations

import json

import pytest

from fusion_core.adapter import consumers as adapter
from fusion_core.adapter.result import ProbeAnswer
from fusion_core.boundary.ops import CHILD_MARK, Op
from fusion_core.boundary.options import Workload
from fusion_core.coverage import worker
from fusion_core.export import consumers as export
from fusion_core.export.result import Consumer, ConsumersAnswer
from fusion_core.host import ops
from fusion_core.run import child, upstream, zygote
from fusion_core.run.results import UpstreamFamily, UpstreamReport

REQUESTS = {
    child.SERVE: child.ServeParams("fusion_core.run.upstream"),
    upstream.UPSTREAM: upstream.UpstreamParams(
        "/m", "LlamaForCausalLM", {"qkv": True}, "float32", 0, {"model.layers.0.self_attn": "qkv"}, False, Workload()
    ),
    export.CONSUMERS_SOURCE: export.ConsumersSourceParams("/m", ["a.b"], False, "bfloat16", "too big", 1 << 30),
    export.CONSUMERS_TRY: export.ConsumersTryParams("/tmp/x", "OUT", exact=True, max_memory=None),
    export.LOADING: export.LoadingParams("the export with fusion_core"),
    adapter.ADAPTER_BASE: adapter.AdapterBaseParams("/m", {"gate_up": {"x": 1}}, ["a"], True),
    adapter.ADAPTER_TRY: adapter.AdapterTryParams("/a", "original", "/w", "OUT"),
    worker.COVERAGE_START: worker.CoverageStartParams(["/f.py"], True, "mod:fn", "/mod.py"),
    worker.COVERAGE_STARTED: worker.CoverageStarted("llama", 12.5),
    worker.COVERAGE_CHUNK: worker.CoverageChunkParams(["llama", "llama4"], ["qkv"], 30.0, "check"),
    zygote.ZYGOTE_FORK: zygote.ZygoteFork("/tmp/fusion-child-x", {"PATH": "/bin", "MARK": "a b\n=c"}),
    zygote.ZYGOTE_REFUSED: zygote.ZygoteRefused("ValueError: not a fork request"),
    zygote.ZYGOTE_EXITED: zygote.ZygoteExited(4321, -9),
}
ANSWERS = {
    child.SERVE: None,
    upstream.UPSTREAM: UpstreamReport(available=True, max_abs_diff=0.5, families=[UpstreamFamily("qkv", "agrees")]),
    export.CONSUMERS_SOURCE: None,
    export.CONSUMERS_TRY: ConsumersAnswer([Consumer("ours", "loads exactly", "load()", max_abs_diff=0.0)], {"p": 1}),
    export.LOADING: export.LoadingParams("the source model m"),
    adapter.ADAPTER_BASE: None,
    adapter.ADAPTER_TRY: ProbeAnswer([Consumer("peft", "refuses to load", "x")], {"inputs": {"a": [1, 2]}}, {"ok": 1}),
    worker.COVERAGE_START: 1234,
    worker.COVERAGE_STARTED: worker.CoverageStarted("vit", 1.0),
    worker.COVERAGE_CHUNK: [{"model_type": "llama", "status": "ok", "families": {"qkv": {"matches": []}}}],
    zygote.ZYGOTE_FORK: zygote.ZygoteForked(4321),
    zygote.ZYGOTE_REFUSED: zygote.ZygoteRefused("OSError: fork failed"),
    zygote.ZYGOTE_EXITED: zygote.ZygoteExited(4321, 3),
}
#: the modules that declare child operations: every Op they hold is in the table
DECLARING = (child, upstream, export, adapter, worker, zygote)


def test_every_child_op_is_in_the_table_and_none_is_the_windows() -> None:
    assert set(ops.CHILD_OPS.values()) == set(REQUESTS) == set(ANSWERS)
    declared = {v for module in DECLARING for v in vars(module).values() if isinstance(v, Op)}
    assert declared == set(ops.CHILD_OPS.values())
    assert not set(ops.CHILD_OPS) & set(ops.OPS)
    assert all(name.startswith("child/") for name in ops.CHILD_OPS)


@pytest.mark.parametrize("op", list(REQUESTS), ids=lambda op: op.name)
def test_a_child_request_and_answer_round_trip(op: Op) -> None:
    line = op.request_line(REQUESTS[op])
    assert "\n" not in line
    assert op.read_request(line) == REQUESTS[op]
    printed = f"model code printed this\n{op.answer_line(ANSWERS[op])}\nand then this\n"
    if ANSWERS[op] is None:
        assert op.find_answer(printed) is None  # answers nothing: the same as no answer
    else:
        assert op.find_answer(printed) == ANSWERS[op]


def test_another_ops_lines_are_not_an_answer_nor_a_request() -> None:
    loading = export.LOADING.answer_line(export.LoadingParams("x"))
    assert export.CONSUMERS_TRY.find_answer(loading + "\nno mark here\n") is None
    with pytest.raises(ValueError, match="child/upstream"):
        upstream.UPSTREAM.read_request(child.SERVE.request_line(child.ServeParams("m")))
    with pytest.raises(ValueError):  # the shape is checked, not only the name
        worker.COVERAGE_STARTED.find_answer(CHILD_MARK + '{"method": "child/coverage_started", "result": {}}')


@pytest.mark.parametrize(
    "op", [zygote.ZYGOTE_FORK, zygote.ZYGOTE_REFUSED, zygote.ZYGOTE_EXITED], ids=lambda op: op.name
)
def test_the_zygotes_answers_are_read_as_their_types_and_nothing_else_is(op: Op) -> None:
    assert zygote.read_answer(op.answer_line(ANSWERS[op]).encode()) == ANSWERS[op]
    for other in (
        b"hello",
        b"\xff",
        child.SERVE.answer_line(None).encode(),  # a declared answer, but not the zygote's
        zygote.ZYGOTE_FORK.request_line(REQUESTS[zygote.ZYGOTE_FORK]).encode(),  # a request, not an answer
        (CHILD_MARK + json.dumps({"method": op.name, "result": {"pid": "12"}})).encode(),
    ):
        with pytest.raises(ValueError):
            zygote.read_answer(other)
