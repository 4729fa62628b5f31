"""The module tree panel: filter box, lazy tree with fusion highlights, legend, "Expand to fusable"."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QItemSelectionModel, QModelIndex, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFontMetrics, QPainter
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QSizePolicy,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QToolButton,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from .. import style
from ..models.tree_model import (
    CLASS,
    NAME,
    SHAPE,
    ColourRole,
    CountRole,
    ModuleFilterProxy,
    ModuleTreeModel,
    StatusRole,
)

if TYPE_CHECKING:
    from fusion_core import Inspection

    from ..state import AppState


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
        painter.setPen(QColor("white"))
        painter.drawText(pill, Qt.AlignmentFlag.AlignCenter, text)
        painter.restore()


class TreePanel(QWidget):
    """Module tree with filter and highlights; reports the current module to the state."""

    filter_applied = Signal(str, int)  # text, number of matching modules

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.model = ModuleTreeModel(self)
        self.proxy = ModuleFilterProxy(self)
        self.proxy.setSourceModel(self.model)
        self._jump = -1

        self.filter_edit = QLineEdit(placeholderText="Filter modules by name or class  (Ctrl+F)")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_count = QLabel("")
        self.filter_count.setProperty("role", "hint")
        self.expand_button = QToolButton(text="Expand to fusable")
        self.expand_button.setToolTip(
            "Expand the tree to each module the enabled fusions replace; press again for the next"
        )
        self.expand_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.expand_button.setIcon(style.fused_icon(style.FAMILY_COLOURS[0]))
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)
        self.busy.setMaximumHeight(6)
        self.busy.setTextVisible(False)
        self.busy.hide()
        self.placeholder = QLabel("Opening…")
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setProperty("role", "hint")
        self.placeholder.hide()

        self.view = QTreeView()
        self.view.setModel(self.proxy)
        self.view.setUniformRowHeights(True)
        self.view.setAlternatingRowColors(True)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setItemDelegateForColumn(NAME, BadgeDelegate(self.view))
        self.view.setExpandsOnDoubleClick(True)
        header = self.view.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        for col, width in enumerate((220, 200, 66, 60, 100, 64)):
            header.resizeSection(col, width)

        self.legend = QHBoxLayout()
        self.legend.setSpacing(10)
        legend_box = QWidget()
        legend_box.setLayout(self.legend)
        # a long legend may be clipped, but never makes the window wider than the screen
        legend_box.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.filter_edit.setMinimumWidth(120)

        top = QHBoxLayout()
        top.addWidget(self.filter_edit, 1)
        top.addWidget(self.filter_count)
        top.addWidget(self.expand_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.busy)
        layout.addWidget(self.placeholder)
        layout.addWidget(self.view, 1)
        layout.addWidget(legend_box)

        self._filter_timer = QTimer(self, singleShot=True, interval=150)
        self._filter_timer.timeout.connect(self.apply_filter)
        self.filter_edit.textChanged.connect(self._on_text_changed)
        self.expand_button.clicked.connect(self.expand_to_fusable)
        self.view.selectionModel().currentRowChanged.connect(self._on_current_row_changed)
        state.model_changed.connect(self._on_model_changed)
        state.fusions_changed.connect(self._on_fusions_changed)
        state.reveal_requested.connect(self._on_reveal_requested)
        state.opening.connect(self._on_opening)
        state.job_ended.connect(self._on_job_ended)
        self._update_legend()

    # state -> view ---------------------------------------------------------------------
    def _on_opening(self, spec: str) -> None:
        self.busy.show()
        if self.model.tree is None:
            self.placeholder.setText(f"Opening {spec}…")
            self.placeholder.show()
            self.view.hide()

    def _on_job_ended(self, name: str, outcome: str, message: str) -> None:
        if name == "open":
            self.busy.hide()
            if self.model.tree is None and outcome != "ok":
                self.placeholder.setText("No model open. Use File ▸ Open (Ctrl+O) or drop a model folder here.")

    def _on_model_changed(self, insp: Inspection) -> None:
        self.placeholder.hide()
        self.view.show()
        self.model.set_tree(insp.tree)
        self._jump = -1
        self._on_fusions_changed()
        # the first two levels: the tower / language model split is what users look for
        tree = insp.tree
        for child in tree.root.children:
            for grandchild in child.children[:1]:
                self.model.ensure_fetched(grandchild.path)
        root = self.proxy.index(0, 0)
        self.view.expand(root)
        for child in tree.root.children:
            if child.children:
                self.view.expand(self.proxy_index(child.path))
        if self.filter_edit.text():
            self.apply_filter()
        self.view.setCurrentIndex(root)

    def _on_fusions_changed(self) -> None:
        matched, rejected = self.state.highlights()
        colours = {name: style.family_colour(i) for i, name in enumerate(self.state.family_order)}
        fused_names = {}
        if self.state.inspection is not None:
            for name in self.state.enabled:
                for m in self.state.inspection.discovery(name).matches:
                    fused_names[m.path] = m.fused_class.__name__
        self.model.set_highlights(matched, rejected, colours, fused_names)
        self._jump = -1
        self._update_legend()

    def _update_legend(self) -> None:
        while self.legend.count():
            item = self.legend.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        enabled = [n for n in self.state.family_order if n in self.state.enabled]
        matched, rejected = self.state.highlights()

        def add(icon, text: str, tip: str) -> None:
            pic = QLabel()
            pic.setPixmap(icon.pixmap(14, 14))
            label = QLabel(text)
            label.setToolTip(tip)
            pic.setToolTip(tip)
            self.legend.addWidget(pic)
            self.legend.addWidget(label)

        # only families with matches: the others mark nothing in the tree (their counts are in the Fusions tab)
        for i, name in enumerate(self.state.family_order):
            n = sum(1 for f in matched.values() if f == name)
            if name in enabled and n:
                colour = style.FAMILY_COLOURS[i % len(style.FAMILY_COLOURS)]
                add(style.fused_icon(colour), f"{name} ({n})", f"modules {name} replaces")
        add(style.rejected_icon(), f"rejected ({len(rejected)})", "candidates not fused; the reason is in the tooltip")
        if matched:
            add(style.contains_icon(style.FAMILY_COLOURS[0]), "contains fusable", "the number of fusable modules below")
        hint = "" if matched else ("nothing to fuse with the enabled fusions" if enabled else "no fusion enabled")
        if hint:
            label = QLabel(f"{hint} (Fusions tab)")
            label.setProperty("role", "hint")
            self.legend.addWidget(label)
        self.legend.addStretch(1)

    # filter ----------------------------------------------------------------------------
    def _on_text_changed(self, _text: str) -> None:
        self._filter_timer.start()

    def apply_filter(self) -> int:
        """Apply the filter box now; returns the number of matching modules."""
        self._filter_timer.stop()
        text = self.filter_edit.text()
        tree = self.model.tree
        self.proxy.set_needle(text)
        if tree is None or not self.proxy.needle:
            self.filter_count.setText("")
            self.filter_applied.emit(text, 0)
            return 0
        hits = [n for n in tree.by_path.values() if self.proxy.matches(n)]
        # rows below unexpanded nodes do not exist yet: create the ancestors of each hit
        for node in hits:
            self.model.ensure_fetched(node.path)
        self.proxy.set_needle(text)
        for node in hits:
            self._expand_ancestors(node.path)
        self.filter_count.setText(f"{len(hits)} match{'es' if len(hits) != 1 else ''}")
        if hits:
            self.view.scrollTo(self.proxy_index(hits[0].path))
        self.filter_applied.emit(text, len(hits))
        return len(hits)

    def focus_filter(self) -> None:
        self.filter_edit.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.filter_edit.selectAll()

    # navigation ------------------------------------------------------------------------
    def proxy_index(self, path: str, column: int = 0) -> QModelIndex:
        """The view index of ``path`` (fetching its ancestors); invalid if filtered out."""
        return self.proxy.mapFromSource(self.model.index_for_path(path, column))

    def _expand_ancestors(self, path: str) -> None:
        node = self.model.tree.by_path[path].parent if self.model.tree else None
        chain = []
        while node is not None:
            chain.append(node.path)
            node = node.parent
        for p in reversed(chain):
            index = self.proxy_index(p)
            if index.isValid() and not self.view.isExpanded(index):
                self.view.expand(index)

    def select_path(self, path: str) -> bool:
        """Show and select ``path`` (clearing a filter that hides it)."""
        if self.model.tree is None or path not in self.model.tree.by_path:
            return False
        index = self.proxy_index(path)
        if not index.isValid() and self.proxy.needle:
            self.filter_edit.clear()
            self.apply_filter()
            index = self.proxy_index(path)
        if not index.isValid():
            return False
        self._expand_ancestors(path)
        self.view.selectionModel().setCurrentIndex(
            index, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
        )
        self.view.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtCenter)
        return True

    def _on_reveal_requested(self, path: str) -> None:
        self.select_path(path)

    def expand_to_fusable(self) -> str:
        """Expand to every fusable module and select the next one; returns its path ('' if none)."""
        paths = self.model.matched_paths()
        if not paths:
            self.filter_count.setText("nothing to fuse")
            return ""
        for path in paths:
            self.model.ensure_fetched(path)
            self._expand_ancestors(path)
        self._jump = (self._jump + 1) % len(paths)
        path = paths[self._jump]
        self.select_path(path)
        self.filter_count.setText(f"fusable {self._jump + 1} of {len(paths)}")
        return path

    def current_path(self) -> str:
        index = self.view.currentIndex()
        return self.proxy.mapToSource(index).internalPointer().path if index.isValid() else ""

    def _on_current_row_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        if current.isValid():
            node = self.proxy.mapToSource(current).internalPointer()
            if node is not None:
                self.state.select_module(node.path)

    def fit_columns(self) -> None:
        """Fit class and shape to their text; the name column takes the rest of the width."""
        header = self.view.header()
        width = self.view.viewport().width()
        for col in (CLASS, SHAPE):
            self.view.resizeColumnToContents(col)
        header.resizeSection(SHAPE, min(max(header.sectionSize(SHAPE), 90), 150))
        header.resizeSection(CLASS, min(max(header.sectionSize(CLASS) + 8, 140), int(width * 0.3)))
        others = sum(header.sectionSize(c) for c in range(header.count()) if c != NAME)
        header.resizeSection(NAME, max(width - others - 2, 200))

    def resizeEvent(self, event) -> None:  # Qt override: keep the columns within the width
        super().resizeEvent(event)
        if self.model.tree is not None:
            self.fit_columns()
