"""What the tree shows over the modules: fusion highlights, near misses, check results, filters.

:class:`Overlay` holds per-path dictionaries (set by the tree panel from the state) and
answers per row in O(1): ancestors' counts, families and check summaries are computed
once when the highlights or results change. :class:`NodeFilter` is the tree's filter:
a regular expression plus ``is:``/``family:``/``class:`` terms.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtGui import QColor

from .. import style
from ..format import rich

if TYPE_CHECKING:
    from fusion_core.model.tree import ModuleNode


def _ancestors(path: str):
    """The strict ancestors of a dotted path, nearest first, ending with the root ''."""
    while path:
        path = path.rsplit(".", 1)[0] if "." in path else ""
        yield path


@dataclass(frozen=True)
class ModuleScore:
    """One fused module's check, as the tree shows it (read from a ``ModuleCheck``)."""

    path: str
    passed: bool
    speedup: float
    low: float
    high: float
    verdict: str  # "faster" | "slower" | "same" | ""
    diff: float
    limit: float
    share: float | None
    verified_by: str
    error: str
    floor: str = ""  # "noise [0.98, 1.02]": the timing's A/A noise floor (and why a verdict is undetermined)
    share_interval: str = ""  # "[8.7%, 11.2%]": the share's 95% interval

    @classmethod
    def of(cls, check: Any) -> ModuleScore:
        timing = getattr(check, "timing", None)
        comp = getattr(check, "comparison", None)
        nan = float("nan")
        speedup = getattr(timing, "speedup", nan) if timing is not None else nan
        return cls(
            path=check.path,
            passed=bool(getattr(check, "passed", False)),
            speedup=speedup,
            low=getattr(timing, "speedup_low", speedup) if timing is not None else nan,
            high=getattr(timing, "speedup_high", speedup) if timing is not None else nan,
            verdict=getattr(timing, "verdict", "") if timing is not None else "",
            diff=getattr(comp, "max_abs_diff", nan) if comp is not None else nan,
            limit=getattr(comp, "limit", nan) if comp is not None else nan,
            share=getattr(check, "share_of_end_to_end", None),
            verified_by=getattr(check, "verified_by", ""),
            error=getattr(check, "error", ""),
            floor=timing.floor_text() if hasattr(timing, "floor_text") else "",
            share_interval=_interval(getattr(check, "share_low", None), getattr(check, "share_high", None)),
        )


def _interval(low: float | None, high: float | None) -> str:
    return f" [{low:.1%}, {high:.1%}]" if low is not None and high is not None else ""


