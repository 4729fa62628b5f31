"""Issue 20 in the window: a folder's text is never markup, and the start-up cache cannot lie.

Hostile folders are real folders around the Llama demo; the widgets are the window's own,
read back after the engine process opened (or refused) them.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from fusion_core.model import cache
from fusion_core.plan.view import cached_view


def test_the_cache_never_paints_another_folder(qtbot, make_window, open_model, llama_dir, tmp_path):
    a, b = tmp_path / "alpha", tmp_path / "bravo"
    shutil.copytree(llama_dir, a)
    shutil.copytree(llama_dir, b)
    (b / "model.safetensors").rename(b / "pytorch_model.bin")  # same config, only a pickle: refused
    first = make_window()
    open_model(first, str(a))  # writes A's entry (after the answer: wait for it)
    qtbot.waitUntil(lambda: cached_view(str(a)) is not None, timeout=30_000)
    assert cache.cache_key(str(b)) != cache.cache_key(str(a))

    window = make_window()
    state = window.state
    shown: list[object] = []
    state.preview_ready.connect(shown.append)
    with qtbot.waitSignal(state._preview_read, timeout=30_000) as read:  # the read of B's entry ended
        state.show_cached(str(b))
    assert read.args[0] == str(b) and read.args[1] is None  # no entry of B; A's is never taken for it
    with qtbot.waitSignal(state.open_failed, timeout=120_000):
        state.open_model(str(b))
    assert shown == [] and state.preview is None
    label = window.model_label.text()
    assert "alpha" not in label and "from the cache" not in label
    assert window.tree.model.tree is None

    # a preview on show is withdrawn when the model then fails to open
    with qtbot.waitSignal(state.preview_ready, timeout=10_000):
        assert state.show_cached(str(a))
    assert "from the cache" in window.model_label.text()
    with qtbot.waitSignal(state.open_failed, timeout=120_000):
        state.open_model(str(b))
    assert state.preview is None and window.tree.model.tree is None
    assert "from the cache" not in window.model_label.text() and "alpha" not in window.windowTitle()
    for box in window.error_boxes:
        box.close()


_WINDOW = """
import sys
from PySide6.QtCore import QCoreApplication
from fusion_gui.engine import Engine
app = QCoreApplication([])
engine = Engine()
engine.start()
assert engine.wait_for(lambda: engine.pid != 0, 120_000)
print(engine.pid, flush=True)
app.exec()  # the engine is warming up (importing torch): a window killed now must not leave it behind
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\\nState:\\tZ" not in f.read()  # a zombie has ended
    except FileNotFoundError:
        return False


def test_the_engine_ends_within_seconds_of_its_window(tmp_path):
    """issue 20, item 7: a killed window used to leave its engine running for about 60 s."""
    import os
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "QT_QPA_PLATFORM": "offscreen"}
    window = subprocess.Popen([sys.executable, "-c", _WINDOW], stdout=subprocess.PIPE, text=True, env=env)
    try:
        engine = int(window.stdout.readline())
        assert _alive(engine)
        os.kill(window.pid, signal.SIGKILL)
        window.wait(10)
        t0 = time.monotonic()
        while _alive(engine) and time.monotonic() - t0 < 15:
            time.sleep(0.1)
        assert not _alive(engine), "the engine outlived its window by 15 s"
        assert time.monotonic() - t0 < 6
    finally:
        window.kill()
        window.wait(10)
        window.stdout.close()


