"""What the conformance kit reports: one result per (property, model)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..boundary.convert import plain


@dataclass(frozen=True)
class PropertyResult:
    """One property of a family on one model.

    ``passed`` is False only for a failure; a property that cannot be checked on a model
    (no sample inputs, nothing matched) is ``skipped`` and counts as passed.
    """

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = ("name", "passed", "skipped", "detail", "model")

    name: str
    passed: bool
    detail: str
    model: str
    skipped: bool = False

    @property
    def status(self) -> str:
        return "skipped" if self.skipped else ("pass" if self.passed else "FAIL")


@dataclass
class ConformanceReport:
    """The kit's verdict on one family."""

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = ("family", "passed", "seconds", "properties")

    family: str
    properties: list[PropertyResult] = field(default_factory=list)
    seconds: float = field(default=0.0, metadata=plain(dump=lambda s: round(s, 2)))

    @property
    def passed(self) -> bool:
        return all(p.passed for p in self.properties)

    @property
    def failures(self) -> list[PropertyResult]:
        return [p for p in self.properties if not p.passed]

    def by_name(self, name: str) -> list[PropertyResult]:
        """The results of property ``name``, one per model it ran on."""
        return [p for p in self.properties if p.name == name]

    def summary(self) -> str:
        """One line per failure (or ``family: all N checks passed``), for assertion messages."""
        if self.passed:
            return f"{self.family}: all {len(self.properties)} checks passed"
        return "\n".join(f"{self.family}: {p.name} on {p.model}: {p.detail}" for p in self.failures)
