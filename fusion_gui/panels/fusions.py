"""Fusions tab: every registered family with a checkbox, description and counts, in the user's order."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from PySide6.QtCore import QModelIndex, QSize, Qt
from PySide6.QtGui import QPainter, QTextDocument
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from fusion_core.plan.view import FamilyInfo

from .. import style
from ..format import natural_key, plain_tip

if TYPE_CHECKING:
    from ..state import AppState

NameRole = Qt.ItemDataRole.UserRole + 1
CountsRole = Qt.ItemDataRole.UserRole + 2
DescriptionRole = Qt.ItemDataRole.UserRole + 3


class FamilyDelegate(QStyledItemDelegate):
    """Two lines per family: the name in bold with its counts, then the wrapped description."""

    def _document(self, index: QModelIndex, width: float, selected: bool = False) -> QTextDocument:
        e = html.escape
        colour, grey = ("white", "#e3f2fd") if selected else ("#1a1a1a", "#5f6368")
        doc = QTextDocument()
        doc.setDocumentMargin(3)
        doc.setHtml(
            f"<div style='color:{colour}'><b>{e(index.data(NameRole) or '')}</b>"
            f"&nbsp;&nbsp;<span style='color:{grey}'>{e(index.data(CountsRole) or '')}</span><br>"
            f"{e(index.data(DescriptionRole) or '')}</div>"
        )
        doc.setTextWidth(max(width, 80))
        return doc

    def _text_rect(self, option: QStyleOptionViewItem, index: QModelIndex):
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        widget = opt.widget
        style_ = widget.style() if widget is not None else None
        rect = style_.subElementRect(QStyle.SubElement.SE_ItemViewItemText, opt, widget) if style_ else opt.rect
        return opt, rect

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        opt, rect = self._text_rect(option, index)
        opt.text = ""
        widget = opt.widget
        (widget.style() if widget else QStyle()).drawControl(
            QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget
        )
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        doc = self._document(index, rect.width(), selected)
        painter.save()
        painter.translate(rect.topLeft())
        doc.drawContents(painter)
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex) -> QSize:
        view = self.parent()
        width = view.viewport().width() if view is not None else 400
        doc = self._document(index, width - 70)
        return QSize(width - 8, int(doc.size().height()) + 4)


def family_tooltip(info: FamilyInfo, discovery: object | None) -> str:
    """The description, the options the family accepts (``fusion_config``), then the first rejections."""
    lines = [info.description]
    if info.options:
        lines.append("Options (fusion_config):")
        lines += [f"  {name}: {accepts}" for name, accepts in info.options.items()]
    rejected = sorted(getattr(discovery, "rejected", None) or [], key=lambda r: natural_key(r.path))
    if rejected:
        lines.append("Rejected:")
        lines += [f"  {r.path}: {r.reason}" for r in rejected[:20]]
    return "\n".join(lines)


class FusionsPanel(QWidget):
    """Checkable, reorderable list of families; the core applies them in this order."""

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._updating = False
        intro = QLabel(
            "Tick the fusions to apply. They are applied in this order (drag to reorder). "
            "The tree, patch mapping and weight transforms follow at once."
        )
        intro.setWordWrap(True)
        intro.setProperty("role", "hint")
        self.list = QListWidget()
        self.list.setDragDropMode(QAbstractItemView.DragDropMode.InternalMove)
        self.list.setDefaultDropAction(Qt.DropAction.MoveAction)
        self.list.setWordWrap(True)
        self.list.setResizeMode(QListWidget.ResizeMode.Adjust)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setItemDelegate(FamilyDelegate(self.list))
        self.list.setSpacing(2)
        self.list.setIconSize(QSize(18, 18))
        self.list.setAlternatingRowColors(True)
        self.up = QPushButton("Move up")
        self.down = QPushButton("Move down")
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message.hide()

        buttons = QHBoxLayout()
        buttons.addWidget(self.up)
        buttons.addWidget(self.down)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.list, 1)
        layout.addLayout(buttons)
        layout.addWidget(self.message)

        self.list.itemChanged.connect(self._on_item_changed)
        self.list.model().rowsMoved.connect(self._on_rows_moved)
        self.up.clicked.connect(lambda: self._move(-1))
        self.down.clicked.connect(lambda: self._move(+1))
        state.model_changed.connect(lambda _insp: self.refresh())
        state.plan_changed.connect(self._on_plan_changed)
        state.fusions_changed.connect(self._on_fusions_changed)

    def item(self, name: str) -> QListWidgetItem | None:
        for row in range(self.list.count()):
            it = self.list.item(row)
            if it.data(NameRole) == name:
                return it
        return None

    def order(self) -> list[str]:
        return [self.list.item(row).data(NameRole) for row in range(self.list.count())]

    def refresh(self) -> None:
        """Rebuild the rows from the state (order, enabled, counts)."""
        self._updating = True
        try:
            current = self.list.currentRow()
            self.list.clear()
            colours = style.family_colours(self.state.family_order)
            for name in self.state.family_order:
                shown = self.state.shown
                info = shown.info(name) if shown is not None else FamilyInfo(name)
                d = self.state.discovery(name)
                if d is not None:
                    classes = len({m.class_path or m.class_name for m in d.matches})
                    counts = (
                        f"{len(d.matches)} module(s) in {classes} class(es) matched, "
                        f"{len(d.rejected)} candidate(s) rejected"
                    )
                else:
                    counts = "no model open"
                item = QListWidgetItem(name)
                item.setData(NameRole, name)
                item.setData(CountsRole, counts)
                item.setData(DescriptionRole, info.description)
                item.setFlags(
                    Qt.ItemFlag.ItemIsEnabled
                    | Qt.ItemFlag.ItemIsSelectable
                    | Qt.ItemFlag.ItemIsUserCheckable
                    | Qt.ItemFlag.ItemIsDragEnabled
                )
                item.setCheckState(Qt.CheckState.Checked if name in self.state.enabled else Qt.CheckState.Unchecked)
                item.setIcon(style.fused_icon(colours[name]))
                item.setToolTip(plain_tip(family_tooltip(info, d)))
                self.list.addItem(item)
            if 0 <= current < self.list.count():
                self.list.setCurrentRow(current)
        finally:
            self._updating = False

    def _on_fusions_changed(self) -> None:
        checked = {n for n in self.order() if self.item(n).checkState() == Qt.CheckState.Checked}
        if self.order() != self.state.family_order or checked != self.state.enabled:
            self.refresh()

    def _on_item_changed(self, item: QListWidgetItem) -> None:
        if self._updating:
            return
        self.state.set_family_enabled(item.data(NameRole), item.checkState() == Qt.CheckState.Checked)

    def _on_rows_moved(self, *_args: object) -> None:
        if not self._updating:
            self.state.set_family_order(self.order())

    def _move(self, delta: int) -> None:
        row = self.list.currentRow()
        target = row + delta
        if row < 0 or not 0 <= target < self.list.count():
            return
        order = self.order()
        order.insert(target, order.pop(row))
        self.state.set_family_order(order)
        self.list.setCurrentRow(target)

    def _on_plan_changed(self, plan: object) -> None:
        if self.state.plan_error:
            self._show("error", f"These fusions cannot be applied together: {self.state.plan_error}")
        elif plan is not None and plan.messages:
            self._show("info", "\n".join(plan.messages))
        elif plan is not None and not self.state.enabled:
            self._show("info", "No fusion enabled: a fused load would be a plain load.")
        else:
            self.message.hide()

    def _show(self, role: str, text: str) -> None:
        self.message.setProperty("role", role)
        self.message.style().unpolish(self.message)
        self.message.style().polish(self.message)
        self.message.setText(text)
        self.message.show()