def test_the_engine_refuses_weights_swapped_after_the_open(
    qtbot, window, open_model, only_fusions, llama_dir, tmp_path
):
    """issue 20, item 4, through the app's engine process: it keeps the opened model, and a
    check minutes later must not read bytes nobody validated."""
    folder = tmp_path / "model"
    shutil.copytree(llama_dir, folder)
    open_model(window, str(folder))
    only_fusions(window, "qkv")
    (tmp_path / "elsewhere.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to(tmp_path / "elsewhere.safetensors")  # a link out, same bytes
    errors: list[tuple[str, str, str]] = []
    window.state.error_raised.connect(lambda *a: errors.append(a))
    with qtbot.waitSignal(window.state.job_ended, timeout=120_000):
        assert window.state.run_checks() is not None
    assert window.state.check_result is None
    (title, message, _details) = errors[-1]
    assert title == "Checks failed" and "model.safetensors" in message and "reopen the model" in message, message
    for box in window.error_boxes:
        box.close()


def _rendered_markup(window, marker: str) -> list[str]:
    """Every place in ``window`` where text containing ``marker`` (a tag) would be rendered as rich text."""
    from PySide6.QtCore import QModelIndex, Qt
    from PySide6.QtWidgets import QAbstractItemView, QLabel, QTextEdit, QWidget

    found = []
    for w in [window, *window.findChildren(QWidget)]:
        name = f"{type(w).__name__} {w.objectName()!r}"
        if marker in w.toolTip():
            found.append(f"{name}: tooltip {w.toolTip()[:120]!r}")
        if isinstance(w, QLabel) and marker in w.text() and w.textFormat() != Qt.TextFormat.PlainText:
            found.append(f"{name}: label {w.text()[:120]!r}")
        if isinstance(w, QTextEdit) and marker.rstrip(">") in w.toHtml():
            found.append(f"{name}: document")
        if isinstance(w, QAbstractItemView) and w.model() is not None:
            model, stack = w.model(), [(QModelIndex(), 0)]
            while stack:
                parent, depth = stack.pop()
                try:
                    columns = model.columnCount(parent)
                except TypeError:  # a list model: one column
                    columns = 1
                for row in range(min(model.rowCount(parent), 200)):
                    for col in range(columns):
                        tip = model.data(model.index(row, col, parent), Qt.ItemDataRole.ToolTipRole)
                        if isinstance(tip, str) and marker in tip:
                            found.append(f"{name}: item tooltip {tip[:120]!r}")
                    if depth < 2:
                        stack.append((model.index(row, 0, parent), depth + 1))
    return found


def test_no_widget_renders_text_from_a_folder_as_markup(qtbot, window, open_model, llama_dir, tmp_path):
    """issue 20, item 1: folder and file names, config strings and error messages are text."""
    import json

    folder = tmp_path / "<h1>FOLDER"
    shutil.copytree(llama_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["attn_implementation"] = "<h1>NOTE</h1>/kernel"  # quoted in a note: the label's tooltip, the log
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "<h1>FILE.txt").write_text("x")
    open_model(window, str(folder))
    window.show_tab("checks")
    found = _rendered_markup(window, "<h1>")
    assert not found, "\n".join(found)

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "<img src=/dev/zero><h1>ERR</h1>"}))
    with qtbot.waitSignal(window.state.open_failed, timeout=60_000):
        window.state.open_model(str(bad))
    qtbot.waitUntil(lambda: not window.state.busy, timeout=30_000)
    assert window.error_boxes and all("<h1>ERR</h1>" in box.text() for box in window.error_boxes)
    found = _rendered_markup(window, "<h1>")
    assert not found, "\n".join(found)
    for box in window.error_boxes:
        box.close()

    # item 2: a 20 MB key in an index is a short message, and the window stays responsive
    huge = tmp_path / "huge"
    shutil.copytree(llama_dir, huge)
    (huge / "model.safetensors").rename(huge / "model-00001-of-00001.safetensors")
    (huge / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"k" * 20_000_000: "model-00001-of-00001.safetensors"}})
    )
    with qtbot.waitSignal(window.state.open_failed, timeout=60_000):
        window.state.open_model(str(huge))
    qtbot.waitUntil(lambda: bool(window.error_boxes), timeout=10_000)
    text = window.error_boxes[-1].text()
    assert len(text) < 1_000 and "(20,000,000 characters)" in text, text[:2000]
    t0 = time.perf_counter()
    qtbot.wait(1)  # the event loop turns at once: nothing huge is laid out
    assert time.perf_counter() - t0 < 1.0
    for box in window.error_boxes:
        box.close()


_RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: "evil\u202egpj_exe" displays as "evilexe_jpg"


def _hostile_tree():
    import torch
    from torch import nn

    from fusion_core import module_tree

    outer = nn.Module()
    outer.add_module(f"evil{_RLO}gpj_exe\ufffe", nn.Linear(4, 4))
    with torch.device("meta"):
        return module_tree(outer)


def _no_raw_controls(text: object) -> None:
    assert isinstance(text, str) and _RLO not in text and "\ufffe" not in text, repr(text)


def test_module_names_with_bidi_overrides_show_escaped(qtbot, qtmodeltester):
    # issue 32: a U+202E in a module name would reorder the rest of the name in the tree
    from PySide6.QtCore import Qt

    from fusion_gui.models.table_model import Column, RowsTableModel
    from fusion_gui.models.tree_model import CLASS, NAME, ModuleTreeModel

    model = ModuleTreeModel()
    model.set_tree(_hostile_tree())
    qtmodeltester.check(model)
    child = model.index(0, NAME, model.index(0, NAME))
    name = child.data(Qt.ItemDataRole.DisplayRole)
    _no_raw_controls(name)
    assert name == "evil\\u202egpj_exe\\ufffe"
    _no_raw_controls(child.data(Qt.ItemDataRole.ToolTipRole))
    assert "\\u202e" in child.data(Qt.ItemDataRole.ToolTipRole)
    assert child.siblingAtColumn(CLASS).data() == "Linear"

    table = RowsTableModel([Column("key", "Key")])
    table.set_rows([{"key": f"a{_RLO}b.weight"}])
    _no_raw_controls(table.index(0, 0).data())
    _no_raw_controls(table.index(0, 0).data(Qt.ItemDataRole.ToolTipRole))


def test_a_folder_named_with_a_bidi_override_shows_escaped(qtbot, make_window, open_model, llama_dir, tmp_path):
    folder = tmp_path / f"model{_RLO}txt.exe"
    shutil.copytree(llama_dir, folder)
    window = make_window()
    open_model(window, str(folder))
    _no_raw_controls(window.windowTitle())
    _no_raw_controls(window.model_label.text())
    assert "model\\u202etxt.exe" in window.windowTitle()
