"""Benchmark: ``plan`` of ``arch:qwen2_vl`` (full-size default config) end to end in the core.

Three figures, each against the 0.5 s target of the foundation issue:

* ``first``: the first plan in a process whose imports are done (torch, transformers,
  fusion_core, and the Qwen2-VL modeling module, which pulls in transformers' whole
  modeling machinery: about 3-7 s of imports on this machine, reported separately);
* ``warm``: median of later plans (fresh resolve, meta model, tree, discovery, plan, JSON;
  the discovery cache is cleared each time);
* ``with imports``: a fresh ``python`` process doing the imports and one plan (median wall
  time of a few processes, interpreter start included).

Run: ``.venv/bin/python benchmarks/bench_plan.py [--runs N]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from _machine import machine_line

TARGET = 0.5
SPEC = "arch:qwen2_vl"

_FRESH = """
import time
t0 = time.perf_counter()
from fusion_core import inspect_model
from fusion_core.boundary.convert import to_plain
plan = inspect_model({spec!r}).plan({{"patch_embeddings": True}})
to_plain(plan)
print(time.perf_counter() - t0)
"""


def plan_once() -> float:
    from fusion_core import inspect_model
    from fusion_core.boundary.convert import to_plain
    from fusion_core.plan.discovery import clear_cache

    clear_cache()
    t0 = time.perf_counter()
    plan = inspect_model(SPEC).plan({"patch_embeddings": True})
    to_plain(plan)
    elapsed = time.perf_counter() - t0
    assert plan.rows(), "qwen2_vl must have its patch embedding matched"
    return elapsed


def fresh_process() -> tuple[float, float]:
    """(wall time of the whole process, time inside it from the first import to the plan)."""
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", _FRESH.format(spec=SPEC)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"},
    )
    return time.perf_counter() - t0, float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    t0 = time.perf_counter()
    import torch  # noqa: F401
    import transformers

    import fusion_core  # noqa: F401

    base_imports = time.perf_counter() - t0
    import transformers.models.qwen2_vl.modeling_qwen2_vl  # noqa: F401

    imports = time.perf_counter() - t0
    first = plan_once()
    warm = statistics.median(plan_once() for _ in range(args.runs))
    fresh = [fresh_process() for _ in range(max(1, args.runs // 2))]
    wall = statistics.median(f[0] for f in fresh)
    inside = statistics.median(f[1] for f in fresh)

    def line(name: str, seconds: float, target: float | None = TARGET) -> str:
        ratio = f"  {seconds / target:5.2f}x of the {target:g} s target" if target else ""
        return f"{name:<44} {seconds:7.3f} s{ratio}"

    print(machine_line())
    print(f"plan {SPEC} --fusion patch_embeddings (load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs)")
    print(line("imports: torch, transformers, fusion_core", base_imports, None))
    print(line("imports: + the Qwen2-VL modeling module", imports, None))
    print(line("first plan after imports", first))
    print(line(f"warm plan (median of {args.runs})", warm))
    print(line("fresh process: imports + plan", inside, None))
    print(line("fresh process: wall, interpreter included", wall, None))


if __name__ == "__main__":
    main()
