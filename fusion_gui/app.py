"""Entry point of the desktop app (placeholder until the GUI lands)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from PySide6.QtWidgets import QApplication, QLabel

    app = QApplication(sys.argv if argv is None else ["fusion-inspector", *argv])
    label = QLabel("Fusion Inspector")
    label.show()
    return app.exec()
