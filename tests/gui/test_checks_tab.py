"""The Checks tab: workload controls reach the check, per-family verdicts, "exact" apart from
"faster", whiskers on the chart, how each row was verified, and rows that select modules."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))

import _check_models as models
from PySide6.QtCore import Qt

from fusion_core.run.results import CheckResult, Comparison, EndToEndCheck, ModuleCheck, Timing, Tolerance
from fusion_gui.panels.checks import COLUMNS

JOB_TIMEOUT_MS = 180_000
PATCH = "model.visual.patch_embed"


def _shown(panel, row: int) -> list[str]:
    """What the table shows in ``row``, column by column."""
    return [panel.model.index(row, c).data() for c in range(len(COLUMNS))]


def _floor(t) -> str:
    """The A/A noise floor as written here: three decimals within 1% of 1, with why there is no verdict."""
    digits = 3 if max(t.noise_high - 1, 1 - t.noise_low) < 0.01 else 2
    floor = f"noise [{t.noise_low:.{digits}f}, {t.noise_high:.{digits}f}]"
    return f"{floor}; {t.verdict_reason}" if t.verdict_reason else floor


def _speed(t) -> str:
    return f"{t.speedup:.2f}x [{t.speedup_low:.2f}, {t.speedup_high:.2f}] {t.verdict} ({_floor(t)})" + (
        " noisy" if t.noisy else ""
    )


def _expected_module_row(m) -> list[str]:
    """A module's cells from its raw numbers: name ("(model)" at the root), how verified, the
    difference and limit (two significant digits), the medians (ms), the speed, the share."""
    c, t = m.comparison, m.timing
    share = f"{m.share_of_end_to_end:.1%}"
    if m.share_low is not None and m.share_high is not None:
        share += f" [{m.share_low:.1%}, {m.share_high:.1%}]"
    return [
        m.path or "(model)", m.verified_by or "not verified", f"{c.max_abs_diff:.2g}", f"{c.limit:.2g}",
        f"{t.original_ms:.3f}", f"{t.fused_ms:.3f}", _speed(t), share, "; ".join(x for x in (m.error, c.note) if x),
    ]  # fmt: skip


def _run(qtbot, window):
    panel = window.checks
    with qtbot.waitSignal(window.state.checks_finished, timeout=JOB_TIMEOUT_MS) as sig:
        panel.run_button.click()
    qtbot.waitUntil(lambda: not window.state.busy, timeout=10_000)
    return sig.args[0]


def test_workload_controls_and_verdicts(qtbot, window, open_model, only_fusions, qwen2_vl_dir):
    open_model(window, str(qwen2_vl_dir))
    only_fusions(window, "patch_embeddings", "gate_up")
    panel = window.checks
    panel.upstream_box.setChecked(False)
    panel.repeats.setValue(2)
    w = panel.workload
    assert w.device.itemText(0) == "cpu" and w.image_size.value() == 0  # 0: the model's own size
    w.image_size.setValue(56)
    w.batch.setValue(2)
    w.seq_len.setValue(10)
    w.threads.setValue(1)
    # folded behind one button that says what differs from the defaults
    assert not w.isVisible() and panel.workload_button.text() == "Workload: cpu, 1 threads, batch 2, px 56, tokens 10"
    window.resize(1460, 900)
    result = _run(qtbot, window)
    assert result.workload.image_size == 56 and result.workload.batch == 2 and result.workload.threads == 1
    patch = next(m for m in result.modules if m.path == PATCH)
    assert patch.input_shapes == [[2 * 4 * 4, 1176]]
    rows = panel.model.rows
    assert [r["path"] for r in rows] == [m.path for m in result.modules] + [None]
    # what the table shows, against the result's own numbers formatted here (not by the code
    # under test): every cell of the patch embedding's row and of the end-to-end row
    e = result.end_to_end
    assert _shown(panel, 0) == _expected_module_row(patch)
    assert _shown(panel, len(rows) - 1) == [
        f"end to end ({e.output})", f"{e.input_kind} inputs", f"{e.comparison.max_abs_diff:.2g}",
        f"{e.comparison.limit:.2g}", f"{e.timing.original_ms:.3f}", f"{e.timing.fused_ms:.3f}",
        _speed(e.timing), "100%", "",
    ]  # fmt: skip
    assert [_shown(panel, i)[1] for i in range(len(rows) - 1)] == ["end-to-end inputs"] * (len(rows) - 1)
    t = patch.timing
    # one whisker per row (modules and end to end), spanning the interval; one floor box per row, holding 1.0
    assert len(panel.chart.whiskers) == len(rows) == len(panel.chart.floors)
    floor_ys = [p.y() for p in panel.chart.floors[0].points()]
    assert min(floor_ys) == pytest.approx(t.noise_low) and max(floor_ys) == pytest.approx(t.noise_high)
    assert min(floor_ys) <= 1.0 <= max(floor_ys)
    # at 1460x900 every row of the table shows, and the chart keeps its room
    assert panel.table.viewport().height() >= len(rows) * panel.table.rowHeight(0)
    assert panel.chart.height() >= 200
    ys = [p.y() for p in panel.chart.whiskers[0].points()]
    assert min(ys) == pytest.approx(t.speedup_low) and max(ys) == pytest.approx(t.speedup_high)
    # "exact" and "faster" are two banners; one verdict line per family
    tol = result.tolerance
    assert panel.banner.text() == (
        f"<b>Exact: all {len(result.modules)} fused module(s) verified</b> ({len(result.modules)} on end-to-end "
        f"inputs; limit for float32: atol {tol.atol} × min(1, max |original|) + rtol {tol.rtol} × max |original|)."
    )
    assert panel.banner.property("role") == "ok"
    et = e.timing
    words = {"faster": "faster", "slower": "SLOWER", "same": "no measurable difference"}.get(et.verdict, et.verdict)
    assert panel.speed_banner.isVisible() and panel.speed_banner.text().startswith(
        f"<b>Speed end to end: {words}</b> — {et.speedup:.2f}x [{et.speedup_low:.2f}, {et.speedup_high:.2f}] "
        f"(95% interval; {_floor(et)})"
    )
    lines = panel.verdicts_label.text()
    assert "patch_embeddings: exact; module " in lines and "gate_up: exact; module " in lines
    # selecting a row selects its module
    with qtbot.waitSignal(window.state.reveal_requested) as revealed:
        panel.table.selectRow(1)
    assert revealed.args == [rows[1]["module"]] and window.state.selected_path == rows[1]["module"]


def test_modules_only_and_sample_inputs_rows(qtbot, window, open_model, only_fusions, tmp_path):
    """Qwen2.5-VL whose image tokens lie outside its vocabulary (end to end cannot reach its
    vision tower): the patch embedding's row says it was verified on module sample inputs; with
    "Modules only" end to end reads "not run" and the speed banner says so."""
    folder = models.qwen25_vl_oov(tmp_path / "q")
    open_model(window, str(folder))
    only_fusions(window, "patch_embeddings")
    panel = window.checks
    panel.upstream_box.setChecked(False)
    panel.repeats.setValue(2)
    result = _run(qtbot, window)
    assert result.passed
    assert panel.model.rows[0]["verified_by"] == "module sample inputs"
    assert "1 on module sample inputs" in panel.banner.text()
    panel.workload.modules_only.setChecked(True)
    result = _run(qtbot, window)
    assert result.passed and result.modules_only
    assert [r["module"] for r in panel.model.rows] == ["model.visual.patch_embed"]
    assert "not run: modules only" in panel.speed_banner.text()
    assert "not run: modules only" in panel.end_label.text()


def test_nothing_to_check_says_which_families_and_is_no_pass(qtbot, window, open_model, only_fusions, llama_dir):
    """A check that checks nothing is not a pass: the banner names the enabled families (or none)."""
    open_model(window, str(llama_dir))
    only_fusions(window, "patch_embeddings")
    panel = window.checks
    panel.upstream_box.setChecked(False)
    result = _run(qtbot, window)
    assert result.nothing_to_fuse and not result.passed
    assert "nothing to check: no module of LlamaForCausalLM matches patch_embeddings" in panel.banner.text()
    assert panel.banner.property("role") == "warn"
    only_fusions(window)
    _run(qtbot, window)
    assert "nothing to check: no family enabled" in panel.banner.text()


def _quick_checks(window, open_model, only_fusions, spec, *families):
    """The Checks tab on ``spec`` with ``families``: no upstream parity, one timed round."""
    open_model(window, spec)
    only_fusions(window, *families)
    panel = window.checks
    panel.upstream_box.setChecked(False)
    panel.repeats.setValue(1)
    return panel


def test_a_memory_budget_reaches_the_check(qtbot, window, open_model, only_fusions, qwen2_vl_dir):
    """The workload's memory budget (accelerate's max_memory) goes to the engine's check and is said."""
    panel = _quick_checks(window, open_model, only_fusions, str(qwen2_vl_dir), "patch_embeddings")
    w = panel.workload
    assert w.max_memory.value() == 0 and w.max_memory.specialValueText() == "available"
    w.max_memory.setValue(1)
    assert panel.workload_button.text() == "Workload: cpu, weights ≤ 1 GiB"
    result = _run(qtbot, window)
    assert "memory: weights 0.0 GiB at this dtype, 1.0 GiB budget: all in memory" in result.messages


