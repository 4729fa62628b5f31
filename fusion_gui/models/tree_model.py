"""The module tree as a lazy Qt item model, with folded repeats, and its filter proxy.

:class:`ModuleTreeModel` is a thin adapter over the core's :class:`ModuleTree`: an index
points at its :class:`ModuleNode` or at a :class:`FoldGroup` (a run of identical numbered
siblings, e.g. "layers 0–31 ×32 (identical)", whose children are those layers). A row's
children are created only when the view expands it (``canFetchMore``/``fetchMore``), so a
model with 10,000+ modules opens at once. Highlights (modules a family replaces, rejected
candidates, counts on ancestors) and check results come from :class:`Overlay`.

The model filters itself (:meth:`ModuleTreeModel.set_filter`) rather than sitting under a
``QSortFilterProxyModel``: each call the view makes through a proxy costs a second round
trip into Python (the proxy maps every index back with ``index()``), which doubled the
time to lay out or paint thousands of rows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QAbstractItemModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QColor, QFont

from .. import style
from ..format import human_count, printable, rich, shape_text
from .overlay import NodeFilter, Overlay

if TYPE_CHECKING:
    from fusion_core.model.tree import ModuleNode, ModuleTree

Index = QModelIndex | QPersistentModelIndex

PathRole = Qt.ItemDataRole.UserRole + 1
StatusRole = Qt.ItemDataRole.UserRole + 2  # "matched" | "rejected" | ""
CountRole = Qt.ItemDataRole.UserRole + 3  # number of matched modules strictly below (in a group: within)
FamilyRole = Qt.ItemDataRole.UserRole + 4
ColourRole = Qt.ItemDataRole.UserRole + 5  # the family colour (for the count badge)
FoldRole = Qt.ItemDataRole.UserRole + 6  # number of folded modules (0: not a fold)
#: the name's shorter forms, longest first, for a narrow column (a fold's label, an adapter mark): the
#: delegate shows the first that fits; each keeps what tells the row apart (the layer range, the name)
ShortRole = Qt.ItemDataRole.UserRole + 7

# the Check column (hidden until checks ran) sits by the name, where a narrow window still shows it
COLUMNS = ("Module", "Class", "Check", "Instances", "Params", "Own", "Weight shape", "dtype")
NAME, CLASS, CHECK, INSTANCES, PARAMS, OWN, SHAPE, DTYPE = range(len(COLUMNS))
_NCOLS = len(COLUMNS)
# computed once: Qt asks for the flags of every row it lays out, and enum arithmetic is slow in Python
_FLAGS = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
# a leaf says so: the view then does not ask it hasChildren() as it lays out
_LEAF_FLAGS = _FLAGS | Qt.ItemFlag.ItemNeverHasChildren
# roles as plain ints, compared in data() for every cell painted
_DISPLAY = int(Qt.ItemDataRole.DisplayRole)
_DECORATION = int(Qt.ItemDataRole.DecorationRole)
_TOOLTIP = int(Qt.ItemDataRole.ToolTipRole)
_FONT = int(Qt.ItemDataRole.FontRole)
_ALIGN = int(Qt.ItemDataRole.TextAlignmentRole)
_BACKGROUND = int(Qt.ItemDataRole.BackgroundRole)
_FOREGROUND = int(Qt.ItemDataRole.ForegroundRole)
_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
_NUMBERS = (INSTANCES, PARAMS, OWN)
_MANY_PARENTS = 64  # beyond this many parents with rows, a highlight change is one layout change
_ROLES = frozenset(
    [_DISPLAY, _DECORATION, _TOOLTIP, _FONT, _ALIGN, _BACKGROUND, _FOREGROUND]
    + [int(r) for r in (PathRole, StatusRole, CountRole, FamilyRole, ColourRole, FoldRole, ShortRole)]
)


@dataclass(eq=False)
class FoldGroup:
    """Consecutive numbered siblings shown as one row: identical ones ("layers 0–31 ×32
    (identical)"), or a repeating pattern of ``period`` layers ("layers 0–47: 12 × [3 + 1]")."""

    parent: ModuleNode
    nodes: list[ModuleNode]
    period: int = 0  # 0: identical siblings
    #: how a neighbour (identical fold) or a layer of the pattern (periodic fold) differs
    note: str = ""
    #: ``⚠ 3`` when rejected candidates sit within (set by the model from its overlay)
    marks: str = ""

    @property
    def path(self) -> str:
        # selecting the fold means "these layers": their parent's scope
        return self.parent.path

    @property
    def label(self) -> str:
        return self.labels[0]

    @property
    def labels(self) -> list[str]:
        """The label, then shorter forms for a narrow column, each with the layer range:
        'layers 0–47: 12 × [3 + 1] · 3 is …' -> 'layers 0–47: 12 × [3 + 1]' -> 'layers 0–47: 12×[3+1]'
        -> '0–47: 12×[3+1]' (the rest is in the tooltip)."""
        first, last = self.nodes[0].name, self.nodes[-1].name
        span = f"{first}–{last}"
        if self.period:
            sigs = [n.signature for n in self.nodes[: self.period]]
            counts: list[int] = []
            for i, sig in enumerate(sigs):  # run lengths within one period: [3 + 1]
                if i and sig == sigs[i - 1]:
                    counts[-1] += 1
                else:
                    counts.append(1)
            repeats = len(self.nodes) // self.period
            text = f"{self.parent.name} {span}: {repeats} × [{' + '.join(map(str, counts))}]"
            tight = f"{span}: {repeats}×[{'+'.join(map(str, counts))}]"
            forms = [text, f"{self.parent.name} {tight}", tight]
        else:
            text = f"{self.parent.name} {span} ×{len(self.nodes)} (identical)"
            forms = [text, f"{self.parent.name} {span} ×{len(self.nodes)}", f"{span} ×{len(self.nodes)}"]
        marks = f" · {self.marks}" if self.marks else ""
        out = [f + marks for f in forms]
        if self.note:
            # "3 differs in self_attn", "3 is MllamaCrossAttentionDecoderLayer"; the rest in the tooltip
            out.insert(0, f"{text} · {self.note.split(':', 1)[0].split(' (', 1)[0]}{marks}")
        return out

    @property
    def paths(self) -> list[str]:
        return [n.path for n in self.nodes]


def _badge_forms(name: str, badge: str) -> list[str]:
    """An adapter mark in less room, the name always whole: 'qkv_proj: fused LoRA rank 8 (partial: …)'
    -> 'qkv_proj: fused LoRA rank 8 (partial)' -> 'LoRA r=8' -> 'LoRA' (all of it in the tooltip)."""
    head = badge.split(" (", 1)[0]
    forms = [f"{head} (partial)" if "partial" in badge else head]
    rank = re.search(r"(?:rank |r=)(\d+)", badge)
    forms += [f"LoRA r={rank.group(1)}"] if rank else []
    forms.append("LoRA")
    return [f"{name}  [{f}]" for f in dict.fromkeys(forms) if f != badge]


def _note(first: ModuleNode, other: ModuleNode, how: str) -> str:
    """'3 differs in self_attn: ...', or '3 is MllamaCrossAttentionDecoderLayer' when its class differs
    (the label shows the part before the colon, the tooltip all of it)."""
    if first.class_qualname != other.class_qualname:
        return f"{other.name} is {other.class_name} (not {first.class_name})"
    return f"{other.name} differs in {how}"


def _folds(item: ModuleNode, children: list[ModuleNode]) -> list[Any]:
    """``children`` with periodic runs and identical runs folded, each fold saying how it differs."""
    from fusion_core.model.tree import difference, periodic_runs, repeat_runs

    spans: list[tuple[int, int, int]] = list(periodic_runs(children))
    taken = [(a, b) for a, b, _ in spans]
    edges = [0] + [x for a, b in taken for x in (a, b)] + [len(children)]
    for lo, hi in zip(edges[::2], edges[1::2]):  # the stretches between periodic runs
        spans += [(lo + a, lo + b, 0) for a, b in repeat_runs(children[lo:hi])]
    spans.sort()
    out: list[Any] = []
    i = 0
    for start, stop, period in spans:
        out.extend(children[i:start])
        nodes = children[start:stop]
        note = ""
        if period:
            other = next((n for n in nodes[1:period] if n.signature != nodes[0].signature), None)
            if other is not None:
                note = _note(nodes[0], other, difference(nodes[0], other))
        else:
            after = children[stop] if stop < len(children) else None
            before = children[start - 1] if start else None
            near = next((n for n in (after, before) if n is not None and n.name.isdigit()), None)
            if near is not None:
                note = _note(nodes[0], near, difference(nodes[0], near))
        out.append(FoldGroup(item, nodes, period, note))
        i = stop
    out.extend(children[i:])
    return out


Item = Any  # ModuleNode | FoldGroup


class ModuleTreeModel(QAbstractItemModel):
    """Lazy tree model over a :class:`ModuleTree` (the root module is the one top row)."""

    def __init__(self, parent: Any = None, fold: bool = True) -> None:
        super().__init__(parent)
        self._tree: ModuleTree | None = None
        self._fold = fold
        self._kids: dict[int, list[Item]] = {}  # id(item) -> its children as items, once fetched
        self._rows: dict[int, list[Item]] = {}  # id(item) -> those the filter shows (its rows)
        self._up: dict[int, Item] = {}  # id(child item) -> the item it is a child of
        self._row: dict[int, int] = {}  # id(shown item) -> its row under its display parent
        self._group_of: dict[int, FoldGroup] = {}  # id(node) -> its fold, once the parent is fetched
        self._filter = NodeFilter("")
        self._shown: set[int] | None = None  # ids of modules that match the filter or contain a match
        self._hits: list[ModuleNode] = []
        self.overlay = Overlay()
        self._texts: dict[int, tuple[str, ...]] = {}  # id(node) -> its columns' text (the tree is immutable)
        self._bold = QFont()
        self._bold.setBold(True)
        self.adapter_badges: dict[str, str] = {}  # path -> a LoRA adapter's rank and alpha (AppState.adapter_badges)

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
        self._kids, self._rows, self._up, self._group_of, self._texts = {}, {}, {}, {}, {}
        self._filter, self._shown, self._hits = NodeFilter(""), None, []
        self._row = {id(self._tree.root): 0} if self._tree is not None else {}

    # filter ----------------------------------------------------------------------------
    @property
    def node_filter(self) -> NodeFilter:
        return self._filter

    @property
    def needle(self) -> str:
        return self._filter.text

    @property
    def hits(self) -> list[ModuleNode]:
        """The modules that match the filter, in tree order (empty without a filter)."""
        return self._hits

    def matches(self, node: ModuleNode) -> bool:
        return self._filter.matches(node, self.overlay)

    def set_needle(self, text: str, state: str = "") -> list[ModuleNode]:
        """Filter by ``text`` and a state term; see :meth:`set_filter`."""
        return self.set_filter(NodeFilter(text, state))

    def set_filter(self, node_filter: NodeFilter) -> list[ModuleNode]:
        """Show only modules that match ``node_filter`` or contain a match (a fold: when one of its layers does).

        The shown set is computed once over the plain tree; the hits' ancestors (folds
        included) are made rows, and rows, persistent indexes (the view's expanded rows,
        the selection) follow in one layout change.

        Args:
            node_filter: the filter (an empty one shows everything).

        Returns:
            The matching modules in tree order.
        """
        tree = self._tree
        self._filter = node_filter
        if tree is None or not node_filter:
            shown, hits = None, []
        else:
            hits = [n for n in tree.root.walk() if node_filter.matches(n, self.overlay)]
            shown = set()
            for node in hits:
                while node is not None and id(node) not in shown:
                    shown.add(id(node))
                    node = node.parent
        self._hits = hits
        if tree is None:
            return hits
        self.layoutAboutToBeChanged.emit()
        before = self.persistentIndexList()
        items = [(index.internalPointer(), index.column()) for index in before]
        for node in hits:
            self._make_row(node)
        self._shown = shown
        self._row = {id(tree.root): 0} if self._visible(tree.root) else {}
        for key, kids in self._kids.items():
            rows = self._rows[key] = self._filtered(kids)
            for i, kid in enumerate(rows):
                self._row[id(kid)] = i
        self.changePersistentIndexList(before, [self._index_of(item, col) for item, col in items])
        self.layoutChanged.emit()
        return hits

    def _visible(self, item: Item) -> bool:
        shown = self._shown
        if shown is None:
            return True
        if isinstance(item, FoldGroup):
            return any(id(n) in shown for n in item.nodes)
        return id(item) in shown

    def _filtered(self, kids: list[Item]) -> list[Item]:
        return kids if self._shown is None else [k for k in kids if self._visible(k)]

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
        for kids in self._kids.values():  # fold rows carry their content's marks
            for kid in kids:
                if isinstance(kid, FoldGroup):
                    kid.marks = self.overlay.marks(kid.paths)
        self._refresh_all()

    def set_adapter(self, badges: dict[str, str]) -> None:
        """Mark the modules an opened LoRA adapter adapts (path -> badge, shown after the name)."""
        self.adapter_badges = dict(badges)
        self._refresh_all()

    def set_checks(self, result: Any) -> None:
        """Show a ``CheckResult`` (or None) in the Check column and tints."""
        self.overlay.set_checks(result)
        self._refresh_all()

    def matched_paths(self) -> list[str]:
        return list(self.overlay.matched)

    def _refresh_all(self) -> None:
        if self._tree is None or not self._row:
            return
        last = self.columnCount() - 1
        self.dataChanged.emit(self.index(0, 0), self.index(0, last))
        parents = [rows for rows in self._rows.values() if rows]
        if len(parents) > _MANY_PARENTS:
            # one dataChanged per parent costs the view dozens of calls into Python each
            # (0.27 s per toggle on an expanded 2.7k-module tree); a layout change that moves
            # no row is one re-layout, and persistent indexes stay as they are
            self.layoutAboutToBeChanged.emit()
            self.layoutChanged.emit()
            return
        for rows in parents:
            parent = self._index_of(self._up[id(rows[0])])
            if parent.isValid():
                self.dataChanged.emit(self.index(0, 0, parent), self.index(len(rows) - 1, last, parent))

    def _children(self, item: Item) -> list[Item]:
        """The rows below ``item``: a node's children with identical runs folded; a fold's nodes."""
        if isinstance(item, FoldGroup):
            return item.nodes
        children = item.children
        if not self._fold or len(children) < 2:
            return children
        out = _folds(item, children)
        for kid in out:
            if isinstance(kid, FoldGroup):
                kid.marks = self.overlay.marks(kid.paths)
        return out

    def fetch_rows(self, nodes: Iterable[ModuleNode]) -> int:
        """Make each of ``nodes`` a child of a fetched row (fetching its ancestors and folds) in one layout change.

        Fetching many rows one ``fetchMore`` at a time costs a row-insertion signal each,
        which the view handles one by one; this announces them all at once.

        Args:
            nodes: modules of this model's tree.

        Returns:
            How many of them were not fetched before.
        """
        missing = [n for n in nodes if not self._fetched(n)]
        if not missing:
            return 0
        self.layoutAboutToBeChanged.emit()
        for node in missing:
            self._make_row(node)
        self.layoutChanged.emit()
        return len(missing)

    def fetch_below(self, item: Item) -> int:
        """Fetch every module below ``item`` (a node or a fold); see :meth:`fetch_rows`."""
        tops = item.nodes if isinstance(item, FoldGroup) else [item]
        return self.fetch_rows(n for top in tops for n in top.walk())

    def parents_below(self, item: Item) -> list[Item]:
        """The shown rows at or below ``item`` that have rows below them (folds included), in tree order."""
        out: list[Item] = []
        stack = [item]
        while stack:
            it = stack.pop()
            rows = self._rows.get(id(it))
            if rows:
                out.append(it)
                stack.extend(reversed(rows))
        return out

    def _fetched(self, node: ModuleNode) -> bool:
        # a child of a fetched item (shown or not), or the root
        return id(node) in self._up or node.parent is None

    def _make_row(self, node: ModuleNode) -> None:
        # existing rows keep their positions: only unfetched parents (and folds) get children
        chain = []
        while not self._fetched(node):
            chain.append(node)
            node = node.parent
        for child in reversed(chain):
            if id(child.parent) not in self._kids:
                self._add_rows(child.parent, self._children(child.parent))
            group = self._group_of.get(id(child))
            if group is not None and id(group) not in self._kids:
                self._add_rows(group, group.nodes)

    def _add_rows(self, item: Item, kids: list[Item]) -> list[Item]:
        for kid in kids:
            self._up[id(kid)] = item
            if isinstance(kid, FoldGroup):
                for node in kid.nodes:
                    self._group_of[id(node)] = kid
        rows = self._rows[id(item)] = self._filtered(kids)
        for i, kid in enumerate(rows):
            self._row[id(kid)] = i
        self._kids[id(item)] = kids
        return rows

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
    # index() and parent() are called from C++ for every row the view lays out or paints:
    # they stay a couple of dictionary look-ups
    def index(self, row: int, column: int, parent: Index = QModelIndex()) -> QModelIndex:  # noqa: B008
        if row < 0 or not 0 <= column < _NCOLS:
            return QModelIndex()
        if not parent.isValid():
            tree = self._tree
            ok = row == 0 and tree is not None and id(tree.root) in self._row
            return self.createIndex(row, column, tree.root) if ok else QModelIndex()
        rows = self._rows.get(id(parent.internalPointer()))
        if rows is None or row >= len(rows):
            return QModelIndex()
        return self.createIndex(row, column, rows[row])

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
            return 1 if id(self._tree.root) in self._row else 0
        if parent.column() > 0:
            return 0
        return len(self._rows.get(id(parent.internalPointer()), ()))

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return _NCOLS

    def hasChildren(self, parent: Index = QModelIndex()) -> bool:  # noqa: B008
        if self._tree is None:
            return False
        if not parent.isValid():
            return id(self._tree.root) in self._row
        if parent.column() > 0:
            return False
        item = parent.internalPointer()
        rows = self._rows.get(id(item))
        return bool(rows) if rows is not None else self._may_show_children(item)

    def _may_show_children(self, item: Item) -> bool:
        kids = item.nodes if isinstance(item, FoldGroup) else item.children
        shown = self._shown
        return bool(kids) if shown is None else any(id(k) in shown for k in kids)

    def canFetchMore(self, parent: Index) -> bool:
        if self._tree is None or not parent.isValid() or parent.column() > 0:
            return False
        item = parent.internalPointer()
        return id(item) not in self._kids and self._may_show_children(item)

    def fetchMore(self, parent: Index) -> None:
        if not self.canFetchMore(parent):
            return
        item = parent.internalPointer()
        kids = self._children(item)
        count = len(self._filtered(kids))
        self.beginInsertRows(parent if isinstance(parent, QModelIndex) else QModelIndex(parent), 0, count - 1)
        self._add_rows(item, kids)
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
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        item = index.internalPointer()
        return _FLAGS if isinstance(item, FoldGroup) or item.children else _LEAF_FLAGS

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if role not in _ROLES or not index.isValid():
            return None
        item = index.internalPointer()
        if isinstance(item, FoldGroup):
            return self._group_data(item, index.column(), role)
        return self._data(item, index.column(), role)

    def _data(self, node: ModuleNode, col: int, role: int) -> Any:
        ov = self.overlay
        path = node.path
        if role == _DISPLAY:
            if col == CHECK:
                return ov.check_text([path], below=path)
            texts = self._texts.get(id(node))
            if texts is None:
                texts = self._texts[id(node)] = tuple(_display(node, c) for c in range(_NCOLS))
            badge = self.adapter_badges.get(path) if col == NAME else None
            return f"{texts[col]}  [{printable(badge)}]" if badge else texts[col]
        if role == ShortRole:
            badge = self.adapter_badges.get(path) if col == NAME else None
            return _badge_forms(_display(node, NAME), printable(badge)) if badge else None
        if role == _BACKGROUND:
            return ov.check_tint([path], below=path) if col == CHECK else ov.background(path)
        if role == _DECORATION:
            return ov.icon(path, [path]) if col == NAME else None
        if role == _ALIGN:
            return _RIGHT if col in _NUMBERS else None
        if role == _FOREGROUND:
            return QColor(style.TEXT_ON_TINT) if ov.status(path) else None
        if role == _FONT:
            return self._bold if path in ov.matched and col in (NAME, CLASS) else None
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
        if role == _TOOLTIP:
            if col == CHECK:
                return ov.check_tooltip([path], below=path)
            badge = self.adapter_badges.get(path)
            return f"{ov.tooltip(node)}<br>adapter: {rich(badge)}" if badge else ov.tooltip(node)
        return None

    def _group_data(self, group: FoldGroup, col: int, role: int) -> Any:
        ov = self.overlay
        paths = group.paths
        first = group.nodes[0]
        if role == Qt.ItemDataRole.DisplayRole:
            if col == NAME:
                return printable(group.label)
            if col == CLASS:
                return printable(first.class_name)
            if col == PARAMS:
                return human_count(sum(n.total_params for n in group.nodes))
            if col == CHECK:
                return ov.check_text(paths)
            return ""
        if role == PathRole:
            return group.path
        if role == ShortRole:
            return [printable(t) for t in group.labels[1:]] if col == NAME else None
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
            if all(p in ov.matched for p in paths):
                return ov.icon(paths[0], paths)
            return ov.icon("", paths) or (style.rejected_icon() if ov.marks(paths) else None)
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
            e = rich
            what = (
                f"<b>{len(paths)} {e(first.class_name)} modules, a pattern of {group.period} repeated</b>"
                if group.period
                else f"<b>{len(paths)} identical {e(first.class_name)} modules</b>"
            )
            same = "" if group.period else "same classes, tensor shapes and dtypes below; "
            note = f"<br>{e(group.note)}" if group.note else ""
            marks = self.overlay.marks(paths)
            warn = f"<br>{e(marks)} rejected candidate(s) within" if marks else ""
            label = f"{e(group.label)}<br>"  # the whole label: a narrow column shows a shorter form
            return f"{label}{what}: {e(paths[0])} … {e(paths[-1])}<br>{same}expand to see each{fused}{note}{warn}"
        return None


def _display(node: ModuleNode, col: int) -> str:
    if col == NAME:
        return printable(node.name)  # a name from the folder: a U+202E must not reorder it
    if col == CLASS:
        return printable(node.class_name)
    if col == INSTANCES:
        # its own column: "Linear ×25" read as a repeat count
        return str(node.same_class_count) if node.same_class_count > 1 else ""
    if col == PARAMS:
        return human_count(node.total_params)
    if col == OWN:
        return human_count(node.own_params) if node.own_params else ""
    weight = node.main_weight
    if node.children and (weight is None or weight.name != "weight"):
        # a container's own small tensor (a gate, a cls_token) is not its weight: the details pane lists it
        weight = None
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
