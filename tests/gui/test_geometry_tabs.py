"""Issue 33, item 3: every tab and dialog is readable at the default size (1460x900) and at 1280x800.

What is measured is what the views paint: a cell's text as its delegate gives it for the cell's
width, cut by Qt's own elision if it were still too wide. Paths and keys keep their layer indices
and last two names (the full text in the tooltip), fold rows keep their layer range, adapter marks
keep the module's name, short columns fit their content and dialog labels are whole.
"""

from __future__ import annotations

from pathlib import Path

import _forked
import pytest
from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtWidgets import QAbstractItemView, QLabel, QStyleOptionViewItem

from fusion_gui.models.tree_model import NAME, FoldRole, PathRole

SIZES = [(1460, 900), (1280, 800)]
JOB_TIMEOUT_MS = 240_000
_TOOLTIP = Qt.ItemDataRole.ToolTipRole
_MAKE = """
import sys, torch, fusion_core
from peft import LoraConfig, get_peft_model
model = fusion_core.load_plain(sys.argv[1])
torch.manual_seed(0)
cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
get_peft_model(model, cfg).save_pretrained(sys.argv[2])
"""


@pytest.fixture(scope="module")
def partial_adapter(qwen2_vl_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real PEFT adapter on q and v of the tiny Qwen2-VL: once fused, 'qkv_proj: fused LoRA rank 4
    (partial: k_proj not adapted, zero block)', the longest mark the tree shows (made in another process)."""
    root = str(Path(__file__).resolve().parents[2])
    out = tmp_path_factory.mktemp("geometry-adapter") / "qv"
    done = _forked.run([str(qwen2_vl_dir), str(out)], code=_MAKE, cwd=root, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def shown_text(view: QAbstractItemView, index: QModelIndex) -> str:
    """The text the view paints in a cell at its current width."""
    option = QStyleOptionViewItem()
    option.initFrom(view)
    option.rect = view.visualRect(index)
    view.itemDelegateForIndex(index).initStyleOption(option, index)
    room = option.rect.width() - 10
    if option.features & QStyleOptionViewItem.ViewItemFeature.HasDecoration:
        room -= option.decorationSize.width() + 6
    fm = option.fontMetrics
    if fm.horizontalAdvance(option.text) <= room:
        return option.text
    return fm.elidedText(option.text, view.textElideMode(), room)


def assert_keeps_core(shown: str, path: str, context: object) -> None:
    """``shown`` keeps every layer index of ``path`` and its last two names, whole."""
    parts = path.split(".")
    segments = [s.strip("…") for s in shown.split(".")]
    assert segments[-2:] == parts[-2:], (context, shown, path)
    for index in (p for p in parts if p.isdigit()):
        assert index in segments, (context, shown, path)


def rows_below(view, parent: QModelIndex | None = None, depth: int = 8):
    """Every row index (column 0) below ``parent``, expanding as it goes (a tree view)."""
    model = view.model()
    parent = QModelIndex() if parent is None else parent
    if model.canFetchMore(parent):
        model.fetchMore(parent)
    for row in range(model.rowCount(parent)):
        index = model.index(row, 0, parent)
        yield index
        if depth and model.hasChildren(index):
            if hasattr(view, "expand"):
                view.expand(index)
            yield from rows_below(view, index, depth - 1)


def assert_labels_whole(dialog, context: object) -> None:
    """Each label of ``dialog`` shows all its text: a wrapped one is as wide as its longest unbreakable
    run and as tall as its lines; another one is as wide as its text."""
    labels = [w for w in dialog.findChildren(QLabel) if w.isVisible() and w.text()]
    assert labels, context
    for label in labels:
        if label.wordWrap():
            assert label.minimumSizeHint().width() <= label.width(), (context, label.text()[:80])
            assert label.heightForWidth(label.width()) <= label.height(), (context, label.text()[:80])
        else:
            assert label.sizeHint().width() <= label.width(), (context, label.text()[:80])
    assert dialog.width() >= dialog.minimumSizeHint().width(), context


@pytest.mark.parametrize("size", SIZES)
def test_tabs_and_dialogs_are_readable(qtbot, window, open_model, qwen2_vl_dir, partial_adapter, size):
    open_model(window, str(qwen2_vl_dir))
    window.resize(*size)
    qtbot.wait(50)

    # Weight transforms: checkpoint keys in both key columns; short columns fit their text
    panel = window.transforms
    window.show_tab("transforms")
    qtbot.waitUntil(lambda: panel.model.rowCount() > 0, timeout=30_000)
    qtbot.wait(50)
    view = panel.table
    fm = view.fontMetrics()
    keys = 0
    for head in rows_below(view, depth=1):
        for row in range(panel.model.rowCount(head)):
            for col in (0, 4):
                index = panel.model.index(row, col, head)
                full = index.data(Qt.ItemDataRole.DisplayRole)
                assert_keeps_core(shown_text(view, index), full, (size, "transforms"))
                assert full in index.data(_TOOLTIP), (size, full)
                keys += 1
            for col in (1, 2, 3, 5):
                text = panel.model.index(row, col, head).data(Qt.ItemDataRole.DisplayRole) or ""
                assert fm.horizontalAdvance(text) + 10 <= view.columnWidth(col), (size, col, text)
    assert keys >= 20, keys

    # Diff: the module paths of both tables
    diff = window.diff
    window.show_tab("diff")
    qtbot.waitUntil(lambda: not diff.pending and bool(diff.modules_model.rows), timeout=JOB_TIMEOUT_MS)
    qtbot.wait(50)
    for table, col in ((diff.modules_table, 0), (diff.keys_table, 1)):
        model = table.model()
        assert model.rowCount() >= 5
        for row in range(model.rowCount()):
            index = model.index(row, col)
            full = index.data(Qt.ItemDataRole.DisplayRole)
            assert_keeps_core(shown_text(table, index), full, (size, "diff"))
            assert full in index.data(_TOOLTIP), (size, full)

    # the tree: fold rows keep their layer range; adapter marks keep the module's name
    with qtbot.waitSignal(window.state.adapter_changed, timeout=JOB_TIMEOUT_MS):
        window.state.open_adapter(partial_adapter)
    qtbot.waitUntil(lambda: not window.state.busy, timeout=30_000)
    tree = window.tree.view
    folds = marks = 0
    for index in list(rows_below(tree)):
        label = index.data(Qt.ItemDataRole.DisplayRole)
        shown = shown_text(tree, index.siblingAtColumn(NAME))
        if index.data(FoldRole):
            span = label.split(" ×")[0].split(":")[0].split(" ")[-1]  # "0–31"
            assert span in shown and "…" not in shown, (size, label, shown)
            assert label in index.data(_TOOLTIP), (size, label)
            folds += 1
        elif "  [" in label:
            name = index.data(PathRole).rsplit(".", 1)[-1]
            assert shown.startswith(f"{name}  [") and shown.endswith("]"), (size, label, shown)
            assert label.split("  [", 1)[1].rstrip("]") in index.data(_TOOLTIP), (size, label)
            marks += 1
    assert folds >= 2 and marks >= 2, (folds, marks)

    # dialogs: every label whole
    for show in (window.show_export_dialog, window.show_adapter_dialog):
        dialog = show()
        qtbot.waitExposed(dialog)
        if show == window.show_export_dialog:
            qtbot.waitUntil(lambda d=dialog: "fusion_core" in d.consumers.text(), timeout=JOB_TIMEOUT_MS)
        qtbot.wait(50)
        assert_labels_whole(dialog, (size, type(dialog).__name__))
        dialog.close()


@pytest.mark.parametrize("size", SIZES)
def test_real_size_folds_keep_their_layer_range(qtbot, window, open_model, size):
    """Llama-4 at real size (config only): its periodic text fold 'layers 0–47: 12 × [3 + 1] · 3 differs
    in self_attn' and identical vision fold keep their layer range in the tree's name column."""
    open_model(window, "arch:llama4")
    window.resize(*size)
    qtbot.wait(50)
    tree = window.tree.view
    folds = []
    for index in list(rows_below(tree, depth=5)):
        if index.data(FoldRole):
            label = index.data(Qt.ItemDataRole.DisplayRole)
            shown = shown_text(tree, index.siblingAtColumn(NAME))
            span = label.split(" ×")[0].split(":")[0].split(" ")[-1]
            assert span in shown and "…" not in shown, (size, label, shown)
            assert label in index.data(_TOOLTIP), (size, label)
            folds.append(shown)
    assert any("×[" in f or " × [" in f for f in folds), folds  # the periodic one
