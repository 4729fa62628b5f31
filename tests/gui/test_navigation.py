"""Navigating real models: folded repeats, regex and state filters, keys, context menu, linked tabs."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtGui import QGuiApplication

from fusion_gui import style
from fusion_gui.models.tree_model import (
    CLASS,
    INSTANCES,
    NAME,
    ColourRole,
    CountRole,
    FoldRole,
    ModuleTreeModel,
    PathRole,
    StatusRole,
)

LM = "model.language_model"


def _child_texts(view_model, parent: QModelIndex) -> list[str]:
    return [view_model.index(r, NAME, parent).data() for r in range(view_model.rowCount(parent))]


def test_identical_layers_fold_into_one_row_that_expands(qtbot, qtmodeltester, window, open_model, only_fusions):
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "qkv", "gate_up")
    tree = window.tree
    layers = tree.view_index(f"{LM}.layers")
    assert tree.view.isExpanded(layers)  # a layer list shows its fold on open
    assert _child_texts(tree.model, layers) == ["layers 0–1 ×2 (identical)"]
    fold = tree.model.index(0, 0, layers)
    assert fold.data(FoldRole) == 2
    # counts aggregate onto the fold: qkv and gate_up in each of the two layers
    assert fold.data(CountRole) == 4
    assert fold.data(ColourRole).name() == style.MIXED.lower()
    assert fold.siblingAtColumn(CLASS).data() == "Qwen2VLDecoderLayer"
    tree.view.expand(fold)
    assert _child_texts(tree.model, fold) == ["0", "1"]
    # the instance count has its own column: "Linear ×25" no longer reads as a repeat
    layer0 = tree.view_index(f"{LM}.layers.0")
    assert layer0.parent() == fold and layer0.siblingAtColumn(INSTANCES).data() == "2"
    assert "×" not in layer0.siblingAtColumn(CLASS).data()
    # selecting the fold selects the layers' scope
    tree.view.setCurrentIndex(fold)
    assert window.state.selected_path == f"{LM}.layers"
    # unfolded, the layers are plain children again
    tree.fold_button.click()
    assert not tree.model.folding
    assert _child_texts(tree.model, tree.view_index(f"{LM}.layers")) == ["0", "1"]
    assert tree.current_path() == f"{LM}.layers"
    # a named pair of identical modules never folds (q_proj/k_proj are roles, not repeats)
    tree.fold_button.click()
    gate = tree.view_index(f"{LM}.layers.0.mlp.gate_proj")
    assert gate.parent() == tree.view_index(f"{LM}.layers.0.mlp") and gate.data(FoldRole) == 0
    assert "up_proj" in _child_texts(tree.model, gate.parent())
    # the Qt model contract, folds included (a model of its own: the tester is not told of the
    # view's fetches while a reset is in flight)
    model = ModuleTreeModel()
    model.set_tree(window.state.inspection.tree)
    assert model.index_for_path(f"{LM}.layers.1.mlp").isValid()
    qtmodeltester.check(model)


def test_regex_and_state_filters_and_keys(qtbot, window, open_model, only_fusions):
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "qkv", "gate_up")
    tree = window.tree
    tree.filter_edit.setText(r"layers.*mlp$")
    assert tree.apply_filter() == 2
    assert tree.view_index(f"{LM}.layers.1.mlp").isValid()
    assert not tree.view_index(f"{LM}.layers.1.self_attn").isValid()
    # Enter and F3 step through the matches, Shift+F3 back
    with qtbot.waitSignal(window.state.module_selected, timeout=5_000):
        qtbot.keyClick(tree.filter_edit, Qt.Key.Key_Return)
    assert tree.current_path() == f"{LM}.layers.0.mlp" and tree.filter_count.text() == "match 1 of 2"
    qtbot.keyClick(tree.filter_edit, Qt.Key.Key_F3)
    assert tree.current_path() == f"{LM}.layers.1.mlp"
    qtbot.keyClick(tree.filter_edit, Qt.Key.Key_F3, Qt.KeyboardModifier.ShiftModifier)
    assert tree.current_path() == f"{LM}.layers.0.mlp"
    # Ctrl+C in the tree copies the full path, not the short name
    tree.view.setFocus()
    qtbot.keyClick(tree.view, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    assert QGuiApplication.clipboard().text() == f"{LM}.layers.0.mlp"
    # Esc clears the filter and keeps the module in view
    qtbot.keyClick(tree.filter_edit, Qt.Key.Key_Escape)
    assert tree.filter_edit.text() == "" and tree.view_index(f"{LM}.embed_tokens").isValid()
    assert tree.current_path() == f"{LM}.layers.0.mlp"
    # state filters: the state box, and terms in the text
    tree.set_state_filter("is:fused")
    fused = {tree.view_index(p).data(PathRole) for p in tree.model.matched_paths()}
    assert tree.filter_count.text() == "4 matches" and len(fused) == 4
    assert not tree.view_index(f"{LM}.embed_tokens").isValid()
    tree.set_state_filter("family:gate_up")
    # the two fused language-model MLPs and the two vision MLPs gate_up names as near misses (fc1/fc2)
    assert tree.filter_count.text() == "4 matches"
    assert tree.view_index("model.visual.blocks.1.mlp").isValid()
    tree.set_state_filter("")
    tree.filter_edit.setText("class:^Linear$ is:candidate")
    assert tree.apply_filter() == 0  # the Linear layers are inside the fused modules, not candidates
    tree.filter_edit.setText("class:^Conv3d$")
    assert tree.apply_filter() == 1
    tree.filter_edit.setText("layers.[")  # not a regex: matched literally, and said so
    assert tree.apply_filter() == 0 and "literal" in tree.filter_count.text()


def test_context_menu_links_to_the_other_tabs(qtbot, window, open_model, only_fusions):
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "qkv", "gate_up", "patch_embeddings")
    tree = window.tree
    attn = f"{LM}.layers.1.self_attn"
    tree.select_path(attn)
    menu = tree.context_menu(tree.view_index(attn))
    actions = {a.text().split("  ")[0]: a for a in menu.actions() if a.text()}
    assert set(actions) >= {"Copy path", "Show transforms", "Show in mapping", "Check this module", "Expand all below"}
    assert actions["Check this module"].isEnabled()
    actions["Copy path"].trigger()
    assert QGuiApplication.clipboard().text() == attn
    actions["Show transforms"].trigger()
    assert window.tabs.currentWidget() is window.transforms
    assert {r["module"] for r in window.transforms.visible_rows()} == {attn}
    actions["Show in mapping"].trigger()
    assert window.tabs.currentWidget() is window.mapping
    assert [paths for *_, paths in window.mapping.rows()] == [[attn]]
    # nothing fused under the embedding: the actions say why they are off
    embed = tree.context_menu(tree.view_index(f"{LM}.embed_tokens"))
    show = next(a for a in embed.actions() if a.text() == "Show transforms")
    assert not show.isEnabled() and "nothing is fused here" in show.toolTip()
    # expand all below: every row under the language model, folds included
    tree.view.collapseAll()
    lm = tree.view_index(LM)
    assert tree.expand_all_below(lm) > 10
    assert tree.view.isExpanded(tree.view_index(f"{LM}.layers.1.mlp"))
    assert tree.view.isExpanded(tree.model.fold_for_path(f"{LM}.layers.0"))


def test_selection_filters_transforms_and_mapping_and_back(qtbot, window, open_model, only_fusions):
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "qkv", "gate_up", "patch_embeddings")
    panel = window.transforms
    window.show_tab("transforms")
    everything = panel.visible_rows()
    modules = [r["module"] for r in everything]
    # grouped by module in natural order, each row with its module path and checkpoint key
    assert modules == sorted(modules, key=lambda m: [int(p) if p.isdigit() else p for p in m.split(".")])
    assert {"model.visual.patch_embed", f"{LM}.layers.0.mlp", f"{LM}.layers.1.self_attn"} <= set(modules)
    row = next(r for r in everything if r["module"] == f"{LM}.layers.1.self_attn")
    assert row["source_key"].startswith("model.layers.1.self_attn.")  # the checkpoint's own name
    # select a module: the tab narrows to it; a child of a fused module shows its owner's keys
    window.tree.select_path(f"{LM}.layers.1")
    assert {r["module"] for r in panel.visible_rows()} == {f"{LM}.layers.1.self_attn", f"{LM}.layers.1.mlp"}
    assert "show all" in panel.scope_label.text()
    window.tree.select_path(f"{LM}.layers.0.mlp.up_proj")
    assert {r["module"] for r in panel.visible_rows()} == {f"{LM}.layers.0.mlp"}
    assert window.mapping.rows() == [("Qwen2MLP", "FusedQwen2MLP", "gate_up", [f"{LM}.layers.0.mlp"])]
    # double-click a key row: its module is selected in the tree, the tab keeps its rows
    group = panel.table.model().index(0, 0)
    key = panel.table.model().index(1, 0, group)
    panel.table.scrollTo(key)
    rect = panel.table.visualRect(key)
    qtbot.mouseClick(panel.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())  # Qt 6 needs the press
    with qtbot.waitSignal(window.state.module_selected, timeout=5_000):
        qtbot.mouseDClick(panel.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert window.tree.current_path() == f"{LM}.layers.0.mlp"
    # unfollow: everything again
    panel.follow_box.setChecked(False)
    assert len(panel.visible_rows()) == len(everything)
    # a check row double-clicked selects its module too (the Checks tab's table)
    from fusion_core.run.results import CheckResult, ModuleCheck, Tolerance
    from fusion_gui.panels.checks import table_rows

    checked = ModuleCheck("model.visual.patch_embed", "patch_embeddings", "PatchEmbed", "FusedPatchEmbed")
    result = CheckResult("demo", "Model", {}, "float32", "cpu", 1, 0, Tolerance(1e-5, 1e-5), modules=[checked])
    window.checks.model.set_rows(table_rows(result))
    window.checks.table.doubleClicked.emit(window.checks.model.index(0, 0))
    assert window.tree.current_path() == "model.visual.patch_embed"


def test_fused_parent_hides_another_familys_rejection(qtbot, window, open_model, only_fusions):
    open_model(window, "demo:vit")
    only_fusions(window, "patch_embeddings", "patch_embeddings_2d")
    model = window.tree.model
    child = model.index_for_path("embeddings.patch_embedding")
    assert child.data(StatusRole) == ""  # not the Conv3d family's "rejected": its parent is fused
    assert model.index_for_path("embeddings").data(StatusRole) == "matched"
    legend = [w.text() for w in window.tree.findChildren(type(window.tree.filter_count))]
    assert not any(t.startswith("rejected") for t in legend)
    window.tree.select_path("embeddings.patch_embedding")
    text = window.details.text()
    assert "fused as part of embeddings by patch_embeddings_2d" in text and "rejected:" not in text


def test_near_misses_give_a_reason(qtbot, window, open_model, only_fusions):
    from fusion_core.plan.discovery import Rejection

    open_model(window, "demo:vit")
    discovery = window.state.inspection.discovery("qkv")
    # the engine's near_misses (fusion_core.plan.discovery) may not be in this build yet: give the
    # real Discovery one, as the engine would, and take it away after (discovery results are cached)
    had = hasattr(discovery, "near_misses")
    saved = getattr(discovery, "near_misses", None)
    discovery.near_misses = [Rejection("head.attention", "MultiheadAttention", "one packed in_proj_weight")]
    try:
        only_fusions(window, "qkv")
        index = window.tree.model.index_for_path("head.attention")
        assert "not a candidate: one packed in_proj_weight" in index.data(Qt.ItemDataRole.ToolTipRole)
        window.tree.filter_edit.setText("is:near")
        assert window.tree.apply_filter() == 1
        window.tree.select_path("head.attention")
        assert "qkv: not a candidate: one packed in_proj_weight" in window.details.text()
    finally:
        if had:
            discovery.near_misses = saved
        else:
            del discovery.near_misses


def test_family_colours_follow_names_not_order(qtbot, window, open_model, only_fusions):
    names = ["patch_embeddings", "patch_embeddings_2d", "qkv", "gate_up"]
    colours = style.family_colours(names)
    assert colours == style.family_colours(list(reversed(names)))
    assert len(set(colours.values())) == len(names)
    assert set(colours.values()) <= set(style.FAMILY_COLOURS)
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "qkv", "gate_up")
    index = window.tree.model.index_for_path(f"{LM}.layers.0.self_attn")
    before = index.data(Qt.ItemDataRole.BackgroundRole).name()
    panel = window.fusions
    panel.list.setCurrentRow(panel.order().index("qkv"))
    panel.down.click() if panel.order().index("qkv") < len(panel.order()) - 1 else panel.up.click()
    assert window.tree.model.index_for_path(f"{LM}.layers.0.self_attn").data(Qt.ItemDataRole.BackgroundRole).name() == (
        before
    )
    assert before == style.tint(colours["qkv"], 0.2).name()


CONFLICT_FILE = Path(__file__).resolve().parent / "family_files" / "same_patch_embed.py"


def test_actions_enabled_only_when_they_can_work(qtbot, window, open_model, only_fusions, engine_family):
    [conflicting_family] = engine_family(window, CONFLICT_FILE)  # a family replacing patch_embeddings' module
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "patch_embeddings")
    assert window.checks_action.isEnabled() and window.export_action.isEnabled()
    assert not window.save_checks_action.isEnabled() and "no check results" in window.save_checks_action.toolTip()
    only_fusions(window, "patch_embeddings", conflicting_family)
    for action in (window.checks_action, window.export_action):
        assert not action.isEnabled() and "conflict" in action.toolTip()
    assert not window.checks.run_button.isEnabled() and "conflict" in window.checks.run_button.toolTip()
    # the "fusable 1 of N" badge goes with the families
    only_fusions(window, "patch_embeddings")
    assert window.tree.expand_to_fusable() and window.tree.filter_count.text() == "fusable 1 of 1"
    only_fusions(window)
    assert window.tree.filter_count.text() == ""


def test_config_only_cannot_run_checks(qtbot, window, open_model, only_fusions, qwen2_vl_dir, tmp_path):
    folder = tmp_path / "config-only"
    folder.mkdir()
    (folder / "config.json").write_text((qwen2_vl_dir / "config.json").read_text())
    open_model(window, str(folder))
    only_fusions(window, "patch_embeddings")
    assert not window.checks_action.isEnabled() and "no weights" in window.checks_action.toolTip()
    assert not window.export_action.isEnabled() and "no weights" in window.export_action.toolTip()
    menu = window.tree.context_menu(window.tree.view_index("model.visual.patch_embed"))
    check = next(a for a in menu.actions() if a.text() == "Check this module")
    assert not check.isEnabled() and "no weights" in check.toolTip()


def test_another_model_clears_the_transforms_scope(qtbot, window, open_model, only_fusions, llama_dir):
    """Issue 33: after opening another model, Weight transforms kept the previous model's selection."""
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "patch_embeddings", "gate_up")
    panel = window.transforms
    window.tabs.setCurrentWidget(panel)
    panel.follow_box.setChecked(True)
    window.tree.select_path("model.visual.patch_embed")
    assert panel.scope == "model.visual.patch_embed"
    open_model(window, str(llama_dir))
    assert panel.scope == "" and "show all" not in panel.scope_label.text()


def test_details_say_another_family_fuses_the_module(qtbot, window, open_model, only_fusions):
    """Issue 33: on patch_embed, "qkv: not a candidate; fused by patch_embeddings" confused."""
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "patch_embeddings", "qkv")
    window.tree.select_path("model.visual.patch_embed")
    text = window.details.browser.toPlainText()
    assert "qkv: does not apply: this module is fused by patch_embeddings" in text
    assert "not a candidate; fused by" not in text
