"""Plain-text helpers every layer may use: tables, counts, and printable names.

Names that reach a terminal (file names, tensor keys, module paths) come from untrusted
model folders: :func:`printable` escapes control characters so that they cannot move the
cursor, recolour the terminal or hide text; bidirectional controls (U+202A-U+202E,
U+2066-U+2069, and the marks U+200E, U+200F, U+061C), which make a name display reordered;
and noncharacters (U+FFFE, U+FFFF, U+FDD0-U+FDEF and the last two of every plane), which
are not allowed in XML, so one in a name would make an SVG invalid (issue 32).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

_NONCHARACTERS = "".join(f"{chr(plane * 0x10000 + 0xFFFE)}{chr(plane * 0x10000 + 0xFFFF)}" for plane in range(17))
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff"  # controls, line separators, lone surrogates
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidirectional marks, embeddings, overrides, isolates
    f"\ufdd0-\ufdef{_NONCHARACTERS}]"  # noncharacters (not allowed in XML)
)


def printable(text: str) -> str:
    """``text`` with control characters, line separators, lone surrogates, bidirectional controls and
    noncharacters escaped (``\\x1b``, ``\\u202e``, ``\\uffff``...)."""
    return _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape", "backslashreplace").decode("ascii"), text)


_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple:
    """Sort key that orders numbers by value: ``layers.2`` before ``layers.10``."""
    return tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(text))


#: the width the CLI's text fits by default (``--wide``: no limit)
DEFAULT_WIDTH = 120
#: a column is never elided below this many characters
MIN_COLUMN = 12


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], width: int | None = None, mark: str = "…") -> str:
    """Format ``rows`` as a plain left-aligned text table (cells made :func:`printable`).

    With ``width``, the widest columns are shortened until every line fits it, counted in
    characters and in UTF-8 bytes alike (what ``awk`` counts): each cell over its column's
    room is elided in the middle (:func:`elide`: a dotted key keeps its first name, its layer
    indices and its last two names), never below ``MIN_COLUMN`` characters.
    """
    cells = [[str(h) for h in headers]] + [[("" if c is None else printable(str(c))) for c in r] for r in rows]
    if width is None:
        return _layout(cells)
    room = width
    while True:
        out = _layout(cells, room - 2 * (len(headers) - 1), mark)
        excess = max(len(line.encode()) for line in out.split("\n")) - width
        if excess <= 0 or room <= MIN_COLUMN * len(headers):
            return out
        room -= excess


def _layout(cells: list[list[str]], room: int | None = None, mark: str = "…") -> str:
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    if room is not None and sum(widths) > room:
        cap = max(widths)
        while cap > MIN_COLUMN and sum(min(w, cap) for w in widths) > room:
            cap -= 1
        cells = [list(row) for row in cells]
        for i, w in enumerate(widths):
            if w > cap:
                for row in cells:
                    row[i] = elide(row[i], cap, mark)
                widths[i] = max(len(row[i]) for row in cells)
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


_FOLD_SUFFIX = re.compile(r" ×\d+$")


def elide(text: str, width: int, mark: str = "…") -> str:
    """``text`` in at most ``width`` characters: a dotted key through :func:`elide_dotted`,
    other text cut in the middle (its first two thirds and its last third kept, ``mark`` between)."""
    if len(text) <= width:
        return text
    lead = len(text) - len(text.lstrip(" "))  # a tree's indentation stays
    if lead and width > lead + 4:
        return text[:lead] + elide(text[lead:], width - lead, mark)
    suffix = _FOLD_SUFFIX.search(text)  # a fold's count stays whole: "... ×28"
    if suffix and width > len(suffix.group(0)) + 4:
        return elide(text[: suffix.start()], width - len(suffix.group(0)), mark) + suffix.group(0)
    if "." in text and " " not in text:
        return elide_dotted(text, width, len).replace("…", mark)
    head = (width - 1) * 2 // 3
    tail = width - 1 - head
    return text[:head].rstrip() + mark + (text[len(text) - tail :].lstrip() if tail else "")


def wrap(line: str, width: int, indent: str = "  ") -> list[str]:
    """A long line of prose broken at spaces into lines of at most ``width`` (the later ones
    indented; a word longer than a line is left whole)."""
    import textwrap

    if len(line.encode()) <= width:
        return [line]
    lead = line[: len(line) - len(line.lstrip(" "))]
    width = max(40, width - (len(line.encode()) - len(line)))  # room for the bytes of '→', '±'...
    return textwrap.wrap(
        line, width, initial_indent="", subsequent_indent=lead + indent, break_long_words=False,
        break_on_hyphens=False,
    ) or [line]  # fmt: skip


_SEGMENT = re.compile(r"(?<=\.)(\d+)(?=\.|$| )")


def _ranges(indices: Sequence[int]) -> str:
    """``[0, 1, 2, 4, 5]`` -> ``"0-2,4-5"`` (more than four runs: the first two, '…', the last)."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    parts = [f"{a}-{b}" if b > a else str(a) for a, b in runs]
    if len(parts) > 4:
        parts = [*parts[:2], "…", parts[-1]]
    return ",".join(parts)


