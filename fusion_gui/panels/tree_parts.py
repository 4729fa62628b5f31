"""Widgets of the tree panel that know nothing of it: the view, the count badge, Esc in the filter box.

The row and header menus and the legend act on the panel and the state: they live in
:mod:`.tree_panel`.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QModelIndex, QObject, QRectF, Qt
from PySide6.QtGui import QColor, QFontMetrics, QPainter
from PySide6.QtWidgets import (
    QLineEdit,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTreeView,
    QWidget,
)

from .. import style
from ..models.tree_model import ColourRole, CountRole, ShortRole, StatusRole


class ModuleTreeView(QTreeView):
    """A tree view over a lazy model whose expand-all creates the rows below in one go.

    ``QTreeView.expandAll`` fetches each collapsed row's children while it lays out, one
    row-insertion signal at a time, and lays out and paints in the same pass.
    ``expandable(index)`` (an invalid index: the whole tree) creates the rows below first,
    in one layout change, and returns those that have children; they are marked expanded
    with a layout pending, so the view lays them out once, in the next pass of the event
    loop, as ``QTreeView.expandRecursively`` does.
    """

    def __init__(self, expandable: Callable[[QModelIndex], list[QModelIndex]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._expandable = expandable

    def expandAll(self) -> None:  # Qt override
        self._expand_rows(QModelIndex())

    def expandRecursively(self, index: QModelIndex, depth: int = -1) -> None:  # Qt override
        if depth != -1 or not index.isValid():
            super().expandRecursively(index, depth)
        else:
            self._expand_rows(index)

    def _expand_rows(self, index: QModelIndex) -> None:
        rows = self._expandable(index)
        self.scheduleDelayedItemsLayout()  # with a layout pending, expand() only records the row
        for row in rows:
            self.expand(row)


class BadgeDelegate(QStyledItemDelegate):
    """Draws a small pill with the number of fusable modules below a collapsed ancestor; a name
    too long for the column (a fold's label, an adapter mark) shows its first shorter form that fits."""

    _badged = False  # painting the name beside its badge: the rect given already leaves the badge out

    def initStyleOption(self, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        super().initStyleOption(option, index)
        forms = index.data(ShortRole)
        if not forms or option.rect.width() <= 0:
            return
        fm = option.fontMetrics
        room = option.rect.width() - 10
        if option.features & QStyleOptionViewItem.ViewItemFeature.HasDecoration:
            room -= option.decorationSize.width() + 6
        count = index.data(CountRole) or 0
        if count and not self._badged and index.data(StatusRole) != "matched":
            room -= fm.horizontalAdvance(str(count)) + 12 + 8
        if fm.horizontalAdvance(option.text) > room:
            option.text = next((f for f in forms if fm.horizontalAdvance(f) <= room), forms[-1])

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        count = index.data(CountRole) or 0
        if not count or index.data(StatusRole) == "matched":
            super().paint(painter, option, index)
            return
        text = str(count)
        fm = QFontMetrics(option.font)
        badge_w = fm.horizontalAdvance(text) + 12
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        style_ = opt.widget.style() if opt.widget is not None else None
        text_rect = (
            style_.subElementRect(style_.SubElement.SE_ItemViewItemText, opt, opt.widget)
            if style_ is not None
            else opt.rect
        )
        name_w = fm.horizontalAdvance(opt.text)
        # the name is elided if the badge would not fit after it; the badge stays visible
        room = text_rect.width() - badge_w - 8
        narrowed = QStyleOptionViewItem(option)
        if name_w > room:
            narrowed.rect = option.rect.adjusted(0, 0, -(badge_w + 8), 0)
            x = option.rect.right() - badge_w - 4
        else:
            x = text_rect.left() + name_w + 6
        self._badged = name_w > room
        try:
            super().paint(painter, narrowed, index)
        finally:
            self._badged = False
        rect = option.rect
        pill = QRectF(x, rect.top() + 3, badge_w, rect.height() - 6)
        colour = index.data(ColourRole) or style.family_colour(0)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(colour))
        painter.drawRoundedRect(pill, pill.height() / 2, pill.height() / 2)
        painter.setPen(style.text_on(colour))
        painter.drawText(pill, Qt.AlignmentFlag.AlignCenter, text)
        painter.restore()


class EscapeFilter(QObject):
    """Esc in the filter box clears the filter (a line edit itself ignores Esc)."""

    def __init__(self, edit: QLineEdit, clear: Callable[[], None]) -> None:
        super().__init__(edit)
        self._clear = clear
        edit.installEventFilter(self)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # Qt override
        if event.type() == QEvent.Type.KeyPress and event.key() == Qt.Key.Key_Escape:
            self._clear()
            return True
        return False
