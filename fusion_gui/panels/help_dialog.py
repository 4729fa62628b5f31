"""The Help menu's parts: the keyboard shortcuts dialog and where the documentation lives."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QAction, QFontDatabase, QKeySequence, QShortcut
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QPlainTextEdit, QVBoxLayout, QWidget

# Keys handled by the module filter's own widgets (no QAction or QShortcut carries them).
FILTER_KEYS = (
    ("Enter", "Next match (typing in the module filter)"),
    ("Esc", "Clear the module filter"),
)

SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the repository, when run from a checkout


def doc_paths(root: Path = SOURCE_ROOT) -> dict[str, Path]:
    """The documentation files the Help menu opens: the README and the docs folder of the source tree."""
    return {"readme": root / "README.md", "docs": root / "docs"}


def _label(text: str) -> str:
    """A menu text without its mnemonic ampersand and trailing ellipsis."""
    return text.replace("&&", "\0").replace("&", "").replace("\0", "&").rstrip("…").strip()


def collect_shortcuts(window: QWidget) -> list[tuple[str, str]]:
    """(keys, what they do) for every shortcut the window and its children define, sorted by what they do.

    Read from the live widgets: each QAction with a shortcut (its what's-this, else its text), each QShortcut (its what's-this
    names it), and the module filter's Enter and Esc.
    """
    seen: dict[tuple[str, str], None] = {}
    for action in window.findChildren(QAction):
        for seq in action.shortcuts():
            keys = seq.toString(QKeySequence.SequenceFormat.PortableText)
            if keys and action.text():
                seen[(keys, action.whatsThis() or _label(action.text()))] = None
    for shortcut in window.findChildren(QShortcut):
        keys = shortcut.key().toString(QKeySequence.SequenceFormat.PortableText)
        if keys:
            seen[(keys, shortcut.whatsThis() or "(unnamed)")] = None
    for keys, what in FILTER_KEYS:
        seen[(keys, what)] = None
    return sorted(seen, key=lambda kw: (kw[1].lower(), kw[0]))


class ShortcutsDialog(QDialog):
    """The window's keyboard shortcuts as plain text (never rich text)."""

    def __init__(self, shortcuts: list[tuple[str, str]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        self.shortcuts = list(shortcuts)
        width = max((len(keys) for keys, _ in self.shortcuts), default=0) + 3
        self.text = QPlainTextEdit(self)
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setPlainText("\n".join(f"{keys:<{width}}{what}" for keys, what in self.shortcuts))
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        metrics = self.text.fontMetrics()
        longest = max((len(line) for line in self.text.toPlainText().splitlines()), default=20)
        self.text.setMinimumSize(
            metrics.horizontalAdvance("M") * (longest + 4), metrics.lineSpacing() * (len(self.shortcuts) + 2)
        )
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.text)
        layout.addWidget(buttons)

    def listed(self) -> list[tuple[str, str]]:
        """The shortcuts read back from the text shown: (keys, what), split at the column gap."""
        rows = []
        for line in self.text.toPlainText().splitlines():
            keys, _, what = line.partition("   ")
            rows.append((keys.strip(), what.strip()))
        return rows
