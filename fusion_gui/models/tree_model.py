"""The module tree as a lazy Qt item model, and its filter proxy.

:class:`ModuleTreeModel` is a thin adapter over the core's :class:`ModuleTree`: an index
points at its :class:`ModuleNode`, and a node's children become rows only when the view
expands it (``canFetchMore``/``fetchMore``), so a model with 10,000+ modules opens at
once. Highlights (modules a family replaces, rejected candidates, counts on ancestors)
are looked up per row from dictionaries set by the tree panel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import (
    QAbstractItemModel,
    QModelIndex,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
)
from PySide6.QtGui import QColor, QFont

from .. import style
from ..format import human_count, shape_text

if TYPE_CHECKING:
    from fusion_core import ModuleNode, ModuleTree

Index = QModelIndex | QPersistentModelIndex

PathRole = Qt.ItemDataRole.UserRole + 1
StatusRole = Qt.ItemDataRole.UserRole + 2  # "matched" | "rejected" | ""
CountRole = Qt.ItemDataRole.UserRole + 3  # number of matched modules strictly below
FamilyRole = Qt.ItemDataRole.UserRole + 4
ColourRole = Qt.ItemDataRole.UserRole + 5  # the family colour (for the count badge)

COLUMNS = ("Module", "Class", "Params", "Own", "Weight shape", "dtype")
NAME, CLASS, PARAMS, OWN, SHAPE, DTYPE = range(len(COLUMNS))


class ModuleTreeModel(QAbstractItemModel):
    """Lazy tree model over a :class:`ModuleTree` (the root module is the one top row)."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._tree: ModuleTree | None = None
        self._fetched: dict[int, ModuleNode] = {}  # id() -> node, for nodes whose children are rows
        self._row: dict[int, int] = {}  # id(node) -> row under its parent
        self._matched: dict[str, str] = {}
        self._rejected: dict[str, tuple[str, str]] = {}
        self._counts: dict[str, int] = {}
        self._colours: dict[str, QColor] = {}
        self._fused_names: dict[str, str] = {}
        self._bold = QFont()
        self._bold.setBold(True)

    # data management -------------------------------------------------------------------
    @property
    def tree(self) -> ModuleTree | None:
        return self._tree

    def set_tree(self, tree: ModuleTree | None) -> None:
        self.beginResetModel()
        self._tree = tree
        self._fetched = {}
        self._row = {id(tree.root): 0} if tree is not None else {}
        self._matched, self._rejected, self._counts, self._fused_names = {}, {}, {}, {}
        self.endResetModel()

    def set_highlights(
        self,
        matched: dict[str, str],
        rejected: dict[str, tuple[str, str]],
        colours: dict[str, QColor],
        fused_names: dict[str, str] | None = None,
    ) -> None:
        """Mark modules: ``matched`` path -> family, ``rejected`` path -> (family, reason).

        Args:
            matched: modules the enabled families replace.
            rejected: candidates they do not replace, with the reason.
            colours: family -> colour.
            fused_names: path -> fused class name (shown in the tooltip).
        """
        self._matched, self._rejected, self._colours = dict(matched), dict(rejected), dict(colours)
        self._fused_names = dict(fused_names or {})
        counts: dict[str, int] = {}
        for path in matched:
            while path:
                path = path.rsplit(".", 1)[0] if "." in path else ""
                counts[path] = counts.get(path, 0) + 1
        self._counts = counts
        self._refresh_all()

    def matched_paths(self) -> list[str]:
        return list(self._matched)

    def _refresh_all(self) -> None:
        if self._tree is None:
            return
        last = self.columnCount() - 1
        self.dataChanged.emit(self.index(0, 0), self.index(0, last))
        for node in list(self._fetched.values()):
            parent = self.index_for_node(node)
            self.dataChanged.emit(self.index(0, 0, parent), self.index(len(node.children) - 1, last, parent))

    def ensure_fetched(self, path: str) -> bool:
        """Make ``path`` and its ancestors rows (fetching lazily created children)."""
        if self._tree is None or path not in self._tree.by_path:
            return False
        chain = []
        node = self._tree.by_path[path].parent
        while node is not None:
            chain.append(node)
            node = node.parent
        for node in reversed(chain):
            if id(node) not in self._fetched:
                self.fetchMore(self.index_for_node(node))
        return True

    def node(self, index: Index) -> ModuleNode | None:
        return index.internalPointer() if index.isValid() else None

    def index_for_node(self, node: ModuleNode, column: int = 0) -> QModelIndex:
        """The index of ``node`` (its ancestors must be fetched; see :meth:`ensure_fetched`)."""
        row = self._row.get(id(node))
        if row is None:
            return QModelIndex()
        return self.createIndex(row, column, node)

    def index_for_path(self, path: str, column: int = 0) -> QModelIndex:
        if self._tree is None or not self.ensure_fetched(path):
            return QModelIndex()
        return self.index_for_node(self._tree.by_path[path], column)

    # Qt model API ----------------------------------------------------------------------
    def index(self, row: int, column: int, parent: Index = QModelIndex()) -> QModelIndex:  # noqa: B008
        if self._tree is None or column < 0 or column >= len(COLUMNS) or row < 0:
            return QModelIndex()
        if not parent.isValid():
            return self.createIndex(row, column, self._tree.root) if row == 0 else QModelIndex()
        node: ModuleNode = parent.internalPointer()
        if id(node) not in self._fetched or row >= len(node.children):
            return QModelIndex()
        return self.createIndex(row, column, node.children[row])

    def parent(self, index: Index = QModelIndex()) -> QModelIndex:  # type: ignore[override]  # noqa: B008
        if not index.isValid():
            return QModelIndex()
        node: ModuleNode = index.internalPointer()
        if node.parent is None:
            return QModelIndex()
        return self.createIndex(self._row.get(id(node.parent), 0), 0, node.parent)

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        if self._tree is None:
            return 0
        if not parent.isValid():
            return 1
        if parent.column() > 0:
            return 0
        node: ModuleNode = parent.internalPointer()
        return len(node.children) if id(node) in self._fetched else 0

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return len(COLUMNS)

    def hasChildren(self, parent: Index = QModelIndex()) -> bool:  # noqa: B008
        if self._tree is None:
            return False
        if not parent.isValid():
            return True
        if parent.column() > 0:
            return False
        return bool(parent.internalPointer().children)

    def canFetchMore(self, parent: Index) -> bool:
        if self._tree is None or not parent.isValid() or parent.column() > 0:
            return False
        node: ModuleNode = parent.internalPointer()
        return bool(node.children) and id(node) not in self._fetched

    def fetchMore(self, parent: Index) -> None:
        if not self.canFetchMore(parent):
            return
        node: ModuleNode = parent.internalPointer()
        self.beginInsertRows(
            parent if isinstance(parent, QModelIndex) else QModelIndex(parent), 0, len(node.children) - 1
        )
        for i, child in enumerate(node.children):
            self._row[id(child)] = i
        self._fetched[id(node)] = node
        self.endInsertRows()

    def fetched_count(self) -> int:
        """How many nodes have their children as rows (for tests of laziness)."""
        return len(self._fetched)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and 0 <= section < len(COLUMNS):
            if role == Qt.ItemDataRole.DisplayRole:
                return COLUMNS[section]
            if role == Qt.ItemDataRole.ToolTipRole:
                return _HEADER_TIPS[section]
        return None

    def flags(self, index: Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        value = self._data(index, role) if index.isValid() else None
        return value

    def _data(self, index: Index, role: int) -> Any:
        node: ModuleNode = index.internalPointer()
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self._display(node, col)
        path = node.path
        if role == PathRole:
            return path
        if role == StatusRole:
            return "matched" if path in self._matched else "rejected" if path in self._rejected else ""
        if role == CountRole:
            return self._counts.get(path, 0)
        if role == FamilyRole:
            if path in self._matched:
                return self._matched[path]
            return self._rejected[path][0] if path in self._rejected else ""
        if role == ColourRole:
            return self._colour_below(node)
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (PARAMS, OWN):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.DecorationRole and col == NAME:
            return self._icon(node)
        if role == Qt.ItemDataRole.BackgroundRole:
            if path in self._matched:
                return style.tint(self._colours.get(self._matched[path], style.family_colour(0)), 0.2)
            if path in self._rejected:
                return style.tint(style.REJECTED, 0.14)
            return None
        if role == Qt.ItemDataRole.ForegroundRole and (path in self._matched or path in self._rejected):
            return QColor(style.TEXT_ON_TINT)
        if role == Qt.ItemDataRole.FontRole and path in self._matched and col in (NAME, CLASS):
            return self._bold
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(node)
        return None

    def _display(self, node: ModuleNode, col: int) -> str:
        if col == NAME:
            return node.name
        if col == CLASS:
            return f"{node.class_name} ×{node.same_class_count}" if node.same_class_count > 1 else node.class_name
        if col == PARAMS:
            return human_count(node.total_params)
        if col == OWN:
            return human_count(node.own_params) if node.own_params else ""
        weight = node.main_weight
        if col == SHAPE:
            return shape_text(weight.shape) if weight is not None else ""
        if col == DTYPE:
            return weight.dtype if weight is not None else ""
        return ""

    def _colour_below(self, node: ModuleNode) -> QColor | None:
        """The family colour of the matches below, neutral when several families meet."""
        if not self._counts.get(node.path):
            return None
        prefix = f"{node.path}." if node.path else ""
        families = {family for path, family in self._matched.items() if path.startswith(prefix)}
        if len(families) == 1:
            return self._colours.get(families.pop())
        return QColor(style.MIXED)

    def _icon(self, node: ModuleNode) -> Any:
        path = node.path
        if path in self._matched:
            return style.fused_icon(self._colours.get(self._matched[path], style.family_colour(0)).name())
        if path in self._rejected:
            return style.rejected_icon()
        if self._counts.get(path):
            colour = self._colour_below(node) or style.family_colour(0)
            return style.contains_icon(colour.name())
        return None

    def _tooltip(self, node: ModuleNode) -> str:
        path = node.path
        lines = [f"<b>{path or node.name}</b><br>{node.class_qualname}"]
        if path in self._matched:
            fused = self._fused_names.get(path)
            to = f" → {fused}" if fused else ""
            lines.append(f"<br><b>fused by {self._matched[path]}</b>: {node.class_name}{to}")
        elif path in self._rejected:
            family, reason = self._rejected[path]
            lines.append(f"<br><b>not fused by {family}</b>: {reason}")
        count = self._counts.get(path, 0)
        if count:
            lines.append(f"<br>{count} module{'s' if count != 1 else ''} below will be fused")
        return "".join(lines)


_HEADER_TIPS = (
    "Module name (its path is in the details pane)",
    "Class; ×N: instances of this class in the whole model",
    "Parameters of the module and everything below it",
    "Parameters of this module itself",
    "Shape of the module's main weight",
    "dtype of the main weight (meta model: the config's dtype)",
)


class ModuleFilterProxy(QSortFilterProxyModel):
    """Recursive filter on module names, paths and classes (case-insensitive substring)."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.setRecursiveFilteringEnabled(True)
        self._needle = ""

    @property
    def needle(self) -> str:
        return self._needle

    def set_needle(self, text: str) -> None:
        self.beginFilterChange()
        self._needle = text.strip().lower()
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def matches(self, node: ModuleNode) -> bool:
        n = self._needle
        return not n or n in node.path.lower() or n in node.class_name.lower() or n in node.name.lower()

    def filterAcceptsRow(self, source_row: int, source_parent: Index) -> bool:
        if not self._needle:
            return True
        model = self.sourceModel()
        index = model.index(source_row, 0, source_parent)
        node = index.internalPointer() if index.isValid() else None
        return node is not None and self.matches(node)
