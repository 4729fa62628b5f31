"""Log tab: the core's and the GUI's logging records, filtered by level.

:class:`QtLogHandler` is a :class:`logging.Handler` that forwards records as a Qt signal;
records logged on worker threads are queued to the GUI thread by Qt.
"""

from __future__ import annotations

import logging
import time

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from .. import style

LOGGERS = ("fusion_core", "fusion_gui")
# third-party loggers shown at their own level (transformers' warnings about weights matter)
EXTRA_LOGGERS = ("transformers",)
LEVELS = (("Debug", logging.DEBUG), ("Info", logging.INFO), ("Warning", logging.WARNING), ("Error", logging.ERROR))
MAX_RECORDS = 5000
_COLOURS = {logging.DEBUG: "#757575", logging.WARNING: "#b26a00", logging.ERROR: style.FAIL}


class _Emitter(QObject):
    record = Signal(int, float, str, str)  # level, created, logger name, message


class QtLogHandler(logging.Handler):
    """Forwards log records to the GUI thread as ``emitter.record`` signals."""

    def __init__(self, level: int = logging.DEBUG) -> None:
        super().__init__(level)
        self.emitter = _Emitter()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info and record.levelno >= logging.ERROR:
                message += "\n" + self.formatException(record.exc_info)
            self.emitter.record.emit(record.levelno, record.created, record.name, message)
        except Exception:  # a handler must never raise into the code that logs
            self.handleError(record)

    def install(self) -> None:
        for name in LOGGERS:
            logger = logging.getLogger(name)
            logger.addHandler(self)
            if logger.level == logging.NOTSET or logger.level > logging.INFO:
                logger.setLevel(logging.DEBUG)
        for name in EXTRA_LOGGERS:
            logging.getLogger(name).addHandler(self)

    def uninstall(self) -> None:
        for name in LOGGERS + EXTRA_LOGGERS:
            logging.getLogger(name).removeHandler(self)


class LogPanel(QWidget):
    """Shows log records; the level box filters what is shown (all records are kept)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.records: list[tuple[int, float, str, str]] = []
        self.level_box = QComboBox()
        for text, level in LEVELS:
            self.level_box.addItem(text, level)
        self.level_box.setCurrentIndex(1)
        self.clear_button = QPushButton("Clear")
        self.view = QPlainTextEdit(readOnly=True)
        self.view.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.view.setMaximumBlockCount(MAX_RECORDS)
        font = self.view.font()
        font.setFamily("monospace")
        font.setStyleHint(font.StyleHint.Monospace)
        self.view.setFont(font)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Show:"))
        bar.addWidget(self.level_box)
        bar.addStretch(1)
        bar.addWidget(self.clear_button)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.view, 1)
        self.handler = QtLogHandler()
        self.handler.emitter.record.connect(self._on_record, Qt.ConnectionType.QueuedConnection)
        self.level_box.currentIndexChanged.connect(self._on_level_changed)
        self.clear_button.clicked.connect(self.clear)

    @property
    def level(self) -> int:
        return int(self.level_box.currentData())

    def set_level(self, level: int) -> None:
        self.level_box.setCurrentIndex(max(0, self.level_box.findData(level)))

    def clear(self) -> None:
        self.records.clear()
        self.view.clear()

    def text(self) -> str:
        return self.view.toPlainText()

    def _on_record(self, level: int, created: float, name: str, message: str) -> None:
        self.records.append((level, created, name, message))
        if len(self.records) > MAX_RECORDS:
            del self.records[: len(self.records) - MAX_RECORDS]
        if level >= self.level:
            self._append(level, created, name, message)

    def _on_level_changed(self, _index: int) -> None:
        self.view.clear()
        for rec in self.records:
            if rec[0] >= self.level:
                self._append(*rec)

    def _append(self, level: int, created: float, name: str, message: str) -> None:
        stamp = time.strftime("%H:%M:%S", time.localtime(created))
        fmt = QTextCharFormat()
        fmt.setForeground(QColor(_COLOURS.get(level, "#202020")))
        cursor = self.view.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        if not self.view.document().isEmpty():
            cursor.insertBlock()
        cursor.insertText(f"{stamp} {logging.getLevelName(level):<7} {name}: {message}", fmt)
        self.view.ensureCursorVisible()
