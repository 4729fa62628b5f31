"""Output helpers shared by the command groups: JSON on stdout, tables, and tqdm progress."""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any, TypeVar

from .. import text as _text
from ..boundary.convert import to_plain
from ..progress import CancelToken, Progress, ProgressGenerator, drive
from ..text import fold_layers, human_count, printable

__all__ = ["fold_layers", "human_count", "print_json", "printable", "run_with_progress", "say", "strict_json", "table"]

T = TypeVar("T")

#: the width human output fits (``--wide``: None, every column whole); main() sets it per run
_width: list[int | None] = [_text.DEFAULT_WIDTH]


def set_width(width: int | None) -> None:
    """Fit the human output of this run to ``width`` characters (None: no limit, ``--wide``)."""
    _width[0] = width


def width() -> int | None:
    """The width human output fits (None: ``--wide``)."""
    return _width[0]


def wide() -> bool:
    """Whether this run prints every row and column whole (``--wide``)."""
    return _width[0] is None


def table(rows: Any, headers: Any) -> str:
    """:func:`fusion_core.text.table` fitted to this run's width (``--wide``: every column whole)."""
    return _text.table(rows, headers, width=_width[0], mark="~")


def say(*values: Any, err: bool = False, sep: str = " ", flush: bool = False) -> None:
    """Print a line (or lines) of human output, every control character escaped.

    The one way the CLI prints text (``print``'s arguments; ``err`` for stderr): file,
    folder and tensor names, notes and config strings in it come from model folders, and
    :func:`~fusion_core.text.printable` keeps them from moving the cursor, retitling or
    clearing the terminal. Line breaks of our own (tables, blocks) are kept; those inside
    a value are escaped too when the caller passes it through ``printable`` first.
    """
    text = sep.join(str(v) for v in values)
    stream = sys.stderr if err else sys.stdout
    lines = [printable(line) for line in text.split("\n")]
    if _width[0] is not None and not err:  # long prose broken at spaces (tables already fit)
        lines = [part for line in lines for part in _text.wrap(line, _width[0])]
    stream.write("\n".join(lines) + "\n")
    if flush:
        stream.flush()


def print_json(data: Any) -> None:
    """Write ``data`` (a result, or a dict of them) in its plain form as indented, strict JSON on
    stdout (the ``--json`` output; :func:`fusion_core.boundary.convert.to_plain`, then
    :func:`strict_json`): never ``NaN`` or ``Infinity``, which strict parsers (``jq``) reject."""
    json.dump(strict_json(to_plain(data)), sys.stdout, indent=2, sort_keys=False, allow_nan=False)
    sys.stdout.write("\n")


def strict_json(value: Any) -> Any:
    """Plain data with every NaN or infinite float as ``None`` (JSON ``null``).

    An object with a ``note`` field left empty gets the reason in it: which of its numbers
    were not finite (a comparison whose difference is NaN, say). A non-empty note already
    says why (outputs that differ in structure) and is kept.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: strict_json(v) for k, v in value.items()}
    dropped = [k for k, v in value.items() if isinstance(v, float) and not math.isfinite(v)]
    if dropped and out.get("note") == "":
        out["note"] = f"{', '.join(dropped)}: not a finite number (NaN or infinite), written as null"
    return out


class ByteBar:
    """A tqdm bar of bytes on a terminal (hashing a checkpoint's weights), nothing otherwise;
    called with the bytes done and the total. A context manager: the bar is closed on exit."""

    def __init__(self, desc: str) -> None:
        self.desc = desc
        self.bar: Any = None

    def __enter__(self) -> ByteBar:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            if not sys.stderr.isatty() or total < 256 * 2**20:
                return
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=self.desc, unit="B", unit_scale=True, leave=False, file=sys.stderr)
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_with_progress(gen: ProgressGenerator[T], desc: str = "", quiet: bool = False, lines: bool = False) -> T:
    """Drive a progress generator with a tqdm bar on a terminal, silently otherwise.

    With ``lines``, a long operation off a terminal (a log, CI) prints a progress line on
    stderr every 30 seconds instead of staying silent.
    """
    if quiet or not sys.stderr.isatty():
        if not lines or quiet:
            return drive(gen)
        last = [time.monotonic()]

        def line(p: Progress) -> None:
            if time.monotonic() - last[0] >= 30 and p.total:
                last[0] = time.monotonic()
                print(f"{desc}: {p.done}/{p.total} {printable(p.message)[:80]}", file=sys.stderr, flush=True)

        return drive(gen, line)
    from tqdm import tqdm

    bar = tqdm(total=0, desc=desc, unit="step", leave=False, file=sys.stderr)

    def update(p: Progress) -> None:
        if p.total and bar.total != p.total:
            bar.total = p.total
        bar.n = p.done
        if p.message:
            bar.set_postfix_str(p.message[-40:], refresh=False)
        bar.refresh()

    token = CancelToken()
    try:
        return drive(gen, update, token)
    finally:
        bar.close()
