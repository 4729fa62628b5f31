"""One view of each result (issue 31, item 2): the presentation layer
(:mod:`fusion_core.run.check_text`) gives the rows, cells, verdict words and intervals; the
CLI prints those rows, the report writes them, and the app renders them (tests/gui). The
expected strings here are written out from the result's raw numbers."""

from __future__ import annotations

import pytest

from fusion_core.cli.execute import format_check
from fusion_core.cli.output import set_width, width
from fusion_core.report import check_markdown
from fusion_core.run.check_text import (
    check_rows,
    end_line,
    exact_line,
    module_detail,
    speed_line,
    speed_text,
    tree_cell,
    tree_summary,
    tree_verdict,
)
from fusion_core.run.results import (
    CheckResult,
    Comparison,
    EndToEndCheck,
    ModuleCheck,
    Timing,
    Tolerance,
)


def _timing(speedup: float, low: float, high: float, original_ms: float = 2.0) -> Timing:
    return Timing(original_ms=original_ms, fused_ms=original_ms / speedup, repeats=9, speedup=speedup,
                  speedup_low=low, speedup_high=high, noise_low=0.99, noise_high=1.01)  # fmt: skip


def _comparison(diff: float) -> Comparison:
    return Comparison(max_abs_diff=diff, max_rel_diff=diff, atol=1e-5, rtol=1e-5, shape=[1, 4], max_original=1.0)


@pytest.fixture
def result() -> CheckResult:
    """A check of three modules: one fused at the model's root (its path is ""), one faster, one
    that failed; and end to end."""
    root = ModuleCheck("", "patch_embeddings", "Conv", "FusedConv", [[2, 3]], _comparison(1e-7),
                       _timing(1.5, 1.4, 1.6), verified_by="end-to-end inputs", share_of_end_to_end=0.25,
                       share_low=0.2, share_high=0.3)  # fmt: skip
    attn = ModuleCheck("model.layers.0.self_attn", "qkv", "Attention", "FusedAttention", [[1, 4, 8]],
                       _comparison(3e-6), _timing(0.8, 0.7, 0.9), verified_by="module sample inputs",
                       share_of_end_to_end=0.1)  # fmt: skip
    broken = ModuleCheck("model.layers.1.mlp", "gate_up", "MLP", "FusedMLP", error="no inputs reached it")
    e2e = EndToEndCheck("", "logits", "synthetic", {"input_ids": [1, 8]}, _comparison(2e-6), _timing(1.1, 1.05, 1.15))
    return CheckResult(model="tiny", model_class="TinyForCausalLM", fusion_config={"qkv": True}, dtype="float32",
                       device="cpu", repeats=9, seed=0, tolerance=Tolerance(1e-5, 1e-5),
                       modules=[root, attn, broken], end_to_end=e2e)  # fmt: skip


def test_the_rows_from_the_raw_numbers(result):
    rows = check_rows(result)
    assert [r.module for r in rows] == [
        "(model)",
        "model.layers.0.self_attn",
        "model.layers.1.mlp",
        "end to end (logits)",
    ]
    assert [r.path for r in rows] == ["", "model.layers.0.self_attn", "model.layers.1.mlp", None]
    root, attn, broken, end = rows
    assert (root.classes, root.verified_by, root.inputs) == ("Conv -> FusedConv", "end-to-end inputs", "2x3")
    assert (root.max_abs, root.limit, root.original_ms, root.fused_ms) == ("1e-07", "2e-05", "2.000", "1.333")
    assert speed_text(root.timing) == "1.50x [1.40, 1.60] faster (noise [0.99, 1.01])"
    assert (root.share, root.result, root.passed) == ("25.0% [20.0%, 30.0%]", "pass", True)
    assert speed_text(attn.timing) == "0.80x [0.70, 0.90] slower (noise [0.99, 1.01])"
    assert (attn.max_abs, attn.share) == ("3e-06", "10.0%")
    assert (broken.result, broken.note, broken.passed, broken.max_abs, broken.original_ms, broken.verified_by) == (
        "FAIL no inputs reached it",
        "no inputs reached it",
        False,
        "",
        "",
        "not verified",
    )
    assert (end.classes, end.verified_by, end.inputs, end.share, end.result) == (
        "TinyForCausalLM",
        "synthetic inputs",
        "input_ids:1x8",
        "100%",
        "pass",
    )


def test_the_cli_prints_the_rows(result):
    """``check --wide``: each row of the table is the presentation row's cells, in order."""
    before = width()
    set_width(None)
    try:
        text = format_check(result)
    finally:
        set_width(before)
    lines = text.splitlines()
    for row in check_rows(result):
        line = next(x for x in lines if x.startswith(row.module + " "))
        cells = [*row[:8], speed_text(row.timing), row.share, row.result]
        at = 0
        for cell in cells:
            at = line.index(cell, at) + len(cell)  # in order, each whole
    assert "exact: NO, not exact or not verified: model.layers.1.mlp" in text


def test_the_report_writes_the_rows(result):
    md = check_markdown(result).replace("\\", "")  # Markdown escapes _ | [ ] < >
    for row in check_rows(result):
        t = row.timing
        cells = ["passed" if row.passed else "failed", row.module, row.family, row.classes, row.verified_by,
                 row.inputs, row.max_abs, row.limit, row.original_ms or "not timed", row.fused_ms,
                 t.interval_text() if t else "", t.verdict if t else "", t.floor_text() if t else "", row.share,
                 row.note]  # fmt: skip
        assert "| " + " | ".join(cells) + " |" in md
    assert "| passed | (model) | patch_embeddings | Conv -> FusedConv |" in md


