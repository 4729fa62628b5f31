"""Timings you can trust: paired, interleaved runs until the 95% interval is tight.

Each round runs the original and the fused side once, alternating which goes first, so
that drift (thermal, frequency, other processes) hits both alike. The speedup of a round
is the ratio of its two times; the reported speedup is the median of those ratios, and
its 95% interval comes from a seeded bootstrap of that median (robust to the outliers a
shared machine produces). Rounds continue until the interval is within ``target`` of
the median on both sides, or the time budget is spent, or ``max_rounds`` is reached; an
interval still wider than ``NOISY`` then marks the timing noisy.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from ..boundary.options import TimingOptions
from .results import Timing

NOISY = 0.25  # relative half-width of the interval above which a timing is "too noisy to tell"
_BOOTSTRAP = 400


def sync_for(device: str) -> Callable[[], None]:
    """A function that waits for queued device work (CUDA), or does nothing (CPU)."""
    import torch

    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.synchronize
    if str(device).startswith("mps") and hasattr(torch, "mps") and torch.backends.mps.is_available():
        return torch.mps.synchronize
    return lambda: None


def ratio_interval(ratios: list[float], seed: int = 0) -> tuple[float, float, float]:
    """(median, low, high): the median of ``ratios`` and a 95% bootstrap interval of it."""
    logs = [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]
    if not logs:
        return float("nan"), float("nan"), float("nan")
    center = statistics.median(logs)
    if len(logs) < 3:  # no interval from so few pairs: widened to hold 1.0, so the verdict is "same"
        return math.exp(center), math.exp(min([*logs, 0.0])), math.exp(max([*logs, 0.0]))
    rng = random.Random(seed)
    n = len(logs)
    meds = sorted(statistics.median(rng.choices(logs, k=n)) for _ in range(_BOOTSTRAP))
    low, high = meds[int(0.025 * _BOOTSTRAP)], meds[int(0.975 * _BOOTSTRAP) - 1]
    return math.exp(center), math.exp(low), math.exp(high)


def _peak_mb(device: str, fn: Callable[[], Any]) -> float | None:
    import torch

    if str(device).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**20
    return None


def measure(
    run_original: Callable[[], Any],
    run_fused: Callable[[], Any],
    options: TimingOptions | None = None,
    *,
    device: str = "cpu",
    seed: int = 0,
) -> Timing:
    """Time both sides in paired, alternating rounds and return the speedup with its interval.

    Args:
        run_original: one call of the original side.
        run_fused: one call of the fused side (same inputs).
        options: rounds always run (``min_rounds``), never exceeded (``max_rounds``), the
            seconds of rounds once ``min_rounds`` ran (``budget_s``), and the relative
            half-width of the interval to stop at (``target``); default :class:`TimingOptions`.
        device: for synchronisation and peak memory (CUDA).
        seed: seed of the bootstrap (same data, same interval).

    Returns:
        A :class:`Timing` (medians per side, speedup median and 95% interval, noisy flag).
    """
    o = options or TimingOptions()
    min_rounds, max_rounds, budget_s, target = o.min_rounds, o.max_rounds, o.budget_s, o.target
    sync = sync_for(device)
    peak_o = _peak_mb(device, run_original)
    peak_f = _peak_mb(device, run_fused)
    run_original(), run_fused()  # warm-up (caches, allocator, lazy init)
    sync()
    times_o: list[float] = []
    times_f: list[float] = []
    t0 = time.perf_counter()
    low = high = center = float("nan")
    rounds = 0
    while rounds < max(1, max_rounds):
        order = ((run_original, times_o), (run_fused, times_f))
        for fn, sink in order if rounds % 2 == 0 else reversed(order):
            sync()
            start = time.perf_counter()
            fn()
            sync()
            sink.append((time.perf_counter() - start) * 1000)
        rounds += 1
        if rounds < max(1, min_rounds):
            continue
        if rounds % 5 == 0 or time.perf_counter() - t0 > budget_s:
            ratios = [o / f if f > 0 else float("inf") for o, f in zip(times_o, times_f)]
            center, low, high = ratio_interval(ratios, seed)
            tight = center > 0 and low >= center * (1 - target) and high <= center * (1 + target)
            if tight or time.perf_counter() - t0 > budget_s:
                break
    if not math.isfinite(center):
        ratios = [o / f if f > 0 else float("inf") for o, f in zip(times_o, times_f)]
        center, low, high = ratio_interval(ratios, seed)
    noisy = (
        not (math.isfinite(low) and math.isfinite(high) and center > 0)
        or (high - low) / 2 > NOISY * center
        or rounds < 3
    )
    return Timing(
        original_ms=statistics.median(times_o),
        fused_ms=statistics.median(times_f),
        repeats=rounds,
        speedup=center,
        speedup_low=low,
        speedup_high=high,
        original_peak_mb=peak_o,
        fused_peak_mb=peak_f,
        noisy=noisy,
        seconds=time.perf_counter() - t0,
    )
