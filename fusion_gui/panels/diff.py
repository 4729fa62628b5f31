"""Diff tab: the original model against the fused one, side by side (``fusion_core.plan.diff``).

Module classes (original -> fused) with parameter counts per module, which must be
equal, and the state-dict keys with shapes that are removed, added, renamed or reshaped.
The diff builds the fused skeleton on the meta device (about a second on a 2.7k-module
model), so it runs as a background job, and only while the tab is shown: toggling a
family never waits for it.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QModelIndex, Qt, QTimer, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QLineEdit,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from .. import style
from ..format import human_count, shape_text
from ..models.elide import KeyElideDelegate, core_width
from ..models.table_model import Column, RowRole, RowsTableModel, TextFilterProxy, natural_widths, share_width

if TYPE_CHECKING:
    from fusion_core.plan.plan_data import PlanData

    from ..state import AppState

MODULE_COLUMNS = (
    Column("module", "Module", tooltip="double-click to select it in the tree"),
    Column("family", "Family"),
    Column("class", "Original class"),
    Column("fused_class", "Fused class"),
    Column("params", "Params", text=lambda n: f"{n:,}", numeric=True),
    Column("fused_params", "Fused params", text=lambda n: f"{n:,}", numeric=True),
    Column("params_equal", "Equal", text=lambda ok: "yes" if ok else "NO", tooltip="a fusion never adds or drops"),
)


def _relative(field: str):
    """A key shown below its module (the Module column has the path): ``q_proj.weight``."""

    def text(row: dict[str, Any]) -> str:
        key, module = row.get(field) or "", row.get("module") or ""
        return key[len(module) + 1 :] if module and key.startswith(module + ".") else key

    return text


KEY_COLUMNS = (
    Column("change", "Change", tooltip="removed, added, renamed (one key becomes another) or reshaped"),
    Column("module", "Module", tooltip="the fused module the key belongs to; double-click to select it"),
    Column("key", "Original key", display=_relative("key")),
    Column("shape", "Shape", text=shape_text),
    Column("op", "Op", display=lambda r: r.get("op") or "(no transform)"),
    Column("fused_key", "Fused key", display=_relative("fused_key")),
    Column("fused_shape", "Fused shape", text=shape_text),
)
# the module column shares the room the others leave, elided on the left (the layer index stays)
LONG_COLUMNS = {"modules": (0,), "keys": (1,)}
CHANGE_COLOURS = {"removed": "#c62828", "added": "#2e7d32", "renamed": "#1565c0", "reshaped": "#6a1b9a"}


def _table(model: TextFilterProxy) -> QTableView:
    view = QTableView()
    view.setModel(model)
    view.setSortingEnabled(True)
    view.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.AscendingOrder)  # the plan's order until a click
    view.setAlternatingRowColors(True)
    view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    view.setTextElideMode(Qt.TextElideMode.ElideLeft)
    view.setWordWrap(False)
    view.verticalHeader().hide()
    view.verticalHeader().setDefaultSectionSize(22)
    view.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
    view.horizontalHeader().setStretchLastSection(True)
    return view


class DiffPanel(QWidget):
    """Original against fused for the plan on show; double-click a row to select its module."""

    diff_ready = Signal(object)  # PlanDiff (or None when there is no plan)

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.diff: Any = None
        self._plan: PlanData | None = None
        self._dirty = False
        self._running: Any = None  # the plan whose diff job is running
        self.summary = QLabel("Open a model to compare it with its fused form.")
        self.summary.setWordWrap(True)
        self.summary.setProperty("role", "info")
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.filter_edit = QLineEdit(placeholderText="Filter modules and keys…")
        self.filter_edit.setClearButtonEnabled(True)
        self.modules_model = RowsTableModel(MODULE_COLUMNS, self._style_module, self)
        self.keys_model = RowsTableModel(KEY_COLUMNS, self._style_key, self)
        self.modules_proxy, self.keys_proxy = TextFilterProxy(self), TextFilterProxy(self)
        self.modules_proxy.setSourceModel(self.modules_model)
        self.keys_proxy.setSourceModel(self.keys_model)
        self.modules_table, self.keys_table = _table(self.modules_proxy), _table(self.keys_proxy)
        # paths keep their first segment, layer index and tail (vision_model vs language_model)
        for table, which in ((self.modules_table, "modules"), (self.keys_table, "keys")):
            for col in LONG_COLUMNS[which]:
                table.setItemDelegateForColumn(col, KeyElideDelegate(table))
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.modules_table)
        split.addWidget(self.keys_table)
        split.setSizes([200, 360])
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(self.filter_edit)
        layout.addWidget(split, 1)
        self.filter_edit.textChanged.connect(self._on_filter)
        for view in (self.modules_table, self.keys_table):
            view.doubleClicked.connect(self._on_double_clicked)
            view.activated.connect(self._on_double_clicked)  # Enter on a row
        # quick toggles make one diff, not one per click (each builds a meta model)
        self._timer = QTimer(self, singleShot=True, interval=150)
        self._timer.timeout.connect(self.refresh)
        state.plan_changed.connect(self._on_plan_changed)

    @property
    def pending(self) -> bool:
        """A diff of the plan on show is due or running (the screenshot mode waits for it)."""
        return self.isVisible() and (self._dirty or self._timer.isActive() or self._running is not None)

    # plan -> diff ----------------------------------------------------------------------
    def _on_plan_changed(self, plan: PlanData | None) -> None:
        self._plan, self._dirty = plan, True
        if self.isVisible():
            self._timer.start()

    def showEvent(self, event: QShowEvent) -> None:  # Qt override
        super().showEvent(event)
        if self._dirty:
            self.refresh()
        else:
            self.fit_columns()

    def refresh(self) -> None:
        """Compute the diff of the plan on show (in the background) unless it is up to date."""
        plan = self._plan
        self._timer.stop()
        self._dirty = False
        if plan is None:
            self._show(None)
            return
        if self._running is plan:
            return
        if not plan.patch_mapping:
            self._set_summary("No module is fused by the enabled families: the models are the same.")
            self._fill(None)
            self.diff_ready.emit(None)
            return
        self._running = plan
        self._set_summary("Comparing the original model with the fused one…")
        job = self.state.diff(plan)
        job.succeeded.connect(lambda result, p=plan: self._on_done(p, result))
        job.failed.connect(lambda error, p=plan: self._on_failed(p, error))

    def _on_done(self, plan: PlanData, result: Any) -> None:
        if plan is self._running:
            self._running = None
        if plan is self._plan:  # a stale diff (the families changed meanwhile) is dropped
            self._show(result)

    def _on_failed(self, plan: PlanData, error: BaseException) -> None:
        from ..state import error_text

        if plan is self._running:
            self._running = None
        if plan is self._plan:
            self._set_summary(f"Cannot compare: {error_text(error)[0]}", error=True)
            self._fill(None)
            self.diff_ready.emit(None)

    def _show(self, diff: Any) -> None:
        if diff is None:
            self._set_summary(html.escape(self.state.plan_error) or "Open a model to compare it with its fused form.")
        else:
            c = diff.counts()
            ok = "equal" if diff.params_equal else "<b>DIFFERENT</b>"
            text = (
                f"<b>{len(diff.modules)}</b> module(s) change class · state dict {diff.original_keys} → "
                f"{diff.fused_keys} keys ({diff.unchanged_keys} unchanged; {c['removed']} removed, "
                f"{c['added']} added, {c['renamed']} renamed, {c['reshaped']} reshaped) · parameters "
                f"{human_count(diff.original_params)} → {human_count(diff.fused_params)} ({ok})"
            )
            if diff.unexplained:
                text += f" · <b>{len(diff.unexplained)} key(s) change without a transform</b>"
            self._set_summary(text, error=not diff.params_equal or bool(diff.unexplained))
        self._fill(diff)
        self.diff_ready.emit(diff)

    def _fill(self, diff: Any) -> None:
        self.diff = diff
        from fusion_core.boundary.convert import to_plain

        # the tables show the documented rows (docs/cli-json.md, "diff"), as the CLI prints them
        self.modules_model.set_rows(to_plain(diff.modules) if diff is not None else [])
        self.keys_model.set_rows(to_plain(diff.keys) if diff is not None else [])
        self.fit_columns()

    def fit_columns(self) -> None:
        """Natural widths, then the long (module, key) columns share what the others leave."""
        metrics = self.fontMetrics()
        for which, model, view in (
            ("modules", self.modules_model, self.modules_table),
            ("keys", self.keys_model, self.keys_table),
        ):
            widths = natural_widths(model, metrics, max_rows=500)
            for col, width in enumerate(widths):
                view.setColumnWidth(col, width)
            long = LONG_COLUMNS[which]
            # the view's own width (its viewport's is stale while the tab is hidden), less a scroll bar
            bar = view.style().pixelMetric(view.style().PixelMetric.PM_ScrollBarExtent)
            width = view.width() - 2 * view.frameWidth() - bar
            room = width - sum(w for c, w in enumerate(widths) if c not in long) - 4
            # never narrower than a path's core (first segments, layer index, last two names):
            # the other columns scroll sideways instead ('model.language….…0.self_attn' before)
            core = core_width(metrics, (str(r.get("module", "")) for r in model.rows))
            share_width(view.horizontalHeader(), long, room, minimum=max(120, core))

    def _set_summary(self, text: str, error: bool = False) -> None:
        self.summary.setText(text)
        self.summary.setProperty("role", "error" if error else "info")
        self.summary.style().unpolish(self.summary)
        self.summary.style().polish(self.summary)

    # view ------------------------------------------------------------------------------
    def _on_filter(self, text: str) -> None:
        self.modules_proxy.set_needle(text)
        self.keys_proxy.set_needle(text)

    def _on_double_clicked(self, index: QModelIndex) -> None:
        row = index.data(RowRole) or {}
        if row.get("module"):
            self.state.reveal(row["module"])

    def _style_module(self, row: dict[str, Any], column: int, role: int) -> Any:
        if role == Qt.ItemDataRole.ForegroundRole and column == 6 and not row.get("params_equal"):
            return style.brush("#c62828")
        return None

    def _style_key(self, row: dict[str, Any], column: int, role: int) -> Any:
        if role == Qt.ItemDataRole.ForegroundRole and column == 0:
            return style.brush(CHANGE_COLOURS.get(row.get("change", ""), "#000000"))
        if role == Qt.ItemDataRole.ForegroundRole and column == 4 and not row.get("op"):
            return style.brush("#c62828")
        return None

    def rows(self, which: str = "keys") -> list[dict[str, Any]]:
        """The rows shown (after the filter and sorting) of the ``modules`` or ``keys`` table."""
        return (self.keys_proxy if which == "keys" else self.modules_proxy).visible_rows()
