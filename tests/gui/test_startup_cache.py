"""A model seen before paints from the model cache before the engine is loaded, then the live model replaces it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fusion_core.model import cache
from fusion_core.plan.view import cached_view


def test_cached_tree_and_highlights_then_the_live_model(qtbot, make_window, open_model):
    first = make_window()
    open_model(first, "demo:qwen2-vl")  # writes the cache entry
    live = first.state.inspection
    live_matched = first.tree.model.matched_paths()
    assert live_matched and cached_view("demo:qwen2-vl") is not None

    window = make_window()
    state = window.state
    with qtbot.waitSignal(state.preview_ready, timeout=5_000):
        assert state.show_cached("demo:qwen2-vl")
    assert state.inspection is None and state.plan is None
    shown = window.tree.model.tree
    assert shown is not live.tree and list(shown.by_path) == list(live.tree.by_path)
    assert sorted(window.tree.model.matched_paths()) == sorted(live_matched)
    assert window.tree.proxy.rowCount() == 1  # the root row is there to paint
    assert "from the cache" in window.model_label.text()
    assert not state.show_cached("org/not-cacheable")

    open_model(window, "demo:qwen2-vl")
    assert window.tree.model.tree is state.inspection.tree and state.preview is None
    assert sorted(window.tree.model.matched_paths()) == sorted(live_matched)
    assert "from the cache" not in window.model_label.text()


def test_no_cache_while_a_family_file_is_registered(qtbot, make_window, open_model, llama_dir, tmp_path):
    family_file = Path(__file__).resolve().parent / "family_files" / "same_patch_embed.py"
    folder = tmp_path / "model"
    shutil.copytree(llama_dir, folder)
    window = make_window()
    state = window.state
    job = state.load_family_file(family_file)
    with qtbot.waitSignal(job.succeeded, timeout=120_000) as blocker:
        pass
    names = list(blocker.args[0])
    assert names
    open_model(window, str(folder))  # its view depends on code the next start may not load
    assert cached_view(str(folder)) is None
    for name in names:
        done = state.unregister_family(name)
        qtbot.waitUntil(done.done, timeout=30_000)
    open_model(window, str(folder))  # nothing from a file is registered any more: cached again
    assert cached_view(str(folder)) is not None


def _start(tmp_path, spec: str) -> dict:
    env = {**os.environ, "FUSION_INSPECTOR_SETTINGS": str(tmp_path / "settings.ini"), "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run(
        [sys.executable, "-m", "fusion_gui", spec, "--report-timing"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_start_paints_the_cached_tree_first(tmp_path, llama_dir):
    spec = str(llama_dir)
    key = cache.cache_key(spec)
    (cache.cache_folder() / f"{key}.json").unlink(missing_ok=True)
    cold = _start(tmp_path, spec)
    assert "preview_ready" not in cold and cold["tree_paint"] >= cold["model_ready"]
    warm = _start(tmp_path, spec)
    # the tree was painted from the cache before the live model was ready, and again after
    assert warm["preview_ready"] <= warm["tree_paint"] < warm["model_ready"] <= warm["live_tree_paint"]
