"""Benchmark: ``coverage --check`` over every architecture with a fusable module (issue 34).

Builds a tiny random model of each type, checks it end to end in worker processes, writes
``docs/coverage.md`` and prints the judged ratios: the share built tiny, and of those, the
shares verified end to end / fallback / failed. Off a terminal it prints a progress line
every 30 seconds. An interrupted run resumes with ``--resume``.

Run: ``.venv/bin/python benchmarks/bench_coverage_check.py [--workers N] [--resume] [--types T,...]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from _machine import machine_line

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: the CPUs available)")
    parser.add_argument("--resume", action="store_true", help="keep an interrupted run's answers")
    parser.add_argument("--types", default="", help="only these model types (comma-separated)")
    parser.add_argument("--markdown", default=str(ROOT / "docs" / "coverage.md"), help="the page to write")
    args = parser.parse_args()
    print(machine_line())
    from fusion_core.cli.main import main as cli

    argv = ["coverage", "--check", "--markdown", args.markdown]
    if args.workers is not None:
        argv += ["--workers", str(args.workers)]
    if args.resume:
        argv.append("--resume")
    if args.types:
        argv += ["--types", args.types]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    code = cli(argv)
    print(f"wall {time.perf_counter() - t0:.0f} s; load average before {load:.1f}, after {os.getloadavg()[0]:.1f}")
    sys.exit(code)


if __name__ == "__main__":
    main()
