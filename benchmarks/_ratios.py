"""Cost ratios of whole-process measurements, through the engine's timing machinery.

A process benchmark measures rounds of fresh processes (a plain load, a fused load, a bare
import...). Each ratio here comes from those paired rounds
(:func:`fusion_core.run.timing.from_samples`): the median of the per-round ratios with its
95% interval, and an A/A noise floor where the denominator ran twice per round. A
quantity that is a difference of two noisy process times (a load "beyond imports") is a
ratio's numerator or denominator only when its own interval stays clear of 0
(:func:`fusion_core.run.timing.within_noise`); otherwise the ratio is "too noisy" and no
number is printed.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def cost(
    numerator: Sequence[float], denominator: Sequence[float], denominator_again: Sequence[float] | None = None
) -> dict[str, Any]:
    """numerator / denominator, round by round: {ratio, low, high, noise, text}; ratio None when too noisy."""
    from fusion_core.run.results import noise_text
    from fusion_core.run.timing import from_samples, within_noise

    for name, values in (("denominator", denominator), ("numerator", numerator)):
        if within_noise(values):
            median = statistics.median(values) if values else float("nan")
            return {
                "ratio": None,
                "low": None,
                "high": None,
                "noise": None,
                "text": f"too noisy (its {name}, {median:.3f} s, lies within its own noise)",
            }
    t = from_samples(denominator, numerator, denominator_again)  # its "speedup" is denominator / numerator
    ratio, low, high = 1 / t.speedup, 1 / t.speedup_high, 1 / t.speedup_low
    floor = noise_text(t.noise_low, t.noise_high) if denominator_again is not None else "no A/A floor"
    return {
        "ratio": round(ratio, 3),
        "low": round(low, 3),
        "high": round(high, 3),
        "noise": round(t.noise, 3) if denominator_again is not None else None,
        "text": f"{ratio:.3f}x [{low:.3f}, {high:.3f}] ({floor})",
    }


def minus(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Round-by-round differences ``a[i] - b[i]`` (a process's time beyond the bare import of its round)."""
    return [x - y for x, y in zip(a, b)]
