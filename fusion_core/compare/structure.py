"""Two module trees matched by path: added, removed, changed or equal, and folded repeats.

Works on :class:`~fusion_core.model.tree.ModuleTree` data only (no torch), so the window
could run it too; the engine does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .result import FoldRow, ModuleRow

if TYPE_CHECKING:
    from ..model.tree import ModuleNode, ModuleTree


def _tensors(node: ModuleNode) -> list[tuple[str, tuple[int, ...], str]]:
    return [(t.name, t.shape, t.dtype) for t in (*node.params, *node.buffers)]


def _row(path: str, a: ModuleNode | None, b: ModuleNode | None) -> ModuleRow:
    if a is None:
        assert b is not None
        return ModuleRow(path, "added", None, b.class_name, None, b.total_params)
    if b is None:
        return ModuleRow(path, "removed", a.class_name, None, a.total_params, None)
    changes = []
    if a.class_name != b.class_name:
        changes.append("class")
    ta, tb = _tensors(a), _tensors(b)
    if [(n, s) for n, s, _ in ta] != [(n, s) for n, s, _ in tb]:
        changes.append("shapes")
    if [(n, d) for n, _, d in ta] != [(n, d) for n, _, d in tb]:
        changes.append("dtypes")
    if a.total_params != b.total_params:
        changes.append("params")
    if [c.name for c in a.children] != [c.name for c in b.children]:
        changes.append("children")
    return ModuleRow(
        path, "changed" if changes else "equal", a.class_name, b.class_name, a.total_params, b.total_params,
        tuple(changes),
    )  # fmt: skip


def compare_trees(a: ModuleTree, b: ModuleTree) -> tuple[list[ModuleRow], list[FoldRow]]:
    """Every module path of either tree, matched by path, and the folds of numbered siblings.

    Returns:
        The rows (A's order, then B's paths that A lacks, in B's order) and the folds:
        runs of consecutive numbered siblings (``layers.0`` ...) whose whole subtrees share
        one status, top-down; below a run that is equal throughout nothing more is folded.
    """
    paths = list(a.by_path)
    paths += [p for p in b.by_path if p not in a.by_path]
    rows = {p: _row(p, a.by_path.get(p), b.by_path.get(p)) for p in paths}
    children: dict[str, list[str]] = {}
    for p in paths:
        if p:
            children.setdefault(p.rpartition(".")[0], []).append(p)
    subtree: dict[str, str] = {}  # path -> status of the whole subtree

    def status(p: str) -> str:
        found = subtree.get(p)
        if found is None:
            stack = [p]
            order = []
            while stack:  # iterative: deep trees
                q = stack.pop()
                order.append(q)
                stack.extend(children.get(q, ()))
            for q in reversed(order):
                own = rows[q].status
                below = {subtree[c] for c in children.get(q, ())}
                if own in ("added", "removed") and below <= {own}:
                    subtree[q] = own
                elif own == "equal" and below <= {"equal"}:
                    subtree[q] = "equal"
                else:
                    subtree[q] = "changed"
            found = subtree[p]
        return found

    status("")
    folds: list[FoldRow] = []
    stack = [""]
    while stack:
        parent = stack.pop()
        kids = children.get(parent, [])
        i = 0
        nested: list[str] = []
        while i < len(kids):
            name = kids[i].rpartition(".")[2]
            if not name.isdigit():  # named children are few: every one is looked into
                nested.append(kids[i])
                i += 1
                continue
            j = i + 1
            while j < len(kids) and kids[j].rpartition(".")[2].isdigit() and subtree[kids[j]] == subtree[kids[i]]:
                j += 1
            st = subtree[kids[i]]
            folds.append(FoldRow(parent, name, kids[j - 1].rpartition(".")[2], j - i, st))
            if st == "changed":
                nested.extend(kids[i:j])
            i = j
        stack.extend(reversed(nested))
    return [rows[p] for p in paths], folds
