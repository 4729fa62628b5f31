"""Adapter dialog: the opened LoRA adapter's conversion (modules, steps, new ranks), then a job with
progress, Cancel, and the consumers PEFT found, as the export dialog does for checkpoints."""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from fusion_core.boundary.options import AdapterOptions

from ..format import bounded, seconds_text

if TYPE_CHECKING:
    from fusion_core.export.result import Consumer

    from ..jobs import Job
    from ..state import AppState


class AdapterDialog(QDialog):
    """Non-blocking dialog (``open()``); the conversion runs in the engine process."""

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Convert LoRA adapter")
        self.setMinimumWidth(640)
        self.state = state
        self.job: Job | None = None
        self.result: Any = None
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.dest_edit = QLineEdit()
        browse = QPushButton("Browse…")
        row = QHBoxLayout()
        row.addWidget(self.dest_edit, 1)
        row.addWidget(browse)
        self.verify_box = QCheckBox("Verify with PEFT on both layouts (a separate process)")
        self.verify_box.setChecked(True)
        self.consumers = QLabel()
        self.consumers.setWordWrap(True)
        self.consumers.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.convert_button = QPushButton("Convert")
        self.convert_button.setDefault(True)
        self.cancel_button = QPushButton("Cancel conversion")
        self.cancel_button.setEnabled(False)
        self.close_button = QPushButton("Close")
        form = QFormLayout()
        form.addRow("Destination:", row)
        form.addRow("", self.verify_box)
        form.addRow("Consumers:", self.consumers)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        for b in (self.convert_button, self.cancel_button, self.close_button):
            buttons.addWidget(b)
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addLayout(form)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addStretch(1)
        layout.addLayout(buttons)
        browse.clicked.connect(self._browse)
        self.convert_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        self.close_button.clicked.connect(self.reject)
        self.dest_edit.textChanged.connect(lambda _t: self._update_buttons())
        state.adapter_changed.connect(self._on_adapter_changed)
        self._on_adapter_changed(state.adapter_plan)
        self.consumers.setText("<i>tried by loading with PEFT after writing</i>")

    def _on_adapter_changed(self, plan: Any) -> None:
        if plan is None:
            why = self.state.adapter_error or "no adapter opened (File → Open adapter…)"
            self.summary.setText(f"<b>Cannot convert:</b> {html.escape(bounded(why, 600))}")
            self._update_buttons()
            return
        rows = "".join(
            f"<li>{html.escape(s.family)}: {html.escape(s.op)} — "
            f"{html.escape(', '.join(x.rsplit('.', 1)[-1] for x in s.source_modules))} → "
            f"{html.escape(', '.join(x.rsplit('.', 1)[-1] for x in s.target_modules))}, "
            f"rank {'/'.join(map(str, s.target_ranks))}"
            + (f" <i>({html.escape(bounded(s.note, 200))})</i>" if s.note else "")
            + "</li>"
            for s in plan.steps[:12]
        )
        more = f"<li>… and {len(plan.steps) - 12} more</li>" if len(plan.steps) > 12 else ""
        self.summary.setText(
            f"Adapter <b>{html.escape(bounded(plan.adapter, 200))}</b>: {len(plan.modules)} adapted module(s), "
            f"{plan.source_layout} layout → <b>{plan.layout}</b> for fusions "
            f"{html.escape(', '.join(plan.fusion_config) or 'none')}; {plan.copied_keys} tensor(s) copied bitwise."
            f"<ul style='margin:2px'>{rows}{more}</ul>"
        )
        if not self.dest_edit.text().strip():
            src = Path(plan.adapter)
            self.dest_edit.setText(str(src.parent / f"{src.name}-{plan.layout}"))
        self._update_buttons()

    def _browse(self) -> None:
        dest = Path(self.dest_edit.text().strip() or ".")
        path = QFileDialog.getExistingDirectory(self, "Convert into (parent folder)", str(dest.parent))
        if path:
            self.dest_edit.setText(str(Path(path) / dest.name))

    def _update_buttons(self) -> None:
        running = self.job is not None
        ready = self.state.adapter_plan is not None and bool(self.dest_edit.text().strip())
        self.convert_button.setEnabled(not running and ready)
        self.cancel_button.setEnabled(running)
        self.dest_edit.setEnabled(not running)
        self.verify_box.setEnabled(not running)

    def start(self) -> Job | None:
        """Start the conversion job."""
        options = AdapterOptions(verify_outputs=self.verify_box.isChecked())
        job = self.state.convert_adapter(Path(self.dest_edit.text().strip()).expanduser(), options)
        if job is None:
            self._set_status("error", "Another job is running, or the plan is not ready; try again.")
            return None
        self.job, self.result = job, None
        self.progress.setRange(0, 0)
        self._set_status("", "Starting…")
        job.progressed.connect(self._on_progressed)
        job.succeeded.connect(self._on_succeeded)
        job.failed.connect(self._on_failed)
        job.aborted.connect(lambda: self._set_status("warn", "Cancelled: nothing was written."))
        job.finished.connect(self._on_finished)
        self._update_buttons()
        return job

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()

    def _on_progressed(self, done: int, total: int, message: str) -> None:
        if total:
            self.progress.setRange(0, total)
            self.progress.setValue(done)
        self.status.setText(bounded(message, 300))

    def _on_succeeded(self, result: Any) -> None:
        self.result = result
        self.progress.setRange(0, 1)
        self.progress.setValue(1)
        self._set_status(
            "ok",
            f"<b>Converted</b> to {html.escape(str(result.out_dir))} in {seconds_text(result.seconds)} "
            f"({result.layout} layout): {result.tensors} tensors, {len(result.transformed)} produced.<br>"
            f"<b>Verified:</b> {html.escape(result.verification.summary)}",
        )
        self.consumers.setText(_consumer_rows(result.consumers))

    def _on_failed(self, error: BaseException) -> None:
        from ..state import error_text

        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self._set_status("error", html.escape(error_text(error)[0]))

    def _on_finished(self) -> None:
        self.job = None
        self._update_buttons()

    def _set_status(self, role: str, text: str) -> None:
        self.status.setProperty("role", role)
        self.status.style().unpolish(self.status)
        self.status.style().polish(self.status)
        self.status.setText(text)

    def reject(self) -> None:  # Qt override: closing cancels a running conversion
        if self.job is not None:
            self.job.cancel()
        super().reject()


def _consumer_rows(rows: list[Consumer]) -> str:
    if not rows:
        return "<i>not tried (verification off)</i>"
    items = "".join(
        f"<li><b>{html.escape(r.name)}</b>: {html.escape(r.status)} — <code>{html.escape(bounded(r.how, 300))}</code>"
        + (f" ({html.escape(bounded(r.detail, 400))})" if r.detail else "")
        + "</li>"
        for r in rows
    )
    return f"tried by loading with PEFT:<ul style='margin:2px'>{items}</ul>"
