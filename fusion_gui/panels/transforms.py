"""Weight transforms tab: per fused module (collapsible), its checkpoint keys -> target keys and the op.

The tab follows the tree: selecting a module shows the transforms of that module, of
what is below it, or of the fused module it is part of. Group rows give the module path
(the tree's name), key rows the checkpoint's own key names; double-click either to select
the module in the tree. Keys are shortened without losing their layer index.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QGuiApplication, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from fusion_core.boundary.convert import to_plain

from .. import style
from ..format import in_scope, natural_key, plain_tip, printable, shape_text
from ..models.elide import KeyElideDelegate, core_width

if TYPE_CHECKING:
    from fusion_core.plan.plan_data import PlanData

    from ..state import AppState

RowRole = Qt.ItemDataRole.UserRole + 1  # the row dict (key rows)
ModuleRole = Qt.ItemDataRole.UserRole + 2  # the module path (both kinds of rows)

HEADERS = ("Module / checkpoint key", "Shape", "dtype", "Op", "Target key", "Target shape")
KEY_COLUMNS = (0, 4)


def _shape(row: dict[str, Any], key: str) -> str:
    # the core gives () for keys it could not find in the checkpoint (dtype "?"): unknown, not scalar
    return "?" if row.get("dtype") == "?" else shape_text(row.get(key))


class TransformsPanel(QWidget):
    """The plan's weight transforms, load (original -> fused) or save (fused -> original)."""

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.rows: list[dict[str, Any]] = []  # every row of the plan, with its "module"
        self._shown: list[dict[str, Any]] = []
        self.scope = ""
        self._dirty = False
        self._revealing = False
        self.model = QStandardItemModel(self)
        self.model.setHorizontalHeaderLabels(list(HEADERS))

        self.load_button = QRadioButton("Load: original → fused")
        self.save_button = QRadioButton("Save: fused → original")
        self.load_button.setChecked(True)
        self.direction_group = QButtonGroup(self)
        self.direction_group.addButton(self.load_button)
        self.direction_group.addButton(self.save_button)
        self.filter_edit = QLineEdit(placeholderText="Filter keys, modules, ops…")
        self.filter_edit.setClearButtonEnabled(True)
        self.follow_box = QCheckBox("Follow tree selection")
        self.follow_box.setChecked(True)
        self.follow_box.setToolTip("Show only the transforms of the module selected in the tree")
        self.copy_button = QPushButton("Copy as JSON")
        self.copy_button.setToolTip("Copy the rows shown (after the filters) to the clipboard as JSON")
        self.info = QLabel()
        self.info.setWordWrap(True)
        self.info.setProperty("role", "info")
        self.scope_label = QLabel()
        self.scope_label.setProperty("role", "hint")
        self.scope_label.setTextInteractionFlags(Qt.TextInteractionFlag.LinksAccessibleByMouse)
        self.scope_label.linkActivated.connect(lambda _link: self.set_scope(""))

        self.table = QTreeView()
        self.table.setModel(self.model)
        self.table.setUniformRowHeights(True)
        self.table.setAlternatingRowColors(True)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.table.setExpandsOnDoubleClick(False)
        for col in KEY_COLUMNS:
            self.table.setItemDelegateForColumn(col, KeyElideDelegate(self.table))
        header = self.table.header()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(False)

        bar = QHBoxLayout()
        bar.addWidget(self.load_button)
        bar.addWidget(self.save_button)
        bar.addSpacing(12)
        bar.addWidget(self.filter_edit, 1)
        bar.addWidget(self.copy_button)
        scope_row = QHBoxLayout()
        scope_row.addWidget(self.follow_box)
        scope_row.addWidget(self.scope_label, 1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.info)
        layout.addLayout(bar)
        layout.addLayout(scope_row)
        layout.addWidget(self.table, 1)

        self.load_button.toggled.connect(self._on_direction_toggled)
        self.filter_edit.textChanged.connect(lambda _t: self._rebuild())
        self.follow_box.toggled.connect(self._on_follow_toggled)
        self.copy_button.clicked.connect(self.copy_json)
        self.table.doubleClicked.connect(self._on_double_clicked)
        state.plan_changed.connect(self._on_plan_changed)
        state.module_selected.connect(self._on_module_selected)
        # another model: the previous one's module scope means nothing there (issue 33)
        state.model_changed.connect(lambda _inspection: self.set_scope(""))
        self._on_plan_changed(None)

    # scope (the tree's selection) ------------------------------------------------------
    def _on_module_selected(self, path: str) -> None:
        if self.follow_box.isChecked() and not self._revealing:
            self.set_scope(path)

    def _on_follow_toggled(self, on: bool) -> None:
        self.set_scope(self.state.selected_path if on else "")

    def set_scope(self, path: str) -> None:
        """Show the transforms of ``path`` ('' for all)."""
        if path == self.scope:
            return
        self.scope = path
        self._schedule()

    def _schedule(self) -> None:
        # a hidden tab rebuilds when shown: clicking through the tree stays cheap
        self._dirty = True
        if self.isVisible():
            self._rebuild()

    def showEvent(self, event) -> None:  # Qt override
        super().showEvent(event)
        if self._dirty:
            self._rebuild()
        elif self.model.rowCount():
            self._fit()  # the window may have been resized while the tab was hidden

    # plan -> rows ----------------------------------------------------------------------
    @property
    def direction(self) -> str:
        return "load" if self.load_button.isChecked() else "save"

    def _on_direction_toggled(self, _checked: bool) -> None:
        self._on_plan_changed(self.state.plan)

    def _on_plan_changed(self, plan: PlanData | None) -> None:
        if plan is None:
            self.rows = []
            self.info.setText(self.state.plan_error or "Open a model to see its weight transforms.")
            self._schedule()
            return
        # the rows as plan --json writes them, the module first, less which side the checkpoint holds
        rows = [{"module": r.module, **to_plain(r)} for r in plan.rows(self.direction)]
        for row in rows:
            del row["present"]
        self.rows = rows
        self.info.setText(self._info_text(plan, len(rows)))
        self._schedule()

    def _info_text(self, plan: PlanData, n: int) -> str:
        if not plan.has_checkpoint:
            text = (
                "<b>No checkpoint attached</b> (config-only source): these are the rules on the model's own "
                "parameter names, with shapes from the config."
            )
        else:
            insp = self.state.inspection
            files = max(insp.checkpoint_files, 0) if insp is not None else 0
            text = (
                f"Checkpoint layout: <b>{plan.checkpoint_layout}</b> ({files} file(s)). "
                f"{n} key(s) transformed; every other key is copied unchanged."
            )
            if plan.checkpoint_layout == "fused" and self.direction == "load":
                text += " The checkpoint is already fused: it loads as is."
            missing = plan.missing_transforms
            if missing:
                text += (
                    f"<br><span style='color:#b26a00'><b>{missing} transform(s)</b> name keys that were not found "
                    "in the checkpoint under these names (shapes shown as ?).</span>"
                )
        if not n:
            text += " Nothing to transform with the enabled fusions."
        return text

    def _rebuild(self) -> None:
        self._dirty = False
        needle = self.filter_edit.text().strip().lower()
        shown = [r for r in self.rows if in_scope(r["module"], self.scope) and _row_matches(r, needle)]
        groups: dict[str, list[dict[str, Any]]] = {}
        for row in shown:
            groups.setdefault(row["module"], []).append(row)
        order = sorted(groups, key=natural_key)
        self._shown = [row for module in order for row in groups[module]]
        colours = style.family_colours(self.state.family_order)
        self.model.removeRows(0, self.model.rowCount())
        bold = QFont(self.table.font())
        bold.setBold(True)
        root = self.model.invisibleRootItem()
        for module in order:
            rows = groups[module]
            family = rows[0].get("family", "")
            # one cell across the row: the module path is never cut for the columns' sake
            head = [QStandardItem(printable(f"{module}   ·  {len(rows)} key(s), {family}"))]
            head[0].setIcon(style.fused_icon(colours.get(family, style.FAMILY_COLOURS[0])))
            head[0].setFont(bold)
            head[0].setToolTip(plain_tip(f"module {module} ({family}); double-click to select it in the tree"))
            for item in head:
                item.setEditable(False)
                item.setData(module, ModuleRole)
            for row in rows:
                cells = [row["source_key"], _shape(row, "source_shape"), row.get("dtype", ""), row["op"],
                         row["target_key"], _shape(row, "target_shape")]  # fmt: skip
                items = [QStandardItem(printable(str(c))) for c in cells]
                for col, item in enumerate(items):
                    item.setEditable(False)
                    item.setData(module, ModuleRole)
                    item.setData(row, RowRole)
                    item.setToolTip(plain_tip(str(cells[col])) if col in KEY_COLUMNS else "")
                items[0].setToolTip(plain_tip(f"{row['source_key']}\nmodule: {module} ({family})"))
                head[0].appendRow(items)
            root.appendRow(head)
            self.table.setFirstColumnSpanned(root.rowCount() - 1, root.index(), True)
        self.table.expandAll()
        self._fit()
        self._update_scope_label(len(shown))

    def _update_scope_label(self, n: int) -> None:
        if not self.scope or not self.rows:
            self.scope_label.setText("")
            return
        total = len(self.rows)
        if n:
            text = f"Showing the {n} key(s) of <b>{self.scope}</b> (of {total}) · <a href='all'>show all</a>"
        else:
            text = f"Nothing is transformed in <b>{self.scope}</b> · <a href='all'>show all {total}</a>"
        self.scope_label.setText(text)

    def _fit(self) -> None:
        """Short columns fit their text; the two key columns share what is left, in proportion to
        their text, never narrower than their keys' cores (layer index and last two names): the
        columns scroll sideways instead, as 'mode….l….weig…' told no key from another."""
        header = self.table.header()
        fm = self.table.fontMetrics()
        for col in (1, 2, 3, 5):
            texts = [HEADERS[col]] + [_cell(row, col) for row in self._shown[:2000]]
            header.resizeSection(col, max(fm.horizontalAdvance(t) for t in texts) + 18)
        others = sum(header.sectionSize(c) for c in (1, 2, 3, 5))
        # the table's own width (its viewport's is stale while the tab is hidden), less a scroll bar
        bar = self.table.style().pixelMetric(self.table.style().PixelMetric.PM_ScrollBarExtent)
        room = self.table.width() - 2 * self.table.frameWidth() - bar - others - 2
        # the key rows sit one level below their module, itself one in (its branch arrow)
        indent = {0: 2 * self.table.indentation(), 4: 0}
        keys = {col: [_cell(row, col) for row in self._shown[:2000]] for col in KEY_COLUMNS}
        natural = {c: max((fm.horizontalAdvance(t) for t in keys[c]), default=0) + 18 + indent[c] for c in keys}
        core = {c: max(core_width(fm, keys[c]) + indent[c], 120) for c in keys}
        total = sum(natural.values())
        for col in KEY_COLUMNS:
            share = natural[col] + (room - total) * natural[col] // total if total else room // 2
            header.resizeSection(col, max(core[col], share))

    def resizeEvent(self, event) -> None:  # Qt override: the key columns share the new width
        super().resizeEvent(event)
        if self.model.rowCount():
            self._fit()

    def _on_double_clicked(self, index) -> None:
        module = index.data(ModuleRole)
        if module:
            self._revealing = True  # the tree follows us; we do not narrow to the row just clicked
            try:
                self.state.reveal(module)
            finally:
                self._revealing = False

    def visible_rows(self) -> list[dict[str, Any]]:
        """The rows shown (after the scope and the filter), grouped by module in natural order."""
        if self._dirty:
            self._rebuild()
        return [dict(row) for row in self._shown]

    def copy_json(self) -> str:
        """Copy the visible rows as JSON to the clipboard; returns the text."""
        text = json.dumps(
            {"model": self.state.spec, "direction": self.direction, "transforms": self.visible_rows()}, indent=2
        )
        QGuiApplication.clipboard().setText(text)
        return text


def _cell(row: dict[str, Any], col: int) -> str:
    if col in KEY_COLUMNS:  # as the key cells show them
        return printable(str(row["source_key" if col == 0 else "target_key"]))
    return {1: _shape(row, "source_shape"), 2: str(row.get("dtype", "")), 3: str(row.get("op", "")),
            5: _shape(row, "target_shape")}[col]  # fmt: skip


def _row_matches(row: dict[str, Any], needle: str) -> bool:
    if not needle:
        return True
    return any(needle in str(v).lower() for v in row.values())
