"""Timings that hold up: warm-up kept out, paired rounds with an A/A noise floor, a verdict
only from evidence. The one timing machinery of the engine and of ``benchmarks/``.

- **Warm-up** (:func:`warm_up`): before any timed round, each side is called until its
  time per call settles (the latest call is no longer faster than every earlier one by
  more than :data:`SETTLE`), bounded in calls and seconds. Its count and the first call's
  cost are reported (``warmup_rounds``, ``first_call_ms``): first-call costs (allocator,
  lazy init, caches) are never read as speed.
- **Rounds**: each round calls the original (A), the fused side (B) and the original
  again (A'), in an order that runs through all six permutations, so that drift and
  position hit every side alike. The speedup of a round is A/B; the noise of a round is
  A/A', the original against itself with the same inputs, alternation and rounds. The
  reported speedup is the median of the per-round ratios and its 95% interval a seeded
  bootstrap of that median; the same for the A/A ratios gives the noise floor
  (``noise_low``, ``noise_high``, widened to hold 1.0).
- **Stop** once both intervals are within ``target`` of their median (from
  :data:`MIN_VERDICT_ROUNDS` rounds on), or the time budget is spent, or ``max_rounds``.
- **Verdict** (:func:`~fusion_core.run.results.speed_verdict`): with the floor's width
  ``d = max(noise_high - 1, 1 - noise_low)``, "faster" only when ``speedup_low > 1 + d``,
  "slower" only when ``speedup_high < 1 - d``, else "same"; "undetermined" (with the
  reason) below :data:`MIN_VERDICT_ROUNDS` paired rounds, or on a busy machine: ``d``
  above :data:`~fusion_core.run.results.MAX_FLOOR`, or (set by the check) a load average
  above the cores the check does not use.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..boundary.options import TimingOptions
from ..progress import heartbeat
from .results import MIN_VERDICT_ROUNDS, Timing

__all__ = [
    "MIN_VERDICT_ROUNDS",
    "NOISY",
    "SETTLE",
    "from_samples",
    "load_average",
    "measure",
    "median_interval",
    "ratio_interval",
    "sync_for",
    "warm_up",
    "within_noise",
]

NOISY = 0.25  # relative half-width of the interval above which a timing is "too noisy to tell"
SETTLE = 0.10  # warm-up ends once the latest call is within this fraction of the fastest earlier one
WARMUP_CALLS = 12  # at most this many warm-up calls per side
_BOOTSTRAP = 400
_ORDERS = list(itertools.permutations(range(3)))  # A, B, A' in every order, round after round


def sync_for(device: str) -> Callable[[], None]:
    """A function that waits for queued device work (CUDA), or does nothing (CPU)."""
    import torch

    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.synchronize
    if str(device).startswith("mps") and hasattr(torch, "mps") and torch.backends.mps.is_available():
        return torch.mps.synchronize
    return lambda: None


def load_average() -> float | None:
    """The 1-minute load average of the machine (``None`` where the OS has none)."""
    import os

    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def median_interval(values: Sequence[float], seed: int = 0) -> tuple[float, float, float]:
    """(median, low, high): the median of ``values`` and a seeded 95% bootstrap interval of it.

    With fewer than 3 values there is no interval: it spans the values themselves.
    """
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return float("nan"), float("nan"), float("nan")
    center = statistics.median(vals)
    if len(vals) < 3:
        return center, min(vals), max(vals)
    rng = random.Random(seed)
    n = len(vals)
    meds = sorted(statistics.median(rng.choices(vals, k=n)) for _ in range(_BOOTSTRAP))
    return center, meds[int(0.025 * _BOOTSTRAP)], meds[int(0.975 * _BOOTSTRAP) - 1]


def ratio_interval(ratios: list[float], seed: int = 0) -> tuple[float, float, float]:
    """(median, low, high): the median of ``ratios`` and a 95% bootstrap interval of it (on logs).

    With fewer than 3 ratios the interval is widened to hold 1.0 (no verdict from so few).
    """
    logs = [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]
    if not logs:
        return float("nan"), float("nan"), float("nan")
    if len(logs) < 3:
        logs_c = statistics.median(logs)
        return math.exp(logs_c), math.exp(min([*logs, 0.0])), math.exp(max([*logs, 0.0]))
    center, low, high = median_interval(logs, seed)
    return math.exp(center), math.exp(low), math.exp(high)


def _tight(center: float, low: float, high: float, target: float) -> bool:
    return center > 0 and low >= center * (1 - target) and high <= center * (1 + target)


def warm_up(
    calls: Sequence[Callable[[], Any]],
    sync: Callable[[], None] = lambda: None,
    *,
    max_calls: int = WARMUP_CALLS,
    budget_s: float = 1.0,
    settle: float = SETTLE,
) -> tuple[int, list[float]]:
    """Call each of ``calls`` in turn until the time per call settles for all of them.

    A side has settled when its latest call is no faster than ``(1 - settle)`` times its
    fastest earlier call (the first call never counts as settled). At least 2 and at most
    ``max_calls`` rounds; no new round starts after ``budget_s`` seconds.

    Returns:
        (rounds, first-call time of each side in ms).
    """
    times: list[list[float]] = [[] for _ in calls]
    t0 = time.perf_counter()
    rounds = 0
    while rounds < max(2, max_calls):
        heartbeat(f"warming up: round {rounds + 1}")
        for fn, sink in zip(calls, times):
            sync()
            start = time.perf_counter()
            fn()
            sync()
            sink.append((time.perf_counter() - start) * 1000)
        rounds += 1
        if rounds < 2:
            continue
        if all(t[-1] >= (1 - settle) * min(t[:-1]) for t in times) or time.perf_counter() - t0 > budget_s:
            break
    return rounds, [t[0] for t in times]


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
    warm: bool = True,
    again: Callable[[], Any] | None = None,
) -> Timing:
    """Time both sides after a warm-up, in rounds of A, B, A' (the original twice), and return
    the speedup with its interval and the A/A noise floor.

    Args:
        run_original: one call of the original side.
        run_fused: one call of the fused side (same inputs).
        options: rounds always run (``min_rounds``), never exceeded (``max_rounds``), the
            seconds of rounds once ``min_rounds`` ran (``budget_s``; the warm-up has half
            of it again, at least 0.2 s), and the relative half-width of both intervals to
            stop at (``target``); default :class:`TimingOptions`.
        device: for synchronisation and peak memory (CUDA).
        seed: seed of the bootstrap (same data, same interval).
        warm: run the warm-up (``False`` only where the caller warmed both sides itself).
        again: the A' side of the A/A floor (default ``run_original`` itself). Where the fused
            side is a copy with memory of its own, a copy of the original belongs here: on a
            machine with a large last-level cache, where a module's weights sit moves its time
            by up to 14% (a deep copy of a Llama attention against itself, bf16, on a 480 MiB
            L3 Xeon), which the same object timed twice never shows.

    Returns:
        A :class:`Timing`: medians per side, speedup median and 95% interval, the noise
        floor, the warm-up, the verdict.
    """
    o = options or TimingOptions()
    sync = sync_for(device)
    peak_o = _peak_mb(device, run_original)
    peak_f = _peak_mb(device, run_fused)
    warm_rounds, firsts = 0, [None, None]
    if warm:
        warm_rounds, measured = warm_up([run_original, run_fused], sync, budget_s=max(0.2, o.budget_s / 2))
        firsts = [*measured]
    calls = (run_original, run_fused, again if again is not None else run_original)
    times: tuple[list[float], list[float], list[float]] = ([], [], [])
    t0 = time.perf_counter()
    rounds = 0
    while rounds < max(1, o.max_rounds):
        if rounds:
            heartbeat(f"timing: round {rounds} done ({time.perf_counter() - t0:.0f} s)")
        for side in _ORDERS[rounds % len(_ORDERS)]:
            sync()
            start = time.perf_counter()
            calls[side]()
            sync()
            times[side].append((time.perf_counter() - start) * 1000)
        rounds += 1
        if rounds < max(1, o.min_rounds):
            continue
        if time.perf_counter() - t0 > o.budget_s:
            break
        if rounds >= MIN_VERDICT_ROUNDS and rounds % 5 == 0:
            ab = ratio_interval(_ratios(times[0], times[1]), seed)
            aa = ratio_interval(_ratios(times[0], times[2]), seed)
            if _tight(*ab, o.target) and _tight(*aa, o.target):
                break
    seconds = time.perf_counter() - t0
    t = from_samples(times[0], times[1], times[2], seed=seed)
    t.original_peak_mb, t.fused_peak_mb, t.seconds = peak_o, peak_f, seconds
    t.warmup_rounds, t.first_call_ms, t.fused_first_call_ms = warm_rounds, firsts[0], firsts[1]
    return t


def from_samples(
    original: Sequence[float], fused: Sequence[float], original_again: Sequence[float] | None = None, *, seed: int = 0
) -> Timing:
    """A :class:`Timing` from paired samples taken elsewhere (whole processes, say): round ``i``
    gave ``original[i]``, ``fused[i]`` and, for the A/A floor, ``original_again[i]``.

    Without ``original_again`` the floor is unknown and stays at exactly 1.0.
    """
    center, low, high = ratio_interval(_ratios(list(original), list(fused)), seed)
    n_low = n_high = 1.0
    if original_again is not None:
        _, n_low, n_high = ratio_interval(_ratios(list(original), list(original_again)), seed)
    rounds = min(len(original), len(fused))
    noisy = (
        not (math.isfinite(low) and math.isfinite(high) and center > 0)
        or (high - low) / 2 > NOISY * center
        or rounds < 3
    )
    both = list(original) + list(original_again or [])
    return Timing(
        original_ms=statistics.median(both) if both else float("nan"),
        fused_ms=statistics.median(fused) if fused else float("nan"),
        repeats=rounds,
        speedup=center,
        speedup_low=low,
        speedup_high=high,
        noisy=noisy,
        noise_low=min(1.0, n_low) if math.isfinite(n_low) else 1.0,
        noise_high=max(1.0, n_high) if math.isfinite(n_high) else 1.0,
    )


def within_noise(values: Sequence[float], seed: int = 0, widest: float = 0.5) -> bool:
    """Whether a quantity measured as ``values`` (e.g. per-round differences of two process
    times) cannot serve as a denominator: its 95% interval holds 0, or is wider than
    ``widest`` of its median on a side. A ratio over it is "too noisy", never printed."""
    center, low, high = median_interval(values, seed)
    if not (math.isfinite(low) and math.isfinite(high)) or low <= 0 <= high or center <= 0:
        return True
    return max(center - low, high - center) > widest * center


def _ratios(num: list[float], den: list[float]) -> list[float]:
    return [a / b if b > 0 else float("inf") for a, b in zip(num, den)]
