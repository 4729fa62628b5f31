"""Small text formatters shared by the panels (no Qt, no core imports)."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from fusion_core.errors import bounded as bounded  # the one cut of a message, shared with the engine and the CLI
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


def parse_size(text: str) -> int:
    """'5GB', '500MiB', '1024' -> bytes.

    Raises:
        ValueError: not a size.
    """
    t = text.strip().upper().replace(" ", "")
    factors = {
        "TIB": 1024**4,
        "GIB": 1024**3,
        "MIB": 1024**2,
        "KIB": 1024,
        "TB": 10**12,
        "GB": 10**9,
        "MB": 10**6,
        "KB": 10**3,
        "B": 1,
    }
    suffix = next((x for x in factors if t.endswith(x)), "")
    value = float(t[: len(t) - len(suffix)])
    factor = factors.get(suffix, 1)
    if value <= 0:
        raise ValueError(f"size must be positive: {text!r}")
    return int(value * factor)


def seconds_text(seconds: float) -> str:
    """A duration for the status bar: '0.42 s', '12 s', '3 min 4 s'."""
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


#: first segments that name a wrapper, not a part: the segment after them is kept as well
_WRAPPERS = frozenset({"model", "base_model", "thinker", "module"})


def dotted_core(text: str) -> str:
    """The shortest form :func:`elide_dotted` gives without cutting inside a segment: the
    first segment(s), every layer index and the last two names (``model.….0.self_attn``)."""
    parts = text.split(".")
    head = 2 if parts[0] in _WRAPPERS and len(parts) > 4 else 1
    dropped = [not (p.isdigit() or i < head or i >= len(parts) - 2) for i, p in enumerate(parts)]
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
    keep = [p.isdigit() or i < head or i >= len(parts) - 2 for i, p in enumerate(parts)]
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
        names = [i for i, p in enumerate(kept) if not p.isdigit() and len(p.rstrip("…")) > 4]
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
