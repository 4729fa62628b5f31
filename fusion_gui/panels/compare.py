"""The Diff tab's A-vs-B view: the open model (A) against another one (B) (``fusion_core.compare``).

One table of modules with both sides' columns and one of state-dict keys, rows coloured
added, removed, changed or equal, filterable by text and by status (``is:changed``,
``is:added``, ``is:renamed``, ``is:different``...). Values are compared in the engine on
request, streamed, with progress and Cancel; selecting a row selects its module in the tree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QModelIndex, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from .. import style
from ..format import bounded, shape_text
from ..models.table_model import Column, RowRole, RowsTableModel, TextFilterProxy, natural_widths

if TYPE_CHECKING:
    from ..state import AppState

#: row backgrounds by status (light, so the text stays readable)
STATUS_BACKGROUNDS = {
    "changed": "#ffe0b2", "added": "#c8e6c9", "removed": "#ffcdd2", "different": "#ffcdd2", "close": "#fff9c4",
    "renamed": "#e3f2fd", "transformed": "#ede7f6",
}  # fmt: skip


def _n(value: Any) -> str:
    return "" if value is None else f"{value:,}"


def _g(value: Any) -> str:
    return "" if value is None else f"{value:.3g}"


MODULE_COLUMNS = (
    Column("status", "Status", tooltip="equal, changed, added (only in B) or removed (only in A)"),
    Column("module", "Module", display=lambda r: r.get("module") or "(root)", tooltip="select it in the tree"),
    Column("class_a", "Class A", text=str),
    Column("class_b", "Class B", text=str),
    Column("params_a", "Params A", text=_n, numeric=True),
    Column("params_b", "Params B", text=_n, numeric=True),
    Column("changes", "What differs", text=lambda c: ", ".join(c)),
)


def _stored(row: dict, side: str) -> str:
    """The stored shape (a fused key holds more than the model key it feeds), else the key's own."""
    shape = row.get(f"stored_shape_{side}") or row.get(f"shape_{side}")
    return shape_text(shape) if shape is not None else ""


KEY_COLUMNS = (
    Column("status", "Status", tooltip="equal, renamed (transformers' renamings), transformed (a family), changed..."),
    Column("name", "Model key"),
    Column("key_a", "Key A"),
    Column("shape_a", "Shape A", display=lambda r: _stored(r, "a"), tooltip="the shape the checkpoint stores"),
    Column("dtype_a", "Dtype A"),
    Column("key_b", "Key B"),
    Column("shape_b", "Shape B", display=lambda r: _stored(r, "b"), tooltip="the shape the checkpoint stores"),
    Column("dtype_b", "Dtype B"),
    Column("via", "Via", display=lambda r: ", ".join(v for v in (r.get("via_a"), r.get("via_b")) if v)),
    Column("value", "Values", tooltip="after Compare values: equal (bitwise), close, different"),
    Column("max_abs", "Max abs", text=_g, numeric=True),
    Column("differing", "Differing", text=lambda x: f"{x:.2%}", numeric=True),
)


