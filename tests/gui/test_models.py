"""Qt model adapters: table rows, and a PySide6 reference bug on None that must not bite."""

from __future__ import annotations

import sys

import torch
from PySide6.QtCore import QSortFilterProxyModel, Qt
from PySide6.QtWidgets import QLabel
from torch import nn

from fusion_core import module_tree
from fusion_gui.format import human_bytes, human_count, shape_text
from fusion_gui.models.table_model import Column, RowsTableModel, TextFilterProxy
from fusion_gui.models.tree_model import ModuleTreeModel


def _tree():
    with torch.device("meta"):
        return module_tree(nn.Sequential(nn.Linear(4, 8), nn.Sequential(nn.Conv2d(3, 4, 2))))


def test_void_calls_and_none_data_never_drain_none(qtbot):
    # PySide6 6.12 on Python < 3.12 drops a reference to None for every void call and every
    # None a Python data() hands to C++; without fusion_gui._pyside_fix a busy window aborts.
    import fusion_gui  # noqa: F401  (applies the fix)

    tree_model = ModuleTreeModel()
    tree_model.set_tree(_tree())
    table = RowsTableModel([Column("a", "A")])
    table.set_rows([{"a": 1}])
    label = QLabel()
    before = sys.getrefcount(None)  # immortal (constant) from Python 3.12 on; counted before that
    for _ in range(200_000):  # more than None's natural reference count
        label.setText("x")
    for model in (tree_model, table):
        proxy = QSortFilterProxyModel()
        proxy.setSourceModel(model)
        index = proxy.index(0, 0)
        for _ in range(20_000):
            index.data(Qt.ItemDataRole.WhatsThisRole)
            proxy.headerData(0, Qt.Orientation.Horizontal, Qt.ItemDataRole.WhatsThisRole)
    # a drained reference per call would show as hundreds of thousands fewer here
    assert sys.getrefcount(None) >= before - 1_000 and label.isVisible() is False


def test_rows_table_model_and_filter(qtbot, qtmodeltester):
    model = RowsTableModel([Column("key", "Key"), Column("shape", "Shape", shape_text), Column("n", "N", numeric=True)])
    model.set_rows([{"key": "a.weight", "shape": [2, 3], "n": 6}, {"key": "b.bias", "shape": [3], "n": 3}])
    qtmodeltester.check(model)
    assert model.index(0, 1).data() == "2×3"
    proxy = TextFilterProxy()
    proxy.setSourceModel(model)
    proxy.set_needle("BIAS")
    assert proxy.visible_rows() == [{"key": "b.bias", "shape": [3], "n": 3}]
    proxy.set_needle("")
    proxy.sort(2)
    assert [r["n"] for r in proxy.visible_rows()] == [3, 6]


def test_formatters():
    assert human_count(219_390) == "219.39K" and human_count(7_000_000_000) == "7.00B" and human_count(12) == "12"
    assert human_bytes(1536) == "1.5 KiB" and human_bytes(10) == "10 B"
    assert shape_text([32, 3, 2, 14, 14]) == "32×3×2×14×14" and shape_text([]) == "scalar"
