"""Issue 20 in the window: a folder's text is never markup, and the start-up cache cannot lie.

Hostile folders are real folders around the Llama demo; the widgets are the window's own,
read back after the engine process opened (or refused) them.
"""

from __future__ import annotations

import shutil

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
