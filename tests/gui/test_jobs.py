"""Background jobs from the window: checks (results, chart, JSON), cancel, export (verified)."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt

from fusion_gui.models.tree_model import CHECK

PATCH = "model.visual.patch_embed"
JOB_TIMEOUT_MS = 180_000


@pytest.mark.slow  # with the upstream parity check (a subprocess)
def test_run_checks_all_rows_pass(qtbot, window, open_model, only_fusions, qwen2_vl_dir, tmp_path):
    open_model(window, str(qwen2_vl_dir))
    only_fusions(window, "patch_embeddings")
    panel = window.checks
    panel.repeats.setValue(2)
    assert panel.upstream_box.isChecked()
    with qtbot.waitSignal(window.state.checks_finished, timeout=JOB_TIMEOUT_MS) as sig:
        qtbot.keyClick(window, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
        assert window.state.busy and not panel.run_button.isEnabled()
    result = sig.args[0]
    assert result.passed
    qtbot.waitUntil(lambda: not window.state.busy, timeout=10_000)
    rows = panel.model.rows
    assert [r["path"] for r in rows] == [PATCH, None] and rows[1]["module"].startswith("end to end (")
    assert all(r["passed"] and r["result"] == "pass" for r in rows)
    assert rows[0]["max_abs_diff"] <= rows[0]["limit"] and rows[0]["low"] <= rows[0]["speedup"] <= rows[0]["high"]
    assert panel.table.model().index(0, 0).data(Qt.ItemDataRole.BackgroundRole) is None  # failures are tinted
    assert "Exact" in panel.banner.text() and panel.banner.property("role") == "ok"
    assert "End to end" in panel.end_label.text() and panel.end_label.isVisible()
    # upstream transformers 5.24 loads Qwen2-VL fused with random weights: the finding is shown, not hidden
    assert "upstream" in panel.upstream_label.text() and panel.upstream_label.isVisible()
    assert "patch_embeddings: differs" in panel.upstream_label.text()
    assert "MISSING" in panel.upstream_label.toolTip()
    assert len(panel.chart.chart().series()) >= 3
    assert window.tabs.currentWidget() is panel
    # the tree shows the result per fused module and summarised on its ancestors
    check = window.tree.model.index_for_path(PATCH, CHECK).data()
    assert (
        "x [" in check
        and " pass" in check
        and window.tree.model.index_for_path("model", CHECK).data().startswith("all 1 pass")
    )
    saved = panel.save_json(tmp_path / "checks.json")
    data = json.loads(saved.read_text())
    assert data["passed"] is True and data["modules"][0]["module"] == PATCH
    # toggling a fusion invalidates the results
    only_fusions(window, "patch_embeddings", "qkv")
    assert panel.model.rows == [] and panel.result is None


def test_cancel_stops_running_job_and_window_stays_usable(qtbot, window, open_model, only_fusions, qwen2_vl_dir):
    open_model(window, str(qwen2_vl_dir))
    only_fusions(window, "patch_embeddings")
    panel = window.checks
    panel.upstream_box.setChecked(False)
    with qtbot.waitSignal(
        window.state.job_progressed, timeout=JOB_TIMEOUT_MS, check_params_cb=lambda name, *_: name == "checks"
    ):
        panel.run()
    assert panel.cancel_button.isEnabled() and window.cancel_action.isEnabled()
    with qtbot.waitSignal(window.state.job_ended, timeout=JOB_TIMEOUT_MS) as ended:
        panel.cancel_button.click()
    assert ended.args[:2] == ["checks", "cancelled"]
    qtbot.waitUntil(lambda: not window.state.busy, timeout=10_000)
    assert panel.result is None and "cancelled" in panel.banner.text().lower()
    assert window.open_action.isEnabled() and window.checks_action.isEnabled() and panel.run_button.isEnabled()
    assert not window.cancel_action.isEnabled()
    # still usable: the tree answers and another model opens
    assert window.tree.select_path(PATCH)
    open_model(window, "demo:llama")
    assert window.state.spec == "demo:llama"


def test_export_writes_a_folder_the_core_verifies(qtbot, window, open_model, only_fusions, qwen2_vl_dir, tmp_path):
    from fusion_core import inspect_model
    from fusion_core.api import load

    open_model(window, str(qwen2_vl_dir))
    only_fusions(window, "patch_embeddings")
    dialog = window.show_export_dialog()
    qtbot.addWidget(dialog)
    out = tmp_path / "exported"
    dialog.dest_edit.setText(str(out))
    assert dialog.layout_box.currentData() == "fused"
    assert not dialog.replace_box.isVisible() and dialog.export_button.isEnabled()
    with qtbot.waitSignal(window.state.export_finished, timeout=JOB_TIMEOUT_MS) as sig:
        dialog.export_button.click()
        assert dialog.cancel_button.isEnabled()
    result = sig.args[0]
    qtbot.waitUntil(lambda: dialog.job is None, timeout=10_000)
    assert "Verified" in dialog.status.text() and dialog.show_button.isEnabled()
    assert result.out_dir == out and result.verification.tensors_checked > 0
    # the core reads it back: fused layout, strict load, the patch embedding fused
    plan = inspect_model(str(out)).plan({"patch_embeddings": True})
    assert plan.layout == "fused"
    loaded = load(str(out), {"patch_embeddings": True})
    assert loaded.fused_modules == [PATCH]

    # exporting again to the same folder asks for confirmation first
    dialog.dest_edit.setText(str(out))
    assert dialog.replace_box.isVisible() and not dialog.export_button.isEnabled()
    dialog.replace_box.setChecked(True)
    dialog.layout_box.setCurrentIndex(dialog.layout_box.findData("original"))
    dialog.dest_edit.setText(str(out))
    dialog.replace_box.setChecked(True)
    with qtbot.waitSignal(window.state.export_finished, timeout=JOB_TIMEOUT_MS) as sig:
        dialog.export_button.click()
    assert sig.args[0].replaced_existing and sig.args[0].layout == "original"
    assert inspect_model(str(out)).plan({"patch_embeddings": True}).layout == "original"
    dialog.close()


@pytest.mark.parametrize("text", ["inf", "1e400GB", "-5GB", "five", "9" * 400 + "GB"])
def test_export_dialog_refuses_a_bad_shard_size_in_words(qtbot, window, open_model, tmp_path, text):
    """The dialog validates with the core's one size parser: "inf" or "1e400GB" raised
    OverflowError past a ``except ValueError`` and reached the bug dialog (issue 31)."""
    open_model(window, "demo:llama")
    dialog = window.show_export_dialog()
    qtbot.addWidget(dialog)
    dialog.dest_edit.setText(str(tmp_path / "out"))
    dialog.shard_edit.setText(text)
    assert dialog.start() is None and dialog.job is None
    assert dialog.status.text().startswith("Max shard size: ") and "size" in dialog.status.text()
    assert not (tmp_path / "out").exists()
