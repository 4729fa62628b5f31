"""Each fused module's share of the original end-to-end time, with an interval.

Hooks around each module add up its time within the same forward whose total it is
divided by, so shares are consistent with each other and sum to at most 1. The forwards
start after a warm-up (:func:`fusion_core.run.timing.warm_up`, with the hooks in place,
so the hooks' own first calls are kept out too) and continue until every share's 95%
interval is tight (within ``target`` of the share, or half a percentage point), the time
budget is spent, or :data:`MAX_FORWARDS`; at least :data:`MIN_FORWARDS`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..boundary.options import TimingOptions
from .timing import median_interval, sync_for, warm_up

if TYPE_CHECKING:
    from torch import nn

MIN_FORWARDS = 5
MAX_FORWARDS = 60
ABS_TIGHT = 0.005  # half a percentage point of the end-to-end time is tight enough for any share


def measure_shares(
    run: Callable[[], Any],
    modules: dict[str, nn.Module],
    options: TimingOptions | None = None,
    *,
    device: str = "cpu",
    seed: int = 0,
) -> dict[str, tuple[float, float, float]]:
    """{path: (share, low, high)}: the median share of ``run``'s time each module takes, and its interval.

    Args:
        run: one end-to-end forward of the original model (already under ``inference_mode``).
        modules: the modules to time inside it, by path.
        options: ``budget_s`` bounds the forwards, ``target`` is the relative half-width to stop at.
        device: for synchronisation.
        seed: seed of the bootstrap.
    """
    o = options or TimingOptions()
    sync = sync_for(device)
    spent: dict[str, float] = {}
    started: dict[str, float] = {}

    def pre(path: str) -> Any:
        def hook(*_a: Any) -> None:
            sync()
            started[path] = time.perf_counter()

        return hook

    def post(path: str) -> Any:
        def hook(*_a: Any) -> None:
            sync()
            spent[path] = spent.get(path, 0.0) + time.perf_counter() - started.pop(path, time.perf_counter())

        return hook

    handles = []
    for path, module in modules.items():
        handles += [module.register_forward_pre_hook(pre(path)), module.register_forward_hook(post(path))]
    per_path: dict[str, list[float]] = {p: [] for p in modules}
    try:
        warm_up([run], sync, budget_s=max(0.2, o.budget_s / 2))
        t0 = time.perf_counter()
        while True:
            spent.clear()
            sync()
            start = time.perf_counter()
            run()
            sync()
            total = time.perf_counter() - start
            for p in modules:
                per_path[p].append(min(1.0, spent.get(p, 0.0) / total) if total > 0 else 0.0)
            n = len(next(iter(per_path.values()), []))
            if n >= MAX_FORWARDS or (n >= MIN_FORWARDS and time.perf_counter() - t0 > o.budget_s):
                break
            if n >= MIN_FORWARDS and n % 5 == 0 and all(_tight(v, o.target, seed) for v in per_path.values()):
                break
    finally:
        for h in handles:
            h.remove()
    return {p: median_interval(v, seed) for p, v in per_path.items()}


def _tight(values: list[float], target: float, seed: int) -> bool:
    center, low, high = median_interval(values, seed)
    half = max(center - low, high - center)
    return half <= max(target * center, ABS_TIGHT)