class Overlay:
    """Highlights and check results per module path."""

    def __init__(self) -> None:
        self.matched: dict[str, str] = {}
        self.rejected: dict[str, tuple[str, str]] = {}
        self.near: dict[str, tuple[str, str]] = {}
        self.colours: dict[str, QColor] = {}
        self.fused_names: dict[str, str] = {}
        self.counts: dict[str, int] = {}  # matched modules strictly below
        self.rejected_below: dict[str, int] = {}  # rejected candidates strictly below
        self._families_below: dict[str, set[str]] = {}  # families matched at or below
        self.scores: dict[str, ModuleScore] = {}
        self._scores_below: dict[str, list[ModuleScore]] = {}  # checks at or below

    def set_highlights(
        self,
        matched: dict[str, str],
        rejected: dict[str, tuple[str, str]],
        colours: dict[str, QColor],
        fused_names: dict[str, str],
        near: dict[str, tuple[str, str]],
    ) -> None:
        # a module some family fuses never shows another family's rejection or near miss
        rejected = {p: r for p, r in rejected.items() if p not in matched}
        near = {p: r for p, r in near.items() if p not in matched}
        self.matched, self.rejected, self.colours = dict(matched), dict(rejected), dict(colours)
        self.fused_names, self.near = dict(fused_names), dict(near)
        warned: dict[str, int] = {}
        for path in rejected:
            for up in _ancestors(path):
                warned[up] = warned.get(up, 0) + 1
        self.rejected_below = warned
        counts: dict[str, int] = {}
        below: dict[str, set[str]] = {}
        for path, family in matched.items():
            below.setdefault(path, set()).add(family)
            for up in _ancestors(path):
                counts[up] = counts.get(up, 0) + 1
                below.setdefault(up, set()).add(family)
        self.counts, self._families_below = counts, below

    def set_checks(self, result: Any) -> None:
        scores = [ModuleScore.of(m) for m in getattr(result, "modules", None) or []]
        self.scores = {s.path: s for s in scores}
        below: dict[str, list[ModuleScore]] = {}
        for s in scores:
            below.setdefault(s.path, []).append(s)
            for up in _ancestors(s.path):
                below.setdefault(up, []).append(s)
        self._scores_below = below

    # highlights ------------------------------------------------------------------------
    def status(self, path: str) -> str:
        return "matched" if path in self.matched else "rejected" if path in self.rejected else ""

    def marks(self, paths: list[str]) -> str:
        """``⚠ 3``: the rejected candidates at or below ``paths`` (a fold row's content), or ""."""
        n = sum(self.rejected_below.get(p, 0) + (p in self.rejected) for p in paths)
        return f"⚠ {n}" if n else ""

    def family(self, path: str) -> str:
        if path in self.matched:
            return self.matched[path]
        return self.rejected[path][0] if path in self.rejected else ""

    def colour_of(self, family: str) -> QColor:
        return self.colours.get(family) or QColor(style.FAMILY_COLOURS[0])

    def colour_below(self, paths: list[str], strictly: bool = False) -> QColor | None:
        """The family colour of the matches within ``paths``; neutral when several families meet."""
        families: set[str] = set()
        for p in paths:
            families |= self._families_below.get(p, set())
            if strictly and p in self.matched and not self.counts.get(p):
                families.discard(self.matched[p])
        if not families:
            return None
        return self.colour_of(families.pop()) if len(families) == 1 else QColor(style.MIXED)

    def icon(self, path: str, paths: list[str]) -> Any:
        if path in self.matched:
            return style.fused_icon(self.colour_of(self.matched[path]).name())
        if path in self.rejected:
            return style.rejected_icon()
        if any(self.counts.get(p) or p in self.matched for p in paths):
            colour = self.colour_below(paths) or QColor(style.FAMILY_COLOURS[0])
            return style.contains_icon(colour.name())
        return None

    def background(self, path: str) -> QColor | None:
        if path in self.matched:
            return style.tint(self.colour_of(self.matched[path]), 0.2)
        if path in self.rejected:
            return style.tint(style.REJECTED, 0.14)
        return None

    def tooltip(self, node: ModuleNode) -> str:
        e = rich
        path = node.path
        lines = [f"<b>{e(path or node.name)}</b><br>{e(node.class_qualname)}"]
        if path in self.matched:
            fused = self.fused_names.get(path)
            to = f" → {e(fused)}" if fused else ""
            lines.append(f"<br><b>fused by {e(self.matched[path])}</b>: {e(node.class_name)}{to}")
        elif path in self.rejected:
            family, reason = self.rejected[path]
            lines.append(f"<br><b>not fused by {e(family)}</b>: {e(reason)}")
        elif path in self.near:
            family, reason = self.near[path]
            why = reason.removeprefix("not a candidate: ")  # discovery's reasons carry the words already
            lines.append(f"<br><b>{e(family)}</b>: not a candidate: {e(why)}")
        count = self.counts.get(path, 0)
        if count:
            lines.append(f"<br>{count} module{'s' if count != 1 else ''} below will be fused")
        return "".join(lines)

    # checks ----------------------------------------------------------------------------
    def _within(self, paths: list[str]) -> list[ModuleScore]:
        seen: dict[str, ModuleScore] = {}
        for p in paths:
            for s in self._scores_below.get(p, ()):
                seen[s.path] = s
        return list(seen.values())

    def check_text(self, paths: list[str], below: str | None = None) -> str:
        """'1.42× [1.30–1.55] pass · 4%' for a checked module (speedup, its 95% interval, the verdict
        against the tolerance, its share of end-to-end time); 'all 3 pass · 12% of time' above."""
        if below is not None and below in self.scores:
            s = self.scores[below]
            if s.error:
                return "error"
            speed = f"{s.speedup:.2f}×" if math.isfinite(s.speedup) else "—"
            if math.isfinite(s.low) and math.isfinite(s.high) and (s.low, s.high) != (s.speedup, s.speedup):
                speed += f" [{s.low:.2f}–{s.high:.2f}]"
            share = f" · {s.share:.0%}" if s.share is not None else ""
            how = {"end-to-end inputs": " · e2e", "module sample inputs": " · alone"}.get(s.verified_by, "")
            return f"{speed} {'pass' if s.passed else 'FAIL'}{share}{how}"
        within = self._within(paths)
        if not within:
            return ""
        fails = sum(1 for s in within if not s.passed)
        share = sum(s.share for s in within if s.share is not None)
        verdict = f"{fails} of {len(within)} FAIL" if fails else f"all {len(within)} pass"
        return f"{verdict} · {share:.0%} of time" if share else verdict

    def check_tint(self, paths: list[str], below: str | None = None) -> QColor | None:
        own = below is not None and below in self.scores
        within = [self.scores[below]] if own else self._within(paths)
        if not within:
            return None
        if any(not s.passed for s in within):
            return style.tint(style.FAIL, 0.25)
        if not own:
            return style.tint(style.MIXED, 0.1)  # a summary: its modules carry the speed colours
        verdicts = {s.verdict for s in within}
        if verdicts == {"faster"}:
            return style.tint(style.PASS, 0.25)
        if "slower" in verdicts:
            return style.tint(style.REJECTED, 0.2)
        return style.tint(style.MIXED, 0.12)  # pass, speed the same (or mixed)

    def check_tooltip(self, paths: list[str], below: str | None = None) -> str:
        within = [self.scores[below]] if below is not None and below in self.scores else self._within(paths)
        if not within:
            return "not checked (Tools ▸ Run checks)"
        return "<br>".join(_score_line(s) for s in sorted(within, key=lambda s: s.path)[:12]) + (
            f"<br>… and {len(within) - 12} more" if len(within) > 12 else ""
        )


