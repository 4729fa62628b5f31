"""Small text formatters shared by the panels (no Qt, no core imports)."""

from __future__ import annotations

import html
from collections.abc import Sequence

from fusion_core.errors import bounded as bounded  # the one cut of a message, shared with the engine and the CLI
from fusion_core.text import dotted_core as dotted_core  # the shortest form elide_dotted keeps whole
from fusion_core.text import elide_dotted as elide_dotted  # one elision for the app and the CLI (issue 33)
from fusion_core.text import natural_key as natural_key  # re-exported: the panels sort with it
from fusion_core.text import printable as printable  # names from a folder shown in a widget (issue 32)

_UNITS = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"))


def in_scope(module: str, scope: str) -> bool:
    """Whether a fused ``module`` concerns the tree's selected ``scope``: it, below it, or above it."""
    if not scope:
        return True
    return module == scope or module.startswith(f"{scope}.") or scope.startswith(f"{module}.")


def human_count(n: int | None) -> str:
    """A parameter count in human units: 219390 -> '219.39K'."""
    if n is None:
        return ""
    for scale, unit in _UNITS:
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(n)


def human_bytes(n: int | float | None) -> str:
    """A byte size in binary units: 1536 -> '1.5 KiB'."""
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover


def shape_text(shape: Sequence[int] | None) -> str:
    """A tensor shape as '32×3×2×14×14' ('scalar' for (), '' for unknown)."""
    if shape is None:
        return ""
    if len(shape) == 0:
        return "scalar"
    return "×".join(str(int(d)) for d in shape)


def seconds_text(seconds: float) -> str:
    """A duration for the status bar: '0.42 s', '12 s', '3 min 4 s'."""
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def rich(text: str) -> str:
    """Text from a model folder inside rich text: bidirectional controls and control characters
    escaped (a U+202E would display the rest of a name reversed), then HTML-escaped."""
    return html.escape(printable(str(text)))


def plain_tip(text: str, limit: int = 4_000) -> str:
    """A tooltip showing ``text`` as text (Qt renders a tooltip that looks like markup as rich
    text: a folder named ``<img src=/dev/zero>`` would load that file): cut to ``limit`` and,
    when it holds a tag or an entity, escaped inside ``<qt>``. Text without ``<`` or ``&`` is unchanged."""
    text = printable(bounded(text, limit))
    if "<" not in text and "&" not in text:
        return text
    return "<qt>" + html.escape(text).replace("\n", "<br>") + "</qt>"
