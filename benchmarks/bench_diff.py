"""Benchmark: ``fusion_core.compare(A, B, values=True)`` of two ~1.3 GB checkpoints that differ in
one tensor, against reading both files once.

Uses the export benchmark's random-weight Qwen2-VL-shaped checkpoint (generated once under
benchmarks/.bench/; ``--quick``: about 0.5 GB) as A, and a copy of it with one tensor's
first elements changed as B. Each measurement runs in a fresh process, interleaved,
medians over ``--runs`` (after a warm-up round that fills the page cache: the figures are
from memory, not the disk):

* bare import: ``torch``, ``transformers``, ``fusion_core`` and the comparison's modules;
* read: ``cat`` of every file of A and B to /dev/null (both files read once);
* diff: ``fusion_core.compare(A, B, values=True)``, which also prints its own time and
  the time of its values phase (the byte ranges read and compared, the changed tensor
  decoded).

Prints the diff's time beyond the bare import (paired round by round), its in-process time
and its values phase vs the read (target <= 1.3x), and its peak RSS above the bare-import
process vs the largest tensor pair + 100 MiB.

    .venv/bin/python benchmarks/bench_diff.py [--quick] [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
from pathlib import Path

from _machine import machine_line
from bench_export import CACHE, MIB, _median, ensure_checkpoint, largest_tensor, measure

MODULES = "import torch, transformers, safetensors, fusion_core, fusion_core.compare.run, fusion_core.compare.values; "
MODULES += "import transformers.models.qwen2_vl.modeling_qwen2_vl"
DIFF = (
    MODULES + "; import sys, time; from fusion_core import compare; t0 = time.perf_counter(); marks = {}; "
    "progress = lambda p: marks.setdefault('values', time.perf_counter()) if p.message == 'values' else None; "
    "c = compare(sys.argv[1], sys.argv[2], values=True, progress=progress); t1 = time.perf_counter(); "
    "assert not c.equal and c.value_counts()['different'] == 1, c.verdict; "
    "print(t1 - marks['values']); print(t1 - t0)"
)
CHANGED = "model.layers.0.mlp.down_proj.weight"  # as the checkpoint names it (legacy Qwen2-VL names)


def changed_copy(src: Path) -> Path:
    """A copy of ``src`` whose tensor ``CHANGED`` has its first 64 bytes altered (headers unchanged)."""
    dest = CACHE / f"{src.name}-changed"
    if (dest / "config.json").is_file():
        return dest
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    for path in tmp.glob("*.safetensors"):
        with open(path, "r+b") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
            entry = header.get(CHANGED)
            if entry is None:
                continue
            f.seek(8 + n + entry["data_offsets"][0])
            data = bytearray(f.read(64))
            f.seek(8 + n + entry["data_offsets"][0])
            f.write(bytes(b ^ 0x40 for b in data))
            break
    else:
        raise SystemExit(f"{CHANGED} is not in {src}")
    tmp.rename(dest)
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a ~0.5 GB checkpoint and 3 runs")
    parser.add_argument("--runs", type=int, default=None, help="measured runs (default 5, quick 3)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs = args.runs or (3 if args.quick else 5)
    a = ensure_checkpoint(args.quick)
    b = changed_copy(a)
    size = sum(p.stat().st_size for p in a.iterdir())
    largest = largest_tensor(a)
    files = sorted(str(p) for p in (*a.glob("*.safetensors"), *b.glob("*.safetensors")))
    py = sys.executable
    commands = {
        "bare": [py, "-c", MODULES],
        "read": ["sh", "-c", 'cat "$@" > /dev/null', "cat", *files],
        "diff": [py, "-c", DIFF, str(a), str(b)],
    }
    samples: dict[str, list[tuple[float, float, float | None]]] = {name: [] for name in commands}
    values_s: list[float] = []
    for i in range(runs + 1):  # the first round warms the page cache and is dropped
        for name, cmd in commands.items():
            if name == "diff":
                value, phase = _measure_diff(cmd)
                if i:
                    values_s.append(phase)
            else:
                value = measure(cmd)
            if i:
                samples[name].append(value)
            print(f"  run {i}{'' if i else ' (warm-up)'} {name}: {value[0]:.2f} s, {value[1]:.0f} MiB", file=sys.stderr)
    wall = {name: _median([s for s, _, _ in v]) for name, v in samples.items()}
    rss = {name: _median([r for _, r, _ in v]) for name, v in samples.items()}
    net = _median([d - b for (d, _, _), (b, _, _) in zip(samples["diff"], samples["bare"])])
    inner = _median([x for _, _, x in samples["diff"]])
    values = _median(values_s)
    rss_above = rss["diff"] - rss["bare"]
    rss_target = (2 * largest + 100 * MIB) / MIB
    report = {
        "checkpoint": a.name,
        "checkpoint_bytes": size,
        "largest_tensor_mib": round(largest / MIB, 1),
        "runs": runs,
        "seconds": {name: round(v, 3) for name, v in wall.items()},
        "diff_beyond_import_s": round(net, 3),
        "diff_in_process_s": round(inner, 3),
        "values_phase_s": round(values, 3),
        "time_ratio_beyond_import_vs_read": round(net / wall["read"], 2),
        "time_ratio_in_process_vs_read": round(inner / wall["read"], 2),
        "time_ratio_values_vs_read": round(values / wall["read"], 2),
        "time_ratio_target": 1.3,
        "peak_rss_mib": {name: round(v, 1) for name, v in rss.items()},
        "diff_rss_above_import_mib": round(rss_above, 1),
        "rss_target_mib": round(rss_target, 1),
        "rss_fraction_of_target": round(rss_above / rss_target, 2),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    r = report
    print(machine_line())
    print(
        f"A {a.name}: {size / 1e9:.2f} GB, largest tensor {largest / MIB:.0f} MiB; B: one tensor changed; {runs} runs"
    )
    for name in commands:
        print(f"  {name:<6} {wall[name]:7.2f} s   peak RSS {rss[name]:7.0f} MiB")
    print(
        f"diff --values beyond import / reading both files: {net:.2f} s / {wall['read']:.2f} s = "
        f"{r['time_ratio_beyond_import_vs_read']:.2f}x (in process {inner:.2f} s: {r['time_ratio_in_process_vs_read']:.2f}x;"
        f" values phase {values:.2f} s: {r['time_ratio_values_vs_read']:.2f}x; target <= 1.3x)"
    )
    print(
        f"diff RSS above import: {rss_above:.0f} MiB vs largest tensor pair + 100 MiB = {rss_target:.0f} MiB "
        f"({r['rss_fraction_of_target']:.2f} of the budget)"
    )


def _measure_diff(cmd: list[str]) -> tuple[tuple[float, float, float | None], float]:
    """``measure`` for the diff, whose process prints its values phase, then its whole time."""
    import os
    import subprocess
    import time

    os.sync()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit("the diff failed")
    phase, inner = (float(x) for x in out.decode().split()[-2:])
    return (seconds, usage.ru_maxrss / 1024, inner), phase


if __name__ == "__main__":
    main()
