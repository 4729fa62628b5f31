"""File → Save image/report…: the module tree as SVG, PNG or indented text (the highlights of
the enabled families, the check overlay and the legend, repeats folded as in the tree), and
the last check or comparison as a self-contained HTML page or Markdown.

The files are written by ``fusion_core.report`` (plain text, no torch); the PNG is that SVG
rendered by Qt.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtWidgets import QFileDialog, QWidget

if TYPE_CHECKING:
    from ..state import AppState

FILTERS = (
    "Tree image, SVG (*.svg)",
    "Tree image, PNG (*.png)",
    "Tree as indented text (*.txt)",
    "Report, HTML (*.html)",
    "Report, Markdown (*.md)",
)
MAX_PNG_SIDE = 16_000  # pixels; a folded tree of a 2,700-module model is far below this


def tree_marks(state: AppState) -> dict[str, Any]:
    """The highlights as the tree shows them: each enabled family's modules, then the check's verdicts."""
    from fusion_core.report.tree_image import Mark, plan_marks

    h = state.highlights()
    marks: dict[str, Any] = plan_marks(
        h.matched, [n for n in state.family_order if n in state.enabled], registered=list(state.family_order)
    )
    result = state.check_result
    if result is not None:
        for m in result.modules:
            ok = m.passed
            marks[m.path] = Mark("#2e7d32" if ok else "#c62828", "check passed" if ok else "check failed")
    return marks


def save_view(state: AppState, path: str | Path, report: str = "auto") -> Path:
    """Write what the window shows to ``path``, by its suffix.

    Args:
        report: for ``.html``/``.md``: ``"comparison"``, ``"check"``, or ``"auto"`` (the
            comparison when there is one, else the check results).

    Raises:
        ValueError: nothing to save of that kind, or an unknown suffix (the message says which).
        OSError: the file cannot be written.
    """
    from fusion_core.report.tree_image import tree_rows, tree_svg, tree_text, write_text

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".svg", ".png", ".txt"):
        shown = state.shown
        if shown is None:
            raise ValueError("no model is open: open one first")
        rows = tree_rows(shown.tree, tree_marks(state))
        if suffix == ".txt":
            write_text(path, tree_text(rows))
            return path
        subtitle = f"{shown.model_class}, {len(shown.tree)} modules; repeats folded: {len(rows)} rows"
        svg = tree_svg(rows, shown.name, subtitle)
        if suffix == ".svg":
            write_text(path, svg)
        else:
            _png(svg, path)
        return path
    if suffix in (".html", ".htm", ".md"):
        from fusion_core.report.documents import render_report

        if report == "comparison" or (report == "auto" and state.comparison is not None):
            result = state.comparison
            what = "comparison: compare with another model first (File → Compare with…)"
        else:
            result = state.check_result
            what = "check results: run the checks first"
        if result is None:
            raise ValueError(f"no {what}")
        write_text(path, render_report(result, "md" if suffix == ".md" else "html"))
        return path
    raise ValueError(f"{path.name}: save as .svg, .png, .txt, .html or .md")


def _png(svg: str, path: Path) -> None:
    from PySide6.QtCore import QByteArray, QSize
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(QByteArray(svg.encode("utf-8")))
    size = renderer.defaultSize()
    scale = min(2.0, MAX_PNG_SIDE / max(size.width(), size.height(), 1))
    image = QImage(QSize(int(size.width() * scale), int(size.height() * scale)), QImage.Format.Format_ARGB32)
    image.fill(0xFFFFFFFF)
    painter = QPainter(image)
    renderer.render(painter)
    painter.end()
    if not image.save(str(path), "PNG"):
        raise OSError(f"cannot write {path}")


def save_dialog(parent: QWidget, state: AppState, on_error: Any) -> QFileDialog:
    """A window-modal save dialog (never blocks the event loop); errors go to ``on_error(title, message)``."""
    dialog = QFileDialog(parent, "Save image or report")
    dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
    dialog.setOption(QFileDialog.Option.DontUseNativeDialog, True)
    dialog.setNameFilters(list(FILTERS))
    if state.comparison is not None:
        dialog.selectNameFilter(FILTERS[3])
    suffixes = {f: f.rsplit("*", 1)[1].rstrip(")") for f in FILTERS}

    def chosen(name: str) -> None:
        path = Path(name)
        if not path.suffix:
            path = path.with_suffix(suffixes.get(dialog.selectedNameFilter(), ".svg"))
        try:
            save_view(state, path)
        except (ValueError, OSError) as e:
            on_error("Cannot save", str(e))

    dialog.fileSelected.connect(chosen)
    dialog.open()
    return dialog
