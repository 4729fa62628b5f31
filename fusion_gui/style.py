"""Colours and icons, drawn in code (no files to ship or lose), and the window's style.

One colour per fusion family, derived from its name (so reordering or enabling families
never recolours them), marks the modules it replaces; rejected candidates are amber with a warning sign, whatever the family.
Row tints are light and text on them is forced dark, so both stay readable.
"""

from __future__ import annotations

from functools import cache

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QIcon, QPainter, QPainterPath, QPen, QPixmap, QPolygonF

from fusion_core.report.colours import FAMILY_COLOURS as FAMILY_COLOURS  # one palette: app and images
from fusion_core.report.colours import family_colours as family_colours

REJECTED = "#e65100"
MIXED = "#455a64"  # ancestors of modules of several families
FAIL = "#c62828"
PASS = "#2e7d32"
TEXT_ON_TINT = "#1a1a1a"


def family_colour(index: int) -> QColor:
    return QColor(FAMILY_COLOURS[index % len(FAMILY_COLOURS)])


def text_on(colour: QColor | str) -> QColor:
    """Black or white, whichever reads better on ``colour`` (a badge's text)."""
    c = QColor(colour)
    luma = 0.299 * c.red() + 0.587 * c.green() + 0.114 * c.blue()
    return QColor("#1a1a1a" if luma > 150 else "white")


def tint(colour: QColor | str, alpha: float = 0.16) -> QColor:
    """A light background version of ``colour`` (blended on white, opaque)."""
    c = QColor(colour)
    return QColor(
        round(255 + (c.red() - 255) * alpha),
        round(255 + (c.green() - 255) * alpha),
        round(255 + (c.blue() - 255) * alpha),
    )


def _canvas(size: int = 32) -> tuple[QPixmap, QPainter]:
    pm = QPixmap(size, size)
    pm.fill(Qt.GlobalColor.transparent)
    p = QPainter(pm)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    return pm, p


@cache
def fused_icon(colour: str) -> QIcon:
    """A lightning bolt in a filled circle: 'this module will be fused'."""
    pm, p = _canvas()
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor(colour))
    p.drawEllipse(QRectF(1, 1, 30, 30))
    bolt = QPolygonF([QPointF(x, y) for x, y in ((18, 4), (8, 18), (15, 18), (12, 28), (24, 13), (17, 13), (20, 4))])
    p.setBrush(QColor("white"))
    p.drawPolygon(bolt)
    p.end()
    return QIcon(pm)


@cache
def rejected_icon() -> QIcon:
    """An amber warning triangle: 'a candidate that is not fused' (reason in the tooltip)."""
    pm, p = _canvas()
    path = QPainterPath()
    path.moveTo(16, 2)
    path.lineTo(31, 29)
    path.lineTo(1, 29)
    path.closeSubpath()
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor(REJECTED))
    p.drawPath(path)
    p.setPen(QPen(QColor("white"), 3.5, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap))
    p.drawLine(QPointF(16, 11), QPointF(16, 20))
    p.drawPoint(QPointF(16, 25))
    p.end()
    return QIcon(pm)


@cache
def contains_icon(colour: str) -> QIcon:
    """A hollow ring: 'fusable modules below'."""
    pm, p = _canvas()
    p.setPen(QPen(QColor(colour), 4))
    p.setBrush(Qt.BrushStyle.NoBrush)
    p.drawEllipse(QRectF(6, 6, 20, 20))
    p.end()
    return QIcon(pm)


@cache
def status_icon(ok: bool) -> QIcon:
    """A check mark or a cross in a circle, for check results."""
    pm, p = _canvas()
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor(PASS if ok else FAIL))
    p.drawEllipse(QRectF(1, 1, 30, 30))
    p.setPen(QPen(QColor("white"), 4, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap))
    if ok:
        p.drawPolyline(QPolygonF([QPointF(9, 16), QPointF(14, 22), QPointF(23, 10)]))
    else:
        p.drawLine(QPointF(10, 10), QPointF(22, 22))
        p.drawLine(QPointF(22, 10), QPointF(10, 22))
    p.end()
    return QIcon(pm)


@cache
def app_icon() -> QIcon:
    """Two blocks merging into one: the application icon."""
    icon = QIcon()
    for size in (16, 32, 64, 128):
        pm = QPixmap(size, size)
        pm.fill(Qt.GlobalColor.transparent)
        p = QPainter(pm)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.scale(size / 64, size / 64)
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor("#1565c0"))
        p.drawRoundedRect(QRectF(4, 6, 22, 22), 4, 4)
        p.drawRoundedRect(QRectF(4, 36, 22, 22), 4, 4)
        p.setBrush(QColor("#2e7d32"))
        p.drawRoundedRect(QRectF(38, 14, 22, 36), 5, 5)
        p.setPen(QPen(QColor("#455a64"), 4))
        p.drawLine(QPointF(26, 17), QPointF(38, 26))
        p.drawLine(QPointF(26, 47), QPointF(38, 38))
        p.end()
        icon.addPixmap(pm)
    return icon


def bold(font: QFont) -> QFont:
    f = QFont(font)
    f.setBold(True)
    return f


def brush(colour: QColor | str) -> QBrush:
    return QBrush(QColor(colour))


STYLESHEET = """
QTabWidget::pane { border-top: 1px solid palette(mid); }
QLabel[role="hint"] { color: palette(placeholder-text); }
QLabel[role="error"] { color: #b71c1c; background: #ffebee; border: 1px solid #ef9a9a;
                       border-radius: 4px; padding: 6px; }
QLabel[role="ok"] { color: #1b5e20; background: #e8f5e9; border: 1px solid #a5d6a7;
                    border-radius: 4px; padding: 6px; }
QLabel[role="warn"] { color: #6d3a00; background: #fff3e0; border: 1px solid #ffcc80;
                      border-radius: 4px; padding: 6px; }
QLabel[role="info"] { background: palette(alternate-base); border: 1px solid palette(mid);
                      border-radius: 4px; padding: 6px; }
QLabel[role="title"] { font-weight: 600; font-size: 13pt; }
"""
