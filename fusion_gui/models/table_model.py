"""A read-only table model over a list of dict rows (the core's preview rows, check results)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QHeaderView

from ..format import plain_tip, printable

Index = QModelIndex | QPersistentModelIndex
RowRole = Qt.ItemDataRole.UserRole + 1  # the whole row dict
SortRole = Qt.ItemDataRole.UserRole + 2  # raw value for sorting


@dataclass(frozen=True)
class Column:
    """One column: the row key, its title, and how to show the value."""

    key: str
    title: str
    text: Callable[[Any], str] = str
    numeric: bool = False
    tooltip: str = ""
    display: Callable[[dict[str, Any]], str] | None = None  # text from the whole row (overrides ``text``)


class RowsTableModel(QAbstractTableModel):
    """Rows are dicts; ``style_row`` may return role -> value overrides (colour, icon, font)."""

    def __init__(
        self,
        columns: Sequence[Column],
        style_row: Callable[[dict[str, Any], int, int], Any] | None = None,
        parent: Any = None,
    ) -> None:
        super().__init__(parent)
        self.columns = list(columns)
        self.rows: list[dict[str, Any]] = []
        self._style_row = style_row

    def set_rows(self, rows: Sequence[dict[str, Any]]) -> None:
        self.beginResetModel()
        self.rows = list(rows)
        self.endResetModel()

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.columns)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(self.columns):
            return None
        col = self.columns[section]
        if role == Qt.ItemDataRole.DisplayRole:
            return col.title
        if role == Qt.ItemDataRole.ToolTipRole and col.tooltip:
            return col.tooltip
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        value = self._data(index, role)
        if role == Qt.ItemDataRole.ToolTipRole and isinstance(value, str):
            return plain_tip(value)  # cells quote keys and names from the model folder: never markup
        if role == Qt.ItemDataRole.DisplayRole and isinstance(value, str):
            return printable(value)  # ... nor reordered by a bidirectional override
        return value

    def _data(self, index: Index, role: int) -> Any:
        if not index.isValid() or index.row() >= len(self.rows):
            return None
        row = self.rows[index.row()]
        col = self.columns[index.column()]
        value = row.get(col.key)
        if role == Qt.ItemDataRole.ToolTipRole and col.display is not None:
            styled = self._style_row(row, index.column(), role) if self._style_row is not None else None
            # the full key or path: the cell may show it shortened or relative to its module
            return styled if styled is not None else value if isinstance(value, str) and value else col.display(row)
        if role == Qt.ItemDataRole.DisplayRole and col.display is not None:
            return col.display(row)
        if role == Qt.ItemDataRole.DisplayRole:
            return "" if value is None else col.text(value)
        if role == RowRole:
            return row
        if role == SortRole:
            return value if isinstance(value, (int, float)) else ("" if value is None else col.text(value))
        if role == Qt.ItemDataRole.TextAlignmentRole and col.numeric:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        styled = self._style_row(row, index.column(), role) if self._style_row is not None else None
        if styled is not None:
            return styled
        if role == Qt.ItemDataRole.ToolTipRole and value is not None:
            return col.text(value)
        return None


def natural_widths(model: RowsTableModel, metrics: QFontMetrics, max_rows: int = 5000, pad: int = 18) -> list[int]:
    """Column widths that fit the longest text of each column (header included).

    ``QTableView.resizeColumnsToContents`` asks the delegate for every cell's size hint
    (~10 ``data()`` calls per cell): 280 ms for 250 rows. The longest string per column,
    measured once, costs a few milliseconds and gives the same widths for plain text.
    """
    widths = []
    rows = model.rows[:max_rows]
    for col in model.columns:
        texts = [col.title]
        for row in rows:
            if col.display is not None:
                texts.append(col.display(row))
            else:
                value = row.get(col.key)
                texts.append("" if value is None else col.text(value))
        longest = sorted(texts, key=len, reverse=True)[:3]  # proportional fonts: measure a few
        widths.append(max(metrics.horizontalAdvance(t) for t in longest) + pad)
    return widths


def share_width(header: QHeaderView, columns: Sequence[int], room: int, minimum: int = 120) -> None:
    """Shrink ``columns`` proportionally so that together they fit in ``room`` pixels.

    Each keeps at least ``minimum``; nothing happens when they already fit. Used by the
    tables whose long key/module columns share what the other columns leave.
    """
    total = sum(header.sectionSize(c) for c in columns)
    if total > room:
        for c in columns:
            header.resizeSection(c, max(minimum, int(header.sectionSize(c) * room / total)))


class TextFilterProxy(QSortFilterProxyModel):
    """Case-insensitive substring filter over every column's text, sortable by raw values."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.setSortRole(SortRole)
        self._needle = ""

    def set_needle(self, text: str) -> None:
        self.beginFilterChange()
        self._needle = text.strip().lower()
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def filterAcceptsRow(self, source_row: int, source_parent: Index) -> bool:
        if not self._needle:
            return True
        model = self.sourceModel()
        for col in range(model.columnCount()):
            text = model.index(source_row, col, source_parent).data() or ""
            if self._needle in str(text).lower():
                return True
        return False

    def visible_rows(self) -> list[dict[str, Any]]:
        return [self.index(r, 0).data(RowRole) for r in range(self.rowCount())]
