"""Checks tab: run fused load + checks in the background at a chosen workload; results as a
table (how each module was verified, speedup with its 95% interval, share of the end-to-end
time), per-family verdict lines, "exact" and "faster" as two banners, and a chart with
whiskers. Reads the typed :class:`~fusion_core.run.results.CheckResult`, never dict keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QTableView,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from fusion_core.boundary.options import DTYPES, CheckOptions, OptionError
from fusion_core.run.check_text import (
    END_TO_END,
    Line,
    check_rows,
    end_line,
    exact_line,
    speed_line,
    speed_text,
    upstream_detail,
    upstream_line,
    verdict_lines,
)

from .. import style
from ..charts import ChecksChart
from ..format import dotted_core, rich
from ..models.elide import KeyElideDelegate
from ..models.table_model import Column, RowsTableModel, natural_widths, share_width
from .workload import WorkloadControls

if TYPE_CHECKING:
    from fusion_core.run.results import CheckResult

    from ..state import AppState


def _cell(name: str):
    """A column's text: the presentation layer's cell (:class:`~fusion_core.run.check_text.CheckRow`)."""
    return lambda row: getattr(row["cells"], name)


COLUMNS = (
    Column("module", "Module", tooltip="pass (green) when max |fused - original| is within the dtype's limit"),
    Column("verified_by", "Verified by", tooltip="end-to-end inputs, or inputs the family made for the module alone"),
    Column("max_abs_diff", "Max abs diff", numeric=True, display=_cell("max_abs")),
    Column(
        "limit",
        "Limit",
        numeric=True,
        display=_cell("limit"),
        tooltip="atol × min(1, max |original|) + rtol × max |original| (relative below 1), or twice the rounding floor",
    ),
    Column(
        "original_ms",
        "Original ms",
        numeric=True,
        display=_cell("original_ms"),
        tooltip="median over the paired rounds",
    ),
    Column("fused_ms", "Fused ms", numeric=True, display=_cell("fused_ms"), tooltip="median over the paired rounds"),
    Column(
        "speedup",
        "Speedup [95%] (noise)",
        tooltip="median of original/fused per round, with its 95% interval, the verdict and the A/A noise floor "
        "(the original timed against itself in the same rounds), as measured: faster or slower only clear of 1 by more than its "
        "widest side, from 5 rounds on, never on a busy machine",
        numeric=True,
        display=lambda row: speed_text(row["cells"].timing),
    ),
    Column(
        "share",
        "Share [95%]",
        numeric=True,
        display=_cell("share"),
        tooltip="share of the original end-to-end time (median over the forwards after a warm-up, 95% interval)",
    ),
    Column("note", "Note"),
)


def table_rows(result: CheckResult) -> list[dict[str, Any]]:
    """The table's and the chart's rows: the presentation layer's cells (``cells``, what every
    column shows), the module's ``path`` (None on the end-to-end row) and the raw numbers the
    chart plots and the columns sort by."""
    comparisons = [m.comparison for m in result.modules]
    shares = [m.share_of_end_to_end for m in result.modules]
    e = result.end_to_end
    if e is not None and e.ran:
        comparisons.append(e.comparison)
        shares.append(1.0)
    rows = []
    for cells, comp, share in zip(check_rows(result), comparisons, shares, strict=True):
        t = cells.timing
        rows.append({
            "cells": cells, "module": cells.module, "path": cells.path, "classes": cells.classes,
            "label": END_TO_END if cells.path is None else cells.module,  # the chart's bar
            "verified_by": cells.verified_by, "passed": cells.passed, "result": cells.result, "note": cells.note,
            "max_abs_diff": comp.max_abs_diff if comp is not None else None,
            "limit": comp.limit if comp is not None else None,
            "original_ms": t.original_ms if t is not None else None, "fused_ms": t.fused_ms if t is not None else None,
            "speedup": t.speedup if t is not None else None, "low": t.speedup_low if t is not None else None,
            "high": t.speedup_high if t is not None else None, "verdict": t.verdict if t is not None else "",
            "noise_low": t.noise_low if t is not None else None, "noise_high": t.noise_high if t is not None else None,
            "share": share,
        })  # fmt: skip
    return rows


def _style_row(row: dict[str, Any], column: int, role: int) -> Any:
    failed = not row.get("passed")
    if role == Qt.ItemDataRole.ToolTipRole and column == 0:
        return f"{row['module']}: {row['classes']}, {row['result']}"
    if role == Qt.ItemDataRole.BackgroundRole and failed:
        return style.tint(style.FAIL, 0.16)
    if role == Qt.ItemDataRole.ForegroundRole and failed:
        return QColor("#7f0000")
    if role == Qt.ItemDataRole.DecorationRole and column == 0:
        return style.status_icon(not failed)
    return None


class ChecksPanel(QWidget):
    """Run checks with a dtype and a workload; per-module and end-to-end results, per-family
    verdicts, "exact" kept apart from "faster", upstream parity per family, a chart."""

    #: the workload panel opened (True) or closed: the window makes room for it above the tabs
    workload_shown = Signal(bool)
    #: the workload panel's height at most; beyond it, it scrolls (the results keep their room)
    WORKLOAD_MAX_HEIGHT = 180

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.result: CheckResult | None = None
        self.dtype_box = QComboBox()
        self.dtype_box.addItems(DTYPES)
        self.repeats = QSpinBox(minimum=1, maximum=200, value=5)
        self.repeats.setToolTip("paired rounds always run per timing; more follow until the 95% interval is tight")
        self.upstream_box = QCheckBox("Compare with upstream")
        self.upstream_box.setChecked(True)
        self.upstream_box.setToolTip(
            "also load through transformers' own fusion_config (in a separate, isolated process), per family"
        )
        self.workload = WorkloadControls()
        devices = state.devices()
        devices.succeeded.connect(self.workload.set_devices)
        self.run_button = QPushButton("Run checks")
        self.run_button.setToolTip("Fused load + per-module and end-to-end checks (Ctrl+R)")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.save_button = QPushButton("Save JSON…")
        self.save_button.setEnabled(False)
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)
        self.progress.setFormat("")
        self.progress.setValue(0)
        self.banner = QLabel("Run the checks to compare the fused model with the original.")
        self.speed_banner = QLabel()
        self.verdicts_label = QLabel()
        self.end_label = QLabel()
        self.upstream_label = QLabel()
        for w in (self.banner, self.speed_banner, self.verdicts_label, self.end_label, self.upstream_label):
            w.setWordWrap(True)
            w.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.banner.setProperty("role", "info")
        for w in (self.speed_banner, self.verdicts_label, self.end_label, self.upstream_label):
            w.hide()

        self.model = RowsTableModel(COLUMNS, _style_row, self)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.verticalHeader().hide()
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setAlternatingRowColors(True)
        self.table.setTextElideMode(Qt.TextElideMode.ElideLeft)
        self.table.setItemDelegateForColumn(0, KeyElideDelegate(self.table))  # first segment, layer index, tail
        self.table.setWordWrap(False)
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 8)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.chart = ChecksChart()
        # the verdicts scroll in their own pane, so the table and the chart keep their room at
        # 1460x900 (they had two rows and a squashed chart below five wrapped labels)
        summary = QWidget()
        summary_layout = QVBoxLayout(summary)
        summary_layout.setContentsMargins(0, 0, 0, 0)
        for w in (self.banner, self.speed_banner, self.verdicts_label, self.end_label, self.upstream_label):
            summary_layout.addWidget(w)
        summary_layout.addStretch(1)
        self.summary_area = QScrollArea()
        self.summary_area.setWidget(summary)
        self.summary_area.setWidgetResizable(True)
        self.summary_area.setFrameShape(QFrame.Shape.NoFrame)
        self.summary_area.setMinimumHeight(36)  # two lines; it scrolls when the results need the room
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        for i, w in enumerate((self.summary_area, self.table, self.chart)):
            self.splitter.addWidget(w)
            self.splitter.setCollapsible(i, False)
            self.splitter.setStretchFactor(i, (1, 2, 2)[i])
        self.splitter.setSizes([120, 220, 240])

        # the workload is folded behind a button: its summary shows on the button
        self.workload_button = QToolButton()
        self.workload_button.setCheckable(True)
        self.workload_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.workload_button.setArrowType(Qt.ArrowType.RightArrow)
        self.workload_button.setToolTip("device, threads, batch, image size, frames, sequence length, real inputs")
        self.workload_button.toggled.connect(self._show_workload)
        # its summary never widens the window: the text is cut when the tab is narrow
        self.workload_button.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.workload_button.setMinimumWidth(90)
        self.workload.changed.connect(self._update_workload_button)
        # the controls scroll within a bounded height: at 1280x800 their 300 px would leave the
        # results table one row (issue 33)
        self.workload_area = QScrollArea()
        self.workload_area.setWidget(self.workload)
        self.workload_area.setWidgetResizable(True)
        self.workload_area.setFrameShape(QFrame.Shape.NoFrame)
        self.workload_area.setMaximumHeight(self.WORKLOAD_MAX_HEIGHT)
        self.workload_area.hide()
        self._update_workload_button()
        bar = QHBoxLayout()
        bar.addWidget(QLabel("dtype:"))
        bar.addWidget(self.dtype_box)
        bar.addWidget(QLabel("repeats:"))
        bar.addWidget(self.repeats)
        bar.addWidget(self.upstream_box)
        bar.addStretch(1)
        run_row = QHBoxLayout()
        run_row.addWidget(self.run_button)
        run_row.addWidget(self.workload_button, 1)
        run_row.addWidget(self.progress, 1)
        run_row.addWidget(self.cancel_button)
        run_row.addWidget(self.save_button)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addLayout(run_row)
        layout.addWidget(self.workload_area)  # unfolds below its button
        layout.addWidget(self.splitter, 1)

        self.run_button.clicked.connect(self.run)
        self.table.doubleClicked.connect(self._on_double_clicked)
        state.plan_changed.connect(lambda _p: self._update_buttons())
        self.cancel_button.clicked.connect(state.cancel_job)
        self.save_button.clicked.connect(self.save_json_dialog)
        self.table.selectionModel().currentRowChanged.connect(self._on_row_changed)
        state.checks_finished.connect(self._on_checks_finished)
        state.checks_cleared.connect(self._on_checks_cleared)
        state.job_started.connect(self._on_job_started)
        state.job_progressed.connect(self._on_job_progressed)
        state.job_ended.connect(self._on_job_ended)
        state.model_changed.connect(lambda _i: self._update_buttons())
        state.busy_changed.connect(lambda _busy: self._update_buttons())
        self._update_buttons()

    def _show_workload(self, on: bool) -> None:
        self.workload_area.setVisible(on)
        self.workload.setVisible(on)
        self.workload_button.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        self.workload_shown.emit(on)
        if on:  # once the window made room: the results table first, the summary scrolls
            QTimer.singleShot(0, self._favour_table)

    def _favour_table(self) -> None:
        """Split the room below an open workload: the chart its 150 px, the table five rows, the
        summary (it scrolls) what is left, at least 40 px."""
        sizes = self.splitter.sizes()
        total = sum(sizes)
        row = self.table.verticalHeader().defaultSectionSize()
        if self.table.model() is not None and self.table.model().rowCount():
            row = max(row, self.table.rowHeight(0))
        bar = self.table.horizontalScrollBar().sizeHint().height()  # the numbers may scroll sideways
        table = self.table.horizontalHeader().height() + 5 * row + bar + 2 * self.table.frameWidth() + 2
        chart = max(150, sizes[2])
        summary = max(36, total - chart - table)
        self.splitter.setSizes([summary, max(0, total - summary - chart), chart])

    def _update_workload_button(self) -> None:
        self.workload_button.setText(f"Workload: {self.workload.summary()}")

    # actions ---------------------------------------------------------------------------
    def options(self) -> CheckOptions:
        """The check options these controls stand for.

        Raises:
            OptionError: a control's value is not valid.
        """
        return CheckOptions.build(
            dtype=self.dtype_box.currentText(),
            repeats=self.repeats.value(),
            upstream=self.upstream_box.isChecked(),
            **self.workload.options(),
        )

    def run(self) -> None:
        try:
            options = self.options()
        except OptionError as e:
            self._set_role(self.banner, "error", f"Cannot run the checks: {e}")
            return
        job = self.state.run_checks(options)
        if job is not None:
            wl = options.workload
            self._set_role(self.banner, "info", f"Checking with {wl.dtype} on {wl.device}…")
            self.speed_banner.hide()

    def save_json(self, path: str | Path) -> Path:
        """Write the last result as JSON (its plain form, as ``fusion-core check --json`` prints it)."""
        if self.result is None:
            raise ValueError("no check result to save")
        path = Path(path)
        from fusion_core.boundary.convert import to_plain

        path.write_text(json.dumps(to_plain(self.result), indent=2) + "\n", encoding="utf-8")
        return path

    def save_json_dialog(self) -> None:
        if self.result is None:
            return
        path, _ = QFileDialog.getSaveFileName(self, "Save check results", "checks.json", "JSON (*.json)")
        if path:
            self.save_json(path)

    def select_module(self, path: str) -> bool:
        """Select the result row of module ``path``; False when it has none."""
        for i, row in enumerate(self.model.rows):
            if row.get("path") == path:
                self.table.selectRow(i)
                self.table.scrollTo(self.model.index(i, 0))
                return True
        return False

    def _on_double_clicked(self, index) -> None:
        row = self.model.rows[index.row()] if 0 <= index.row() < len(self.model.rows) else {}
        if row.get("path") is not None:
            self.state.reveal(row["path"])

    def _on_row_changed(self, current: Any, _previous: Any) -> None:
        """Selecting a module's row selects that module (in the tree and the details)."""
        rows = self.model.rows
        if not current.isValid() or current.row() >= len(rows):
            return
        path = rows[current.row()]["path"]
        if path is not None and self.result is not None and any(m.path == path for m in self.result.modules):
            self.state.reveal(path)
            self.state.select_module(path)

    # state -> view ---------------------------------------------------------------------
    def _update_buttons(self) -> None:
        busy = self.state.busy
        blocker = self.state.check_blocker()
        self.run_button.setEnabled(not blocker)
        self.run_button.setToolTip(
            f"Run checks: {blocker}" if blocker else "Fused load + per-module and end-to-end checks (Ctrl+R)"
        )
        self.cancel_button.setEnabled(
            busy and self.state.jobs.current is not None and self.state.jobs.current.name == "checks"
        )
        self.save_button.setEnabled(self.result is not None)

    def _on_job_started(self, name: str) -> None:
        if name == "checks":
            self.progress.setRange(0, 0)
            self.progress.setFormat("")
        self._update_buttons()

    def _on_job_progressed(self, name: str, done: int, total: int, message: str) -> None:
        if name != "checks":
            return
        if total:
            self.progress.setRange(0, total)
            self.progress.setValue(done)
        # one line that fits the bar (a long module path wrapped and was clipped); all of it in the tooltip
        line = " ".join(message.split())
        room = max(40, self.progress.width() - 24)
        self.progress.setFormat(
            self.progress.fontMetrics().elidedText(line, Qt.TextElideMode.ElideMiddle, room).replace("%", "%%")
        )
        self.progress.setToolTip(line)

    def _on_job_ended(self, name: str, outcome: str, message: str) -> None:
        if name == "checks":
            self.progress.setRange(0, 1)
            self.progress.setValue(1 if outcome == "ok" else 0)
            self.progress.setFormat({"ok": "done", "cancelled": "cancelled"}.get(outcome, "failed"))
            if outcome == "cancelled":
                self._set_role(self.banner, "warn", "Checks cancelled.")
            elif outcome == "failed":
                self._set_role(self.banner, "error", "The checks could not run (see the message and the Log tab).")
        self._update_buttons()

    def _on_checks_cleared(self) -> None:
        self.result = None
        self.model.set_rows([])
        self.chart.set_rows([])
        for w in (self.speed_banner, self.verdicts_label, self.end_label, self.upstream_label):
            w.hide()
        self._set_role(self.banner, "info", "Run the checks to compare the fused model with the original.")
        self._update_buttons()

    def _on_checks_finished(self, result: CheckResult) -> None:
        self.result = result
        rows = table_rows(result)
        self.model.set_rows(rows)
        self._fit(rows)
        modules = [r for r in rows if r["path"] is not None]
        self.chart.set_rows(modules, next((r for r in rows if r["path"] is None), None))
        self._show_line(self.banner, exact_line(result))
        self._show_line(self.speed_banner, speed_line(result))
        self._show_verdicts(result)
        self._show_end_to_end(result)
        self._show_upstream(result)
        self._update_buttons()

    def _show_line(self, label: QLabel, line: Line | None) -> None:
        """A line of the presentation layer as plain words (its head bold); hidden when there is none."""
        if line is None:
            label.hide()
            return
        text = f"<b>{rich(line.head)}</b>{rich(line.rest)}"  # words from the model folder are data, never markup
        text += "".join(f"<br>{rich(n)}" for n in line.notes)
        self._set_role(label, line.kind, text)
        label.show()

    def _show_verdicts(self, result: CheckResult) -> None:
        lines = verdict_lines(result)
        colours = {"pass": style.PASS, "fail": style.FAIL}
        self.verdicts_label.setText(
            "<br>".join(
                f"<span style='color:{colours.get(kind, style.REJECTED)}'>●</span> {rich(line)}" for kind, line in lines
            )
        )
        self.verdicts_label.setVisible(bool(lines))

    def _fit(self, rows: list[dict[str, Any]]) -> None:
        """Numbers at full width; module and class names share the rest (elided in the middle)."""
        self.table.setColumnHidden(len(COLUMNS) - 1, not any(r.get("note") for r in rows))
        header = self.table.horizontalHeader()
        for col, w in enumerate(natural_widths(self.model, self.table.fontMetrics())):
            header.resizeSection(col, w + (22 if col == 0 else 0))
        shared = (0,)
        visible = [c for c in range(len(COLUMNS)) if not self.table.isColumnHidden(c)]
        others = sum(header.sectionSize(c) for c in visible if c not in shared)
        # room for a vertical scroll bar that may appear once the rows are in
        bar = self.table.style().pixelMetric(self.table.style().PixelMetric.PM_ScrollBarExtent)
        # never narrower than each name's core (first segment, layer index, last two names):
        # the numbers scroll sideways instead, as "mode….self…" told no layer from another
        fm = self.table.fontMetrics()
        core = max((fm.horizontalAdvance(dotted_core(str(r.get("module", "")))) for r in rows), default=0) + 22 + 24
        room = self.table.width() - 2 * self.table.frameWidth() - bar - others - 2
        share_width(header, shared, max(room, core, 120), minimum=max(120, core))

    def resizeEvent(self, event) -> None:  # Qt override: keep the result columns within the width
        super().resizeEvent(event)
        if self.model.rows:
            self._fit(self.model.rows)

    def _show_end_to_end(self, result: CheckResult) -> None:
        e = result.end_to_end
        self.workload.media.show_fed(list(e.inputs) if e is not None else [])
        self._show_line(self.end_label, None if result.nothing_to_fuse else end_line(result))

    def _show_upstream(self, result: CheckResult) -> None:
        up = result.upstream
        # one line; every family's finding in the tooltip (the table and chart need the room)
        self._show_line(self.upstream_label, None if up is None else upstream_line(up))
        self.upstream_label.setToolTip("" if up is None else upstream_detail(up))

    def _set_role(self, label: QLabel, role: str, text: str | None) -> None:
        label.setProperty("role", role)
        label.style().unpolish(label)
        label.style().polish(label)
        if text is not None:
            label.setText(text)
