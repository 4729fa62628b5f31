"""Patch mapping tab: original class -> fused class, with the module paths each one covers.

Like the weight transforms, it follows the tree's selection (the fused modules in, above or
below the selected module); clicking a module path selects it in the tree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QHeaderView, QLabel, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from .. import style
from ..format import in_scope, natural_key, plain_tip, printable

if TYPE_CHECKING:
    from fusion_core.plan.plan_data import PlanData

    from ..state import AppState

PathRole = Qt.ItemDataRole.UserRole + 1


class MappingPanel(QWidget):
    """Class-level patch mapping; click a module path to select it in the tree."""

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setProperty("role", "info")
        self.scope = ""
        self._revealing = False
        self.follow_box = QCheckBox("Follow tree selection")
        self.follow_box.setChecked(True)
        self.follow_box.setToolTip("Show only the fused modules in, above or below the module selected in the tree")
        self.table = QTreeWidget()
        self.table.setColumnCount(4)
        self.table.setHeaderLabels(["Original class / module", "Fused class", "Family", "Modules"])
        self.table.setAlternatingRowColors(True)
        self.table.setUniformRowHeights(True)
        header = self.table.header()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in (1, 2, 3):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(False)
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(self.follow_box)
        layout.addWidget(self.table, 1)
        self.table.itemClicked.connect(self._on_item_clicked)
        self.table.itemActivated.connect(self._on_item_clicked)
        state.plan_changed.connect(self._on_plan_changed)
        state.module_selected.connect(self._on_module_selected)
        self.follow_box.toggled.connect(lambda on: self.set_scope(self.state.selected_path if on else ""))
        self._on_plan_changed(None)

    def _on_module_selected(self, path: str) -> None:
        if self.follow_box.isChecked() and not self._revealing:
            self.set_scope(path)

    def set_scope(self, path: str) -> None:
        """Show the mapping of the fused modules in, above or below ``path`` ('' for all)."""
        if path != self.scope:
            self.scope = path
            self._on_plan_changed(self.state.plan)

    def _on_plan_changed(self, plan: PlanData | None) -> None:
        self.table.clear()
        if plan is None:
            self.summary.setText(self.state.plan_error or "Open a model to see its patch mapping.")
            self.summary.setProperty("role", "error" if self.state.plan_error else "info")
            self._repolish()
            return
        self.summary.setProperty("role", "info")
        self._repolish()
        colours = style.family_colours(self.state.family_order)
        count = hidden = 0
        for fam in plan.families:
            by_class: dict[str, list] = {}
            for m in sorted(fam.matches, key=lambda m: natural_key(m.path)):
                if in_scope(m.path, self.scope):
                    by_class.setdefault(m.class_path or m.class_name, []).append(m)
                else:
                    hidden += 1
            for class_path, matches in by_class.items():
                first = matches[0]
                top = QTreeWidgetItem(
                    [printable(first.class_name), printable(first.fused_class_name), fam.name, str(len(matches))]
                )
                top.setToolTip(0, plain_tip(class_path))
                top.setIcon(0, style.fused_icon(colours.get(fam.name, style.FAMILY_COLOURS[0])))
                top.setTextAlignment(3, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                for m in matches:
                    child = QTreeWidgetItem([printable(m.path), "", "", ""])
                    child.setData(0, PathRole, m.path)
                    child.setToolTip(0, plain_tip(f"click to select {m.path} in the tree"))
                    child.setForeground(0, style.brush("#1565c0"))
                    top.addChild(child)
                self.table.addTopLevelItem(top)
                top.setExpanded(True)
                count += len(matches)
        classes = self.table.topLevelItemCount()
        if hidden and not classes:
            self.summary.setText(
                f"Nothing is patched in <b>{self.scope}</b> ({hidden} module(s) elsewhere: select the model's root, "
                "or untick Follow tree selection)."
            )
        elif classes:
            self.summary.setText(
                f"{classes} class(es) patched, {count} module(s) replaced. "
                "Patching is scoped: the classes are swapped only while loading, and restored after."
                + (f" Showing those in or around <b>{self.scope}</b>; {hidden} more elsewhere." if hidden else "")
            )
        elif not self.state.enabled:
            self.summary.setText("No fusion enabled: nothing is patched. Enable one in the Fusions tab.")
        else:
            self.summary.setText(" ".join(plan.messages) or "Nothing to patch for the enabled fusions.")

    def _repolish(self) -> None:
        self.summary.style().unpolish(self.summary)
        self.summary.style().polish(self.summary)

    def _on_item_clicked(self, item: QTreeWidgetItem, _column: int = 0) -> None:
        path = item.data(0, PathRole)
        if path:
            self._revealing = True  # the tree follows us; the mapping does not narrow to the row clicked
            try:
                self.state.reveal(path)
            finally:
                self._revealing = False

    def rows(self) -> list[tuple[str, str, str, list[str]]]:
        """(original, fused, family, module paths) per row, as shown."""
        out = []
        for i in range(self.table.topLevelItemCount()):
            top = self.table.topLevelItem(i)
            paths = [top.child(j).text(0) for j in range(top.childCount())]
            out.append((top.text(0), top.text(1), top.text(2), paths))
        return out