def test_generation_from_the_workload(qtbot, window, open_model, only_fusions, qwen2_vl_dir):
    """The workload's "generate" decodes greedily, original against fused, and the verdicts say so."""
    panel = _quick_checks(window, open_model, only_fusions, str(qwen2_vl_dir), "patch_embeddings", "qkv")
    w = panel.workload
    assert w.generate.value() == 0 and w.generate.specialValueText() == "off"
    w.generate.setValue(6)
    assert panel.workload_button.text() == "Workload: cpu, generate 6"
    result = _run(qtbot, window)
    assert result.generation is not None and result.generation.identical and result.generation.new_tokens == 6
    assert "generation (dynamic cache): 6 new tokens identical, original and fused" in panel.verdicts_label.text()


def test_a_result_is_shown_only_for_the_plan_it_ran(qtbot, window, open_model, only_fusions, qwen2_vl_dir):
    """Fusions edited while a check runs: the old check's result is not installed for the new
    plan (issue 31: the Checks tab and the tree overlay showed results of a plan no longer on show)."""
    _quick_checks(window, open_model, only_fusions, str(qwen2_vl_dir), "patch_embeddings", "qkv")
    state = window.state
    finished = []
    state.checks_finished.connect(finished.append)
    with qtbot.waitSignal(state.job_ended, timeout=JOB_TIMEOUT_MS) as ended:
        window.checks.run_button.click()
        assert state.busy
        state.set_family_enabled("qkv", False)  # while the check of patch_embeddings + qkv runs
    assert ended.args[0] == "checks" and ended.args[1] == "ok"
    qtbot.waitUntil(lambda: not state.busy, timeout=10_000)
    assert finished == [] and state.check_result is None
    assert window.checks.model.rowCount() == 0


