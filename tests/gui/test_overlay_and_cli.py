"""The check overlay on the tree, a real-size model, and the command line's honest exits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from PySide6.QtCore import Qt

from fusion_core.run.results import CheckResult, Comparison, ModuleCheck, Timing, Tolerance
from fusion_gui.models.tree_model import CHECK, CountRole, FoldRole

LM = "model.language_model"


def _check(path: str, speedup: float, diff: float, share: float) -> ModuleCheck:
    return ModuleCheck(
        path=path,
        family="qkv",
        original_class="Qwen2VLAttention",
        fused_class="FusedQwen2VLAttention",
        comparison=Comparison(
            max_abs_diff=diff, max_rel_diff=diff, atol=1e-5, rtol=1e-5, shape=[1, 4, 8], max_original=1.0
        ),
        timing=Timing(
            original_ms=2.0,
            fused_ms=2.0 / speedup,
            repeats=9,
            speedup=speedup,
            speedup_low=speedup - 0.1,
            speedup_high=speedup + 0.1,
        ),
        verified_by="end-to-end inputs",
        share_of_end_to_end=share,
    )


def test_check_overlay_per_module_and_summarised_on_ancestors(qtbot, window, open_model, only_fusions):
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "qkv")
    tree = window.tree
    assert tree.view.isColumnHidden(CHECK)
    result = CheckResult(
        model="demo:qwen2-vl", model_class="Qwen2VLForConditionalGeneration", fusion_config={"qkv": True},
        dtype="float32", device="cpu", repeats=9, seed=0, tolerance=Tolerance(1e-5, 1e-5),
        modules=[_check(f"{LM}.layers.0.self_attn", 1.5, 1e-7, 0.1), _check(f"{LM}.layers.1.self_attn", 0.8, 1e-3, 0.05)],
    )  # fmt: skip
    state = window.state
    state._on_checks_done(result, (state.session, state.spec, state.fusion_config))  # what a finished check does
    assert not tree.view.isColumnHidden(CHECK)
    model = tree.model
    first = model.index_for_path(f"{LM}.layers.0.self_attn", CHECK)
    assert first.data() == "1.50x [1.40, 1.60] pass · 10% · e2e"  # verified on end-to-end inputs
    tip = first.data(Qt.ItemDataRole.ToolTipRole)
    assert "1.50x [1.40, 1.60] faster (noise [1.000, 1.000])" in tip  # with its floor
    assert "10.0% of end-to-end time" in tip
    assert "max |diff| 1.00e-07 vs tolerance 2.00e-05" in tip
    second = model.index_for_path(f"{LM}.layers.1.self_attn", CHECK)
    assert second.data() == "0.80x [0.70, 0.90] FAIL · 5% · e2e"
    assert first.data(Qt.ItemDataRole.BackgroundRole) != second.data(Qt.ItemDataRole.BackgroundRole)
    # ancestors and the fold summarise what is below them
    assert model.index_for_path(LM, CHECK).data() == "1 of 2 FAIL · 15% of time"
    fold = model.fold_for_path(f"{LM}.layers.0")
    assert fold.data(FoldRole) == 2 and fold.siblingAtColumn(CHECK).data() == "1 of 2 FAIL · 15% of time"
    tree.filter_edit.setText("is:failed")
    assert tree.apply_filter() == 1
    # "check this module" with results: the Checks tab, its row selected
    window.state.check_module(f"{LM}.layers.1.self_attn")
    assert window.tabs.currentWidget() is window.checks
    selected = window.checks.table.selectionModel().selectedRows()
    assert [window.checks.model.rows[i.row()]["module"] for i in selected] == [f"{LM}.layers.1.self_attn"]
    # a new plan clears them
    only_fusions(window)
    assert tree.view.isColumnHidden(CHECK) and model.index_for_path(LM, CHECK).data() == ""


def test_qwen2_5_omni_at_real_size(qtbot, window, open_model, only_fusions):
    open_model(window, "arch:qwen2_5_omni")  # meta only, ~2.7k modules
    only_fusions(window, "qkv", "gate_up")
    tree = window.tree
    assert len(window.state.inspection.tree) > 2000
    layers = "thinker.model.language_model.layers"
    fold = tree.model.fold_for_path(f"{layers}.0")
    n = len(window.state.inspection.tree.by_path[layers].children)
    assert fold.data(FoldRole) == n and fold.data() == f"layers 0–{n - 1} ×{n} (identical)"
    assert fold.data(CountRole) == 2 * n  # qkv and gate_up in every layer
    tree.filter_edit.setText(r"thinker.*language_model\.layers\.\d+\.mlp$")
    assert tree.apply_filter() == n
    assert tree.next_match() == f"{layers}.0.mlp" and tree.next_match() == f"{layers}.1.mlp"
    tree.filter_edit.clear()
    tree.set_state_filter("is:fused")
    assert tree.filter_count.text() == f"{len(tree.model.matched_paths())} matches"
    window.tree.select_path(f"{layers}.10.self_attn")
    window.show_tab("transforms")
    rows = window.transforms.visible_rows()
    assert rows and {r["module"] for r in rows} == {f"{layers}.10.self_attn"}
    assert all(".10." in r["source_key"] for r in rows)


def _run_gui(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "FUSION_INSPECTOR_SETTINGS": str(tmp_path / "user.ini")}
    return subprocess.run(
        [sys.executable, "-m", "fusion_gui", *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


def test_bad_arguments_exit_2_with_a_message(tmp_path):
    done = _run_gui(["--size", "800", "--screenshot", str(tmp_path / "x.png")], tmp_path)
    assert done.returncode == 2 and "--size must be WIDTHxHEIGHT" in done.stderr
    done = _run_gui(["demo:qwen2-vl", "--select", "no.such.module", "--screenshot", str(tmp_path / "x.png")], tmp_path)
    assert done.returncode == 2 and "no module 'no.such.module'" in done.stderr
    assert not (tmp_path / "x.png").exists()


def test_screenshot_mode_never_writes_settings(tmp_path):
    settings = tmp_path / "user.ini"
    settings.write_text('[fusions]\nlast="{\\"order\\": [\\"qkv\\"], \\"enabled\\": [\\"qkv\\"]}"\n')
    before = settings.read_bytes()
    shot = tmp_path / "shot.png"
    done = _run_gui(["demo:vit", "--fusion", "patch_embeddings_2d", "--screenshot", str(shot)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert shot.stat().st_size > 10_000
    assert settings.read_bytes() == before  # no recents, no fusions, no geometry
