"""What the conformance kit reports: one result per (property, model)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PropertyResult:
    """One property of a family on one model.

    ``passed`` is False only for a failure; a property that cannot be checked on a model
    (no sample inputs, nothing matched) is ``skipped`` and counts as passed.
    """

    name: str
    passed: bool
    detail: str
    model: str
    skipped: bool = False

    @property
    def status(self) -> str:
        return "skipped" if self.skipped else ("pass" if self.passed else "FAIL")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "passed": self.passed,
            "skipped": self.skipped,
            "detail": self.detail,
            "model": self.model,
        }


@dataclass
class ConformanceReport:
    """The kit's verdict on one family."""

    family: str
    properties: list[PropertyResult] = field(default_factory=list)
    seconds: float = 0.0

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

    def to_dict(self) -> dict[str, Any]:
        """Stable JSON data (``fusion-core families --self-test --json``)."""
        return {
            "family": self.family,
            "passed": self.passed,
            "seconds": round(self.seconds, 2),
            "properties": [p.to_dict() for p in self.properties],
        }
