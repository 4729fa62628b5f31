"""The tree and tables at real size (issue 22, item 4): periodic folds that say how a layer
differs, marks on fold rows, one family's reasons only, elision that keeps the tower's name,
containers without a borrowed shape, the export dialog, the progress text, a quick quit."""

from __future__ import annotations

import time

import pytest
from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtGui import QColor

from fusion_core import inspect_model
from fusion_gui.format import elide_dotted
from fusion_gui.models.tree_model import SHAPE, FoldGroup, FoldRole, ModuleTreeModel

LLAMA4_LAYERS = "language_model.model.layers"


@pytest.fixture(scope="module")
def llama4_tree():
    return inspect_model("arch:llama4").tree  # meta only


def _fold(model: ModuleTreeModel, path: str) -> QModelIndex:
    fold = model.fold_for_path(path)
    assert fold.isValid() and isinstance(model.item(fold), FoldGroup)
    return fold


def test_periodic_layers_fold_into_one_row_that_says_how_a_layer_differs(qtbot, qtmodeltester, llama4_tree):
    model = ModuleTreeModel()
    model.set_tree(llama4_tree)
    fold = _fold(model, f"{LLAMA4_LAYERS}.0")
    # 48 layers, 3 alike and a fourth that differs, 12 times: one row, not 24
    assert fold.data().startswith("layers 0–47: 12 × [3 + 1] · 3 differs in ")
    assert fold.data(FoldRole) == 48
    tip = fold.data(Qt.ItemDataRole.ToolTipRole)
    assert "a pattern of 4 repeated" in tip and "3 differs in self_attn" in tip
    parent = fold.parent()
    assert model.rowCount(parent) == 1  # the layers list holds the one fold
    model.fetchMore(fold)
    assert model.rowCount(fold) == 48
    qtmodeltester.check(model)


def test_fold_rows_carry_their_contents_marks(qtbot, llama4_tree):
    model = ModuleTreeModel()
    model.set_tree(llama4_tree)
    fold = _fold(model, f"{LLAMA4_LAYERS}.0")
    assert "⚠" not in fold.data()
    rejected = {f"{LLAMA4_LAYERS}.{i}.self_attn": ("qkv", "a reason") for i in range(12)}
    model.set_highlights({}, rejected, {"qkv": QColor("#1565c0")})
    assert fold.data().endswith(" · ⚠ 12")  # collapsed, and the legend's 12 rejections still show
    assert fold.data(Qt.ItemDataRole.DecorationRole) is not None
    assert "⚠ 12 rejected candidate(s) within" in fold.data(Qt.ItemDataRole.ToolTipRole)


def test_a_fused_module_never_shows_another_familys_rejection(qtbot, llama4_tree):
    model = ModuleTreeModel()
    model.set_tree(llama4_tree)
    path = "vision_model.patch_embedding"
    model.set_highlights(
        {path: "patch_embeddings_2d"},
        {path: ("patch_embeddings", "no Conv3d child")},
        {"patch_embeddings_2d": QColor("#2e7d32"), "patch_embeddings": QColor("#1565c0")},
        near_misses={path: ("patch_embeddings", "looks like one")},
    )
    index = model.index_for_path(path)
    tip = index.data(Qt.ItemDataRole.ToolTipRole)
    assert "fused by patch_embeddings_2d" in tip and "no Conv3d child" not in tip and "looks like one" not in tip
    assert model.overlay.marks([path]) == "" and model.overlay.rejected == {}


def test_containers_show_no_own_tensor_as_their_weight_shape(qtbot):
    tree = inspect_model("arch:mllama").tree
    model = ModuleTreeModel(fold=False)
    model.set_tree(tree)
    layer = next(p for p, n in tree.by_path.items() if n.class_name == "MllamaCrossAttentionDecoderLayer")
    node = tree.by_path[layer]
    assert node.params and all(t.name != "weight" for t in node.params)  # its own gates
    assert model.index_for_path(layer, SHAPE).data() == ""
    proj = f"{layer}.cross_attn.q_proj"
    assert model.index_for_path(proj, SHAPE).data() != ""  # a Linear shows its weight


def test_elision_keeps_the_tower_the_layer_index_and_the_tail():
    def measure(text: str) -> int:
        return len(text)

    vision = "vision_model.transformer.layers.0.self_attn.q_proj.weight"
    text = "language_model.model.layers.0.self_attn.q_proj.weight"
    short_v, short_t = elide_dotted(vision, 40, measure), elide_dotted(text, 40, measure)
    assert short_v.startswith("vision_model.") and short_t.startswith("language_model.")
    assert "0.self_attn" in short_v and short_v.endswith("q_proj.weight") and short_v != short_t
    # a wrapper first segment keeps the one after it too
    wrapped = elide_dotted("model.language_model.layers.13.self_attn.o_proj.weight", 44, measure)
    assert wrapped.startswith("model.language_model.") and "…13." in wrapped


def test_tables_elide_paths_by_segment_and_tooltips_hold_them_whole(qtbot, window):
    from fusion_gui.models.elide import KeyElideDelegate

    assert isinstance(window.checks.table.itemDelegateForColumn(0), KeyElideDelegate)
    assert isinstance(window.diff.modules_table.itemDelegateForColumn(0), KeyElideDelegate)
    assert isinstance(window.diff.keys_table.itemDelegateForColumn(1), KeyElideDelegate)


def test_checks_progress_text_is_one_elided_line(qtbot, window):
    checks = window.checks
    checks.show()
    checks.progress.resize(300, checks.progress.height())
    message = "checking vision_model.transformer.layers.31.self_attn\n(module 118 of 240, end-to-end inputs 100%)"
    checks._on_job_progressed("checks", 3, 10, message)
    shown = checks.progress.format().replace("%%", "%")
    assert "\n" not in shown and "…" in shown
    assert checks.progress.fontMetrics().horizontalAdvance(shown) <= checks.progress.width()
    assert checks.progress.toolTip() == " ".join(message.split())


def test_export_dialog_grows_to_show_every_consumer(qtbot, window):
    from fusion_core.export.result import Consumer
    from fusion_gui.panels.export_dialog import ExportDialog

    dialog = ExportDialog(window.state, window)
    qtbot.addWidget(dialog)
    dialog.show()
    before = dialog.height()
    rows = [
        Consumer(f"consumer {i}", "loads exactly", "AutoModel.from_pretrained(out)", "detail " * 30) for i in range(4)
    ]
    dialog._on_predicted(dialog.layout_box.currentData(), rows)
    label = dialog.consumers
    assert dialog.height() > before
    assert label.height() >= label.heightForWidth(label.width())  # no line clipped


def test_the_engine_ends_at_once_on_quit(qtbot):
    from fusion_gui.engine import QUIT_GRACE_MS, Engine

    engine = Engine()
    engine.start()
    assert engine.wait_for(lambda: engine.pid != 0, 60_000)
    t0 = time.monotonic()
    engine.stop()
    assert not engine.running
    assert time.monotonic() - t0 < QUIT_GRACE_MS / 1000 + 1.5


def test_export_dialog_names_only_the_families_that_match(qtbot, window, open_model, only_fusions):
    from fusion_gui.panels.export_dialog import ExportDialog

    open_model(window, "demo:vit")
    only_fusions(window, "patch_embeddings_2d", "gate_up")  # ViT has no gated MLP: gate_up matches nothing
    dialog = ExportDialog(window.state, window)
    qtbot.addWidget(dialog)
    note = dialog.note.text()
    assert "fusions: <b>patch_embeddings_2d</b>" in note and "gate_up" not in note
