"""The module tree as an image (SVG) and as indented text, folded as the window folds it.

Consecutive numbered siblings of identical structure (``layers.0`` to ``layers.31``) are one
row, ``layers 0–31 ×32``, with the first one's modules below it: a 2,700-module model is a
page of rows, not a poster. Rows can carry a :class:`Mark` (a family that fuses the module,
a check's verdict, a comparison's status); the legend lists the marks used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape, quoteattr

from ..text import human_count, printable

if TYPE_CHECKING:
    from ..model.tree import ModuleNode, ModuleTree

ROW_PX = 18
INDENT_PX = 14
MAX_ROWS = 5_000  # an image beyond this is cut, with a last row saying how many are left out


@dataclass(frozen=True)
class Mark:
    """A highlight: its colour (``#rrggbb``) and what it means (the legend's text)."""

    colour: str
    label: str


@dataclass(frozen=True)
class TreeRow:
    """One row of the folded tree."""

    depth: int
    name: str
    class_name: str
    params: int
    weight: str  # the main weight's shape and dtype ("" if none)
    count: int = 1  # modules a fold stands for
    path: str = ""
    mark: Mark | None = None


def _label(text: str, limit: int = 120) -> str:
    text = printable(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tree_rows(tree: ModuleTree, marks: Mapping[str, Mark] | None = None, fold: bool = True) -> list[TreeRow]:
    """The rows of ``tree`` in order, repeats folded (``fold``), each with its mark.

    A fold's mark is the first mark among the modules it stands for (any of their subtrees).
    """
    from ..model.tree import repeat_runs

    marks = marks or {}
    rows: list[TreeRow] = []

    def mark_below(nodes: list[ModuleNode]) -> Mark | None:
        for n in nodes:
            for m in n.walk():
                if m.path in marks:
                    return marks[m.path]
        return None

    def row(node: ModuleNode, depth: int, name: str, count: int = 1, mark: Mark | None = None) -> TreeRow:
        w = node.main_weight
        weight = f"{'x'.join(map(str, w.shape))} {w.dtype}" if w is not None else ""
        params = node.total_params * count
        return TreeRow(depth, name, node.class_name, params, weight, count, node.path, mark or marks.get(node.path))

    stack: list[tuple[ModuleNode, int, str, int, Mark | None]] = [(tree.root, 0, tree.root.name, 1, None)]
    while stack:
        node, depth, name, count, mark = stack.pop()
        rows.append(row(node, depth, name, count, mark))
        kids = node.children
        runs = dict(repeat_runs(kids)) if fold and len(kids) > 1 else {}
        items: list[tuple[ModuleNode, int, str, int, Mark | None]] = []
        i = 0
        while i < len(kids):
            j = runs.get(i)
            if j is not None:
                group = kids[i:j]
                items.append((kids[i], depth + 1, f"{kids[i].name}–{kids[j - 1].name}", j - i, mark_below(group)))
                i = j
            else:
                items.append((kids[i], depth + 1, kids[i].name, 1, None))
                i += 1
        stack.extend(reversed(items))
    return rows


def plan_marks(
    matched: Mapping[str, str], families: list[str] | None = None, *, registered: list[str] | None = None
) -> dict[str, Mark]:
    """Marks for a plan's fused modules (``module path -> family``), in the app's colours.

    ``registered``: every registered family (the colours depend on that set, never on which
    are enabled); the window passes the engine's list (it never imports the families, which
    import torch), elsewhere the registry is asked.
    """
    from .colours import family_colours

    if registered is None:
        from ..families.registry import families as all_families

        registered = [spec.name for spec in all_families()]
    order = families or list(dict.fromkeys(matched.values()))
    colour = family_colours([*registered, *order, *matched.values()])
    return {path: Mark(colour[f], f"fused by {f}") for path, f in matched.items()}


def tree_text(rows: list[TreeRow]) -> str:
    """Indented text: ``name  Class  params  weight  [mark]`` per row, two spaces a level."""
    out = []
    for r in rows:
        fold = f" ×{r.count}" if r.count > 1 else ""
        mark = f"  [{r.mark.label}]" if r.mark else ""
        weight = f"  {r.weight}" if r.weight else ""
        out.append(
            f"{'  ' * r.depth}{_label(r.name)}{fold}  {_label(r.class_name)}  {human_count(r.params)}{weight}{mark}"
        )
    return "\n".join(out) + "\n"


def tree_svg(rows: list[TreeRow], title: str = "", subtitle: str = "") -> str:
    """A standalone SVG of the rows: a title, the legend of the marks used, one line per row."""
    shown = rows[:MAX_ROWS]
    legend: dict[str, Mark] = {}
    for r in shown:
        if r.mark is not None:
            legend.setdefault(r.mark.label, r.mark)
    top = 20 + (22 if title else 0) + (18 if subtitle else 0) + (22 if legend else 0)
    depth = max((r.depth for r in shown), default=0)
    name_w = max(260, min(900, depth * INDENT_PX + 8 * max((len(_label(r.name)) + 4 for r in shown), default=10)))
    class_x = name_w + 20
    params_x = class_x + 300
    weight_x = params_x + 90
    width = weight_x + 220
    height = top + ROW_PX * (len(shown) + (1 if len(rows) > len(shown) else 0)) + 12
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
    ]
    y = 22
    if title:
        parts.append(f'<text x="12" y="{y}" font-size="16" font-weight="bold">{escape(_label(title, 200))}</text>')
        y += 20
    if subtitle:
        parts.append(f'<text x="12" y="{y}" fill="#555555">{escape(_label(subtitle, 300))}</text>')
        y += 18
    if legend:
        x = 12
        for mark in legend.values():
            parts.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill={quoteattr(mark.colour)}/>')
            text = _label(mark.label, 60)
            parts.append(f'<text x="{x + 18}" y="{y}">{escape(text)}</text>')
            x += 40 + 7 * len(text)
        y += 22
    y = top
    for header, x in (("module", 12), ("class", class_x), ("params", params_x), ("weight", weight_x)):
        parts.append(f'<text x="{x}" y="{y - 4}" fill="#777777">{header}</text>')
    for r in shown:
        y += ROW_PX
        if r.mark is not None:
            parts.append(
                f'<rect x="4" y="{y - 13}" width="{width - 8}" height="{ROW_PX - 2}" rx="3" '
                f'fill={quoteattr(r.mark.colour)} fill-opacity="0.18" stroke={quoteattr(r.mark.colour)}/>'
            )
        fold = f" ×{r.count}" if r.count > 1 else ""
        weight = "bold" if r.count > 1 else "normal"
        parts.append(
            f'<text x="{12 + r.depth * INDENT_PX}" y="{y}" font-weight="{weight}">{escape(_label(r.name) + fold)}</text>'
        )
        parts.append(f'<text x="{class_x}" y="{y}" fill="#37474f">{escape(_label(r.class_name, 40))}</text>')
        parts.append(f'<text x="{params_x}" y="{y}">{escape(human_count(r.params))}</text>')
        parts.append(f'<text x="{weight_x}" y="{y}" fill="#555555">{escape(r.weight)}</text>')
    if len(rows) > len(shown):
        y += ROW_PX
        parts.append(f'<text x="12" y="{y}" fill="#c62828">… {len(rows) - len(shown)} more rows left out</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _umask() -> int:
    """This process's umask, read without changing it where Linux says it (``/proc/self/status``)."""
    import os

    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: read by setting it back at once
    os.umask(mask)
    return mask


def write_text(path: Any, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary sibling and a rename (never half a file)."""
    import os
    import tempfile
    from pathlib import Path

    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent or ".")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # the user's default mode, as any file they write (mkstemp: 0600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
