"""The module tree: highlights follow the Fusions tab, the filter finds modules, rows are lazy."""

from __future__ import annotations

import torch
from PySide6.QtCore import QModelIndex, Qt
from torch import nn

from fusion_core import module_tree
from fusion_gui.models.tree_model import CountRole, FoldRole, ModuleTreeModel, PathRole, StatusRole

PATCH = "model.visual.patch_embed"


def test_patch_embedding_highlighted_after_enabling(qtbot, qtmodeltester, window, open_model, only_fusions):
    open_model(window, "demo:qwen2-vl")
    only_fusions(window)
    model = window.tree.model
    assert model.index_for_path(PATCH).data(StatusRole) == ""
    assert model.index_for_path("model.visual").data(CountRole) == 0

    only_fusions(window, "patch_embeddings")
    index = model.index_for_path(PATCH)
    assert index.data(StatusRole) == "matched"
    assert index.data(Qt.ItemDataRole.BackgroundRole) is not None
    assert not index.data(Qt.ItemDataRole.DecorationRole).isNull()
    assert "fused by patch_embeddings" in index.data(Qt.ItemDataRole.ToolTipRole)
    # ancestors carry the count, so a collapsed tree still shows where to look
    for ancestor in ("", "model", "model.visual"):
        assert model.index_for_path(ancestor).data(CountRole) == 1
    assert model.index_for_path("model.language_model").data(CountRole) == 0
    legend = " ".join(
        w.text() for w in window.tree.findChildren(type(window.tree.filter_count)) if w.text().startswith("patch")
    )
    assert "patch_embeddings (1)" in legend
    qtmodeltester.check(model)


def test_filter_finds_patch_embedding(qtbot, window, open_model):
    open_model(window, "demo:qwen2-vl")
    tree = window.tree
    qtbot.keyClicks(tree.filter_edit, "patch_embed")
    qtbot.waitUntil(lambda: tree.filter_count.text() != "", timeout=5_000)
    assert tree.view_index(PATCH).isValid()
    assert not tree.view_index("model.language_model.embed_tokens").isValid()
    # classes match too: the Conv3d inside the patch embedding
    tree.filter_edit.setText("conv3d")
    assert tree.apply_filter() == 1
    assert tree.view_index(f"{PATCH}.proj").isValid()
    tree.filter_edit.clear()
    assert tree.apply_filter() == 0
    assert tree.view_index("model.language_model.embed_tokens").isValid()


def test_expand_to_fusable_and_details(qtbot, window, open_model, only_fusions):
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "patch_embeddings")
    tree = window.tree
    tree.view.collapseAll()
    with qtbot.waitSignal(window.state.module_selected, timeout=5_000) as sig:
        assert tree.expand_to_fusable() == PATCH
    assert sig.args == [PATCH]
    assert tree.current_path() == PATCH
    assert tree.view.isExpanded(tree.view_index("model.visual"))
    text = window.details.text()
    assert PATCH in text and "PatchEmbed" in text and "FusedPatchEmbed" in text
    assert "replaced by FusedPatchEmbed" in text
    # the Conv3d weight, with its shape, is in the child's details
    tree.select_path(f"{PATCH}.proj")
    assert "32×3×2×14×14" in window.details.text()


def _wide_model(blocks: int, per_block: int) -> nn.Module:
    with torch.device("meta"):
        return nn.Sequential(*(nn.Sequential(*(nn.Linear(4, 4) for _ in range(per_block))) for _ in range(blocks)))


def test_large_tree_is_lazy(qtbot, qtmodeltester):
    tree = module_tree(_wide_model(100, 110))  # 11,101 modules
    assert len(tree) > 10_000
    model = ModuleTreeModel(fold=False)
    model.set_tree(tree)
    assert model.rowCount() == 1
    assert model.fetched_count() == 0  # nothing below the root row exists yet
    root = model.index(0, 0)
    assert model.hasChildren(root) and model.rowCount(root) == 0 and model.canFetchMore(root)
    model.fetchMore(root)
    assert model.rowCount(root) == 100 and model.fetched_count() == 1
    assert model.index_for_path("57.3").isValid()
    assert model.fetched_count() == 2
    small = ModuleTreeModel(fold=False)
    small.set_tree(module_tree(_wide_model(3, 4)))
    qtmodeltester.check(small)


def test_filter_reaches_unexpanded_rows(qtbot):
    tree = module_tree(_wide_model(20, 30))
    model = ModuleTreeModel(fold=False)
    model.set_tree(tree)
    hits = model.set_needle("12.17")  # nothing below the root was fetched
    assert [n.path for n in hits] == ["12.17"]
    top = model.index(0, 0, QModelIndex())
    assert model.rowCount(top) == 1
    block = model.index(0, 0, top)
    assert block.data() == "12"
    assert model.rowCount(block) == 1 and model.index(0, 0, block).data() == "17"
    assert model.fetched_count() == 2  # only the hit's ancestors
    assert not model.index_for_path("11").isValid()
    model.set_needle("")
    assert model.rowCount(top) == 20 and model.rowCount(block) == 30


