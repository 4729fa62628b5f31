"""The Checks tab: workload controls reach the check, per-family verdicts, "exact" apart from
"faster", whiskers on the chart, how each row was verified, and rows that select modules."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))

import _check_models as models

from fusion_gui.panels.checks import COLUMNS

JOB_TIMEOUT_MS = 180_000
PATCH = "model.visual.patch_embed"


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
    assert [r["module"] for r in rows] == [m.path for m in result.modules] + ["end to end"]
    assert all(r["verified_by"] == "end-to-end inputs" for r in rows[:-1])
    # what the table shows, against the result's own numbers formatted here (not by the code under test):
    # the ratio with its interval, its verdict and its A/A noise floor, and the medians in ms
    t = patch.timing
    cell = {c.key: i for i, c in enumerate(COLUMNS)}
    shown = panel.model.index(0, cell["speedup_text"]).data()
    assert shown.startswith(f"{t.speedup:.2f}x [{t.speedup_low:.2f}, {t.speedup_high:.2f}] {t.verdict} (noise [")
    assert panel.model.index(0, cell["original_ms"]).data() == f"{t.original_ms:.3f}"
    assert panel.model.index(0, cell["fused_ms"]).data() == f"{t.fused_ms:.3f}"
    assert panel.model.index(0, cell["max_abs_diff"]).data() == f"{patch.comparison.max_abs_diff:.2e}"
    # one whisker per row (modules and end to end), spanning the interval; one floor box per row, holding 1.0
    assert len(panel.chart.whiskers) == len(rows) == len(panel.chart.floors)
    floor_ys = [p.y() for p in panel.chart.floors[0].points()]
    assert min(floor_ys) == pytest.approx(t.noise_low) and max(floor_ys) == pytest.approx(t.noise_high)
    assert min(floor_ys) <= 1.0 <= max(floor_ys)
    assert rows[0]["share_text"].startswith(f"{patch.share_of_end_to_end:.1%} [")
    # at 1460x900 every row of the table shows, and the chart keeps its room
    assert panel.table.viewport().height() >= len(rows) * panel.table.rowHeight(0)
    assert panel.chart.height() >= 200
    ys = [p.y() for p in panel.chart.whiskers[0].points()]
    assert min(ys) == pytest.approx(t.speedup_low) and max(ys) == pytest.approx(t.speedup_high)
    # "exact" and "faster" are two banners; one verdict line per family
    assert panel.banner.text().startswith("<b>Exact") and panel.banner.property("role") == "ok"
    assert panel.speed_banner.isVisible() and "Speed end to end" in panel.speed_banner.text()
    assert result.end_to_end.timing.interval_text() in panel.speed_banner.text()
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
