"""Export dialog: destination, layout, shard size; a background job with progress, Cancel and a summary."""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
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

from fusion_core.boundary.options import ExportOptions, OptionError, parse_size

from ..format import human_bytes, seconds_text

if TYPE_CHECKING:
    from fusion_core.export.result import Consumer

    from ..jobs import Job
    from ..state import AppState


class ExportDialog(QDialog):
    """Non-blocking dialog (``open()``/``show()``); the export itself runs in a worker."""

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Export checkpoint")
        self.setMinimumWidth(620)
        self.state = state
        self.job: Job | None = None
        self.result: Any = None
        shown = state.inspection

        self.dest_edit = QLineEdit()
        browse = QPushButton("Browse…")
        dest_row = QHBoxLayout()
        dest_row.addWidget(self.dest_edit, 1)
        dest_row.addWidget(browse)
        self.layout_box = QComboBox()
        self.layout_box.addItem("fused: weights as the fused modules hold them", "fused")
        self.layout_box.addItem("original: the layout of the unfused model", "original")
        self.shard_edit = QLineEdit("5GB")
        self.shard_edit.setToolTip("largest shard file: e.g. 5GB, 500MB, 2GiB")
        self.wrong_box = QComboBox()
        self.wrong_box.addItem("write it so that transformers refuses it (fusion_core:<name>)", "guard")
        self.wrong_box.addItem("do not export", "refuse")
        self.wrong_box.setToolTip(
            "The export is loaded by stock transformers after writing; a fused export it would load wrong "
            "(it knows the family's name, not these modules) is never written as it is"
        )
        self.consumers = QLabel()
        self.consumers.setWordWrap(True)
        self.consumers.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.replace_box = QCheckBox("Replace the existing folder")
        self.replace_box.hide()
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.setProperty("role", "info")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.export_button = QPushButton("Export")
        self.export_button.setDefault(True)
        self.cancel_button = QPushButton("Cancel export")
        self.cancel_button.setEnabled(False)
        self.show_button = QPushButton("Show in folder")
        self.show_button.setEnabled(False)
        self.close_button = QPushButton("Close")

        form = QFormLayout()
        form.addRow("Destination:", dest_row)
        form.addRow("", self.replace_box)
        form.addRow("Layout:", self.layout_box)
        form.addRow("Max shard size:", self.shard_edit)
        form.addRow("If transformers loads it wrong:", self.wrong_box)
        form.addRow("Consumers:", self.consumers)
        buttons = QHBoxLayout()
        buttons.addWidget(self.show_button)
        buttons.addStretch(1)
        buttons.addWidget(self.export_button)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.close_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.note)
        layout.addLayout(form)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addStretch(1)
        layout.addLayout(buttons)

        # only the families that fuse something here: an enabled family that matches nothing is not exported
        plan = state.plan
        matched = {fam.name for fam in plan.families if fam.matches} if plan is not None else set()
        fusions = ", ".join(name for name in state.fusion_config if name in matched) or "none"
        if shown is None or not shown.has_checkpoint:
            self.note.setText("This source has no weights (config only): there is nothing to export.")
            self.note.setProperty("role", "warn")
            self.export_button.setEnabled(False)
        else:
            self.note.setText(
                f"Export <b>{html.escape(state.spec)}</b> with fusions: <b>{html.escape(fusions)}</b>. "
                "The output is written to a temporary folder, verified, then moved into place; "
                "the source folder is only read."
            )
            base = Path(shown.folder) if shown.folder else Path.cwd()
            self.dest_edit.setText(str(_default_destination(base)))

        browse.clicked.connect(self._browse)
        self.dest_edit.textChanged.connect(self._on_dest_changed)
        self.layout_box.currentIndexChanged.connect(self._on_layout_changed)
        self.layout_box.currentIndexChanged.connect(lambda _i: self._show_predicted())
        self.replace_box.toggled.connect(lambda _c: self._update_buttons())
        self.export_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        self.show_button.clicked.connect(self.show_in_folder)
        self.close_button.clicked.connect(self.reject)
        self._on_dest_changed(self.dest_edit.text())
        self._show_predicted()

    # form ------------------------------------------------------------------------------
    @property
    def destination(self) -> Path:
        return Path(self.dest_edit.text().strip()).expanduser()

    def _browse(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Export to (parent folder)", str(self.destination.parent))
        if path:
            self.dest_edit.setText(str(Path(path) / self.destination.name))

    def _on_layout_changed(self, _index: int) -> None:
        dest = self.dest_edit.text().strip()
        for old, new in (("-fused", "-original"), ("-original", "-fused")):
            if self.layout_box.currentData() == new.lstrip("-") and dest.endswith(old):
                self.dest_edit.setText(dest[: -len(old)] + new)

    def _show_predicted(self) -> None:
        """Before writing: who is expected to load the export (a dry run on the plan, no tensors)."""
        if self.state.plan is None:
            self.consumers.setText("")
            return
        layout = self.layout_box.currentData()
        job = self.state.consumers(layout)
        job.succeeded.connect(lambda rows, layout=layout: self._on_predicted(layout, rows))

    def _on_predicted(self, layout: str, rows: list[Consumer]) -> None:
        if layout == self.layout_box.currentData() and self.job is None and self.result is None:
            self.consumers.setText(_consumer_rows(rows, "before writing (predicted; tried by loading after writing)"))
            self._grow()

    def _grow(self) -> None:
        """Grow (never shrink) to show every line of the consumers and the status."""
        self.layout().activate()
        hint = self.sizeHint()
        self.resize(max(self.width(), hint.width()), max(self.height(), hint.height()))

    def _on_dest_changed(self, _text: str) -> None:
        dest = self.destination
        exists = bool(self.dest_edit.text().strip()) and dest.exists()
        self.replace_box.setVisible(exists)
        if exists:
            self.replace_box.setText(f"{dest.name} exists: replace it (its current content is deleted)")
        else:
            self.replace_box.setChecked(False)
        self._update_buttons()

    def _update_buttons(self) -> None:
        running = self.job is not None
        has_weights = self.state.inspection is not None and self.state.inspection.has_checkpoint
        blocked = self.replace_box.isVisible() and not self.replace_box.isChecked()
        self.export_button.setEnabled(
            not running and has_weights and bool(self.dest_edit.text().strip()) and not blocked
        )
        self.cancel_button.setEnabled(running)
        for w in (self.dest_edit, self.layout_box, self.shard_edit, self.replace_box, self.wrong_box):
            w.setEnabled(not running)

    # job -------------------------------------------------------------------------------
    def start(self) -> Job | None:
        """Validate the form and start the export job."""
        try:
            shard = parse_size(self.shard_edit.text())  # the one parser: the CLI's and accelerate's grammar
        except OptionError as e:
            self._set_status("error", f"Max shard size: {e.detail}")
            return None
        if not self.dest_edit.text().strip():
            self._set_status("error", "Choose a destination folder.")
            return None
        try:
            options = ExportOptions(
                layout=self.layout_box.currentData(),
                max_shard_size=shard,
                overwrite=self.replace_box.isVisible() and self.replace_box.isChecked(),
                on_wrong_load=self.wrong_box.currentData(),
            )
        except OptionError as e:
            self._set_status("error", f"Cannot export: {e}")
            return None
        job = self.state.export(self.destination, options)
        if job is None:
            self._set_status("error", "Another job is running; wait for it or cancel it.")
            return None
        self.job, self.result = job, None
        self.show_button.setEnabled(False)
        self.progress.setRange(0, 0)
        self._set_status("", "Starting…")
        job.progressed.connect(self._on_progressed)
        job.succeeded.connect(self._on_succeeded)
        job.failed.connect(self._on_failed)
        job.aborted.connect(self._on_cancelled)
        job.finished.connect(self._on_finished)
        self._update_buttons()
        return job

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self._set_status("", "Cancelling…")

    def _on_progressed(self, done: int, total: int, message: str) -> None:
        if total:
            self.progress.setRange(0, total)
            self.progress.setValue(done)
        self.status.setText(message)

    def _on_succeeded(self, result: Any) -> None:
        self.result = result
        self.progress.setRange(0, 1)
        self.progress.setValue(1)
        files = "".join(f"<li>{html.escape(f.name)} — {human_bytes(f.bytes)}</li>" for f in result.files[:12])
        more = f"<li>… and {len(result.files) - 12} more</li>" if len(result.files) > 12 else ""
        self._set_status(
            "ok",
            f"<b>Exported</b> to {html.escape(str(result.out_dir))} in {seconds_text(result.seconds)} "
            f"({result.layout} layout): {len(result.files)} file(s), {human_bytes(result.total_bytes)}, "
            f"{result.tensors} tensors, {len(result.transformed)} transformed.<br>"
            f"<b>Verified:</b> {html.escape(result.verification.summary)}<ul style='margin:2px'>{files}{more}</ul>",
        )
        self.consumers.setText(_consumer_rows(result.consumers, "tried by loading the export"))
        self._grow()
        self.show_button.setEnabled(True)
        self.adjustSize()  # the summary lists the files: let the dialog grow to show them

    def _on_failed(self, error: BaseException) -> None:
        from ..state import error_text

        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self._set_status("error", html.escape(error_text(error)[0]))

    def _on_cancelled(self) -> None:
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self._set_status("warn", "Export cancelled: nothing was written, the destination is as it was.")

    def _on_finished(self) -> None:
        self.job = None
        self._on_dest_changed(self.dest_edit.text())

    def _set_status(self, role: str, text: str) -> None:
        self.status.setProperty("role", role)
        self.status.style().unpolish(self.status)
        self.status.style().polish(self.status)
        self.status.setText(text)
        self._grow()

    def show_in_folder(self) -> None:
        if self.result is not None:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(self.result.out_dir)))

    def reject(self) -> None:  # Qt override: closing cancels a running export
        if self.job is not None:
            self.job.cancel()
        super().reject()


