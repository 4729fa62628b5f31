"""The module tree as a lazy Qt item model, with folded repeats, and its filter proxy.

:class:`ModuleTreeModel` is a thin adapter over the core's :class:`ModuleTree`: an index
points at its :class:`ModuleNode` or at a :class:`FoldGroup` (a run of identical numbered
siblings, e.g. "layers 0–31 ×32 (identical)", whose children are those layers). A row's
children are created only when the view expands it (``canFetchMore``/``fetchMore``), so a
model with 10,000+ modules opens at once. Highlights (modules a family replaces, rejected
candidates, counts on ancestors) and check results come from :class:`Overlay`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
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
from .overlay import NodeFilter, Overlay

if TYPE_CHECKING:
    from fusion_core import ModuleNode, ModuleTree

Index = QModelIndex | QPersistentModelIndex

PathRole = Qt.ItemDataRole.UserRole + 1
StatusRole = Qt.ItemDataRole.UserRole + 2  # "matched" | "rejected" | ""
CountRole = Qt.ItemDataRole.UserRole + 3  # number of matched modules strictly below (in a group: within)
FamilyRole = Qt.ItemDataRole.UserRole + 4
ColourRole = Qt.ItemDataRole.UserRole + 5  # the family colour (for the count badge)
FoldRole = Qt.ItemDataRole.UserRole + 6  # number of folded modules (0: not a fold)

# the Check column (hidden until checks ran) sits by the name, where a narrow window still shows it
COLUMNS = ("Module", "Class", "Check", "Instances", "Params", "Own", "Weight shape", "dtype")
NAME, CLASS, CHECK, INSTANCES, PARAMS, OWN, SHAPE, DTYPE = range(len(COLUMNS))
_NCOLS = len(COLUMNS)
# computed once: Qt asks for the flags of every row it lays out, and enum arithmetic is slow in Python
_FLAGS = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable


@dataclass(eq=False)
class FoldGroup:
    """Consecutive numbered siblings with identical structure, shown as one row."""

    parent: ModuleNode
    nodes: list[ModuleNode]

    @property
    def path(self) -> str:
        # selecting the fold means "these layers": their parent's scope
        return self.parent.path

    @property
    def label(self) -> str:
        first, last = self.nodes[0].name, self.nodes[-1].name
        return f"{self.parent.name} {first}–{last} ×{len(self.nodes)} (identical)"

    @property
    def paths(self) -> list[str]:
        return [n.path for n in self.nodes]


Item = Any  # ModuleNode | FoldGroup


class ModuleTreeModel(QAbstractItemModel):
    """Lazy tree model over a :class:`ModuleTree` (the root module is the one top row)."""

    def __init__(self, parent: Any = None, fold: bool = True) -> None:
        super().__init__(parent)
        self._tree: ModuleTree | None = None
        self._fold = fold
        self._kids: dict[int, list[Item]] = {}  # id(item) -> its rows, once fetched
        self._up: dict[int, Item] = {}  # id(row item) -> the item it is a row of
        self._row: dict[int, int] = {}  # id(row item) -> row under its display parent
        self._group_of: dict[int, FoldGroup] = {}  # id(node) -> its fold, once the parent is fetched
        self.overlay = Overlay()
        self._bold = QFont()
        self._bold.setBold(True)

    # data management -------------------------------------------------------------------
    @property
    def tree(self) -> ModuleTree | None:
        return self._tree

    @property
    def folding(self) -> bool:
        return self._fold

    def set_tree(self, tree: ModuleTree | None) -> None:
        self.beginResetModel()
        self._tree = tree
        self._clear_rows()
        self.overlay = Overlay()
        self.endResetModel()

    def set_folding(self, on: bool) -> None:
        """Fold identical repeats (or show every sibling); the rows are rebuilt."""
        if on == self._fold:
            return
        self.beginResetModel()
        self._fold = on
        self._clear_rows()
        self.endResetModel()

    def _clear_rows(self) -> None:
        self._kids, self._up, self._group_of = {}, {}, {}
        self._row = {id(self._tree.root): 0} if self._tree is not None else {}

    def set_highlights(
        self,
        matched: dict[str, str],
        rejected: dict[str, tuple[str, str]],
        colours: dict[str, QColor],
        fused_names: dict[str, str] | None = None,
        near_misses: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        """Mark modules: ``matched`` path -> family, ``rejected`` path -> (family, reason).

        Args:
            matched: modules the enabled families replace.
            rejected: candidates they do not replace, with the reason.
            colours: family -> colour.
            fused_names: path -> fused class name (shown in the tooltip).
            near_misses: path -> (family, reason) for modules that look like a family's
                target under other names ("not a candidate: ..." in the tooltip).
        """
        self.overlay.set_highlights(matched, rejected, colours, fused_names or {}, near_misses or {})
        self._refresh_all()

    def set_checks(self, result: Any) -> None:
        """Show a ``CheckResult`` (or None) in the Check column and tints."""
        self.overlay.set_checks(result)
        self._refresh_all()

    def matched_paths(self) -> list[str]:
        return list(self.overlay.matched)

    def _refresh_all(self) -> None:
        if self._tree is None:
            return
        last = self.columnCount() - 1
        self.dataChanged.emit(self.index(0, 0), self.index(0, last))
        for kids in list(self._kids.values()):
            parent = self._index_of(self._up[id(kids[0])])
            if parent.isValid():
                self.dataChanged.emit(self.index(0, 0, parent), self.index(len(kids) - 1, last, parent))

    def _children(self, item: Item) -> list[Item]:
        """The rows below ``item``: a node's children with identical runs folded; a fold's nodes."""
        if isinstance(item, FoldGroup):
            return item.nodes
        children = item.children
        if not self._fold or len(children) < 2:
            return children
        from fusion_core.model.tree import repeat_runs

        runs = repeat_runs(children)
        if not runs:
            return children
        out: list[Item] = []
        i = 0
        for start, stop in runs:
            out.extend(children[i:start])
            out.append(FoldGroup(item, children[start:stop]))
            i = stop
        out.extend(children[i:])
        return out

    def fetch_rows(self, nodes: Iterable[ModuleNode]) -> int:
        """Make each of ``nodes`` a row (fetching its ancestors and folds) in one layout change.

        Fetching many rows one ``fetchMore`` at a time costs a row-insertion signal each,
        which the proxy and the view handle one by one; this announces them all at once.

        Args:
            nodes: modules of this model's tree.

        Returns:
            How many of them were not rows before.
        """
        missing = [n for n in nodes if id(n) not in self._row]
        if not missing:
            return 0
        self.layoutAboutToBeChanged.emit()
        for node in missing:
            self._make_row(node)
        self.layoutChanged.emit()
        return len(missing)

    def fetch_below(self, item: Item) -> int:
        """Make every module below ``item`` (a node or a fold) a row; see :meth:`fetch_rows`."""
        tops = item.nodes if isinstance(item, FoldGroup) else [item]
        return self.fetch_rows(n for top in tops for n in top.walk())

    def _make_row(self, node: ModuleNode) -> None:
        # existing rows keep their positions: only unfetched parents (and folds) get rows
        chain = []
        while id(node) not in self._row:
            chain.append(node)
            node = node.parent
        for child in reversed(chain):
            if id(child.parent) not in self._kids:
                self._add_rows(child.parent)
            group = self._group_of.get(id(child))
            if group is not None and id(group) not in self._kids:
                self._add_rows(group)

    def _add_rows(self, item: Item) -> list[Item]:
        kids = self._children(item)
        for i, kid in enumerate(kids):
            self._row[id(kid)] = i
            self._up[id(kid)] = item
            if isinstance(kid, FoldGroup):
                for node in kid.nodes:
                    self._group_of[id(node)] = kid
        self._kids[id(item)] = kids
        return kids

    def row_item(self, parent: Index, row: int) -> Item | None:
        """The item at ``row`` below ``parent`` without creating an index (for the filter)."""
        if not parent.isValid():
            return self._tree.root if self._tree is not None and row == 0 else None
        kids = self._kids.get(id(parent.internalPointer()))
        return kids[row] if kids is not None and 0 <= row < len(kids) else None

    def is_row(self, item: Item) -> bool:
        return id(item) in self._row

    def ensure_fetched(self, path: str) -> bool:
        """Make ``path`` and its ancestors (folds included) rows, fetching lazily created children."""
        if self._tree is None or path not in self._tree.by_path:
            return False
        chain = []
        node = self._tree.by_path[path]
        while node is not None:
            chain.append(node)
            node = node.parent
        chain.reverse()  # root .. path
        for parent, child in pairwise(chain):
            if id(parent) not in self._kids:
                self.fetchMore(self._index_of(parent))
            group = self._group_of.get(id(child))
            if group is not None and id(group) not in self._kids:
                self.fetchMore(self._index_of(group))
        return True

    def item(self, index: Index) -> Item | None:
        return index.internalPointer() if index.isValid() else None

    def node(self, index: Index) -> ModuleNode | None:
        """The module of a row (None for a fold row or an invalid index)."""
        item = self.item(index)
        return None if item is None or isinstance(item, FoldGroup) else item

    def _index_of(self, item: Item, column: int = 0) -> QModelIndex:
        row = self._row.get(id(item))
        return QModelIndex() if row is None else self.createIndex(row, column, item)

    def index_for_item(self, item: Item, column: int = 0) -> QModelIndex:
        """The index of a row's node or fold (invalid when it is not a row yet)."""
        return self._index_of(item, column)

    def fold_of(self, node: ModuleNode) -> FoldGroup | None:
        """The fold row that holds ``node``, once its parent's rows exist."""
        return self._group_of.get(id(node))

    def index_for_node(self, node: ModuleNode, column: int = 0) -> QModelIndex:
        """The index of ``node`` (its ancestors must be fetched; see :meth:`ensure_fetched`)."""
        return self._index_of(node, column)

    def index_for_path(self, path: str, column: int = 0) -> QModelIndex:
        if self._tree is None or not self.ensure_fetched(path):
            return QModelIndex()
        return self._index_of(self._tree.by_path[path], column)

    def fold_for_path(self, path: str) -> QModelIndex:
        """The fold row that holds ``path`` (invalid when it is not folded)."""
        if self.index_for_path(path).isValid():
            group = self._group_of.get(id(self._tree.by_path[path])) if self._tree else None
            if group is not None:
                return self._index_of(group)
        return QModelIndex()

    # Qt model API ----------------------------------------------------------------------
    # index() and parent() are called from C++ for every row the proxy and the view touch:
    # they stay a couple of dictionary look-ups
    def index(self, row: int, column: int, parent: Index = QModelIndex()) -> QModelIndex:  # noqa: B008
        if row < 0 or not 0 <= column < _NCOLS:
            return QModelIndex()
        if not parent.isValid():
            tree = self._tree
            return self.createIndex(row, column, tree.root) if row == 0 and tree is not None else QModelIndex()
        kids = self._kids.get(id(parent.internalPointer()))
        if kids is None or row >= len(kids):
            return QModelIndex()
        return self.createIndex(row, column, kids[row])

    def parent(self, index: Index = QModelIndex()) -> QModelIndex:  # type: ignore[override]  # noqa: B008
        if not index.isValid():
            return QModelIndex()
        up = self._up.get(id(index.internalPointer()))
        if up is None:
            return QModelIndex()
        return self.createIndex(self._row[id(up)], 0, up)

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        if self._tree is None:
            return 0
        if not parent.isValid():
            return 1
        if parent.column() > 0:
            return 0
        return len(self._kids.get(id(parent.internalPointer()), ()))

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return len(COLUMNS)

    def hasChildren(self, parent: Index = QModelIndex()) -> bool:  # noqa: B008
        if self._tree is None:
            return False
        if not parent.isValid():
            return True
        if parent.column() > 0:
            return False
        item = parent.internalPointer()
        return True if isinstance(item, FoldGroup) else bool(item.children)

    def canFetchMore(self, parent: Index) -> bool:
        if self._tree is None or not parent.isValid() or parent.column() > 0:
            return False
        item = parent.internalPointer()
        return id(item) not in self._kids and (isinstance(item, FoldGroup) or bool(item.children))

    def fetchMore(self, parent: Index) -> None:
        if not self.canFetchMore(parent):
            return
        item = parent.internalPointer()
        count = len(self._children(item))
        self.beginInsertRows(parent if isinstance(parent, QModelIndex) else QModelIndex(parent), 0, count - 1)
        self._add_rows(item)
        self.endInsertRows()

    def fetched_count(self) -> int:
        """How many rows have their children as rows (for tests of laziness)."""
        return len(self._kids)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and 0 <= section < len(COLUMNS):
            if role == Qt.ItemDataRole.DisplayRole:
                return COLUMNS[section]
            if role == Qt.ItemDataRole.ToolTipRole:
                return _HEADER_TIPS[section]
        return None

    def flags(self, index: Index) -> Qt.ItemFlag:
        return _FLAGS if index.isValid() else Qt.ItemFlag.NoItemFlags

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        item = index.internalPointer()
        if isinstance(item, FoldGroup):
            return self._group_data(item, index.column(), role)
        return self._data(item, index.column(), role)

    def _data(self, node: ModuleNode, col: int, role: int) -> Any:
        ov = self.overlay
        path = node.path
        if role == Qt.ItemDataRole.DisplayRole:
            return ov.check_text([path], below=path) if col == CHECK else _display(node, col)
        if role == PathRole:
            return path
        if role == StatusRole:
            return ov.status(path)
        if role == CountRole:
            return ov.counts.get(path, 0)
        if role == FamilyRole:
            return ov.family(path)
        if role == ColourRole:
            return ov.colour_below([path], strictly=True)
        if role == FoldRole:
            return 0
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (INSTANCES, PARAMS, OWN):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.DecorationRole and col == NAME:
            return ov.icon(path, [path])
        if role == Qt.ItemDataRole.BackgroundRole:
            return ov.check_tint([path], below=path) if col == CHECK else ov.background(path)
        if role == Qt.ItemDataRole.ForegroundRole and ov.status(path):
            return QColor(style.TEXT_ON_TINT)
        if role == Qt.ItemDataRole.FontRole and path in ov.matched and col in (NAME, CLASS):
            return self._bold
        if role == Qt.ItemDataRole.ToolTipRole:
            return ov.check_tooltip([path], below=path) if col == CHECK else ov.tooltip(node)
        return None

    def _group_data(self, group: FoldGroup, col: int, role: int) -> Any:
        ov = self.overlay
        paths = group.paths
        first = group.nodes[0]
        if role == Qt.ItemDataRole.DisplayRole:
            if col == NAME:
                return group.label
            if col == CLASS:
                return first.class_name
            if col == PARAMS:
                return human_count(sum(n.total_params for n in group.nodes))
            if col == CHECK:
                return ov.check_text(paths)
            return ""
        if role == PathRole:
            return group.path
        if role == FoldRole:
            return len(group.nodes)
        if role == StatusRole:
            states = {ov.status(p) for p in paths}
            return states.pop() if len(states) == 1 else ""
        if role == CountRole:
            return sum(ov.counts.get(p, 0) + (p in ov.matched) for p in paths)
        if role == FamilyRole:
            families = {ov.family(p) for p in paths}
            return families.pop() if len(families) == 1 else ""
        if role == ColourRole:
            return ov.colour_below(paths)
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (INSTANCES, PARAMS, OWN):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.DecorationRole and col == NAME:
            return ov.icon(paths[0], paths) if all(p in ov.matched for p in paths) else ov.icon("", paths)
        if role == Qt.ItemDataRole.BackgroundRole and col == CHECK:
            return ov.check_tint(paths)
        if role == Qt.ItemDataRole.FontRole and col == NAME:
            font = QFont()
            font.setItalic(True)
            return font
        if role == Qt.ItemDataRole.ToolTipRole:
            if col == CHECK:
                return ov.check_tooltip(paths)
            count = sum(ov.counts.get(p, 0) + (p in ov.matched) for p in paths)
            fused = f"<br>{count} module(s) within will be fused" if count else ""
            return (
                f"<b>{len(paths)} identical {first.class_name} modules</b>: {paths[0]} … {paths[-1]}<br>"
                f"same classes, tensor shapes and dtypes below; expand to see each{fused}"
            )
        return None


