"""A delegate that shortens dotted keys without hiding their layer index (see ``format.elide_dotted``)."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex
from PySide6.QtWidgets import QStyledItemDelegate, QStyleOptionViewItem

from ..format import elide_dotted


class KeyElideDelegate(QStyledItemDelegate):
    """Drops whole leading segments ('…layers.13.self_attn.q_proj.weight') instead of cutting the text."""

    def initStyleOption(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:
        super().initStyleOption(option, index)
        width = option.rect.width()
        if width <= 0 or not option.text:  # size hints: the full text
            return
        if option.features & QStyleOptionViewItem.ViewItemFeature.HasDecoration:
            width -= option.decorationSize.width() + 6
        room = width - 10
        fm = option.fontMetrics
        if fm.horizontalAdvance(option.text) > room:
            option.text = elide_dotted(option.text, room, fm.horizontalAdvance)
