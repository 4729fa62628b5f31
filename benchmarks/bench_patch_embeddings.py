"""Benchmark: the ``patch_embeddings`` family, fused vs original module, on CPU.

Real transformers patch-embedding modules at realistic sizes (random weights): Qwen2-VL's
``PatchEmbed`` (1280 dims, 14x14x2 patches) and Qwen3-VL's (1152 dims, 16x16x2) on 4096
patches, and VideoMAE's on a 16-frame 224x224 clip. The fused twin is a deep copy fused in
place by the family (``spec.fuse_module``), exactly what fused loading does. Both run under
``torch.inference_mode`` on the same input, float32 and bfloat16; each fused output is
checked against the original first. Timings: warm-up, then interleaved runs, medians, and
the speedup (original / fused) side by side (target: >= 3x in float32).

    .venv/bin/python benchmarks/bench_patch_embeddings.py [--quick] [--repeats N] [--json]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
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


def _time(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def bench(name: str, patches: int, dtype: str, repeats: int) -> dict[str, Any]:
    from fusion_core.families import get_family

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
        for _ in range(2):  # warm-up (allocator, kernels)
            original(x), fused(x)
        a, b = [], []
        for _ in range(repeats):
            a.append(_time(lambda: original(x)))
            b.append(_time(lambda: fused(x)))
    orig_ms, fused_ms = statistics.median(a), statistics.median(b)
    return {
        "case": name,
        "dtype": dtype,
        "input": list(x.shape),
        "original_ms": round(orig_ms, 3),
        "fused_ms": round(fused_ms, 3),
        "speedup": round(orig_ms / fused_ms, 2),
        "max_abs_diff": diff,
        "max_abs_output": ref.float().abs().max().item(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1024 patches, 5 repeats")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per side (default 20, quick 5)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    patches = 1024 if args.quick else 4096
    repeats = args.repeats or (5 if args.quick else 20)
    rows = [bench(name, patches, dtype, repeats) for name in CASES for dtype in DTYPES]
    if args.json:
        print(json.dumps({"threads": torch.get_num_threads(), "repeats": repeats, "results": rows}, indent=2))
        return 0
    print(f"CPU, {torch.get_num_threads()} threads, torch {torch.__version__}; medians of {repeats} interleaved runs")
    head = f"{'module':26}{'dtype':10}{'input':>20}{'original ms':>13}{'fused ms':>10}{'speedup':>9}{'max diff':>10}"
    print(head)
    print("-" * len(head))
    for r in rows:
        shape = "x".join(map(str, r["input"]))
        print(
            f"{r['case']:26}{r['dtype']:10}{shape:>20}{r['original_ms']:>13.2f}{r['fused_ms']:>10.2f}"
            f"{r['speedup']:>8.2f}x{r['max_abs_diff']:>10.1e}"
        )
    headline = next(r for r in rows if r["case"] == "qwen2_vl PatchEmbed" and r["dtype"] == "float32")
    verdict = "meets" if headline["speedup"] >= TARGET else "BELOW"
    print(f"qwen2_vl float32 speedup {headline['speedup']:.2f}x: {verdict} the >= {TARGET:g}x target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
