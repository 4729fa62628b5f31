"""A delegate that shortens dotted keys without hiding their layer index (see ``format.elide_dotted``)."""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import QModelIndex, QPersistentModelIndex
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QStyledItemDelegate, QStyleOptionViewItem

from ..format import dotted_core, elide_dotted


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


def core_width(metrics: QFontMetrics, texts: Iterable[str], limit: int = 2000) -> int:
    """The width a :class:`KeyElideDelegate` column needs to show every text's core whole: its first
    segment(s), every layer index and its last two names (``model.….0.self_attn``; see ``dotted_core``)."""
    widths = [metrics.horizontalAdvance(dotted_core(str(t))) for t, _ in zip(texts, range(limit))]
    return max(widths, default=0) + PADDING


#: what the delegate keeps beside its text (it elides to the cell's width less 10), and 2 px to spare
PADDING = 12
