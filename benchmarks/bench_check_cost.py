"""Benchmark: the wall time of a whole ``fusion-core check`` from two source trees, side by side.

What the timing machinery costs: the same check (default ``demo:qwen2-vl --fusion
patch_embeddings``, upstream parity included) run as a fresh process from this tree and
from another one (``--old``: e.g. ``git archive <commit> | tar -x -C /tmp/old``), in
alternating order, ``--runs`` rounds; the ratio new / old per round with its 95% interval
and the A/A floor (the old tree run twice per round), as ``_ratios.cost`` gives it.

    .venv/bin/python benchmarks/bench_check_cost.py --old /tmp/old [--runs 3] [-- CHECK ARGS...]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _machine import machine_line
from _ratios import cost

HERE = Path(__file__).resolve().parent
DEFAULT = ["check", "demo:qwen2-vl", "--fusion", "patch_embeddings", "--json"]


def run(tree: Path, argv: list[str]) -> float:
    """Seconds of one check as a fresh process with ``tree`` first on the path."""
    env = dict(os.environ, PYTHONPATH=str(tree), HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "fusion_core", *argv], cwd=tree, env=env, capture_output=True)
    seconds = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{tree}: exit {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="the other source tree")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("check", nargs="*", help="the check's arguments (default: demo:qwen2-vl patch_embeddings)")
    args = parser.parse_args(argv)
    check = args.check or DEFAULT
    trees = {"new": HERE.parent, "old": args.old.resolve(), "old_again": args.old.resolve()}
    times: dict[str, list[float]] = {k: [] for k in trees}
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    orders = list(itertools.permutations(trees))
    for i in range(args.runs):
        for name in orders[i % len(orders)]:
            times[name].append(run(trees[name], check))
            print(f"  round {i + 1} {name}: {times[name][-1]:.1f} s", file=sys.stderr)
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    ratio = cost(times["new"], times["old"], times["old_again"])
    print(machine_line())
    print(f"fusion-core {' '.join(check)}: {args.runs} rounds, fresh processes, medians")
    if load_before is not None:
        print(f"load average {load_before:.1f} before, {load_after:.1f} after, on {os.cpu_count()} CPUs")
    for name in trees:
        print(f"  {name:10} {statistics.median(times[name]):7.1f} s")
    print(f"new / old: {ratio['text']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
