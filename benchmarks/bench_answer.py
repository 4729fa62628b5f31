"""Benchmark: time to an answer for a check (with upstream parity) and an export (with its consumers).

Both start isolated child processes (``python -I``) that import torch and transformers:
the upstream reference of a check, the consumers of an export. This benchmark runs each
operation three ways in one process, rotating, on the same plan:

* **before**: each child started only when its request is ready, with transformers' own
  ``dir()`` (``FUSION_NO_HF_SPEEDUPS=1``): how it was before these changes;
* **cli**: as a CLI run does: children started at the start of the operation (the upstream
  request sent at once), with the linear-time ``dir()``;
* **app**: as the window's engine does: children forked from a zygote that imported torch
  and transformers once (:mod:`fusion_core.run.zygote`), and a spare child kept between
  operations (:func:`fusion_core.run.isolated.keep_spares`), started after the previous
  operation; the benchmark waits 1.5 child import times before the next one (the user
  reading the result; the zygote, closed by the other modes, starts again meanwhile).

Every mode's children end without the interpreter's teardown (``os._exit``, 1.6 s here):
"before" is before the other changes, not before that one.

It prints the median wall time of each side and the ratios before/cli and before/app with
their 95% bootstrap intervals over the rounds (ratios measured side by side: these machines
are noisy).

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

    def __init__(self, module: str, *, prefix: str = "fusion-child-") -> None:
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


MODES = ("before", "cli", "app")


def _patched(mode: str) -> Any:
    import os

    import fusion_core.export.consumers as consumers
    import fusion_core.run.upstream as upstream
    from fusion_core.run import isolated

    kind = ColdChild if mode == "before" else isolated.child_for
    upstream.child_for = kind
    consumers.child_for = kind
    if mode == "before":
        os.environ["FUSION_NO_HF_SPEEDUPS"] = "1"
    else:
        os.environ.pop("FUSION_NO_HF_SPEEDUPS", None)
    isolated.keep_spares(1 if mode == "app" else 0)
    isolated.use_zygote(mode == "app")  # the engine forks its children from a zygote


def _import_seconds() -> float:
    """How long one child takes to import (it starts, warms up, reads end of input, and ends)."""
    from fusion_core.run.isolated import WarmChild

    t0 = time.perf_counter()
    WarmChild().finish(300)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="demo:qwen2-vl")
    parser.add_argument("--fusion", default="patch_embeddings")
    parser.add_argument("--runs", type=int, default=5, help="rounds per operation (after one warm-up round)")
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

    from fusion_core.run import isolated

    idle = 1.5 * _import_seconds()  # the app's spare starts after the previous operation
    report: dict[str, Any] = {"model": args.model, "fusion": args.fusion, "runs": args.runs, "spare_idle_s": idle}
    for name, operation in (("check (with upstream)", check), ("export (with consumers)", export)):
        times: dict[str, list[float]] = {m: [] for m in MODES}
        for i in range(args.runs + 1):
            for k in range(len(MODES)):  # rotate which side goes first
                mode = MODES[(i + k) % len(MODES)]
                _patched(mode)
                if mode == "app":  # the engine refills between operations; the user looks at the result
                    isolated.refill_spares()
                    time.sleep(idle)
                t0 = time.perf_counter()
                operation()
                if i:  # the first round warms this process up (imports, caches)
                    times[mode].append(time.perf_counter() - t0)
        _patched("cli")
        entry: dict[str, Any] = {f"{m}_s": statistics.median(times[m]) for m in MODES}
        for m in ("cli", "app"):
            center, low, high = ratio_interval([b / n for b, n in zip(times["before"], times[m])])
            entry[f"before/{m}"] = {"ratio": center, "low": low, "high": high}
        report[name] = entry
        if not args.json:
            print(
                f"{name:26} before {entry['before_s']:6.2f} s  cli {entry['cli_s']:6.2f} s  app {entry['app_s']:6.2f} s"
                + "".join(
                    f"  before/{m} {entry[f'before/{m}']['ratio']:.2f}x "
                    f"[{entry[f'before/{m}']['low']:.2f}, {entry[f'before/{m}']['high']:.2f}]"
                    for m in ("cli", "app")
                )
                + f" ({args.runs} rounds)",
                flush=True,
            )
    if args.json:
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
