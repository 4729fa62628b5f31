"""Benchmark: streaming export (original -> fused) vs a plain copy of the same files.

Generates (once, cached under benchmarks/.bench/) a random-weight Qwen2-VL-shaped
checkpoint of about 1.3 GB (``--quick``: about 0.5 GB), then measures, each in a fresh
process, interleaved, medians over ``--runs``:

* bare import: ``torch``, ``transformers``, ``fusion_core`` and the model's modeling module;
* export: ``fusion_core.export(..., verify_outputs=False)`` (headers re-checked, transforms
  inverted bitwise, files fsynced; the output check would load the model, so it is off);
* copy: ``cp --reflink=never`` of every file of the source folder (and the same followed
  by ``sync`` of the copies: the export fsyncs its files before the final rename).

Every measurement starts after a ``sync``. Prints the export's time beyond the bare import
(whole process minus the bare-import process of the same round, median; and the export's
own in-process time, which is free of the import's noise) vs the copy (target <= 1.5x),
each ratio per round with its 95% interval and the A/A floor of the copy (``_ratios.py``:
a difference that lies within its own noise prints "too noisy", never a number),
and the export's peak RSS above the bare-import process vs 2x the largest tensor + 100 MiB.

    .venv/bin/python benchmarks/bench_export.py [--quick] [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
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
FUSION = {"patch_embeddings": True}
MODULES = "import torch, transformers, safetensors, fusion_core, fusion_core.export.pipeline; "
MODULES += "import transformers.models.qwen2_vl.modeling_qwen2_vl"
BARE = MODULES
# The export prints its own duration (after the imports) too: a second, import-noise-free figure.
EXPORT = (
    MODULES + "; import sys, time; from fusion_core import export; t0 = time.perf_counter(); "
    f"export(sys.argv[1], sys.argv[2], {FUSION!r}, verify_outputs=False, sync=sys.argv[3] == 'sync'); "
    "print(time.perf_counter() - t0)"
)


def generate(folder: Path, layers: int) -> None:
    """Write the export benchmark's checkpoint (a smaller vision tower than the load benchmark's)."""
    _generate(folder, layers, vision_depth=2, vision_dim=512, vision_heads=8)


def ensure_checkpoint(quick: bool) -> Path:
    layers = 4 if quick else 16
    import transformers

    folder = CACHE / f"qwen2vl-random-{layers}l-v2-tf{transformers.__version__}"
    if not (folder / "config.json").is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        print(f"generating {folder.name} (once) ...", file=sys.stderr)
        subprocess.run([sys.executable, __file__, "--_generate", str(folder), str(layers)], check=True)
    return folder


def largest_tensor(folder: Path) -> int:
    """The largest tensor's bytes, from the headers.

    Parsed here rather than with fusion_core: this process must stay small, because a
    child's peak RSS (``ru_maxrss``) starts from its parent's at fork.
    """
    largest = 0
    for path in folder.glob("*.safetensors"):
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        largest = max([largest, *(e["data_offsets"][1] - e["data_offsets"][0] for e in header.values())])
    return largest


def measure(cmd: list[str]) -> tuple[float, float, float | None]:
    """Run ``cmd`` in a fresh process after a ``sync``: (wall s, peak RSS MiB, its own printed s)."""
    os.sync()  # start every measurement with no dirty pages from the previous one
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd[:3])} ...")
    try:
        inner = float(out.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        inner = None
    return seconds, usage.ru_maxrss / 1024, inner  # Linux: KiB


def _median(values: list[float | None]) -> float:
    return statistics.median(v for v in values if v is not None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a ~0.5 GB checkpoint and 3 runs")
    parser.add_argument("--runs", type=int, default=None, help="measured runs (default 7, quick 3)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--_generate", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._generate:
        generate(Path(args._generate[0]), int(args._generate[1]))
        return
    runs = args.runs or (3 if args.quick else 7)
    src = ensure_checkpoint(args.quick)
    size = sum(p.stat().st_size for p in src.iterdir())
    largest = largest_tensor(src)
    files = sorted(str(p) for p in src.iterdir())
    work = CACHE / "out"
    py = sys.executable
    copied = " ".join(f"'{work / 'copy' / Path(f).name}'" for f in files)
    commands = {
        "bare": [py, "-c", BARE],
        "export": [py, "-c", EXPORT, str(src), str(work / "export"), "sync"],
        "export_nosync": [py, "-c", EXPORT, str(src), str(work / "export_nosync"), "nosync"],
        "copy": ["cp", "--reflink=never", *files, str(work / "copy")],
        # the same copy made durable, as the export is by default (fsync before the rename)
        "copy_sync": [
            "sh",
            "-c",
            f"cp --reflink=never {' '.join(map(repr, files))} '{work / 'copy'}' && sync {copied}",
        ],
    }
    # each copy twice per round: the A/A noise floor of every ratio over a copy
    commands["copy_again"], commands["copy_sync_again"] = commands["copy"], commands["copy_sync"]
    samples: dict[str, list[tuple[float, float, float | None]]] = {name: [] for name in commands}
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    for i in range(runs + 1):  # the first round warms the page cache and is dropped
        names = list(commands)
        names = names[i % len(names) :] + names[: i % len(names)]  # rotating order: drift hits all alike
        for name in names:
            cmd = commands[name]
            shutil.rmtree(work, ignore_errors=True)
            (work / "copy").mkdir(parents=True)
            value = measure(cmd)
            if i:
                samples[name].append(value)
            print(f"  run {i}{'' if i else ' (warm-up)'} {name}: {value[0]:.2f} s, {value[1]:.0f} MiB", file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    walls = {name: [s for s, _, _ in v] for name, v in samples.items()}
    inners = {
        name: [x if x is not None else float("nan") for _, _, x in samples[name]]
        for name in ("export", "export_nosync")
    }
    nets = {name: minus(walls[name], walls["bare"]) for name in ("export", "export_nosync")}
    # a difference of two process times is a numerator only when it stays clear of its own noise
    ratios = {
        "vs_durable_copy": cost(nets["export"], walls["copy_sync"], walls["copy_sync_again"]),
        "in_process_vs_durable_copy": cost(inners["export"], walls["copy_sync"], walls["copy_sync_again"]),
        "nosync_vs_copy": cost(nets["export_nosync"], walls["copy"], walls["copy_again"]),
        "nosync_in_process_vs_copy": cost(inners["export_nosync"], walls["copy"], walls["copy_again"]),
    }
    wall = {name: _median([s for s, _, _ in v]) for name, v in samples.items()}
    rss = {name: _median([r for _, r, _ in v]) for name, v in samples.items()}
    inner = {name: _median([x for _, _, x in v]) for name in ("export", "export_nosync") for v in [samples[name]]}
    # the import time varies from process to process: subtract it round by round (paired)
    net = {
        name: _median([e - b for (e, _, _), (b, _, _) in zip(samples[name], samples["bare"])])
        for name in ("export", "export_nosync")
    }
    rss_above = rss["export"] - rss["bare"]
    rss_target = (2 * largest + 100 * MIB) / MIB
    report = {
        "checkpoint": src.name,
        "checkpoint_bytes": size,
        "largest_tensor_mib": round(largest / MIB, 1),
        "runs": runs,
        "seconds": {name: round(v, 3) for name, v in wall.items()},
        "export_beyond_import_s": round(net["export"], 3),
        "export_in_process_s": round(inner["export"], 3),
        "load_average": {"before": load_before, "after": load_after, "cpus": os.cpu_count()},
        "time_ratio_vs_durable_copy": ratios["vs_durable_copy"]["ratio"],
        "time_ratio_in_process_vs_durable_copy": ratios["in_process_vs_durable_copy"]["ratio"],
        "time_ratio_nosync_vs_copy": ratios["nosync_vs_copy"]["ratio"],
        "time_ratio_nosync_in_process_vs_copy": ratios["nosync_in_process_vs_copy"]["ratio"],
        "ratios": ratios,
        "time_ratio_target": 1.5,
        "machine": machine(),
        "peak_rss_mib": {name: round(v, 1) for name, v in rss.items()},
        "export_rss_above_import_mib": round(rss_above, 1),
        "rss_target_mib": round(rss_target, 1),
        "rss_fraction_of_target": round(rss_above / rss_target, 2),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(machine_line())
    print(f"checkpoint {src.name}: {size / 1e9:.2f} GB, largest tensor {largest / MIB:.0f} MiB; {runs} runs, medians")
    for name in commands:
        print(f"  {name:<14} {wall[name]:7.2f} s   peak RSS {rss[name]:7.0f} MiB")
    r = report
    if load_before is not None:
        print(f"load average {load_before:.1f} before, {load_after:.1f} after, on {os.cpu_count()} CPUs")
    print("ratios per round, 95% interval, A/A noise floor (each copy run twice per round):")
    print(
        f"export (fsync) beyond import {net['export']:.2f} s / durable copy {wall['copy_sync']:.2f} s: "
        f"{r['ratios']['vs_durable_copy']['text']}; in-process {inner['export']:.2f} s: "
        f"{r['ratios']['in_process_vs_durable_copy']['text']} (target <= 1.5x)"
    )
    print(
        f"export (no fsync) beyond import {net['export_nosync']:.2f} s / cp {wall['copy']:.2f} s: "
        f"{r['ratios']['nosync_vs_copy']['text']}; in-process {inner['export_nosync']:.2f} s: "
        f"{r['ratios']['nosync_in_process_vs_copy']['text']}"
    )
    print(
        f"export RSS above import: {rss_above:.0f} MiB vs 2x largest tensor + 100 MiB = {rss_target:.0f} MiB "
        f"({r['rss_fraction_of_target']:.2f} of the budget)"
    )


if __name__ == "__main__":
    main()