def fold_layers(rows: Sequence[Sequence[Any]], passes: int = 2, column: int = 0) -> list[list[str]]:
    """Rows that differ only by a layer index folded into one, as the app folds repeated layers.

    The first numbered segment of a row's path (its cell ``column``, or the first cell after
    it that has one: an added key's new name) is its index; rows whose cells are equal once
    that index is taken out of each of them (the same class, shapes and op in every layer)
    become one row, in the place of the first, the path naming the indices and the count:
    ``model.layers.{0-27}.self_attn ×28``. ``passes`` folds that many numbered segments
    (layers, then experts).
    """
    folded: list[tuple[list[str], int, int]] = [(["" if c is None else str(c) for c in r], 1, column) for r in rows]
    for _ in range(passes):
        groups: dict[tuple[str, ...], list[tuple[int, list[str], int, int]]] = {}
        order: list[tuple[str, ...] | int] = []
        for n, (cells, count, _where) in enumerate(folded):
            found = next(((i, m) for i in range(column, len(cells)) if (m := _SEGMENT.search(cells[i]))), None)
            if found is None:
                order.append(n)
                continue
            where, m = found
            index = m.group(1)
            seg = re.compile(rf"(?<=\.){index}(?=\.|$| )")
            key = tuple(seg.sub("{}", c, count=1) for c in cells)
            if key not in groups:
                groups[key] = []
                order.append(key)
            groups[key].append((int(index), cells, count, where))
        out: list[tuple[list[str], int, int]] = []
        for item in order:
            if isinstance(item, int):
                out.append(folded[item])
                continue
            members = groups[item]
            if len(members) == 1:
                out.append(members[0][1:])
                continue
            label = "{" + _ranges(sorted(m[0] for m in members)) + "}"
            out.append(([c.replace("{}", label, 1) for c in item], sum(m[2] for m in members), members[0][3]))
        if len(out) == len(folded):
            break
        folded = out
    return [
        [f"{c} ×{count}" if count > 1 and i == where else c for i, c in enumerate(cells)]
        for cells, count, where in folded
    ]


def human_count(n: int) -> str:
    """``1234567`` -> ``"1.23M"`` (parameter counts in tables)."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)


#: first segments that name a wrapper, not a part: the segment after them is kept as well
_WRAPPERS = frozenset({"model", "base_model", "thinker", "module"})


def dotted_core(text: str) -> str:
    """The shortest form :func:`elide_dotted` gives without cutting inside a segment: the
    first segment(s), every layer index and the last two names (``model.….0.self_attn``)."""
    parts = text.split(".")
    head = 2 if parts[0] in _WRAPPERS and len(parts) > 4 else 1
    dropped = [not (_index(p) or i < head or i >= len(parts) - 2) for i, p in enumerate(parts)]
    return _join_dropped(parts, dropped) if any(dropped) else text


def elide_dotted(text: str, width: int, measure: Callable[[str], int]) -> str:
    """Shorten a dotted key to ``width`` without hiding its layer indices or its tail.

    Whole segments are dropped after the first one (``vision_model`` or ``language_model``:
    it tells the towers apart; after ``model.``, the next one too), never a numeric one (the
    layer index) nor the last two (``q_proj.weight``); each dropped run becomes one '…'.
    Only when that is not enough is the text cut in the middle.

    Args:
        text: a module path or checkpoint key.
        width: the room in pixels (or any unit ``measure`` returns).
        measure: the width of a string.

    Returns:
        ``text`` itself when it fits, else a shorter form.
    """
    if measure(text) <= width:
        return text
    parts = text.split(".")
    head = 2 if parts[0] in _WRAPPERS and len(parts) > 4 else 1
    keep = [_index(p) or i < head or i >= len(parts) - 2 for i, p in enumerate(parts)]
    dropped = [False] * len(parts)
    for i in range(len(parts)):
        if keep[i]:
            continue
        dropped[i] = True
        out = _join_dropped(parts, dropped)
        if measure(out) <= width:
            return out
    out = _join_dropped(parts, dropped)
    # still too wide: shorten the longest named segment left, inside it, one character at a
    # time (never a layer index, never the dots between segments), then the middle of it all
    kept = [p for p, gone in zip(parts, dropped, strict=True) if not gone]
    while measure(out) > width:
        names = [i for i, p in enumerate(kept) if not _index(p) and len(p.rstrip("…")) > 4]
        if not names:
            break
        i = max(names, key=lambda j: len(kept[j]))
        seg = kept[i].rstrip("…")
        kept[i] = seg[: len(seg) - 1] + "…"
        out = _rejoin(dropped, kept)
    while len(out) > 4 and measure(out) > width:
        mid = len(out) // 2
        out = out[: mid - 1] + "…" + out[mid + 1 :]
        out = out.replace("……", "…")
    return out


def _index(segment: str) -> bool:
    """A layer index (``13``) or a folded run of them (``{0-27}``, from :func:`fold_layers`)."""
    return segment.isdigit() or segment.startswith("{")


def _rejoin(dropped: Sequence[bool], kept: Sequence[str]) -> str:
    """The segments with each dropped run as one '…' (no dot after it) and the kept ones as in ``kept``."""
    out = ""
    k = iter(kept)
    marker = False  # the last thing written is a dropped run's '…'
    for gone in dropped:
        if gone:
            if not marker:
                out += ("." if out else "") + "…"
            marker = True
            continue
        out += ("" if marker or not out else ".") + next(k)
        marker = False
    return out


def _join_dropped(parts: Sequence[str], dropped: Sequence[bool]) -> str:
    out: list[str] = []
    for part, gone in zip(parts, dropped, strict=True):
        if gone:
            if not out or out[-1] != "…":
                out.append("…")
        else:
            out.append(part)
    return ".".join(out).replace("….", "…")
