"""The Checks tab takes real inputs: an image dropped on it (thumbnail), a prompt; the check runs
them through the demo's processor, says what the processor made, and the tree marks the vision
module verified end to end."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage
from PySide6.QtWidgets import QApplication

from fusion_gui.models.tree_model import CHECK

PATCH = "model.visual.patch_embed"


def _drop(widget, paths: list[Path]) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    copy, left, none = Qt.DropAction.CopyAction, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    enter = QDragEnterEvent(QPoint(5, 5), copy, mime, left, none)  # a drag enters, the widget takes it
    assert QApplication.sendEvent(widget, enter) and enter.isAccepted()
    event = QDropEvent(
        QPointF(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    QApplication.sendEvent(widget, event)


def test_image_dropped_and_checked_end_to_end(qtbot, window, open_model, only_fusions, tmp_path: Path) -> None:
    photo = tmp_path / "photo.png"
    image = QImage(64, 48, QImage.Format.Format_RGB32)
    image.fill(0x3366AA)
    assert image.save(str(photo))
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "patch_embeddings")
    panel = window.checks
    panel.upstream_box.setChecked(False)
    panel.repeats.setValue(1)
    media = panel.workload.media
    _drop(media, [photo, tmp_path / "clip.mp4"])
    assert [media.files.item(i).text() for i in range(media.files.count())] == ["photo.png", "clip.mp4"]
    assert not media.files.item(0).icon().pixmap(48, 48).isNull()  # the thumbnail
    media.files.takeItem(1)  # no video this time
    media.prompt.setText("Describe")
    assert media.options() == {"images": (str(photo),), "video": None, "audio": None, "prompt": "Describe"}
    assert panel.workload_button.text() == "Workload: cpu, real inputs (1 file)"
    with qtbot.waitSignal(window.state.checks_finished, timeout=180_000) as sig:
        panel.run_button.click()
    qtbot.waitUntil(lambda: not window.state.busy, timeout=10_000)
    result = sig.args[0]
    e = result.end_to_end
    assert result.passed and e.input_kind == "image+text" and "pixel_values" in e.input_shapes
    assert not media.fed.isHidden()  # shown (inside the folded workload)
    assert media.fed.text().startswith("the processor made: image+text: 1 × image 64x48 px (photo.png), 1 × text")
    cell = window.tree.model.index_for_path(PATCH, CHECK)
    assert cell.data().endswith(" · e2e") and " pass " in cell.data()  # verified on end-to-end inputs
