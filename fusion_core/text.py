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
from collections.abc import Sequence
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


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """Format ``rows`` as a plain left-aligned text table (cells made :func:`printable`)."""
    cells = [[str(h) for h in headers]] + [[("" if c is None else printable(str(c))) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def human_count(n: int) -> str:
    """``1234567`` -> ``"1.23M"`` (parameter counts in tables)."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)
