"""Parts of the tree panel: the count badge, the legend, the row and header menus, Esc in the filter box."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QModelIndex, QObject, QRectF, Qt
from PySide6.QtGui import QColor, QFontMetrics, QPainter
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTreeView,
    QWidget,
)

from .. import style
from ..models.tree_model import CHECK, ColourRole, CountRole, PathRole, StatusRole

if TYPE_CHECKING:
    from ..state import AppState
    from .tree_panel import TreePanel


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
    """Draws a small pill with the number of fusable modules below a collapsed ancestor."""

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
        super().paint(painter, narrowed, index)
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


def row_menu(panel: TreePanel, index: QModelIndex) -> QMenu:
    """The row's menu: copy path, show transforms / in mapping, check this module, expand all below."""
    path = index.data(PathRole) or ""
    menu = QMenu(panel)
    menu.setToolTipsVisible(True)
    ov = panel.model.overlay
    within = [p for p in ov.matched if p == path or p.startswith(f"{path}.") or not path]
    menu.addAction(f"Copy path  ({path or 'root'})", lambda: panel.copy_path(index))
    menu.addSeparator()
    for text, tab, reason in (
        ("Show transforms", "transforms", "" if within else "nothing is fused here with the enabled fusions"),
        ("Show in mapping", "mapping", "" if within else "nothing is fused here with the enabled fusions"),
    ):
        action = menu.addAction(text, lambda t=tab: panel.show_in(path, t))
        action.setEnabled(not reason)
        action.setToolTip(reason or f"{text.lower()} of {path or 'the model'}")
    checked = [p for p in ov.scores if p == path or p.startswith(f"{path}.") or not path]
    reason = "" if within else "nothing is fused here with the enabled fusions"
    if within and not checked:
        reason = panel.state.check_blocker()
    action = menu.addAction(
        "Check this module" if not checked else "Show its check results", lambda: panel.state.check_module(path)
    )
    action.setEnabled(not reason)
    action.setToolTip(reason or ("select its results in Checks" if checked else "run the checks, then show it"))
    menu.addSeparator()
    menu.addAction("Expand all below", lambda: panel.expand_all_below(index))
    menu.addAction("Collapse", lambda: panel.view.collapse(index))
    return menu


def header_menu(panel: TreePanel) -> QMenu:
    """Show or hide the tree's columns."""
    menu = QMenu(panel)
    for col in range(1, panel.model.columnCount()):
        if col == CHECK and not panel.model.overlay.scores:
            continue
        action = menu.addAction(panel.model.headerData(col, Qt.Orientation.Horizontal))
        action.setCheckable(True)
        action.setChecked(not panel.view.isColumnHidden(col))
        action.toggled.connect(lambda on, c=col: (panel.view.setColumnHidden(c, not on), panel.fit_columns()))
    return menu


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


def fill_legend(layout: QHBoxLayout, state: AppState) -> None:
    """The legend under the tree: each family with matches in its colour, rejected, fusable below."""
    while layout.count():
        item = layout.takeAt(0)
        if item.widget() is not None:
            item.widget().deleteLater()
    matched, rejected = state.highlights()
    colours = style.family_colours(state.family_order)

    def add(icon, text: str, tip: str) -> None:
        pic = QLabel()
        pic.setPixmap(icon.pixmap(14, 14))
        label = QLabel(text)
        label.setToolTip(tip)
        pic.setToolTip(tip)
        layout.addWidget(pic)
        layout.addWidget(label)

    enabled = [n for n in state.family_order if n in state.enabled]
    # only families with matches: the others mark nothing (their counts are in the Fusions tab)
    for name in enabled:
        n = sum(1 for f in matched.values() if f == name)
        if n:
            tip = f"modules {name} replaces (its colour everywhere)"
            add(style.fused_icon(colours[name]), f"{name} ({n})", tip)
    if rejected:
        tip = "candidates not fused; the reason is in the tooltip"
        add(style.rejected_icon(), f"rejected ({len(rejected)})", tip)
    if matched:
        add(style.contains_icon(style.MIXED), "contains fusable", "the number of fusable modules below")
    hint = "" if matched else ("nothing to fuse with the enabled fusions" if enabled else "no fusion enabled")
    if hint:
        label = QLabel(f"{hint} (Fusions tab)")
        label.setProperty("role", "hint")
        layout.addWidget(label)
    layout.addStretch(1)