def test_compiled_too_reaches_the_check_and_its_line_is_shown(qtbot, window, open_model, only_fusions, llama_dir):
    """The workload's "Compiled too" asks for inductor; a check compiled (here with the eager
    backend, seconds instead of minutes) shows its line among the verdicts."""
    from fusion_core.boundary.options import CheckOptions

    panel = _quick_checks(window, open_model, only_fusions, str(llama_dir), "qkv")
    w = panel.workload
    assert w.options()["compile"] == ""
    w.compile.setChecked(True)
    assert (
        w.options()["compile"] == "inductor"
        and panel.workload_button.text() == "Workload: cpu, compiled too (inductor)"
    )
    with qtbot.waitSignal(window.state.checks_finished, timeout=JOB_TIMEOUT_MS) as sig:
        window.state.run_checks(CheckOptions.build(repeats=1, upstream=False, time_budget=0, compile="eager"))
    c = sig.args[0].compiled
    assert c is not None and c.passed and c.graphs_fused == c.graphs_original
    assert c.line.split(":")[0] in panel.verdicts_label.text() and "graphs original" in panel.verdicts_label.text()


def _timing(speedup: float, low: float, high: float) -> Timing:
    return Timing(original_ms=3.0, fused_ms=3.0 / speedup, repeats=7, speedup=speedup, speedup_low=low,
                  speedup_high=high, noise_low=0.995, noise_high=1.004)  # fmt: skip