def _display(node: ModuleNode, col: int) -> str:
    if col == NAME:
        return node.name
    if col == CLASS:
        return node.class_name
    if col == INSTANCES:
        # its own column: "Linear ×25" read as a repeat count
        return str(node.same_class_count) if node.same_class_count > 1 else ""
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


_HEADER_TIPS = (
    "Module name (its path is in the details pane); 'layers 0–31 ×32 (identical)' folds identical layers",
    "Class of the module",
    "Last checks: speedup and pass/FAIL against the tolerance (interval and error in the tooltip); ancestors summarise",
    "Instances of this class in the whole model (not a repeat count)",
    "Parameters of the module and everything below it",
    "Parameters of this module itself",
    "Shape of the module's main weight",
    "dtype of the main weight (meta model: the config's dtype)",
)


class ModuleFilterProxy(QSortFilterProxyModel):
    """The tree filtered by a :class:`NodeFilter` (regex, state, family, class).

    A row shows when its module matches or contains a match; a fold row when one of its
    layers does. The set of such modules is computed once per filter over the plain tree,
    so :meth:`filterAcceptsRow` is a set look-up (Qt's recursive filtering would call back
    into Python for every row and its ancestors, many times over).
    """

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        # the filter is re-applied by set_needle; a highlight change must not re-filter each row
        self.setDynamicSortFilter(False)
        self._filter = NodeFilter("")
        self._shown: set[int] | None = None  # ids of modules that match or contain a match
        self._hits: list[ModuleNode] = []
        self._source: ModuleTreeModel | None = None

    def setSourceModel(self, model: Any) -> None:  # Qt override: keep the Python model at hand
        self._source = model
        super().setSourceModel(model)

    @property
    def needle(self) -> str:
        return self._filter.text

    @property
    def node_filter(self) -> NodeFilter:
        return self._filter

    @property
    def hits(self) -> list[ModuleNode]:
        """The modules that match the filter, in tree order (empty without a filter)."""
        return self._hits

    def set_needle(self, text: str, state: str = "") -> list[ModuleNode]:
        """Filter by ``text`` (see :class:`NodeFilter`) and a state ('', 'fused', 'family:qkv', ...).

        Returns:
            The matching modules in tree order; their ancestors (folds included) are made rows.
        """
        self._filter = NodeFilter(text, state)
        model = self._source
        tree = model.tree if model is not None else None
        if tree is None or not self._filter:
            self._shown, self._hits = None, []
        else:
            overlay = model.overlay
            self._hits = [n for n in tree.root.walk() if self._filter.matches(n, overlay)]
            shown: set[int] = set()
            for node in self._hits:
                while node is not None and id(node) not in shown:
                    shown.add(id(node))
                    node = node.parent
            self._shown = shown
            model.fetch_rows(self._hits)
        # one layout change: the mapping is rebuilt lazily, for the rows the view lays out
        self.invalidate()
        return self._hits

    def matches(self, node: ModuleNode) -> bool:
        model = self._source
        return self._filter.matches(node, model.overlay if model is not None else None)

    def filterAcceptsRow(self, source_row: int, source_parent: Index) -> bool:
        shown = self._shown
        if shown is None:
            return True
        item = self._source.row_item(source_parent, source_row) if self._source is not None else None
        if item is None:
            return False
        if isinstance(item, FoldGroup):
            return any(id(n) in shown for n in item.nodes)
        return id(item) in shown
