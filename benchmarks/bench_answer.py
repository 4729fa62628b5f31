"""Benchmark: time to an answer for a check (with upstream parity) and an export (with its consumers).

Both start isolated child processes (``python -I``) that import torch and transformers:
the upstream reference of a check, the consumers of an export. The engine starts them at
the beginning of the operation (:class:`fusion_core.run.isolated.WarmChild`), so that
their imports (and the consumers' loading of the source) overlap its own work. This
benchmark runs each operation both ways in one process, alternating, on the same plan:

* **now**: as the engine does: children started ahead, and each child uses the linear-time
  ``dir()`` of :mod:`fusion_core.run.hf_speedups` (transformers' own is quadratic and runs
  on every model build once a fusion is registered);
* **before**: each child started only when its request is ready, with transformers' own
  ``dir()`` (``FUSION_NO_HF_SPEEDUPS=1``): how it was before both changes.

It prints the median wall time of each side and the ratio before/now with its 95% bootstrap
interval over the pairs (a ratio measured side by side: these machines are noisy).

    .venv/bin/python benchmarks/bench_answer.py [--model demo:qwen2-vl] [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


class ColdChild:
    """A WarmChild that starts its process only when its answer is asked for (the old behaviour)."""

    def __init__(self, module: str, *, prefix: str) -> None:
        self._args = (module, prefix)
        self._child: Any = None
        self._lines: list[str] = []

    @property
    def sent(self) -> int:
        return len(self._lines)

    def send(self, line: str) -> None:
        self._lines.append(line)

    def finish(self, timeout: float) -> Any:
        from fusion_core.run.isolated import WarmChild

        if self._child is not None:  # asked again: the same answer
            return self._child.finish(timeout)
        module, prefix = self._args
        self._child = WarmChild(module, prefix=prefix)
        for line in self._lines:
            self._child.send(line)
        return self._child.finish(timeout)

    def close(self) -> None:
        if self._child is not None:
            self._child.close()


def _patched(cold: bool) -> Any:
    import os

    import fusion_core.export.consumers as consumers
    import fusion_core.run.upstream as upstream
    from fusion_core.run.isolated import WarmChild

    kind = ColdChild if cold else WarmChild
    upstream.WarmChild = kind
    consumers.WarmChild = kind
    if cold:
        os.environ["FUSION_NO_HF_SPEEDUPS"] = "1"
    else:
        os.environ.pop("FUSION_NO_HF_SPEEDUPS", None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="demo:qwen2-vl")
    parser.add_argument("--fusion", default="patch_embeddings")
    parser.add_argument("--runs", type=int, default=5, help="pairs per operation (after one warm-up pair)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from fusion_core.boundary.options import CheckOptions, ExportOptions
    from fusion_core.export.pipeline import iter_export
    from fusion_core.plan.fusion_plan import inspect_model
    from fusion_core.progress import drive
    from fusion_core.run.checks import iter_check
    from fusion_core.run.timing import ratio_interval

    plan = inspect_model(args.model).plan({args.fusion: True})
    check_options = CheckOptions.build(repeats=5, time_budget=0.5)
    out_root = Path(tempfile.mkdtemp(prefix="bench-answer-"))

    def check() -> None:
        result = drive(iter_check(plan, check_options), None, None)
        assert result.upstream is not None and result.upstream.ran, result.upstream

    def export() -> None:
        out = out_root / f"out-{time.monotonic_ns()}"
        result = drive(iter_export(plan, out, ExportOptions()), None, None)
        assert [c.status for c in result.consumers] == ["loads exactly", "loads exactly"], result.consumers

    report: dict[str, Any] = {"model": args.model, "fusion": args.fusion, "runs": args.runs}
    for name, operation in (("check (with upstream)", check), ("export (with consumers)", export)):
        times: dict[bool, list[float]] = {True: [], False: []}
        for i in range(args.runs + 1):
            for cold in (i % 2 == 0, i % 2 == 1):  # alternate which side goes first
                _patched(cold)
                t0 = time.perf_counter()
                operation()
                if i:  # the first pair warms this process up (imports, caches)
                    times[cold].append(time.perf_counter() - t0)
        _patched(False)
        ratios = [c / w for c, w in zip(times[True], times[False])]
        center, low, high = ratio_interval(ratios)
        report[name] = {
            "before_s": statistics.median(times[True]),
            "now_s": statistics.median(times[False]),
            "ratio": center,
            "low": low,
            "high": high,
        }
        if not args.json:
            r = report[name]
            print(
                f"{name:26} before {r['before_s']:6.2f} s  now {r['now_s']:6.2f} s  "
                f"before/now {center:.2f}x [{low:.2f}, {high:.2f}] ({args.runs} pairs)",
                flush=True,
            )
    if args.json:
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
