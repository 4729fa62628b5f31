"""Benchmark: the ``patch_embeddings`` family, fused vs original module, on CPU.

Real transformers patch-embedding modules at realistic sizes (random weights): Qwen2-VL's
``PatchEmbed`` (1280 dims, 14x14x2 patches) and Qwen3-VL's (1152 dims, 16x16x2) on 4096
patches, and VideoMAE's on a 16-frame 224x224 clip. The fused twin is a deep copy fused in
place by the family (``spec.fuse_module``), exactly what fused loading does. Both run under
``torch.inference_mode`` on the same input, float32 and bfloat16; each fused output is
checked against the original first. Timings are the engine's own
(:func:`fusion_core.run.timing.measure`): a warm-up until the time per call settles, then
rounds of original, fused and original again, the speedup (original / fused) with its 95%
interval and the A/A noise floor (target: >= 3x in float32).

    .venv/bin/python benchmarks/bench_patch_embeddings.py [--quick] [--budget S] [--threads N] [--json]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

DTYPES = ("float32", "bfloat16")
TARGET = 3.0


def _qwen2_vl(patches: int) -> tuple[nn.Module, torch.Tensor]:
    from transformers.models.qwen2_vl.modeling_qwen2_vl import PatchEmbed

    module = PatchEmbed(patch_size=14, temporal_patch_size=2, in_channels=3, embed_dim=1280)
    return module, torch.randn(patches, 3 * 2 * 14 * 14)


def _qwen3_vl(patches: int) -> tuple[nn.Module, torch.Tensor]:
    from transformers import Qwen3VLVisionConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionPatchEmbed

    module = Qwen3VLVisionPatchEmbed(Qwen3VLVisionConfig(hidden_size=1152, patch_size=16, temporal_patch_size=2))
    return module, torch.randn(patches, 3 * 2 * 16 * 16)


def _videomae(patches: int) -> tuple[nn.Module, torch.Tensor]:
    from transformers import VideoMAEConfig
    from transformers.models.videomae.modeling_videomae import VideoMAEPatchEmbeddings

    frames = 16 if patches >= 4096 else 4  # 1568 or 392 patches of 2x16x16
    module = VideoMAEPatchEmbeddings(VideoMAEConfig(num_frames=frames))
    return module, torch.randn(1, frames, 3, 224, 224)


CASES: dict[str, Callable[[int], tuple[nn.Module, torch.Tensor]]] = {
    "qwen2_vl PatchEmbed": _qwen2_vl,
    "qwen3_vl PatchEmbed": _qwen3_vl,
    "videomae PatchEmbeddings": _videomae,
}


def bench(name: str, patches: int, dtype: str, options: Any) -> dict[str, Any]:
    from fusion_core.families import get_family
    from fusion_core.run.timing import measure

    torch.manual_seed(0)
    original, x = CASES[name](patches)
    want = getattr(torch, dtype)
    original = original.to(want).eval()
    fused = copy.deepcopy(original)
    get_family("patch_embeddings").fuse_module(fused)
    x = x.to(want)
    with torch.inference_mode():
        ref, out = original(x), fused(x)
        diff = (ref.float() - out.float()).abs().max().item()
        t = measure(lambda: original(x), lambda: fused(x), options)  # warm-up, A/B/A' rounds, the floor
    return {
        "case": name,
        "dtype": dtype,
        "input": list(x.shape),
        "original_ms": round(t.original_ms, 3),
        "fused_ms": round(t.fused_ms, 3),
        "speedup": round(t.speedup, 2),
        "speedup_low": round(t.speedup_low, 2),
        "speedup_high": round(t.speedup_high, 2),
        "noise_low": round(t.noise_low, 3),
        "noise_high": round(t.noise_high, 3),
        "verdict": t.verdict,
        "text": t.verdict_text(),
        "rounds": t.repeats,
        "max_abs_diff": diff,
        "max_abs_output": ref.float().abs().max().item(),
    }


def main(argv: list[str] | None = None) -> int:
    from fusion_core.boundary.options import TimingOptions

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1024 patches, a 1 s budget per timing")
    parser.add_argument("--repeats", type=int, default=None, help="rounds always run per timing (default 7)")
    parser.add_argument("--budget", type=float, default=None, help="seconds per timing (default 3, quick 1)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    patches = 1024 if args.quick else 4096
    options = TimingOptions(min_rounds=args.repeats or 7, budget_s=args.budget or (1.0 if args.quick else 3.0))
    load = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs" if hasattr(os, "getloadavg") else ""
    from _machine import machine, machine_line

    rows = [bench(name, patches, dtype, options) for name in CASES for dtype in DTYPES]
    if args.json:
        print(json.dumps({"machine": machine(), "load": load, "results": rows}, indent=2))
        return 0
    print(f"{machine_line()}; {load}; the engine's timing")
    head = f"{'module':26}{'dtype':10}{'input':>20}{'original ms':>13}{'fused ms':>10}"
    head += f"  {'speedup [95%] verdict (A/A noise floor)':44}{'max diff':>10}"
    print(head)
    print("-" * len(head))
    for r in rows:
        shape = "x".join(map(str, r["input"]))
        print(
            f"{r['case']:26}{r['dtype']:10}{shape:>20}{r['original_ms']:>13.2f}{r['fused_ms']:>10.2f}"
            f"  {r['text']:44}{r['max_abs_diff']:>10.1e}"
        )
    headline = next(r for r in rows if r["case"] == "qwen2_vl PatchEmbed" and r["dtype"] == "float32")
    if headline["verdict"] == "undetermined":
        verdict = "cannot tell against"
    else:  # the whole interval must clear the target, and the floor must be narrower than the margin
        verdict = "meets" if headline["speedup_low"] >= TARGET and headline["verdict"] == "faster" else "BELOW"
    print(f"qwen2_vl float32 speedup {headline['text']}: {verdict} the >= {TARGET:g}x target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
