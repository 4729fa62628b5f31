"""Patch mapping tab: original class -> fused class, with the module paths each one covers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHeaderView, QLabel, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from .. import style

if TYPE_CHECKING:
    from fusion_core import FusionPlan

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
        layout.addWidget(self.table, 1)
        self.table.itemClicked.connect(self._on_item_clicked)
        self.table.itemActivated.connect(self._on_item_clicked)
        state.plan_changed.connect(self._on_plan_changed)
        self._on_plan_changed(None)

    def _on_plan_changed(self, plan: FusionPlan | None) -> None:
        self.table.clear()
        if plan is None:
            self.summary.setText(self.state.plan_error or "Open a model to see its patch mapping.")
            self.summary.setProperty("role", "error" if self.state.plan_error else "info")
            self._repolish()
            return
        self.summary.setProperty("role", "info")
        self._repolish()
        colours = {name: style.family_colour(i) for i, name in enumerate(self.state.family_order)}
        count = 0
        for fam in plan.families:
            by_class: dict[type, list] = {}
            for m in fam.discovery.matches:
                by_class.setdefault(m.original_class, []).append(m)
            for original, matches in by_class.items():
                top = QTreeWidgetItem([original.__name__, matches[0].fused_class.__name__, fam.name, str(len(matches))])
                top.setToolTip(0, f"{original.__module__}.{original.__qualname__}")
                top.setIcon(0, style.fused_icon(colours.get(fam.name, style.family_colour(0)).name()))
                top.setTextAlignment(3, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                for m in matches:
                    child = QTreeWidgetItem([m.path, "", "", ""])
                    child.setData(0, PathRole, m.path)
                    child.setToolTip(0, f"click to select {m.path} in the tree")
                    child.setForeground(0, style.brush("#1565c0"))
                    top.addChild(child)
                self.table.addTopLevelItem(top)
                top.setExpanded(True)
                count += len(matches)
        classes = self.table.topLevelItemCount()
        if classes:
            self.summary.setText(
                f"{classes} class(es) patched, {count} module(s) replaced. "
                "Patching is scoped: the classes are swapped only while loading, and restored after."
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
            self.state.reveal(path)

    def rows(self) -> list[tuple[str, str, str, list[str]]]:
        """(original, fused, family, module paths) per row, as shown."""
        out = []
        for i in range(self.table.topLevelItemCount()):
            top = self.table.topLevelItem(i)
            paths = [top.child(j).text(0) for j in range(top.childCount())]
            out.append((top.text(0), top.text(1), top.text(2), paths))
        return out
