"""The window around the panels: errors, settings, drag and drop, log, open dialog, screenshot mode."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading

from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QMessageBox

from fusion_gui.app import install_excepthook


def test_bad_folder_shows_error_and_keeps_model(qtbot, window, open_model, tmp_path):
    open_model(window, "demo:qwen2-vl")
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    with qtbot.waitSignal(window.error_shown, timeout=60_000) as sig:
        window.state.open_model(str(empty))
    title, message = sig.args
    assert str(empty) in title and "no config.json" in message
    box = window.error_boxes[-1]
    assert isinstance(box, QMessageBox) and box.isVisible() and "no config.json" in box.text()
    qtbot.waitUntil(lambda: not window.state.busy, timeout=10_000)
    # the previous model is still open, and the window works
    assert window.state.spec == "demo:qwen2-vl" and window.state.inspection is not None
    assert window.tree.model.tree is window.state.inspection.tree
    assert "demo:qwen2-vl" in window.windowTitle()
    assert window.open_action.isEnabled()
    box.button(QMessageBox.StandardButton.Close).click()
    assert window.error_boxes == []
    assert str(empty) not in window.state.settings.recent_models()


def test_settings_persist_across_restart(qtbot, make_window, open_model, only_fusions):
    first = make_window()
    open_model(first, "demo:qwen2-vl")
    only_fusions(first, "qkv", "patch_embeddings")
    first.fusions.list.setCurrentRow(first.fusions.order().index("qkv"))
    first.fusions.up.click()
    order = list(first.state.family_order)
    first.resize(790, 610)  # within the offscreen screen: geometry is clamped to it
    first.splitter.setSizes([250, 540])
    sizes = first.splitter.sizes()
    first.show_tab("transforms")
    first.close()

    second = make_window()
    assert (second.width(), second.height()) == (790, 610)
    assert second.splitter.sizes() == sizes
    assert second.tabs.currentWidget() is second.transforms
    assert second.state.settings.recent_models()[0] == "demo:qwen2-vl"
    assert second.recent_menu.actions()[0].text() == "demo:qwen2-vl"
    open_model(second, "demo:qwen2-vl")
    assert second.state.family_order == order
    assert second.state.enabled == {"qkv", "patch_embeddings"}


def test_excepthook_shows_unexpected_errors(qtbot, window, monkeypatch):
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    install_excepthook(window)
    with qtbot.waitSignal(window.error_shown, timeout=5_000) as sig:
        try:
            raise RuntimeError("boom in a slot")
        except RuntimeError as e:
            sys.excepthook(type(e), e, e.__traceback__)
    assert sig.args[0] == "Unexpected error" and "boom in a slot" in sig.args[1]
    assert "Traceback" in window.error_boxes[-1].detailedText()
    window.error_boxes[-1].close()


def test_drop_a_model_folder_opens_it(qtbot, window, qwen2_vl_dir):
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(qwen2_vl_dir))])
    event = QDropEvent(
        QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    with qtbot.waitSignal(window.state.model_changed, timeout=120_000):
        window.dropEvent(event)
    assert window.state.spec == str(qwen2_vl_dir)
    assert "58 tensors" in window.model_label.text() and "parameters" in window.params_label.text()


def test_log_tab_shows_core_logging_by_level(qtbot, window):
    panel = window.log_panel
    panel.set_level(logging.INFO)

    def from_worker() -> None:
        logging.getLogger("fusion_core.test").info("hello from a worker thread")
        logging.getLogger("fusion_core.test").debug("debug detail")

    thread = threading.Thread(target=from_worker)
    thread.start()
    thread.join()
    qtbot.waitUntil(lambda: "hello from a worker thread" in panel.text(), timeout=5_000)
    assert "debug detail" not in panel.text()
    panel.set_level(logging.DEBUG)
    assert "debug detail" in panel.text()
    panel.set_level(logging.WARNING)
    assert "hello from a worker thread" not in panel.text()


def test_open_dialog_lists_sources(qtbot, window):
    dialog = window.show_open_dialog()
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.demo_list.count() > 0, timeout=60_000)
    dialog.select_tab("demo")
    assert dialog.spec().startswith("demo:")
    dialog.select_tab("arch")
    qtbot.keyClicks(dialog.arch_edit, "qwen2_vl")
    assert dialog.arch_proxy.rowCount() >= 1
    dialog.arch_list.setCurrentIndex(dialog.arch_proxy.index(0, 0))
    assert dialog.spec() == "arch:qwen2_vl"
    dialog.select_tab("hub")
    dialog.hub_edit.setText("org/model")
    assert dialog.spec() == "org/model"
    dialog.select_tab("folder")
    dialog.path_edit.setText("/some/folder")
    assert dialog.spec() == "/some/folder"
    dialog.reject()


def test_screenshot_mode_writes_png_and_exits_0(tmp_path, _isolated_cache):
    """Without a display and without QT_QPA_PLATFORM, --screenshot renders offscreen by itself."""
    out = tmp_path / "shot.png"
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")},
        "FUSION_INSPECTOR_SETTINGS": str(tmp_path / "s.ini"),
        "FUSION_INSPECTOR_CACHE": str(_isolated_cache),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "fusion_gui", "demo:qwen2-vl", "--screenshot", str(out), "--fusion", "patch_embeddings"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = subprocess.run(
        [sys.executable, "-m", "fusion_gui", str(tmp_path / "missing"), "--screenshot", str(tmp_path / "x.png")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 1 and "no such folder" in bad.stderr


def test_model_text_is_never_markup_and_is_bounded(qtbot, window, open_model, llama_dir, tmp_path):
    """A folder name or message from a model folder shows as text: no HTML rendered, no megabyte box."""
    import shutil

    from PySide6.QtCore import Qt

    hostile = "<img src=/dev/zero><h1><font color=red>VERIFIED SAFE</font></h1>"
    box = window.show_error("Cannot open", f"model_type {hostile} " + "x" * 50_000)
    assert box.textFormat() == Qt.TextFormat.PlainText
    assert box.text().startswith(f"model_type {hostile} ") and len(box.text()) < 2_100
    assert "more characters not shown" in box.text()
    box.close()
    folder = tmp_path / "<h1><font color=red>VERIFIED SAFE BY VENDOR"
    shutil.copytree(llama_dir, folder)
    open_model(window, str(folder))
    label = window.model_label.text()
    assert "&lt;h1&gt;&lt;font color=red&gt;VERIFIED SAFE BY VENDOR" in label and "<h1>" not in label


def test_expand_to_fusable_is_offered_once_above_the_tree(window):
    """Issue 33: "Expand to fusable" appeared twice, in the toolbar and above the tree."""
    from PySide6.QtWidgets import QToolBar

    toolbar = window.findChild(QToolBar, "main-toolbar")
    texts = [a.text().replace("&", "") for a in toolbar.actions()]
    assert "Expand to fusable" not in texts and texts  # the toolbar itself is still there
    assert window.tree.expand_button.text() == "Expand to fusable"
    assert window.expand_action.shortcut().toString() == "Ctrl+J"  # still in the View menu


def test_the_architecture_tab_answers_enter_and_down(qtbot, window):
    """Issue 33: in the Architecture tab, Enter or Down on a typed name did nothing."""
    dialog = window.show_open_dialog()
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.arch_model.rowCount() > 0, timeout=60_000)
    dialog.select_tab("arch")
    qtbot.keyClicks(dialog.arch_edit, "qwen2_vl")  # several match; the exact name is made current
    assert dialog.arch_proxy.rowCount() > 1 and dialog.spec() == "arch:qwen2_vl"
    dialog.arch_edit.clear()
    qtbot.keyClicks(dialog.arch_edit, "llam")
    first = dialog.arch_proxy.index(0, 0).data()
    assert dialog.spec() == f"arch:{first}"
    dialog.show()
    dialog.arch_edit.setFocus()
    qtbot.keyClick(dialog.arch_edit, Qt.Key.Key_Down)
    assert dialog.arch_list.hasFocus() or dialog.focusWidget() is dialog.arch_list
    with qtbot.waitSignal(dialog.accepted, timeout=5_000):
        qtbot.keyClick(dialog.arch_list, Qt.Key.Key_Return)
