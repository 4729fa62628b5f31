"""Benchmark: fused loading vs a plain ``from_pretrained`` of the same checkpoint.

Generates (once, cached under ``benchmarks/.bench/``) a random-weight Qwen2-VL-shaped
checkpoint of about 1.4 GB (``--quick``: about 0.6 GB), saved by transformers'
``save_pretrained``. Then, each measurement a fresh process, interleaved, medians over
``--runs``:

* plain: ``Qwen2VLForConditionalGeneration.from_pretrained(folder)``;
* fused: ``fusion_core.load(folder, {"patch_embeddings": True})`` (the plan, the strict key
  checks, the load through transformers, the in-place fusion);
* bare: the imports alone (for reference).

Whole-process wall time and peak RSS (``wait4``) of each, and the fused/plain ratios
(targets: time <= 1.10, peak RSS <= 1.05), side by side: per round (plain, fused and plain
again in rotating order), with the 95% interval and the A/A floor (plain against plain) of
the engine's timing (``_ratios.py``). A ratio over a difference that lies within its own
noise (the load "beyond imports" on a busy machine) prints "too noisy", never a number.

    .venv/bin/python benchmarks/bench_load.py [--quick] [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _machine import machine, machine_line
from _qwen2vl_checkpoint import generate as _generate
from _ratios import cost, minus

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".bench"
MIB = 1024 * 1024
QUIET = "import os; os.environ['TRANSFORMERS_VERBOSITY'] = 'error'; os.environ['HF_HUB_OFFLINE'] = '1'; "
QUIET += "from transformers.utils import logging as l; l.disable_progress_bar(); "
TIMED = "import sys, time; t0 = time.perf_counter(); "
SCRIPTS = {
    "bare": QUIET + "import torch, fusion_core, transformers.models.qwen2_vl.modeling_qwen2_vl",
    "plain": QUIET
    + TIMED
    + "from transformers import Qwen2VLForConditionalGeneration as C; m = C.from_pretrained(sys.argv[1]); "
    + "print(time.perf_counter() - t0)",
    "fused": QUIET
    + TIMED
    + "from fusion_core import load; r = load(sys.argv[1], {'patch_embeddings': True}); "
    + "assert r.fused_modules; print(time.perf_counter() - t0)",
}


def generate(folder: Path, layers: int, vision_depth: int) -> None:
    """Write the load benchmark's checkpoint."""
    _generate(folder, layers, vision_depth=vision_depth)


def checkpoint(quick: bool) -> Path:
    import transformers

    layers, depth = (2, 2) if quick else (12, 4)
    folder = CACHE / f"load-qwen2vl-{layers}l{depth}v-v1-tf{transformers.__version__}"
    if not (folder / "config.json").is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        print(f"generating {folder.name} ...", file=sys.stderr)
        generate(folder, layers, depth)
    return folder


def measure_rss(kind: str, folder: Path) -> tuple[dict[str, float], float]:
    """As :func:`measure`, with the child's own peak RSS from ``wait4``."""
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPTS[kind], str(folder)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    # the pipes are small (one number), so waiting before reading cannot deadlock
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    out, err = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
    if proc.returncode != 0:
        raise SystemExit(f"{kind} failed: {err.decode()[-2000:]}")
    lines = out.decode().split()
    inner = float(lines[-1]) if lines and kind != "bare" else 0.0
    rss = usage.ru_maxrss / 1024 if sys.platform != "darwin" else usage.ru_maxrss / MIB
    return {"wall": wall, "inner": inner}, rss


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a ~0.6 GB checkpoint, 3 runs")
    parser.add_argument("--runs", type=int, default=None, help="runs per variant (default 5, quick 3)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    runs = args.runs or (3 if args.quick else 5)
    folder = checkpoint(args.quick)
    size = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    results: dict[str, dict[str, list[float]]] = {k: {"wall": [], "inner": [], "rss": []} for k in SCRIPTS}
    results["plain_again"] = {"wall": [], "inner": [], "rss": []}  # the A/A floor of every ratio over plain
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    measure_rss("plain", folder)  # warm the page cache: every measured run reads from memory
    orders = list(itertools.permutations(("plain", "fused", "plain_again")))
    for i in range(runs):
        for kind in ("bare", *orders[i % len(orders)]):
            times, rss = measure_rss("plain" if kind == "plain_again" else kind, folder)
            results[kind]["wall"].append(times["wall"])
            results[kind]["inner"].append(times["inner"])
            results[kind]["rss"].append(rss)
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    med = {k: {m: statistics.median(v) for m, v in r.items()} for k, r in results.items()}
    r = {k: v["wall"] for k, v in results.items()}
    inner = {k: v["inner"] for k, v in results.items()}
    ratios = {
        "time": cost(r["fused"], r["plain"], r["plain_again"]),
        "load_in_process": cost(inner["fused"], inner["plain"], inner["plain_again"]),
        # a difference of two process times: a ratio only when it stays clear of its noise
        "beyond_imports": cost(
            minus(r["fused"], r["bare"]), minus(r["plain"], r["bare"]), minus(r["plain_again"], r["bare"])
        ),
        "rss": cost(results["fused"]["rss"], results["plain"]["rss"], results["plain_again"]["rss"]),
    }
    report = {
        "checkpoint": str(folder),
        "checkpoint_mb": round(size / MIB, 1),
        "runs": runs,
        "machine": machine(),
        "load_average": {"before": load_before, "after": load_after, "cpus": os.cpu_count()},
        "median": {k: {m: round(v, 4) for m, v in r.items()} for k, r in med.items()},
        "time_ratio": ratios["time"]["ratio"],
        "rss_ratio": ratios["rss"]["ratio"],
        "time_ratio_beyond_imports": ratios["beyond_imports"]["ratio"],
        "ratios": ratios,
        "targets": {"time_ratio": 1.10, "rss_ratio": 1.05},
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(machine_line())
    print(f"checkpoint: {folder.name} ({size / MIB:.0f} MiB), {runs} rounds of fresh processes, medians")
    if load_before is not None:
        print(f"load average {load_before:.1f} before, {load_after:.1f} after, on {os.cpu_count()} CPUs")
    print("ratios: fused / plain per round, 95% interval, A/A noise floor (plain against plain)")
    print(f"{'':22}{'plain':>9}{'fused':>9}  {'ratio [95%] (noise)':40}target")
    print(
        f"{'whole process, s':22}{med['plain']['wall']:>9.2f}{med['fused']['wall']:>9.2f}  "
        f"{ratios['time']['text']:40}<= 1.10"
    )
    print(
        f"{'peak RSS, MiB':22}{med['plain']['rss']:>9.0f}{med['fused']['rss']:>9.0f}  {ratios['rss']['text']:40}<= 1.05"
    )
    print(
        f"{'load in process, s':22}{med['plain']['inner']:>9.2f}{med['fused']['inner']:>9.2f}  "
        f"{ratios['load_in_process']['text']}"
    )
    print(
        f"{'bare imports, s':22}{med['bare']['wall']:>9.2f}{'':9}  beyond imports: {ratios['beyond_imports']['text']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
