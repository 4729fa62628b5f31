"""The module tree panel: regex and state filters, lazy folded tree with highlights and checks, legend.

Keys as in Netron / Model Explorer: Ctrl+F filter, Enter or F3 next match (Shift+F3
previous), Esc clears, Ctrl+C copies the full path; a context menu links to the other tabs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QItemSelectionModel, QModelIndex, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QColor, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QProgressBar,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from .. import style
from ..models.tree_model import (
    CHECK,
    CLASS,
    DTYPE,
    INSTANCES,
    NAME,
    OWN,
    SHAPE,
    ModuleTreeModel,
    PathRole,
)
from .tree_parts import BadgeDelegate, EscapeFilter, ModuleTreeView

if TYPE_CHECKING:
    from fusion_core.model.tree import ModuleNode
    from fusion_core.plan.view import InspectionView

    from ..state import AppState


CHECK_STATES = {"checked", "failed"}  # filter states that only check results can satisfy
STATE_CHOICES = (
    ("All modules", ""),
    ("Fused", "is:fused"),
    ("Rejected", "is:rejected"),
    ("Candidates (fused or rejected)", "is:candidate"),
    ("Near misses (not a candidate)", "is:near"),
    ("Checked", "is:checked"),
    ("Failed checks", "is:failed"),
)


class TreePanel(QWidget):
    """Module tree with filters and highlights; reports the current module to the state."""

    filter_applied = Signal(str, int)  # text, number of matching modules

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.model = ModuleTreeModel(self)
        self._jump = -1
        self._hits: list[str] = []  # matches of the filter, in model order
        self._hit = -1

        self.filter_edit = QLineEdit(
            placeholderText="Filter: regex on path/class, is:fused, family:qkv, class:Linear  (Ctrl+F, Enter/F3 next)"
        )
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.setToolTip(
            "A regular expression searched in module paths, names and classes (layers.*mlp), plus terms:<br>"
            "<b>is:</b>fused | rejected | candidate | near | checked | failed, <b>family:</b>NAME, "
            "<b>class:</b>REGEX.<br>Enter or F3: next match, Shift+F3: previous, Esc: clear."
        )
        self.state_box = QComboBox()
        self.state_box.setToolTip("Show only modules in this state (with their ancestors)")
        self._fill_state_box()
        self.filter_count = QLabel("")
        self.filter_count.setProperty("role", "hint")
        self.fold_button = QToolButton(text="Fold repeats")
        self.fold_button.setCheckable(True)
        self.fold_button.setChecked(True)
        self.fold_button.setToolTip("Show consecutive identical layers as one row ('layers 0–31 ×32 (identical)')")
        self.expand_button = QToolButton(text="Expand to fusable")
        self.expand_button.setToolTip(
            "Expand the tree to each module the enabled fusions replace; press again for the next"
        )
        self.expand_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.expand_button.setIcon(style.contains_icon(style.MIXED))
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)
        self.busy.setMaximumHeight(6)
        self.busy.setTextVisible(False)
        self.busy.hide()
        self.placeholder = QLabel("Opening…")
        self.placeholder.setTextFormat(Qt.TextFormat.PlainText)  # it quotes the spec being opened
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setProperty("role", "hint")
        self.placeholder.hide()

        self.view = ModuleTreeView(self._expandable_below)
        self.view.setModel(self.model)
        self.view.setUniformRowHeights(True)
        # 16 px a level (not 20): a module seven levels down keeps its name and its marks at 1280x800
        self.view.setIndentation(16)
        self.view.setAlternatingRowColors(True)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setItemDelegateForColumn(NAME, BadgeDelegate(self.view))
        self.view.setExpandsOnDoubleClick(True)
        self.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        header = self.view.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        for col, width in enumerate((220, 200, 150, 66, 66, 60, 100, 64)):
            header.resizeSection(col, width)
        self.view.setColumnHidden(CHECK, True)
        for col in (OWN, DTYPE):  # rarely needed at first sight; the header's menu shows them
            self.view.setColumnHidden(col, True)
        header.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        header.customContextMenuRequested.connect(self._on_header_menu)
        self.copy_action = QAction("Copy path", self.view)
        self.copy_action.setShortcut(QKeySequence.StandardKey.Copy)
        self.copy_action.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
        self.copy_action.triggered.connect(lambda: self.copy_path())
        self.view.addAction(self.copy_action)

        self.legend = QHBoxLayout()
        self.legend.setSpacing(10)
        legend_box = QWidget()
        legend_box.setLayout(self.legend)
        # a long legend may be clipped, but never makes the window wider than the screen
        legend_box.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.filter_edit.setMinimumWidth(120)

        self.state_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.state_box.setMinimumContentsLength(12)
        top = QHBoxLayout()
        top.addWidget(self.filter_edit, 1)
        top.addWidget(self.state_box)
        tools = QHBoxLayout()
        tools.addWidget(self.fold_button)
        tools.addWidget(self.expand_button)
        tools.addWidget(self.filter_count, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addLayout(tools)
        layout.addWidget(self.busy)
        layout.addWidget(self.placeholder)
        layout.addWidget(self.view, 1)
        layout.addWidget(legend_box)

        self._filter_timer = QTimer(self, singleShot=True, interval=150)
        self._filter_timer.timeout.connect(self.apply_filter)
        self.filter_edit.textChanged.connect(self._on_text_changed)
        self.filter_edit.returnPressed.connect(self.next_match)
        self._esc = EscapeFilter(self.filter_edit, self.clear_filter)
        for keys, slot, what in (
            ("F3", self.next_match, "Next match (module tree)"),
            ("Shift+F3", self.previous_match, "Previous match (module tree)"),
        ):
            shortcut = QShortcut(QKeySequence(keys), self)
            shortcut.setWhatsThis(what)
            shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            shortcut.activated.connect(slot)
        self.state_box.currentIndexChanged.connect(lambda _i: self.apply_filter())
        self.fold_button.toggled.connect(self.set_folding)
        self.expand_button.clicked.connect(self.expand_to_fusable)
        self.view.customContextMenuRequested.connect(self._on_context_menu)
        self.view.selectionModel().currentRowChanged.connect(self._on_current_row_changed)
        state.model_changed.connect(self._on_model_changed)
        state.fusions_changed.connect(self._on_fusions_changed)
        state.reveal_requested.connect(self._on_reveal_requested)
        state.opening.connect(self._on_opening)
        state.job_ended.connect(self._on_job_ended)
        state.checks_finished.connect(self._on_checks_finished)
        state.checks_cleared.connect(lambda: self._on_checks_finished(None))
        state.adapter_changed.connect(lambda _a: self.model.set_adapter(state.adapter_badges()))
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

    def _on_model_changed(self, insp: InspectionView) -> None:
        self.placeholder.hide()
        self.view.show()
        self.model.set_tree(insp.tree)
        self._jump = -1
        self._on_fusions_changed()
        self._on_checks_finished(None)
        self._show_top_levels()
        if self.filter_edit.text() or self.state_box.currentIndex() > 0:
            self.apply_filter()
        self.view.setCurrentIndex(self.model.index(0, 0))

    def _show_top_levels(self) -> None:
        # the first two levels: the tower / language model split is what users look for
        tree = self.model.tree
        if tree is None:
            return
        for child in tree.root.children:
            for grandchild in child.children[:1]:
                self.model.ensure_fetched(grandchild.path)
        self.view.expand(self.model.index(0, 0))
        for child in tree.root.children:
            if child.children:
                self.view.expand(self.view_index(child.path))
        from fusion_core.model.tree import repeat_runs  # the engine is loaded: a model is open

        # the layer lists near the top show their folds ("layers 0–31 ×32 (identical)") at once
        if self.model.folding:
            for node in tree.root.walk():
                if node.kind == "container" and node.path.count(".") <= 2 and repeat_runs(node.children):
                    self.model.ensure_fetched(node.children[0].path)  # the fold row exists, closed
                    self._expand_ancestors(node.path)
                    self.view.expand(self.view_index(node.path))

    def _on_fusions_changed(self) -> None:
        h = self.state.highlights()
        colours = {n: QColor(c) for n, c in style.family_colours(self.state.family_order).items()}
        self.model.set_highlights(h.matched, h.rejected, colours, h.fused_names, h.near)
        self._jump = -1
        self._fill_state_box()
        self._update_legend()
        if self.model.node_filter:
            self.apply_filter()  # state filters follow the highlights
        else:
            self.filter_count.setText("")  # a "fusable 1 of 3" from before would be stale

    def _on_checks_finished(self, result: object) -> None:
        self.model.set_checks(result)
        has = bool(self.model.overlay.scores)
        self.view.setColumnHidden(CHECK, not has)
        if has:
            self.fit_columns()
        elif set(self.model.node_filter.states) & CHECK_STATES:
            self._drop_check_terms()

    def _drop_check_terms(self) -> None:
        """The check results are gone: a filter on them (is:checked, is:failed) would hide every row."""
        terms = [t for t in self.filter_edit.text().split() if t.lower() not in {f"is:{s}" for s in CHECK_STATES}]
        self.filter_edit.blockSignals(True)
        self.filter_edit.setText(" ".join(terms))
        self.filter_edit.blockSignals(False)
        if (self.state_box.currentData() or "").removeprefix("is:") in CHECK_STATES:
            self.state_box.blockSignals(True)
            self.state_box.setCurrentIndex(0)
            self.state_box.blockSignals(False)
        self.apply_filter()

    def _fill_state_box(self) -> None:
        current = self.state_box.currentData() or ""
        self.state_box.blockSignals(True)
        self.state_box.clear()
        for text, data in STATE_CHOICES:
            self.state_box.addItem(text, data)
        colours = style.family_colours(self.state.family_order)
        for name in self.state.family_order:
            self.state_box.addItem(style.fused_icon(colours[name]), f"Family: {name}", f"family:{name}")
        i = self.state_box.findData(current)
        self.state_box.setCurrentIndex(max(i, 0))
        self.state_box.blockSignals(False)

    def set_state_filter(self, term: str) -> None:
        """Choose a state filter by its term ('' | 'is:fused' | 'family:qkv' ...) and apply it."""
        i = self.state_box.findData(term)
        if i < 0:
            raise ValueError(f"no such state filter: {term!r}")
        self.state_box.setCurrentIndex(i)
        self.apply_filter()

    def _update_legend(self) -> None:
        """The legend under the tree: each family with matches in its colour, rejected, fusable below."""
        layout = self.legend
        while layout.count():
            item = layout.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        h = self.state.highlights()
        colours = style.family_colours(self.state.family_order)

        def add(icon, text: str, tip: str) -> None:
            pic = QLabel()
            pic.setPixmap(icon.pixmap(14, 14))
            label = QLabel(text)
            label.setToolTip(tip)
            pic.setToolTip(tip)
            layout.addWidget(pic)
            layout.addWidget(label)

        enabled = [n for n in self.state.family_order if n in self.state.enabled]
        # only families with matches: the others mark nothing (their counts are in the Fusions tab)
        for name in enabled:
            n = sum(1 for f in h.matched.values() if f == name)
            if n:
                add(
                    style.fused_icon(colours[name]), f"{name} ({n})", f"modules {name} replaces (its colour everywhere)"
                )
        if h.rejected:
            tip = "candidates not fused; the reason is in the tooltip"
            add(style.rejected_icon(), f"rejected ({len(h.rejected)})", tip)
        if h.matched:
            add(style.contains_icon(style.MIXED), "contains fusable", "the number of fusable modules below")
        hint = "" if h.matched else ("nothing to fuse with the enabled fusions" if enabled else "no fusion enabled")
        if hint:
            label = QLabel(f"{hint} (Fusions tab)")
            label.setProperty("role", "hint")
            layout.addWidget(label)
        layout.addStretch(1)

    # filter ----------------------------------------------------------------------------
    def _on_text_changed(self, _text: str) -> None:
        self._filter_timer.start()

    def apply_filter(self) -> int:
        """Apply the filter box and the state box now; returns the number of matching modules."""
        self._filter_timer.stop()
        text = self.filter_edit.text()
        term = self.state_box.currentData() or ""
        hits = self.model.set_needle(text, term)  # the rows of the hits' ancestors are created
        node_filter = self.model.node_filter
        self._hits, self._hit = [n.path for n in hits], -1
        if self.model.tree is None or not node_filter:
            self.filter_count.setText("")
            self.filter_applied.emit(text, 0)
            return 0
        self._expand_to(hits[:2000])  # beyond that, expanding costs more than it shows
        error = node_filter.error
        count = f"{len(hits)} match{'es' if len(hits) != 1 else ''}"
        self.filter_count.setText(f"{count} (literal)" if error else count)
        self.filter_count.setToolTip(error)
        if hits:
            self.view.scrollTo(self.view_index(hits[0].path))
        self.filter_applied.emit(text, len(hits))
        return len(hits)

    def next_match(self, step: int = 1) -> str:
        """Select the next match of the filter (Enter, F3); returns its path ('' if none)."""
        if self._filter_timer.isActive() or not self._hits:
            self.apply_filter()
        if not self._hits:
            return ""
        self._hit = (self._hit + step) % len(self._hits)
        path = self._hits[self._hit]
        self.select_path(path)
        self.filter_count.setText(f"match {self._hit + 1} of {len(self._hits)}")
        return path

    def previous_match(self) -> str:
        return self.next_match(-1)

    def clear_filter(self) -> None:
        """Esc: clear the text and the state filter, keep the current module in view."""
        current = self.current_path()
        self.filter_edit.clear()
        self.state_box.setCurrentIndex(0)
        self.apply_filter()
        if current:
            self.select_path(current)

    def focus_filter(self) -> None:
        self.filter_edit.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.filter_edit.selectAll()

    def set_folding(self, on: bool) -> None:
        current = self.current_path()
        self.fold_button.setChecked(on)
        self.model.set_folding(on)
        self._show_top_levels()
        if self.model.node_filter:
            self.apply_filter()
        if current and self.select_path(current):
            self.view.expand(self.view.currentIndex())  # where the user was: open, as the fold was

    # navigation ------------------------------------------------------------------------
    @property
    def proxy(self) -> ModuleTreeModel:
        """The model the view shows (it filters itself; the name is kept for older callers)."""
        return self.model

    def view_index(self, path: str, column: int = 0) -> QModelIndex:
        """The view index of ``path`` (fetching its ancestors); invalid if filtered out."""
        return self.model.index_for_path(path, column)

    def _expand_to(self, nodes: list[ModuleNode]) -> None:
        """Expand the rows above each of ``nodes`` (folds included), laying the view out once."""
        items: dict[int, object] = {}
        for node in nodes:
            child, up = node, node.parent
            while up is not None:
                fold = self.model.fold_of(child)
                if fold is not None:
                    items.setdefault(id(fold), fold)
                if id(up) in items:
                    break
                items[id(up)] = up
                child, up = up, up.parent
        # with a layout pending, expand() only records the row: one layout for them all
        self.view.scheduleDelayedItemsLayout()
        for item in items.values():
            self.view.expand(self.model.index_for_item(item))

    def _expandable_below(self, index: QModelIndex) -> list[QModelIndex]:
        """Create every row below a view row (the whole tree for an invalid one) in one go;
        returns the view indexes of those with children, the row itself included."""
        tree = self.model.tree
        if tree is None:
            return []
        item = self.model.item(index) if index.isValid() else tree.root
        if item is None:
            return []
        self.model.fetch_below(item)
        rows = [self.model.index_for_item(i) for i in self.model.parents_below(item)]
        return [r for r in rows if r.isValid()]

    def _expand_ancestors(self, path: str) -> None:
        index = self.view_index(path).parent()
        chain = []
        while index.isValid():
            chain.append(index)
            index = index.parent()
        for index in reversed(chain):
            if not self.view.isExpanded(index):
                self.view.expand(index)

    def select_path(self, path: str) -> bool:
        """Show and select ``path`` (clearing a filter that hides it)."""
        if self.model.tree is None or path not in self.model.tree.by_path:
            return False
        index = self.view_index(path)
        if not index.isValid() and self.model.node_filter:
            self.filter_edit.clear()
            self.state_box.setCurrentIndex(0)
            self.apply_filter()
            index = self.view_index(path)
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

    def expand_all_below(self, index: QModelIndex | None = None) -> int:
        """Expand every row below ``index`` (default: the current row), folds included."""
        index = index if index is not None else self.view.currentIndex()
        item = self.model.item(index)
        if item is None:
            return 0
        nodes = [n for top in getattr(item, "nodes", [item]) for n in top.walk()]
        self.view.expandRecursively(index)  # the view creates the rows below in one go
        return len(nodes)

    def current_path(self) -> str:
        index = self.view.currentIndex()
        return index.data(PathRole) or "" if index.isValid() else ""

    def copy_path(self, index: QModelIndex | None = None) -> str:
        """Copy the full dotted path of the current (or given) row; returns it."""
        index = index if index is not None else self.view.currentIndex()
        path = index.data(PathRole) if index.isValid() else None
        if path is None:
            return ""
        QGuiApplication.clipboard().setText(path)
        return path

    def _on_current_row_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        if current.isValid():
            path = current.data(PathRole)
            if path is not None:
                self.state.select_module(path)

    def context_menu(self, index: QModelIndex) -> QMenu:
        """The row's menu: copy path, show transforms / in mapping, check this module, expand all below."""
        path = index.data(PathRole) or ""
        menu = QMenu(self)
        menu.setToolTipsVisible(True)
        ov = self.model.overlay
        within = [p for p in ov.matched if p == path or p.startswith(f"{path}.") or not path]
        nothing = "" if within else "nothing is fused here with the enabled fusions"
        menu.addAction(f"Copy path  ({path or 'root'})", lambda: self.copy_path(index))
        menu.addSeparator()
        for text, tab in (("Show transforms", "transforms"), ("Show in mapping", "mapping")):
            action = menu.addAction(text, lambda t=tab: self.show_in(path, t))
            action.setEnabled(not nothing)
            action.setToolTip(nothing or f"{text.lower()} of {path or 'the model'}")
        checked = [p for p in ov.scores if p == path or p.startswith(f"{path}.") or not path]
        reason = self.state.check_blocker() if within and not checked else nothing
        action = menu.addAction(
            "Check this module" if not checked else "Show its check results", lambda: self.state.check_module(path)
        )
        action.setEnabled(not reason)
        action.setToolTip(reason or ("select its results in Checks" if checked else "run the checks, then show it"))
        menu.addSeparator()
        menu.addAction("Expand all below", lambda: self.expand_all_below(index))
        menu.addAction("Collapse", lambda: self.view.collapse(index))
        return menu

    def header_menu(self) -> QMenu:
        """Show or hide the tree's columns."""
        menu = QMenu(self)
        for col in range(1, self.model.columnCount()):
            if col == CHECK and not self.model.overlay.scores:
                continue
            action = menu.addAction(self.model.headerData(col, Qt.Orientation.Horizontal))
            action.setCheckable(True)
            action.setChecked(not self.view.isColumnHidden(col))
            action.toggled.connect(lambda on, c=col: (self.view.setColumnHidden(c, not on), self.fit_columns()))
        return menu

    def _on_header_menu(self, pos) -> None:
        self.header_menu().popup(self.view.header().mapToGlobal(pos))

    def show_in(self, path: str, tab: str) -> None:
        """Select ``path`` and show it in a tab (transforms, mapping)."""
        self.state.select_module(path)
        self.state.tab_requested.emit(tab)

    def _on_context_menu(self, pos) -> None:
        index = self.view.indexAt(pos)
        if index.isValid():
            self.context_menu(index.siblingAtColumn(0)).popup(self.view.viewport().mapToGlobal(pos))

    def fit_columns(self) -> None:
        """Fit class and shape to their text; the name column takes the rest of the width."""
        header = self.view.header()
        # room for the vertical scroll bar that appears as rows are expanded
        bar = self.view.style().pixelMetric(self.view.style().PixelMetric.PM_ScrollBarExtent)
        width = self.view.width() - 2 * self.view.frameWidth() - bar
        for col in (CLASS, SHAPE):
            self.view.resizeColumnToContents(col)
        header.resizeSection(SHAPE, min(max(header.sectionSize(SHAPE), 90), 150))
        header.resizeSection(
            CLASS,
            min(
                max(header.sectionSize(CLASS) + 8, 140),
                int(width * (0.19 if self.view.isColumnHidden(CHECK) else 0.15)),
            ),
        )
        header.resizeSection(INSTANCES, self.view.fontMetrics().horizontalAdvance("Instances") + 16)
        if not self.view.isColumnHidden(CHECK):
            self.view.resizeColumnToContents(CHECK)
            header.resizeSection(CHECK, min(max(header.sectionSize(CHECK), 110), 190))
        shown = [c for c in range(header.count()) if c != NAME and not self.view.isColumnHidden(c)]
        # too wide for the pane (the Check column on): Check, then Class, give way down to their
        # floors before the last columns go past the right edge
        for col, floor in ((CHECK, 110), (CLASS, 100)):
            excess = sum(header.sectionSize(c) for c in shown) + 240 + 2 - width
            if excess > 0 and col in shown:
                header.resizeSection(col, max(floor, header.sectionSize(col) - excess))
        others = sum(header.sectionSize(c) for c in shown)
        header.resizeSection(NAME, max(width - others - 2, 240))

    def resizeEvent(self, event) -> None:  # Qt override: keep the columns within the width
        super().resizeEvent(event)
        if self.model.tree is not None:
            self.fit_columns()
