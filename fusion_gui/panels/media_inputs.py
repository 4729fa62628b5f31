"""The Checks tab's real inputs: image, video and audio files (picker and drag and drop), a prompt.

Images show as thumbnails (``QImageReader`` in the window: no torch, no model code); after
a check, :meth:`MediaInputs.show_fed` says what the model's processor made of them (the
result's ``end_to_end.inputs``: grid, tiles, frames, seconds, tokens).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QIcon, QImageReader, QPixmap
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

VIDEO_SUFFIXES = {".mp4", ".mkv", ".webm", ".avi", ".mov", ".m4v", ".gif"}
AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".mp3", ".aiff", ".aif", ".opus"}
THUMB = 48
_FILTERS = {
    "image": "Images (*.png *.jpg *.jpeg *.bmp *.webp *.tif *.tiff);;All files (*)",
    "video": "Videos (" + " ".join(f"*{s}" for s in sorted(VIDEO_SUFFIXES)) + ");;All files (*)",
    "audio": "Audio (" + " ".join(f"*{s}" for s in sorted(AUDIO_SUFFIXES)) + ");;All files (*)",
}


def kind_of(path: str) -> str:
    """ "image", "video" or "audio" for a file, from its suffix (images: whatever Qt reads)."""
    suffix = Path(path).suffix.lower()
    if suffix in VIDEO_SUFFIXES and suffix != ".gif":
        return "video"
    if suffix in AUDIO_SUFFIXES:
        return "audio"
    return "image"


class MediaInputs(QWidget):
    """Files and a prompt for a check's end-to-end runs; ``changed`` on any edit."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAcceptDrops(True)
        self.files = QListWidget()
        self.files.setViewMode(QListWidget.ViewMode.IconMode)
        self.files.setIconSize(QSize(THUMB, THUMB))
        self.files.setFlow(QListWidget.Flow.LeftToRight)
        self.files.setWrapping(False)
        self.files.setFixedHeight(THUMB + 34)
        self.files.setToolTip("images, a video, an audio file: drop them here or use the buttons")
        self.files.setAcceptDrops(False)  # the widget takes the drops
        self.buttons: dict[str, QPushButton] = {}
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        for kind in ("image", "video", "audio"):
            button = QPushButton(f"Add {kind}…")
            button.setToolTip(f"a real {kind}, through the model's own processor")
            button.clicked.connect(lambda _c=False, k=kind: self._pick(k))
            self.buttons[kind] = button
            row.addWidget(button)
        self.clear_button = QPushButton("Clear")
        self.clear_button.clicked.connect(self.clear)
        row.addWidget(self.clear_button)
        row.addStretch(1)
        self.prompt = QLineEdit()
        self.prompt.setPlaceholderText("prompt (optional)")
        self.prompt.setToolTip("real text, through the model's own tokenizer")
        self.prompt.textChanged.connect(lambda _t: self.changed.emit())
        self.fed = QLabel()
        self.fed.setWordWrap(True)
        self.fed.setTextFormat(Qt.TextFormat.PlainText)  # file names are data
        self.fed.setStyleSheet("color: #5f6368")
        self.fed.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.files)
        layout.addLayout(row)
        layout.addWidget(self.prompt)
        layout.addWidget(self.fed)

    # files -----------------------------------------------------------------------------
    def add_file(self, path: str) -> str:
        """Add ``path`` (a second video or audio file replaces the first); returns its kind."""
        kind = kind_of(path)
        if kind in ("video", "audio"):
            for i in reversed(range(self.files.count())):
                if self.files.item(i).data(Qt.ItemDataRole.UserRole + 1) == kind:
                    self.files.takeItem(i)
        item = QListWidgetItem(Path(path).name)
        item.setData(Qt.ItemDataRole.UserRole, path)
        item.setData(Qt.ItemDataRole.UserRole + 1, kind)
        item.setToolTip(f"{kind}: {path}")
        item.setIcon(_thumbnail(path, kind))
        self.files.addItem(item)
        self.changed.emit()
        return kind

    def paths(self, kind: str) -> list[str]:
        items = (self.files.item(i) for i in range(self.files.count()))
        return [it.data(Qt.ItemDataRole.UserRole) for it in items if it.data(Qt.ItemDataRole.UserRole + 1) == kind]

    def clear(self) -> None:
        self.files.clear()
        self.fed.hide()
        self.changed.emit()

    def _pick(self, kind: str) -> None:
        if kind == "image":
            paths, _ = QFileDialog.getOpenFileNames(self, "Add images", "", _FILTERS[kind])
        else:
            path, _ = QFileDialog.getOpenFileName(self, f"Add a {kind} file", "", _FILTERS[kind])
            paths = [path] if path else []
        for path in paths:
            self.add_file(path)

    # drag and drop (Qt overrides) --------------------------------------------------------
    def dragEnterEvent(self, event: Any) -> None:
        if event.mimeData().hasUrls() and any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event: Any) -> None:
        for url in event.mimeData().urls():
            if url.isLocalFile():
                self.add_file(url.toLocalFile())
        event.acceptProposedAction()

    # options and results ---------------------------------------------------------------
    def options(self) -> dict[str, Any]:
        video, audio = self.paths("video"), self.paths("audio")
        return {
            "images": tuple(self.paths("image")),
            "video": video[0] if video else None,
            "audio": audio[0] if audio else None,
            "prompt": self.prompt.text() or None,
        }

    def show_fed(self, inputs: list[Any]) -> None:
        """What the end-to-end runs fed (``EndToEndCheck.inputs``), one line per run."""
        runs: dict[str, list[str]] = {}
        for f in inputs:
            source = f" ({f.source})" if f.source and f.source not in ("synthetic", "prompt") else ""
            runs.setdefault(f.run, []).append(f"{f.count} × {f.modality} {f.size}{source}")
        text = "\n".join(f"{run}: {', '.join(parts)}" for run, parts in runs.items())
        self.fed.setText(f"the processor made: {text}" if text else "")
        self.fed.setVisible(bool(text))


def _thumbnail(path: str, kind: str) -> QIcon:
    if kind == "image":
        reader = QImageReader(path)
        reader.setAutoTransform(True)
        size = reader.size()
        if size.isValid():
            reader.setScaledSize(size.scaled(THUMB, THUMB, Qt.AspectRatioMode.KeepAspectRatio))
        image = reader.read()
        if not image.isNull():
            return QIcon(QPixmap.fromImage(image))
    from PySide6.QtWidgets import QApplication, QStyle

    icon = QStyle.StandardPixmap.SP_MediaPlay if kind == "video" else QStyle.StandardPixmap.SP_MediaVolume
    if kind == "image":
        icon = QStyle.StandardPixmap.SP_MessageBoxWarning  # not an image Qt reads: the check will say why
    return QApplication.style().standardIcon(icon)
