"""Checks tab: run fused load + checks in the background; results as a table, summary lines and a chart."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from .. import style
from ..charts import ChecksChart
from ..models.table_model import Column, RowsTableModel, natural_widths, share_width

if TYPE_CHECKING:
    from ..state import AppState

DTYPES = ("float32", "bfloat16", "float16")


def _num(fmt: str):
    def text(v: Any) -> str:
        return fmt.format(v) if isinstance(v, (int, float)) and math.isfinite(v) else str(v)

    return text


COLUMNS = (
    Column("module", "Module", tooltip="pass (green) when max |fused - original| is within the dtype's tolerance"),
    Column("max_abs_diff", "Max abs diff", _num("{:.2e}"), numeric=True),
    Column("max_rel_diff", "Rel diff", _num("{:.2e}"), numeric=True, tooltip="max |diff| / max |original|"),
    Column("tolerance", "Tolerance", _num("{:.1e}"), numeric=True, tooltip="atol + rtol × max |original|"),
    Column("original_ms", "Original ms", _num("{:.3f}"), numeric=True, tooltip="median over the repeats"),
    Column("fused_ms", "Fused ms", _num("{:.3f}"), numeric=True, tooltip="median over the repeats"),
    Column("speedup", "Speedup", _num("{:.2f}×"), numeric=True, tooltip="original ms / fused ms"),
    Column("note", "Note"),
)


def check_rows(data: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Table rows (one per fused module) and the end-to-end row, from ``CheckResult.to_dict()``."""

    def row(module: str, classes: str, comp: dict | None, timing: dict | None, passed: bool, note: str) -> dict:
        comp, timing = comp or {}, timing or {}
        tol = None
        if "atol" in comp:
            tol = comp["atol"] + comp.get("rtol", 0.0) * comp.get("max_original", 0.0)
        return {
            "result": "pass" if passed else "FAIL",
            "passed": passed,
            "module": module,
            "classes": classes,
            "max_abs_diff": comp.get("max_abs_diff"),
            "max_rel_diff": comp.get("max_rel_diff"),
            "tolerance": tol,
            "original_ms": timing.get("original_ms"),
            "fused_ms": timing.get("fused_ms"),
            "speedup": timing.get("speedup"),
            "note": note,
        }

    rows = [
        row(
            m["module"],
            f"{m['original_class']} → {m['fused_class']}",
            m.get("comparison"),
            m.get("timing"),
            bool(m.get("passed")),
            m.get("error") or (m.get("comparison") or {}).get("note", ""),
        )
        for m in data.get("modules", [])
    ]
    e2e = data.get("end_to_end")
    end = None
    if e2e:
        end = row(
            "end to end",
            f"{_entry(e2e)} · {e2e.get('output', '')}",
            e2e.get("comparison"),
            e2e.get("timing"),
            bool(e2e.get("passed")),
            "",  # its notes go to the end-to-end line, where there is room for them
        )
    return rows, end


def _style_row(row: dict[str, Any], column: int, role: int) -> Any:
    failed = not row.get("passed")
    if role == Qt.ItemDataRole.ToolTipRole and column == 0:
        return f"{row['module']}: {row['classes']}, {'pass' if not failed else 'FAIL'}"
    if role == Qt.ItemDataRole.BackgroundRole and failed:
        return style.tint(style.FAIL, 0.16)
    if role == Qt.ItemDataRole.ForegroundRole and failed:
        return QColor("#7f0000")
    if role == Qt.ItemDataRole.DecorationRole and column == 0:
        return style.status_icon(not failed)
    return None