def _score_line(s: ModuleScore) -> str:
    e = rich
    if s.error:
        return f"<b>{e(s.path)}</b>: error: {e(s.error)}"
    speed = (
        f"{s.speedup:.2f}× [{s.low:.2f}, {s.high:.2f}] ({e(s.verdict or 'untimed')}"
        + (f", {e(s.floor)})" if s.floor else ")")
        if math.isfinite(s.speedup)
        else "not timed"
    )
    share = f", {s.share:.1%}{s.share_interval} of end-to-end time" if s.share is not None else ""
    verdict = "pass" if s.passed else "FAIL"
    by = f", verified by {e(s.verified_by)}" if s.verified_by else ""
    return (
        f"<b>{e(s.path)}</b>: {speed}{share}; max |diff| {s.diff:.2e} vs tolerance {s.limit:.2e}: <b>{verdict}</b>{by}"
    )


STATES = ("fused", "rejected", "candidate", "near", "checked", "failed")


class NodeFilter:
    """The tree filter: terms ``is:STATE``, ``family:NAME``, ``class:REGEX``; the rest is a regex.

    The regex is searched (case-insensitive) in the path, the name and the class name; an
    invalid one is taken literally (``error`` says why). ``state`` comes from the state box
    ('' | 'fused' | 'rejected' | 'candidate' | 'near' | 'checked' | 'failed' | 'family:NAME').
    A candidate is a module some enabled family fuses or rejects.
    """

    def __init__(self, text: str, state: str = "") -> None:
        self.text = text.strip()
        self.error = ""
        self.states: list[str] = []
        self.families: list[str] = []
        self.classes: list[re.Pattern[str]] = []
        rest: list[str] = []
        for term in [*self.text.split(), *([state] if state else [])]:
            key, sep, value = term.partition(":")
            key = key.lower()
            if sep and key == "is" and value.lower() in STATES:
                self.states.append(value.lower())
            elif sep and key == "family" and value:
                self.families.append(value)
            elif sep and key == "class" and value:
                self.classes.append(self._compile(value))
            else:
                rest.append(term)
        self.pattern = self._compile(" ".join(rest)) if rest else None

    def _compile(self, text: str) -> re.Pattern[str]:
        try:
            return re.compile(text, re.IGNORECASE)
        except re.error as e:
            self.error = f"not a regular expression ({e}); matching it literally"
            return re.compile(re.escape(text), re.IGNORECASE)

    def __bool__(self) -> bool:
        return bool(self.pattern or self.states or self.families or self.classes)

    def matches(self, node: ModuleNode, overlay: Overlay | None) -> bool:
        p = self.pattern
        if p is not None and not (p.search(node.path) or p.search(node.name) or p.search(node.class_name)):
            return False
        if any(not c.search(node.class_name) for c in self.classes):
            return False
        ov = overlay or Overlay()
        path = node.path
        for state in self.states:
            ok = {
                "fused": path in ov.matched,
                "rejected": path in ov.rejected,
                "candidate": path in ov.matched or path in ov.rejected,
                "near": path in ov.near,
                "checked": path in ov.scores,
                "failed": path in ov.scores and not ov.scores[path].passed,
            }[state]
            if not ok:
                return False
        return all(family in (ov.family(path), ov.near.get(path, ("", ""))[0]) for family in self.families)
