"""Weight transforms tab: per checkpoint key, source key/shape/dtype -> target key/shape and the op."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from .. import style
from ..format import shape_text
from ..models.table_model import Column, RowsTableModel, TextFilterProxy, natural_widths, share_width

if TYPE_CHECKING:
    from fusion_core import FusionPlan

    from ..state import AppState


def _shape(key: str):
    # the core gives () for keys it could not find in the checkpoint (dtype "?"): unknown, not scalar
    def text(row: dict) -> str:
        return "?" if row.get("dtype") == "?" else shape_text(row.get(key))

    return text


COLUMNS = (
    Column("source_key", "Source key", tooltip="key in the source layout"),
    Column("source_shape", "Shape", display=_shape("source_shape")),
    Column("dtype", "dtype"),
    Column("op", "Op", tooltip="the tensor operation; each has an exact inverse"),
    Column("target_key", "Target key", tooltip="key in the target layout"),
    Column("target_shape", "Target shape", display=_shape("target_shape")),
)
KEY_COLUMNS = (0, 4)


class TransformsPanel(QWidget):
    """The plan's weight transforms, load (original -> fused) or save (fused -> original)."""

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.model = RowsTableModel(COLUMNS, self._style_row, self)
        self._widths: list[int] = []
        self.proxy = TextFilterProxy(self)
        self.proxy.setSourceModel(self.model)

        self.load_button = QRadioButton("Load: original → fused")
        self.save_button = QRadioButton("Save: fused → original")
        self.load_button.setChecked(True)
        self.direction_group = QButtonGroup(self)
        self.direction_group.addButton(self.load_button)
        self.direction_group.addButton(self.save_button)
        self.filter_edit = QLineEdit(placeholderText="Filter keys, shapes, ops…")
        self.filter_edit.setClearButtonEnabled(True)
        self.copy_button = QPushButton("Copy as JSON")
        self.copy_button.setToolTip("Copy the rows shown (after the filter) to the clipboard as JSON")
        self.info = QLabel()
        self.info.setWordWrap(True)
        self.info.setProperty("role", "info")

        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(-1, Qt.SortOrder.AscendingOrder)
        self.table.setAlternatingRowColors(True)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setWordWrap(False)
        self.table.verticalHeader().hide()
        # keys differ in their tails (layer index, projection): keep the tail visible
        self.table.setTextElideMode(Qt.TextElideMode.ElideLeft)
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 8)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(False)

        bar = QHBoxLayout()
        bar.addWidget(self.load_button)
        bar.addWidget(self.save_button)
        bar.addSpacing(12)
        bar.addWidget(self.filter_edit, 1)
        bar.addWidget(self.copy_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.info)
        layout.addLayout(bar)
        layout.addWidget(self.table, 1)

        self.load_button.toggled.connect(self._on_direction_toggled)
        self.filter_edit.textChanged.connect(self.proxy.set_needle)
        self.copy_button.clicked.connect(self.copy_json)
        state.plan_changed.connect(self._on_plan_changed)
        self._on_plan_changed(None)

    def _style_row(self, row: dict, column: int, role: int) -> object:
        # the family shows as its colour (as in the tree) with the name in the tooltip: one column less
        if column == 0 and role == Qt.ItemDataRole.DecorationRole:
            order = self.state.family_order
            i = order.index(row["family"]) if row.get("family") in order else 0
            return style.fused_icon(style.FAMILY_COLOURS[i % len(style.FAMILY_COLOURS)])
        if column == 0 and role == Qt.ItemDataRole.ToolTipRole:
            return f"{row.get('source_key')}  ({row.get('family')})"
        return None

    @property
    def direction(self) -> str:
        return "load" if self.load_button.isChecked() else "save"

    def set_direction(self, direction: str) -> None:
        (self.load_button if direction == "load" else self.save_button).setChecked(True)

    def _on_direction_toggled(self, _checked: bool) -> None:
        self._on_plan_changed(self.state.plan)

    def _on_plan_changed(self, plan: FusionPlan | None) -> None:
        if plan is None:
            self.model.set_rows([])
            self.info.setText(self.state.plan_error or "Open a model to see its weight transforms.")
            return
        rows = plan.rows(self.direction)
        self.model.set_rows(rows)
        self._fit()
        if not plan.has_checkpoint:
            text = (
                "<b>No checkpoint attached</b> (config-only source): these are the rules on the model's own "
                "parameter names, with shapes from the config."
            )
        else:
            src = self.state.inspection.source if self.state.inspection else None
            files = len(src.checkpoint.files) if src is not None and src.checkpoint is not None else 0
            text = (
                f"Checkpoint layout: <b>{plan.layout}</b> ({files} file(s)). "
                f"{len(rows)} key(s) transformed; every other key is copied unchanged."
            )
            if plan.layout == "fused" and self.direction == "load":
                text += " The checkpoint is already fused: it loads as is."
            missing = sum(1 for ct in plan.checkpoint_transforms if ct.present == "missing")
            if missing:
                text += (
                    f"<br><span style='color:#b26a00'><b>{missing} transform(s)</b> name keys that were not found "
                    "in the checkpoint under these names (shapes shown as ?).</span>"
                )
        if not rows:
            text += " Nothing to transform with the enabled fusions."
        self.info.setText(text)

    def _fit(self, measure: bool = True) -> None:
        """Fit the columns to their text; long keys share what is left (elided on the left)."""
        header = self.table.horizontalHeader()
        if measure or not self._widths:
            self._widths = natural_widths(self.model, self.table.fontMetrics())
            self._widths[0] += 22  # the family icon
        for col, w in enumerate(self._widths):
            header.resizeSection(col, w)
        width = self.table.viewport().width()
        others = sum(header.sectionSize(c) for c in range(self.model.columnCount()) if c not in KEY_COLUMNS)
        share_width(header, KEY_COLUMNS, max(width - others - 2, 2 * 120))

    def resizeEvent(self, event) -> None:  # Qt override: the key columns share the new width
        super().resizeEvent(event)
        if self.model.rows:
            self._fit(measure=False)

    def visible_rows(self) -> list[dict]:
        return self.proxy.visible_rows()

    def copy_json(self) -> str:
        """Copy the visible rows as JSON to the clipboard; returns the text."""
        text = json.dumps(
            {"model": self.state.spec, "direction": self.direction, "transforms": self.visible_rows()}, indent=2
        )
        QGuiApplication.clipboard().setText(text)
        return text
