"""What the tree shows over the modules: fusion highlights, near misses, check results, filters.

:class:`Overlay` holds per-path dictionaries (set by the tree panel from the state) and
answers per row in O(1): ancestors' counts, families and check summaries are computed
once when the highlights or results change. :class:`NodeFilter` is the tree's filter:
a regular expression plus ``is:``/``family:``/``class:`` terms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtGui import QColor

from fusion_core.run.check_text import module_detail, module_name, tree_cell, tree_summary, tree_verdict

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
    """One fused module's check, as the tree shows it: the ``ModuleCheck`` and its texts from the
    presentation layer (:mod:`fusion_core.run.check_text`), made once per result."""

    path: str
    check: Any  # the ModuleCheck
    cell: str  # the check column's text
    detail: str  # its tooltip line, after the name

    @property
    def passed(self) -> bool:
        return bool(self.check.passed)

    @classmethod
    def of(cls, check: Any) -> ModuleScore:
        return cls(check.path, check, tree_cell(check), module_detail(check))


# the tint of the check column per verdict word (:func:`~fusion_core.run.check_text.tree_verdict`)
def _verdict_tint(word: str) -> QColor | None:
    if word == "FAIL":
        return style.tint(style.FAIL, 0.25)
    if word == "checked":
        return style.tint(style.MIXED, 0.1)  # a summary: its modules carry the speed colours
    if word == "faster":
        return style.tint(style.PASS, 0.25)
    if word == "slower":
        return style.tint(style.REJECTED, 0.2)
    return style.tint(style.MIXED, 0.12) if word else None  # pass, speed the same (or mixed)


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
        """The check column: a checked module's own line, or the summary of the modules below."""
        if below is not None and below in self.scores:
            return self.scores[below].cell
        return tree_summary(s.check for s in self._within(paths))

    def check_tint(self, paths: list[str], below: str | None = None) -> QColor | None:
        own = below is not None and below in self.scores
        within = [self.scores[below]] if own else self._within(paths)
        return _verdict_tint(tree_verdict((s.check for s in within), summary=not own))

    def check_tooltip(self, paths: list[str], below: str | None = None) -> str:
        within = [self.scores[below]] if below is not None and below in self.scores else self._within(paths)
        if not within:
            return "not checked (Tools ▸ Run checks)"
        return "<br>".join(_score_line(s) for s in sorted(within, key=lambda s: s.path)[:12]) + (
            f"<br>… and {len(within) - 12} more" if len(within) > 12 else ""
        )


def _score_line(s: ModuleScore) -> str:
    return f"<b>{rich(module_name(s.path))}</b>: {rich(s.detail)}"


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