class ChecksPanel(QWidget):
    """Run checks with a dtype; see per-module and end-to-end results, upstream parity, a chart."""

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.result: Any = None
        self.dtype_box = QComboBox()
        self.dtype_box.addItems(DTYPES)
        self.repeats = QSpinBox(minimum=1, maximum=200, value=10)
        self.repeats.setToolTip("timed runs per side; medians are reported")
        self.upstream_box = QCheckBox("Compare with upstream")
        self.upstream_box.setChecked(True)
        self.upstream_box.setToolTip(
            "also load through transformers' own fusion_config (in a separate process) and report the differences"
        )
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
        self.banner.setWordWrap(True)
        self.banner.setProperty("role", "info")
        self.end_label = QLabel()
        self.end_label.setWordWrap(True)
        self.upstream_label = QLabel()
        self.upstream_label.setWordWrap(True)
        self.upstream_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        for w in (self.end_label, self.upstream_label):
            w.hide()

        self.model = RowsTableModel(COLUMNS, _style_row, self)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.verticalHeader().hide()
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setAlternatingRowColors(True)
        self.table.setTextElideMode(Qt.TextElideMode.ElideLeft)
        self.table.setWordWrap(False)
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 8)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.chart = ChecksChart()
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.table)
        splitter.addWidget(self.chart)
        splitter.setSizes([190, 280])

        bar = QHBoxLayout()
        bar.addWidget(QLabel("dtype:"))
        bar.addWidget(self.dtype_box)
        bar.addWidget(QLabel("repeats:"))
        bar.addWidget(self.repeats)
        bar.addWidget(self.upstream_box)
        bar.addStretch(1)
        run_row = QHBoxLayout()
        run_row.addWidget(self.run_button)
        run_row.addWidget(self.progress, 1)
        run_row.addWidget(self.cancel_button)
        run_row.addWidget(self.save_button)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addLayout(run_row)
        layout.addWidget(self.banner)
        layout.addWidget(self.end_label)
        layout.addWidget(self.upstream_label)
        layout.addWidget(splitter, 1)

        self.run_button.clicked.connect(self.run)
        self.table.doubleClicked.connect(self._on_double_clicked)
        state.plan_changed.connect(lambda _p: self._update_buttons())
        self.cancel_button.clicked.connect(state.cancel_job)
        self.save_button.clicked.connect(self.save_json_dialog)
        state.checks_finished.connect(self._on_checks_finished)
        state.checks_cleared.connect(self._on_checks_cleared)
        state.job_started.connect(self._on_job_started)
        state.job_progressed.connect(self._on_job_progressed)
        state.job_ended.connect(self._on_job_ended)
        state.model_changed.connect(lambda _i: self._update_buttons())
        state.busy_changed.connect(lambda _busy: self._update_buttons())
        self._update_buttons()

    # actions ---------------------------------------------------------------------------
    def run(self) -> None:
        job = self.state.run_checks(
            self.dtype_box.currentText(), self.repeats.value(), upstream=self.upstream_box.isChecked()
        )
        if job is not None:
            self._set_banner("info", f"Checking with {self.dtype_box.currentText()}…")

    def save_json(self, path: str | Path) -> Path:
        """Write the last result as JSON (the core's ``to_dict``)."""
        if self.result is None:
            raise ValueError("no check result to save")
        path = Path(path)
        path.write_text(json.dumps(self.result.to_dict(), indent=2, default=str) + "\n", encoding="utf-8")
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
            if row.get("module") == path:
                self.table.selectRow(i)
                self.table.scrollTo(self.model.index(i, 0))
                return True
        return False

    def _on_double_clicked(self, index) -> None:
        row = self.model.rows[index.row()] if 0 <= index.row() < len(self.model.rows) else {}
        if row.get("module") and row.get("module") != "end to end":
            self.state.reveal(row["module"])

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
        self.progress.setFormat(message)

    def _on_job_ended(self, name: str, outcome: str, message: str) -> None:
        if name == "checks":
            self.progress.setRange(0, 1)
            self.progress.setValue(1 if outcome == "ok" else 0)
            self.progress.setFormat({"ok": "done", "cancelled": "cancelled"}.get(outcome, "failed"))
            if outcome == "cancelled":
                self._set_banner("warn", "Checks cancelled.")
            elif outcome == "failed":
                self._set_banner("error", "The checks could not run (see the message and the Log tab).")
        self._update_buttons()

    def _on_checks_cleared(self) -> None:
        self.result = None
        self.model.set_rows([])
        self.chart.set_rows([])
        self.end_label.hide()
        self.upstream_label.hide()
        self._set_banner("info", "Run the checks to compare the fused model with the original.")
        self._update_buttons()

    def _on_checks_finished(self, result: Any) -> None:
        self.result = result
        data = result.to_dict()
        rows, end = check_rows(data)
        self.model.set_rows(rows + ([end] if end else []))
        self._fit(rows + ([end] if end else []))
        self.chart.set_rows(rows, end)
        failed = [r["module"] for r in rows + ([end] if end else []) if not r["passed"]]
        tol = data.get("tolerance", {})
        rule = f"tolerance for {data.get('dtype')}: atol {tol.get('atol')}, rtol {tol.get('rtol')}"
        if data.get("nothing_to_fuse"):
            self._set_banner("info", html.escape(" ".join(data.get("messages", [])) or "Nothing to fuse."))
        elif result.passed:
            self._set_banner(
                "ok", f"<b>All {len(rows)} module check(s) and the end-to-end check pass</b> ({html.escape(rule)})."
            )
        else:
            self._set_banner(
                "error",
                f"<b>{len(failed)} check(s) FAIL</b>: {html.escape(', '.join(failed))} ({html.escape(rule)}).",
            )
        self._show_end_to_end(end, data.get("end_to_end"))
        self._show_upstream(data.get("upstream"))
        self._update_buttons()

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
        share_width(header, shared, max(self.table.width() - 2 * self.table.frameWidth() - bar - others - 2, 120))

    def resizeEvent(self, event) -> None:  # Qt override: keep the result columns within the width
        super().resizeEvent(event)
        if self.model.rows:
            self._fit(self.model.rows)

    def _show_end_to_end(self, end: dict[str, Any] | None, raw: dict[str, Any] | None) -> None:
        if not end or not raw:
            self.end_label.hide()
            return
        colour = style.PASS if end["passed"] else style.FAIL
        verdict = "pass" if end["passed"] else "FAIL"
        self.end_label.setText(
            f"<b>End to end</b> ({html.escape(str(raw.get('output')))} of {html.escape(_entry(raw))}, "
            f"{html.escape(str(raw.get('input_kind')))} inputs): max abs diff {_num('{:.2e}')(end['max_abs_diff'])}, "
            f"rel {_num('{:.2e}')(end['max_rel_diff'])} — <b style='color:{colour}'>{verdict}</b>; "
            f"original {_num('{:.2f}')(end['original_ms'])} ms, fused {_num('{:.2f}')(end['fused_ms'])} ms "
            f"(<b>{_num('{:.2f}×')(end['speedup'])}</b>)"
            + "".join(f"<br><span style='color:#5f6368'>{html.escape(n)}</span>" for n in raw.get("notes", []))
        )
        self.end_label.show()

    def _show_upstream(self, upstream: dict[str, Any] | None) -> None:
        if not upstream:
            self.upstream_label.hide()
            return
        text = upstream_text(upstream)
        matches = upstream.get("matches_ours")
        verdict = "" if matches is None else (" — matches ours" if matches else " — differs from ours")
        self.upstream_label.setText(f"<b>transformers' own fusion (upstream){verdict}:</b> {html.escape(text)}")
        self.upstream_label.setProperty("role", "ok" if matches else "warn")
        self.upstream_label.style().unpolish(self.upstream_label)
        self.upstream_label.style().polish(self.upstream_label)
        self.upstream_label.show()

    def _set_banner(self, role: str, text: str) -> None:
        self.banner.setProperty("role", role)
        self.banner.style().unpolish(self.banner)
        self.banner.style().polish(self.banner)
        self.banner.setText(text)


def _entry(raw: dict[str, Any]) -> str:
    entry = str(raw.get("entry") or "")
    return "the whole model" if entry in ("", "(model)") else entry


def upstream_text(upstream: dict[str, Any]) -> str:
    """One readable line from the upstream parity report."""
    for key in ("finding", "summary", "message", "verdict"):
        if isinstance(upstream.get(key), str) and upstream[key]:
            return upstream[key]
    return "; ".join(f"{k}: {v}" for k, v in upstream.items() if isinstance(v, (str, int, float, bool)))