def test_the_apps_lines_and_the_trees_texts(result):
    exact = exact_line(result)
    assert exact.kind == "error" and exact.head == "NOT exact or not verified"
    assert exact.rest.startswith(": model.layers.1.mlp (limit for float32: atol 1e-05 ×")
    speed = speed_line(result)
    assert speed.kind == "ok" and speed.head == "Speed end to end: faster"  # 1.05 clears 1 + 0.01
    assert speed.rest.startswith(" — 1.10x [1.05, 1.15] (95% interval; noise [0.99, 1.01]")
    e = end_line(result)
    assert e.kind == "ok" and e.rest == (
        " (logits of the whole model, synthetic inputs): max abs diff 2.00e-06 (limit 2.0e-05) — pass; "
        "original 2.00 ms, fused 1.82 ms"
    )
    root, attn, broken = result.modules
    assert tree_cell(root) == "1.50x [1.40, 1.60] pass · 25% · e2e"
    assert tree_cell(attn) == "0.80x [0.70, 0.90] pass · 10% · alone"
    assert tree_cell(broken) == "error"
    assert tree_summary(result.modules) == "1 of 3 FAIL · 35% of time"
    assert tree_summary([root, attn]) == "all 2 pass · 35% of time"
    assert [tree_verdict([m]) for m in result.modules] == ["faster", "slower", "FAIL"]
    assert tree_verdict([root, attn], summary=True) == "checked"
    assert module_detail(root) == (
        "1.50x [1.40, 1.60] faster (noise [0.99, 1.01]), 25.0% [20.0%, 30.0%] of end-to-end time; "
        "max |diff| 1.00e-07 vs tolerance 2.00e-05: pass, verified by end-to-end inputs"
    )
    assert module_detail(broken) == "error: no inputs reached it"


def test_upstream_parity_judged_per_family_in_every_view(result):
    """The upstream child's judgement of each family (:func:`~fusion_core.run.upstream._judge`)
    and what the CLI, the report and the app say of it."""
    from fusion_core.run.check_text import upstream_detail, upstream_line, upstream_summary
    from fusion_core.run.results import UpstreamFamily, UpstreamReport
    from fusion_core.run.upstream import _judge

    lost = "model.layers.0.self_attn.qkv_proj.weight MISSING, randomly initialized"
    keys = [lost, "lm_head.weight UNEXPECTED, dropped"]  # lm_head: no module of a family
    qkv = _judge("qkv", {"model.layers.0.self_attn": "FusedAttention", "model.layers.1.self_attn": "Attention"},
                 keys, within=False)  # fmt: skip
    found = ["upstream loaded FusedAttention", "did not fuse model.layers.1.self_attn", lost]
    assert (qkv.status, qkv.detail) == ("differs", "; ".join([*found, "outputs outside the tolerance"]))
    assert _judge("gate_up", {"model.layers.0.mlp": "MLP"}, keys, True) == UpstreamFamily(
        "gate_up", "not fused upstream", "upstream left MLP"
    )
    assert _judge("qkv", {"a": "FusedX"}, [], True) == UpstreamFamily("qkv", "agrees", "upstream loaded FusedX")
    assert len(_judge("qkv", {"a": "FusedX"}, [f"a.{'k' * 9000} MISSING"], True).detail) < 2100  # bounded

    gone = UpstreamFamily("patch_embeddings", "not available upstream", "no such family")
    up = UpstreamReport(True, "5.24.0", max_abs_diff=0.5, ours_max_abs_diff=1e-7, within_tolerance=False,
                        leak=True, leak_detail="still fused", families=[qkv, gone])  # fmt: skip
    up.summary = upstream_summary(up)
    diff = "upstream fused vs the original: max abs diff 0.5, OUTSIDE tolerance (ours: 1e-07)"
    assert up.summary == (
        f"upstream (transformers 5.24.0) DIFFERS from ours: {diff}; LEAK: still fused; "
        "families: qkv differs, patch_embeddings not available upstream"
    )
    assert upstream_line(up)[:3] == (
        "warn",
        "transformers' own fusion (upstream) — differs from ours:",
        " qkv: differs; patch_embeddings: not available upstream",
    )
    detail = f"{up.summary}\n  qkv differs: {qkv.detail}\n  patch_embeddings not available upstream: no such family"
    assert upstream_detail(up) == detail  # the app's tooltip
    result.upstream = up
    before = width()
    set_width(None)
    try:
        assert detail in format_check(result)
    finally:
        set_width(before)
    md = check_markdown(result).replace("\\", "")
    assert "upstream (transformers 5.24.0) DIFFERS from ours\n" in md and diff in md and "LEAK: still fused" in md
    assert "| qkv | differs | upstream loaded FusedAttention |" in md and f"|  |  | {lost} |" in md

    up = UpstreamReport(True, "5.24.0", error="the worker failed", families=[UpstreamFamily("qkv", "differs", "x")])
    assert upstream_summary(up) == "upstream (transformers 5.24.0): the worker failed"
    up.summary = upstream_summary(up)
    assert upstream_detail(up) == up.summary and not up.matches_ours
