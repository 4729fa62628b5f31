"""Export dialog: the consumers before writing (predicted from the plan) and after (tried by loading)."""

from __future__ import annotations

JOB_TIMEOUT_MS = 240_000


def test_dialog_shows_consumers_before_and_after(qtbot, window, open_model, only_fusions, qwen2_vl_dir, tmp_path):
    open_model(window, str(qwen2_vl_dir))
    only_fusions(window, "patch_embeddings")
    dialog = window.show_export_dialog()
    qtbot.addWidget(dialog)
    # predicted by the engine from the plan (a quick job): the text arrives shortly
    qtbot.waitUntil(lambda: "before writing" in dialog.consumers.text(), timeout=30_000)
    before = dialog.consumers.text()
    assert "before writing" in before and "fusion_core.load" in before
    assert "transformers" in before and "tried after writing" in before  # it knows the name: loading tells
    dialog.layout_box.setCurrentIndex(dialog.layout_box.findData("original"))
    qtbot.waitUntil(lambda: "no fusion_config, a plain model" in dialog.consumers.text(), timeout=30_000)
    dialog.layout_box.setCurrentIndex(dialog.layout_box.findData("fused"))
    qtbot.waitUntil(lambda: "tried after writing" in dialog.consumers.text(), timeout=30_000)
    assert dialog.wrong_box.currentData() == "guard"
    dialog.dest_edit.setText(str(tmp_path / "out"))
    with qtbot.waitSignal(window.state.export_finished, timeout=JOB_TIMEOUT_MS) as sig:
        dialog.export_button.click()
        assert not dialog.wrong_box.isEnabled()
    result = sig.args[0]
    qtbot.waitUntil(lambda: dialog.job is None, timeout=10_000)
    after = dialog.consumers.text()
    assert "tried by loading the export" in after
    assert [c.status for c in result.consumers] == ["loads exactly", "loads exactly"]
    assert after.count("loads exactly") == 2 and "Qwen2VLForConditionalGeneration.from_pretrained" in after
    dialog.close()


def test_the_default_destination_is_never_inside_a_cache(qtbot, window, open_model, qwen2_vl_dir, tmp_path):
    """A demo lives in the cache: its export defaults to the user's documents folder, not beside it
    (issue 33). A model in the user's own folder exports beside itself."""
    from pathlib import Path

    from PySide6.QtCore import QStandardPaths

    open_model(window, str(qwen2_vl_dir))
    dialog = window.show_export_dialog()
    qtbot.addWidget(dialog)
    docs = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation) or str(Path.home())
    assert Path(dialog.dest_edit.text()) == Path(docs) / f"{qwen2_vl_dir.name}-fused"
    dialog.close()
    import shutil

    mine = tmp_path / "my-model"
    shutil.copytree(qwen2_vl_dir, mine)
    open_model(window, str(mine))
    dialog = window.show_export_dialog()
    qtbot.addWidget(dialog)
    assert Path(dialog.dest_edit.text()) == tmp_path / "my-model-fused"
