"""Where the time goes: the projected end-to-end speedup and one verdict line per family.

A fused module that takes a share ``s`` of the original end-to-end time and runs ``k``
times faster saves ``s - s / k`` of it (Amdahl): the projection is
``1 / (1 - sum(s) + sum(s / k))`` over the modules with a share. Its interval follows
from the shares' and the speedups' intervals (:func:`amdahl_interval`).
"""

from __future__ import annotations

import statistics

from .results import CheckResult, FamilyVerdict, ModuleCheck, noise_text, speed_verdict, undetermined_reason


def amdahl(parts: list[tuple[float, float]]) -> float | None:
    """Projected overall speedup from (share, speedup) pairs; ``None`` without any."""
    parts = [(s, k) for s, k in parts if s is not None and k and k > 0]
    if not parts:
        return None
    rest = 1.0 - sum(s for s, _ in parts)
    return 1.0 / (max(0.0, rest) + sum(s / k for s, k in parts))


def amdahl_interval(
    boxes: list[tuple[float, float, float, float]],
) -> tuple[float, float] | None:
    """(low, high) of the projection over (share_low, share_high, speedup_low, speedup_high) boxes.

    The projection is monotonic in each speedup, and in each share with the sign of
    ``1 - 1/k``: the low end takes every module's slowest speedup with the share that
    hurts most at it, the high end the fastest with the share that helps most.
    """
    boxes = [b for b in boxes if None not in b and b[2] > 0 and b[3] > 0]
    if not boxes:
        return None
    low = amdahl([(s_hi if k_lo < 1 else s_lo, k_lo) for s_lo, s_hi, k_lo, _ in boxes])
    high = amdahl([(s_hi if k_hi > 1 else s_lo, k_hi) for s_lo, s_hi, _, k_hi in boxes])
    return (low, high) if low is not None and high is not None else None


def _around(point: float | None, interval: tuple[float, float] | None) -> tuple[float | None, float | None]:
    """The interval, widened to hold its point. Shares are timed one module at a time, so on a
    busy machine they can add up to more than the whole forward; ``amdahl`` then clamps the
    rest at 0, differently for the point and for the ends, and a point could fall outside."""
    if interval is None:
        return None, None
    low, high = interval
    if point is None:
        return low, high
    return min(low, point), max(high, point)


def _parts(modules: list[ModuleCheck]) -> list[tuple[float, float]]:
    return [
        (m.share_of_end_to_end, m.timing.speedup)
        for m in modules
        if m.share_of_end_to_end is not None and m.timing is not None
    ]


def _boxes(modules: list[ModuleCheck]) -> list[tuple[float, float, float, float]]:
    out = []
    for m in modules:
        if m.share_of_end_to_end is None or m.timing is None:
            continue
        s_lo = m.share_low if m.share_low is not None else m.share_of_end_to_end
        s_hi = m.share_high if m.share_high is not None else m.share_of_end_to_end
        out.append((s_lo, s_hi, m.timing.speedup_low, m.timing.speedup_high))
    return out


def project(result: CheckResult) -> None:
    """Set ``result.end_to_end.projected_speedup`` and its interval from the modules' shares and speedups."""
    e = result.end_to_end
    if e is not None:
        e.projected_speedup = amdahl(_parts(result.modules))
        e.projected_low, e.projected_high = _around(e.projected_speedup, amdahl_interval(_boxes(result.modules)))


def family_verdicts(result: CheckResult) -> list[FamilyVerdict]:
    """One :class:`FamilyVerdict` per family, in the order of the fusion config.

    For example ``patch_embeddings: exact; module 3.60x [3.40, 3.80] faster (noise [0.98, 1.02]);
    2.0% [1.9%, 2.1%] of end-to-end time → about 1.02x [1.02, 1.02] end to end``.
    """
    out = []
    for name in result.fusion_config:
        mods = [m for m in result.modules if m.family == name]
        if not mods:
            continue
        v = FamilyVerdict(name=name, exact=all(m.passed for m in mods))
        timed = [m.timing for m in mods if m.timing is not None]
        if timed:
            v.speedup = statistics.median(t.speedup for t in timed)
            v.low = statistics.median(t.speedup_low for t in timed)
            v.high = statistics.median(t.speedup_high for t in timed)
            v.noise_low = statistics.median(t.noise_low for t in timed)
            v.noise_high = statistics.median(t.noise_high for t in timed)
            v.verdict = speed_verdict(v.low, v.high, v.noise_low, v.noise_high, *_rounds_busy(mods))
        shares = [m.share_of_end_to_end for m in mods if m.share_of_end_to_end is not None]
        if shares:
            v.share = sum(shares)
            v.projected_end_to_end = amdahl(_parts(mods))
            interval = amdahl_interval(_boxes(mods))
            if interval is not None:
                v.projected_low, v.projected_high = _around(v.projected_end_to_end, interval)
        v.line = _line(v, mods)
        out.append(v)
    return out


def _rounds_busy(mods: list[ModuleCheck]) -> tuple[int, str]:
    """The fewest paired rounds of the family's timings, and the first "machine busy" reason among them."""
    timed = [m.timing for m in mods if m.timing is not None]
    return min(t.repeats for t in timed), next((t.busy for t in timed if t.busy), "")


def _line(v: FamilyVerdict, mods: list[ModuleCheck]) -> str:
    failed = [m for m in mods if not m.passed]
    if not failed:
        head = "exact"
    elif any(m.comparison is None for m in failed):
        head = f"NOT VERIFIED on {len(failed)} of {len(mods)} module(s)"
    else:
        head = f"NOT EXACT on {len(failed)} of {len(mods)} module(s)"
    parts = [f"{v.name}: {head}"]
    if v.speedup is not None:
        count = f" (median of {len(mods)})" if len(mods) > 1 else ""
        floor = noise_text(v.noise_low, v.noise_high)
        reason = undetermined_reason(v.noise_low, v.noise_high, *_rounds_busy(mods))
        if reason:
            floor += f"; {reason}"
        parts.append(f"module {v.speedup:.2f}x [{v.low:.2f}, {v.high:.2f}] {v.verdict} ({floor}){count}")
    if v.share is not None and v.projected_end_to_end is not None:
        lows = [m.share_low for m in mods if m.share_low is not None]
        highs = [m.share_high for m in mods if m.share_high is not None]
        share = f"{v.share:.1%}"
        if lows and highs and len(lows) == len(highs):
            share += f" [{min(1.0, sum(lows)):.1%}, {min(1.0, sum(highs)):.1%}]"
        about = f"about {v.projected_end_to_end:.2f}x"
        if v.projected_low is not None and v.projected_high is not None:
            about += f" [{v.projected_low:.2f}, {v.projected_high:.2f}]"
        parts.append(f"{share} of end-to-end time → {about} end to end")
    else:
        parts.append("share of end-to-end time unknown (the end-to-end run did not reach it)")
    return "; ".join(parts)
