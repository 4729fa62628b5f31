"""Benchmark: ``fusion-core check`` on a real-size Qwen2-VL vision tower, at 448 and 1024 px.

Two checkpoints with random weights (seeded), written once into ``--cache``:

* **full**: Qwen2-VL-2B's vision tower at its real size (depth 32, 1280 dims, 16 heads:
  675M parameters, 2.7 GB in float32) under a small language model. Checked with
  ``--modules-only``: the patch embedding is read alone from the checkpoint by key and
  timed on its own flattened patches; the peak RSS growth shows the memory bound.
* **e2e**: the same widths with ``--e2e-depth`` blocks (default 4), so that the whole
  model runs end to end on one CPU in reasonable time: module and end-to-end speedups
  with their 95% intervals and A/A noise floors (the engine's timing, as ``check``), the
  patch embedding's share (with its interval) of the end-to-end time, and the
  projected end-to-end speedup. With 32 blocks the share (and so the gain) is about
  ``e2e-depth / 32`` of this one.

    .venv/bin/python benchmarks/bench_check.py [--sizes 448 1024] [--e2e-depth 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

FULL = {"depth": 32, "embed_dim": 1280, "num_heads": 16, "hidden_size": 1536, "in_channels": 3}


def _generate(folder: Path, depth: int) -> Path:
    if (folder / "config.json").is_file():
        return folder

    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    config = Qwen2VLConfig(
        text_config={
            "vocab_size": 2000, "hidden_size": 1536, "intermediate_size": 256, "num_hidden_layers": 1,
            "num_attention_heads": 12, "num_key_value_heads": 2, "tie_word_embeddings": False,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        },
        vision_config={**FULL, "depth": depth},
        image_token_id=1990, video_token_id=1991, vision_start_token_id=1992, vision_end_token_id=1993,
    )  # fmt: skip
    from _qwen2vl_checkpoint import save_random

    save_random(Qwen2VLForConditionalGeneration, config, folder)
    return folder


def _hwm_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        return int(f.read().split("VmHWM:")[1].split()[0]) / 1024


def _rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def _row(label: str, size: int, m: Any) -> dict[str, Any]:
    t = m.timing
    return {
        "case": label, "px": size, "module": m.path, "verified_by": m.verified_by, "passed": m.passed,
        "max_abs_diff": m.comparison.max_abs_diff if m.comparison else None,
        "original_ms": t.original_ms, "fused_ms": t.fused_ms, "speedup": t.speedup,
        "low": t.speedup_low, "high": t.speedup_high, "verdict": t.verdict, "share": m.share_of_end_to_end,
        "share_low": m.share_low, "share_high": m.share_high, "noise_low": t.noise_low, "noise_high": t.noise_high,
        "text": t.verdict_text(),
    }  # fmt: skip


def _modules_only_child(folder: Path, size: int, common: dict[str, Any]) -> dict[str, Any]:
    """Run the modules-only check in a fresh process; its rows and peak RSS growth."""
    import subprocess

    code = f"""
import json, sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
import transformers.models.qwen2_vl.modeling_qwen2_vl
from bench_check import _hwm_mb, _rss_mb, _row
from fusion_core import check
base, t0 = _rss_mb(), time.perf_counter()
r = check({str(folder)!r}, {{"patch_embeddings": True}}, modules_only=True, image_size={size}, **{common!r})
out = dict(rows=[_row("full tower, --modules-only", {size}, m) for m in r.modules],
           growth_mb=_hwm_mb() - base, seconds=time.perf_counter() - t0)
print("RESULT " + json.dumps(out))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[7:])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cache", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "fusion-bench-check")
    p.add_argument("--sizes", type=int, nargs="+", default=[448, 1024])
    p.add_argument("--e2e-depth", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--budget", type=float, default=10.0, help="seconds per timing")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--skip-full", action="store_true", help="skip the real-size (2.7 GB) modules-only case")
    p.add_argument("--skip-e2e", action="store_true", help="only the real-size modules-only case")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers.models.qwen2_vl.modeling_qwen2_vl  # noqa: F401  (code, not the checkpoint's memory)

    from fusion_core import check

    fusion = {"patch_embeddings": True}
    common = {"repeats": args.repeats, "time_budget": args.budget, "upstream": False, "threads": args.threads}
    rows, notes = [], []
    if not args.skip_full:
        full = _generate(args.cache / "qwen2-vl-vision-full", FULL["depth"])
        size_gb = sum(f.stat().st_size for f in full.glob("*.safetensors")) / 2**30
        for size in args.sizes:
            # in a fresh process: this one's peak RSS includes writing the checkpoint
            child = _modules_only_child(full, size, common)
            rows += child["rows"]
            notes.append(
                f"full tower ({size_gb:.1f} GB checkpoint), {size} px, --modules-only: peak RSS "
                f"{child['growth_mb']:.0f} MiB above the import baseline, {child['seconds']:.1f} s"
            )
    small = _generate(args.cache / f"qwen2-vl-vision-d{args.e2e_depth}", args.e2e_depth)
    for size in [] if args.skip_e2e else args.sizes:
        r = check(small, fusion, image_size=size, **common)
        rows += [_row(f"depth {args.e2e_depth}, end to end", size, m) for m in r.modules]
        e = r.end_to_end
        notes.append(
            f"depth {args.e2e_depth}, {size} px: end to end {e.timing.verdict_text()}, "
            f"original {e.timing.original_ms:.0f} ms; projected from the module share "
            f"{e.projected_speedup:.3f}x [{e.projected_low:.3f}, {e.projected_high:.3f}]; "
            + "; ".join(v.line for v in r.family_verdicts)
        )
    load = f"; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs" if hasattr(os, "getloadavg") else ""
    from _machine import machine, machine_line

    header = f"{machine_line()}, float32{load}"
    if args.json:
        print(json.dumps({"env": header, "machine": machine(), "rows": rows, "notes": notes}, indent=2))
        return 0
    print(header)
    print(
        f"{'case':30} {'px':>5} {'orig ms':>9} {'fused ms':>9} {'speedup [95%] verdict (A/A noise floor)':>44} "
        f"{'share [95%]':>22} {'max abs':>8}"
    )
    for row in rows:
        share = "" if row["share"] is None else f"{row['share']:.2%}"
        if row["share"] is not None and row["share_low"] is not None:
            share += f" [{row['share_low']:.2%}, {row['share_high']:.2%}]"
        print(
            f"{row['case']:30} {row['px']:>5} {row['original_ms']:>9.2f} {row['fused_ms']:>9.2f} "
            f"{row['text']:>44} {share:>22} {row['max_abs_diff']:>8.1e}"
        )
    for note in notes:
        print(f"- {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