class StatusFilterProxy(TextFilterProxy):
    """Text filter plus ``is:STATUS`` terms (a row's status or its values' status must be one of them)."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._statuses: set[str] = set()

    def set_needle(self, text: str) -> None:
        words = text.split()
        statuses = {w[3:].lower() for w in words if w.lower().startswith("is:") and len(w) > 3}
        rest = " ".join(w for w in words if not w.lower().startswith("is:"))
        self._statuses = statuses
        super().set_needle(rest)

    def filterAcceptsRow(self, source_row: int, source_parent: Any) -> bool:  # Qt override
        if self._statuses:
            row = self.sourceModel().index(source_row, 0, source_parent).data(RowRole) or {}
            if row.get("status") not in self._statuses and row.get("value") not in self._statuses:
                return False
        return super().filterAcceptsRow(source_row, source_parent)


def _table(model: StatusFilterProxy) -> QTableView:
    view = QTableView()
    view.setModel(model)
    view.setSortingEnabled(True)
    view.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.AscendingOrder)
    view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    view.setTextElideMode(Qt.TextElideMode.ElideLeft)
    view.setWordWrap(False)
    view.verticalHeader().hide()
    view.verticalHeader().setDefaultSectionSize(22)
    view.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
    view.horizontalHeader().setStretchLastSection(True)
    return view


def _style(row: dict[str, Any], column: int, role: int) -> Any:
    if role == Qt.ItemDataRole.BackgroundRole:
        colour = STATUS_BACKGROUNDS.get(row.get("value") or "") or STATUS_BACKGROUNDS.get(row.get("status", ""))
        return style.brush(colour) if colour else None
    if role == Qt.ItemDataRole.ForegroundRole and colour_of(row):
        return style.brush("#000000")  # dark text on the light backgrounds, in dark themes too
    return None


def colour_of(row: dict[str, Any]) -> str:
    return STATUS_BACKGROUNDS.get(row.get("value") or "") or STATUS_BACKGROUNDS.get(row.get("status", ""), "")


class ComparePanel(QWidget):
    """A against B; ``closed`` asks the window to show the original-vs-fused diff again."""

    closed = Signal()

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.comparison: Any = None
        self.summary = QLabel("Compare the open model with another one: File → Compare with…")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.PlainText)  # model names are data, never markup
        self.summary.setProperty("role", "info")
        self.filter_edit = QLineEdit(placeholderText="Filter… (is:changed, is:added, is:removed, is:different)")
        self.filter_edit.setClearButtonEnabled(True)
        self.values_button = QPushButton("Compare values")
        self.values_button.setToolTip("Compare every matched tensor's values in the engine (streamed; Cancel stops it)")
        self.cancel_button = QPushButton("Cancel")
        self.close_button = QPushButton("Original vs fused")
        self.close_button.setToolTip("Back to the open model against its fused form")
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(200)
        self.progress.hide()
        self.cancel_button.hide()
        self.modules_model = RowsTableModel(MODULE_COLUMNS, _style, self)
        self.keys_model = RowsTableModel(KEY_COLUMNS, _style, self)
        self.modules_proxy, self.keys_proxy = StatusFilterProxy(self), StatusFilterProxy(self)
        self.modules_proxy.setSourceModel(self.modules_model)
        self.keys_proxy.setSourceModel(self.keys_model)
        self.modules_table, self.keys_table = _table(self.modules_proxy), _table(self.keys_proxy)
        bar = QHBoxLayout()
        bar.addWidget(self.filter_edit, 1)
        for w in (self.values_button, self.progress, self.cancel_button, self.close_button):
            bar.addWidget(w)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.modules_table)
        split.addWidget(self.keys_table)
        split.setSizes([260, 300])
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addLayout(bar)
        layout.addWidget(split, 1)
        self.filter_edit.textChanged.connect(self._on_filter)
        self.values_button.clicked.connect(self._on_values_clicked)
        self.cancel_button.clicked.connect(state.cancel_job)
        self.close_button.clicked.connect(self.closed.emit)
        for view in (self.modules_table, self.keys_table):
            view.selectionModel().currentRowChanged.connect(self._on_current_row)
        state.comparison_changed.connect(self._on_comparison_changed)
        state.job_progressed.connect(self._on_job_progressed)
        state.job_ended.connect(self._on_job_ended)
        self._show(None)

    # state -> view -------------------------------------------------------------------
    def _on_comparison_changed(self, comparison: Any) -> None:
        self._show(comparison)

    def _show(self, c: Any) -> None:
        from fusion_core.boundary.convert import to_plain

        self.comparison = c
        self.values_button.setEnabled(c is not None and c.a.has_checkpoint and c.b.has_checkpoint)
        if c is None:
            self.summary.setText("Compare the open model with another one: File → Compare with…")
            self.modules_model.set_rows([])
            self.keys_model.set_rows([])
            return
        mc, kc = c.module_counts(), c.key_counts()
        lines = [
            f"A: {bounded(c.a.name, 200)} ({c.a.model_class})   B: {bounded(c.b.name, 200)} ({c.b.model_class})",
            f"{c.verdict}",
            "modules: " + ", ".join(f"{n} {s}" for s, n in mc.items() if n)
            + " · keys: " + ", ".join(f"{n} {s}" for s, n in kc.items() if n),
        ]  # fmt: skip
        if c.folds:
            lines.append("; ".join(f.text for f in c.folds[:8]) + (" …" if len(c.folds) > 8 else ""))
        if c.values is not None:
            vc = c.value_counts() or {}
            lines.append("values: " + ", ".join(f"{n} {s}" for s, n in vc.items() if n))
        lines += [bounded(m, 300) for m in c.messages]
        self.summary.setText("\n".join(lines))
        self.summary.setProperty("role", "info" if c.equal else "error")
        self.summary.style().unpolish(self.summary)
        self.summary.style().polish(self.summary)
        self.modules_model.set_rows(to_plain(c.modules))
        values = {v.name: v for v in c.values or ()}
        rows = []
        for k in to_plain(c.keys):
            v = values.get(k["name"])
            k["value"] = v.status if v is not None else None
            k["max_abs"] = v.max_abs if v is not None else None
            k["differing"] = v.differing if v is not None else None
            rows.append(k)
        self.keys_model.set_rows(rows)
        self.fit_columns()

    def fit_columns(self) -> None:
        metrics = self.fontMetrics()
        for model, view in ((self.modules_model, self.modules_table), (self.keys_model, self.keys_table)):
            for col, width in enumerate(natural_widths(model, metrics, max_rows=300)):
                view.setColumnWidth(col, min(width, 420))

    def _on_job_progressed(self, name: str, done: int, total: int, message: str) -> None:
        if name != "compare":
            return
        self.progress.show()
        self.cancel_button.show()
        self.values_button.setEnabled(False)
        self.progress.setRange(0, total if total else 0)
        if total:
            self.progress.setValue(min(done, total))

    def _on_job_ended(self, name: str, outcome: str, message: str) -> None:
        if name != "compare":
            return
        self.progress.hide()
        self.cancel_button.hide()
        c = self.comparison
        self.values_button.setEnabled(c is not None and c.a.has_checkpoint and c.b.has_checkpoint)

    # view -> state -------------------------------------------------------------------
    def _on_values_clicked(self) -> None:
        if self.state.compare_spec:
            self.state.compare_with(self.state.compare_spec, values=True)

    def _on_filter(self, text: str) -> None:
        self.modules_proxy.set_needle(text)
        self.keys_proxy.set_needle(text)

    def _on_current_row(self, current: QModelIndex, _previous: QModelIndex) -> None:
        row = current.data(RowRole) or {}
        # a key's module is its path without the tensor's name; B's new modules are not in A's tree
        path = row["module"] if "module" in row else (row.get("name") or "").rpartition(".")[0]
        if row.get("status") != "added":
            self.state.reveal(path)

    def rows(self, which: str = "modules") -> list[dict[str, Any]]:
        """The rows shown (after the filter and sorting) of the ``modules`` or ``keys`` table."""
        return (self.keys_proxy if which == "keys" else self.modules_proxy).visible_rows()