def test_rejected_candidate_marked_with_reason(qtbot, window, open_model, only_fusions):
    # an overlapping patch embedding (7x7, stride 4): a candidate of the Conv2d family, rejected with the reason
    open_model(window, "arch:segformer")  # meta only
    only_fusions(window, "patch_embeddings_2d")
    path = "stages.0.patch_embeddings"
    index = window.tree.model.index_for_path(path)
    assert index.data(StatusRole) == "rejected"
    assert "proj stride (4, 4) != kernel (7, 7)" in index.data(Qt.ItemDataRole.ToolTipRole)
    assert index.data(Qt.ItemDataRole.BackgroundRole) is not None
    assert window.tree.model.index_for_path(path).data(CountRole) == 0
    legend = [w.text() for w in window.tree.findChildren(type(window.tree.filter_count))]
    assert "rejected (4)" in legend
    window.tree.select_path(path)
    assert "rejected: proj stride (4, 4) != kernel (7, 7)" in window.details.text()
    assert "can be fused" in window.fusions.message.text()  # its spatial reductions are


def _shown_rows(view) -> list[QModelIndex]:
    """The rows the view lays out, top to bottom (expanded ones open)."""
    rows, index = [], view.model().index(0, 0)
    while index.isValid():
        rows.append(index)
        index = view.indexBelow(index)
    return rows


def test_filter_clear_and_expand_all_at_real_size(qtbot, qtmodeltester, window, open_model, only_fusions):
    open_model(window, "arch:qwen2_5_omni")  # meta only, ~2.7k modules
    only_fusions(window, "gate_up")
    tree, model = window.tree, window.tree.model
    modules = window.state.inspection.tree
    assert model.fetched_count() < 50  # lazy: the first levels only
    layers = "thinker.model.language_model.layers"
    n = len(modules.by_path[layers].children)

    # a filter shows the matches and their ancestors, folds included, expanded down to each match
    assert tree.apply_filter() == 0
    tree.filter_edit.setText("mlp")
    hits = tree.apply_filter()
    matches = {p for p in modules.by_path if "mlp" in p.lower() or "mlp" in modules.by_path[p].class_name.lower()}
    assert hits == len(matches)
    shown = _shown_rows(tree.view)
    paths = {i.data(PathRole) for i in shown if not i.data(FoldRole)}
    assert matches <= paths  # every match is laid out (its ancestors are expanded)
    assert all(p in matches or any(m.startswith(f"{p}.") or not p for m in matches) for p in paths)
    assert not tree.view_index(f"{layers}.0.self_attn").isValid()
    fold = tree.model.fold_for_path(f"{layers}.0")
    assert fold.isValid() and tree.view.isExpanded(fold) and fold.data(FoldRole) == n
    assert tree.view.isExpanded(tree.view_index(f"{layers}.3.mlp"))
    # the Qt model contract with a filter on (a model of its own: the tester is not told of
    # the view's fetches while a layout change is in flight)
    filtered = ModuleTreeModel()
    filtered.set_tree(modules)
    filtered.set_needle("mlp")
    qtmodeltester.check(filtered)

    # clearing brings every row back under the rows that were open, and keeps them open
    tree.filter_edit.setText("")
    assert tree.apply_filter() == 0
    assert tree.view_index(f"{layers}.0.self_attn").isValid()
    assert tree.view.isExpanded(tree.view_index(f"{layers}.3.mlp"))
    assert len(_shown_rows(tree.view)) > len(shown)

    # expand all: every module is a row and laid out, once, folds included
    tree.view.expandAll()
    shown = _shown_rows(tree.view)
    folds = sum(1 for i in shown if i.data(FoldRole))
    assert folds > 0 and len(shown) == len(modules) + folds
    assert tree.view.isExpanded(tree.view_index(f"{layers}.{n - 1}.mlp"))
    # highlights follow a toggle on the expanded tree, and every row stays open
    only_fusions(window)
    assert tree.view_index(f"{layers}.0.mlp").data(StatusRole) == ""
    only_fusions(window, "gate_up")
    assert tree.view_index(f"{layers}.{n - 1}.mlp").data(StatusRole) == "matched"
    assert len(_shown_rows(tree.view)) == len(modules) + folds
    tree.view.collapseAll()
    assert len(_shown_rows(tree.view)) == 1

    # expand all with a filter on opens only what the filter shows
    tree.filter_edit.setText("gate_proj")
    assert tree.apply_filter() > 0
    tree.view.collapseAll()
    tree.view.expandAll()
    shown = [i.data(PathRole) for i in _shown_rows(tree.view) if not i.data(FoldRole)]
    assert {p for p in shown if p.endswith("gate_proj")} == {p for p in modules.by_path if "gate_proj" in p}
    assert not any(p.endswith("up_proj") for p in shown)


def test_clearing_checks_drops_a_filter_on_them(qtbot, window, open_model, only_fusions):
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "qkv")
    tree = window.tree
    tree.filter_edit.setText("layers is:failed")
    assert tree.apply_filter() == 0  # no check results: nothing failed
    only_fusions(window)  # a new plan clears the check results
    assert tree.filter_edit.text() == "layers"
    assert tree.view_index("model.language_model.layers.1.self_attn").isValid()
    tree.filter_edit.clear()
    tree.set_state_filter("is:checked")
    only_fusions(window, "qkv")
    assert tree.state_box.currentData() == "" and tree.view_index("model.language_model.embed_tokens").isValid()
