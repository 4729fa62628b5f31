"""Where the time goes: the projected end-to-end speedup and one verdict line per family.

A fused module that takes a share ``s`` of the original end-to-end time and runs ``k``
times faster saves ``s - s / k`` of it (Amdahl): the projection is
``1 / (1 - sum(s) + sum(s / k))`` over the modules with a share.
"""

from __future__ import annotations

import statistics

from .results import CheckResult, FamilyVerdict, ModuleCheck


def amdahl(parts: list[tuple[float, float]]) -> float | None:
    """Projected overall speedup from (share, speedup) pairs; ``None`` without any."""
    parts = [(s, k) for s, k in parts if s is not None and k and k > 0]
    if not parts:
        return None
    rest = 1.0 - sum(s for s, _ in parts)
    return 1.0 / (max(0.0, rest) + sum(s / k for s, k in parts))


def _parts(modules: list[ModuleCheck]) -> list[tuple[float, float]]:
    return [
        (m.share_of_end_to_end, m.timing.speedup)
        for m in modules
        if m.share_of_end_to_end is not None and m.timing is not None
    ]


def project(result: CheckResult) -> None:
    """Set ``result.end_to_end.projected_speedup`` from the modules' shares and speedups."""
    if result.end_to_end is not None:
        result.end_to_end.projected_speedup = amdahl(_parts(result.modules))


def family_verdicts(result: CheckResult) -> list[FamilyVerdict]:
    """One :class:`FamilyVerdict` per family, in the order of the fusion config.

    For example ``patch_embeddings: exact; module 3.6x [3.4, 3.8]; 2% of end-to-end time ->
    about 1.02x end to end``.
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
        shares = [m.share_of_end_to_end for m in mods if m.share_of_end_to_end is not None]
        if shares:
            v.share = sum(shares)
            v.projected_end_to_end = amdahl(_parts(mods))
        v.line = _line(v, mods)
        out.append(v)
    return out


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
        parts.append(f"module {v.speedup:.2f}x [{v.low:.2f}, {v.high:.2f}]{count}")
    if v.share is not None and v.projected_end_to_end is not None:
        parts.append(f"{v.share:.1%} of end-to-end time → about {v.projected_end_to_end:.2f}x end to end")
    else:
        parts.append("share of end-to-end time unknown (the end-to-end run did not reach it)")
    return "; ".join(parts)
