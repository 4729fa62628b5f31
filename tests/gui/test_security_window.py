"""Issue 20 in the window: a folder's text is never markup, and the start-up cache cannot lie.

Hostile folders are real folders around the Llama demo; the widgets are the window's own,
read back after the engine process opened (or refused) them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from fusion_core.model import cache
from fusion_core.plan.view import cached_view


def test_the_cache_never_paints_another_folder(qtbot, make_window, open_model, llama_dir, tmp_path):
    a, b = tmp_path / "alpha", tmp_path / "bravo"
    shutil.copytree(llama_dir, a)
    shutil.copytree(llama_dir, b)
    (b / "model.safetensors").rename(b / "pytorch_model.bin")  # same config, only a pickle: refused
    first = make_window()
    open_model(first, str(a))  # writes A's entry
    assert cached_view(str(a)) is not None and cache.cache_key(str(b)) != cache.cache_key(str(a))

    window = make_window()
    state = window.state
    shown: list[object] = []
    state.preview_ready.connect(shown.append)
    state.show_cached(str(b))
    with qtbot.waitSignal(state.open_failed, timeout=120_000):
        state.open_model(str(b))
    qtbot.wait(200)  # any entry read would have arrived
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
