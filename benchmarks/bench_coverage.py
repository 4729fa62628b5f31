"""Benchmark: the coverage scan of every architecture transformers knows (target <= 60 s wall).

Prints the wall time against the target, the CPU time the workers used (CPU seconds / jobs
is what the scan costs on an otherwise idle machine), the load average around the run
(the scan shares the CPUs with whatever else runs), the slowest model types, and the
per-family counts.

Run: ``.venv/bin/python benchmarks/bench_coverage.py [--jobs N] [--json PATH]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

from _machine import machine_line

from fusion_core.boundary.convert import to_plain

TARGET = 60.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: the CPUs available)")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the report as JSON")
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    from fusion_core.coverage.scan import scan

    imports = time.perf_counter() - t0
    report = scan(jobs=args.jobs)
    wall = time.perf_counter() - t0
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    worker_cpu = children.ru_utime + children.ru_stime
    load_after = os.getloadavg()[0]

    print(machine_line())
    print(
        f"coverage of {len(report.results)} model types: {len(report.instantiated)} instantiated, "
        f"{len(report.failed)} could not be (transformers {report.transformers_version})"
    )
    print(f"wall time (imports + scan)     {wall:7.1f} s   {wall / TARGET:5.2f}x of the {TARGET:g} s target")
    print(f"  of which imports             {imports:7.1f} s")
    print(
        f"workers' CPU time              {worker_cpu:7.1f} s   over {report.jobs} job(s): {worker_cpu / report.jobs:.1f} s each"
    )
    print(f"load average before / after    {load_before:7.1f} / {load_after:.1f} on {os.cpu_count()} CPUs")
    slowest = sorted(report.results, key=lambda r: r.seconds, reverse=True)[:8]
    print("slowest types: " + ", ".join(f"{r.model_type} {r.seconds:.2f} s" for r in slowest))
    for name in report.families:
        print(
            f"  {name:<22} fusable in {len(report.fusable(name)):4d} types, candidates rejected in {len(report.rejected(name)):4d}"
        )
    stages: dict[str, int] = {}
    for r in report.failed:
        stages[r.stage] = stages.get(r.stage, 0) + 1
    print("  failed by stage: " + ", ".join(f"{k} {v}" for k, v in sorted(stages.items())))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(to_plain(report), f, indent=1)


if __name__ == "__main__":
    main()