def test_a_module_fused_at_the_root_and_a_failure(qtbot, qtmodeltester, window, open_model, only_fusions):
    """A result delivered as a finished check delivers it: the module fused at the model's root
    reads "(model)" as in the CLI; a failed module, its reason; the banners and end-to-end line
    say it in the words written here."""
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "qkv")
    diff = 1e-7
    comp = Comparison(max_abs_diff=diff, max_rel_diff=diff, atol=1e-5, rtol=1e-5, shape=[1, 4], max_original=0.5)
    root = ModuleCheck("", "qkv", "Qwen2VLModel", "FusedModel", [[1, 4]], comp, _timing(1.25, 1.2, 1.3),
                       verified_by="end-to-end inputs", share_of_end_to_end=0.5, share_low=0.45, share_high=0.55)  # fmt: skip
    bad = ModuleCheck("model.language_model.layers.1.self_attn", "qkv", "Attention", "FusedAttention",
                      error="<b>no</b> inputs reached it")  # fmt: skip
    e2e = EndToEndCheck("", "logits", "synthetic", {"input_ids": [1, 8]}, comp, _timing(0.9, 0.85, 0.95),
                        notes=["<i>a note</i>"])  # fmt: skip
    result = CheckResult(model="demo:qwen2-vl", model_class="Qwen2VLForConditionalGeneration",
                         fusion_config={"qkv": True}, dtype="float32", device="cpu", repeats=7, seed=0,
                         tolerance=Tolerance(1e-5, 1e-5), modules=[root, bad], end_to_end=e2e)  # fmt: skip
    state = window.state
    state._on_checks_done(result, (state.session, state.spec, state.fusion_config))  # what a finished check does
    panel = window.checks
    qtmodeltester.check(panel.model)
    assert _shown(panel, 0) == [
        "(model)", "end-to-end inputs", "1e-07", "1e-05", "3.000", "2.400",
        "1.25x [1.20, 1.30] faster (noise [0.995, 1.004])", "50.0% [45.0%, 55.0%]", "",
    ]  # fmt: skip
    assert _shown(panel, 1) == [
        "model.language_model.layers.1.self_attn", "not verified", "", "", "", "", "", "",
        "<b>no</b> inputs reached it",
    ]  # fmt: skip
    assert _shown(panel, 2)[0] == "end to end (logits)" and _shown(panel, 2)[6].startswith("0.90x [0.85, 0.95] slower")
    tip = panel.model.index(1, 0).data(Qt.ItemDataRole.ToolTipRole)
    assert tip == (  # text from the result is never markup
        "<qt>model.language_model.layers.1.self_attn: Attention -&gt; FusedAttention, "
        "FAIL &lt;b&gt;no&lt;/b&gt; inputs reached it</qt>"
    )
    # sorting reads the raw numbers
    from fusion_gui.models.table_model import SortRole

    assert panel.model.index(0, 2).data(SortRole) == diff
    assert panel.banner.text() == (
        "<b>NOT exact or not verified</b>: model.language_model.layers.1.self_attn (limit for float32: "
        "atol 1e-05 × min(1, max |original|) + rtol 1e-05 × max |original|)."
    )
    assert panel.banner.property("role") == "error"
    assert panel.speed_banner.text() == (
        "<b>Speed end to end: SLOWER</b> — 0.90x [0.85, 0.95] (95% interval; noise [0.995, 1.004])"
    )
    assert panel.speed_banner.property("role") == "warn"
    assert panel.end_label.text() == (
        "<b>End to end</b> (logits of the whole model, synthetic inputs): max abs diff 1.00e-07 (limit 1.0e-05) — "
        "pass; original 3.00 ms, fused 3.33 ms<br>&lt;i&gt;a note&lt;/i&gt;"
    )
    # the tree's check column says the same of the root module
    from fusion_gui.models.tree_model import CHECK

    assert window.tree.model.index_for_path("", CHECK).data() == "1.25x [1.20, 1.30] pass · 50% · e2e"