def _consumer_rows(rows: list[Consumer], when: str) -> str:
    """Consumers as rich text: name, status, the call a user makes, and why."""
    if not rows:
        return f"<i>not tried ({html.escape(when)})</i>"
    items = "".join(
        f"<li><b>{html.escape(r.name)}</b>: {html.escape(r.status)} — <code>{html.escape(r.how)}</code>"
        + (f" ({html.escape(r.detail)})" if r.detail else "")
        + "</li>"
        for r in rows
    )
    return f"{html.escape(when)}:<ul style='margin:2px'>{items}</ul>"


def _default_destination(source: Path) -> Path:
    """``<source>-fused`` beside the source, unless the source lives in a cache (a demo, the
    hub's cache): an export is the user's own file, so it goes to their documents folder."""
    import os

    from PySide6.QtCore import QStandardPaths

    caches = [QStandardPaths.writableLocation(QStandardPaths.StandardLocation.GenericCacheLocation)]
    caches += [os.environ.get("HF_HOME", ""), os.environ.get("FUSION_INSPECTOR_CACHE", "")]
    resolved = source.resolve()
    cached = any(c and resolved.is_relative_to(Path(c).resolve()) for c in caches) or ".cache" in resolved.parts
    if not cached:
        return source.parent / f"{source.name}-fused"
    docs = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation) or str(Path.home())
    return Path(docs) / f"{source.name}-fused"
