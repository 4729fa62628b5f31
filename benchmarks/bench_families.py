"""Benchmark: fused vs original module, per fusion family, on CPU, float32 and bfloat16.

For each family, real transformers modules at realistic sizes (random weights) are built
from configs; the fused twin is a deep copy fused in place by the family
(``spec.fuse_module``), exactly what fused loading does. Both run the module's own
``forward`` on the same input under ``torch.inference_mode``; timings are the engine's own
(:func:`fusion_core.run.timing.measure`, what ``fusion-core check`` reports): paired rounds in
alternating order until the 95% interval of the median speedup is tight or the budget is
spent, reported as the speedup with its interval and a verdict (faster / slower / same). Each fused output is checked against the original
first (max abs difference shown), so a fast wrong module cannot win. Each row carries its
A/A noise floor (the original timed against a deep copy of itself in the same rounds: the
fused side is a copy with memory of its own, and on a large-L3 CPU where the weights sit
moves a module's time by several percent): "faster" or "slower" only outside it, after a
warm-up, from 5 rounds on. Every row names the machine (CPU model, ISA flags, torch, threads).

    .venv/bin/python benchmarks/bench_families.py [--quick] [--family NAME] [--threads N] [--json]

On a busy machine ``--threads 1`` gives much steadier ratios (one preempted thread stalls
a 2-thread GEMM).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True)
class Case:
    family: str
    label: str
    build: Callable[[], tuple[nn.Module, Callable[[nn.Module, torch.dtype], Any]]]  # -> (module, run)
    quick: bool = True


def _llama_attention(hidden: int, heads: int, kv_heads: int, tokens: int, bias: bool = False):
    def build():
        from transformers import Qwen2Config
        from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention, Qwen2RotaryEmbedding

        # Qwen2's attention is Llama's with an optional q/k/v bias
        config = Qwen2Config(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads)
        config._attn_implementation = "sdpa"
        module = Qwen2Attention(config, layer_idx=0)
        if not bias:
            for name in ("q_proj", "k_proj", "v_proj"):
                getattr(module, name).bias = None
        rope = Qwen2RotaryEmbedding(config)
        x = torch.randn(1, tokens, hidden)
        positions = torch.arange(tokens)[None]

        def run(m: nn.Module, dtype: torch.dtype):
            h = x.to(dtype)
            cos, sin = rope(h, positions)
            return m(h, position_embeddings=(cos, sin), attention_mask=None)[0]

        return module, run

    return build


def _mlp(hidden: int, intermediate: int, tokens: int):
    def build():
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaMLP

        module = LlamaMLP(LlamaConfig(hidden_size=hidden, intermediate_size=intermediate))
        x = torch.randn(1, tokens, hidden)
        return module, lambda m, dtype: m(x.to(dtype))

    return build


def _patch(kind: str, hidden: int, patch: int, image: int, batch: int):
    def build():
        import transformers

        sizes = {"hidden_size": hidden, "patch_size": patch, "image_size": image, "num_attention_heads": 16}
        if kind == "vit":
            config = transformers.ViTConfig(**sizes)
            from transformers.models.vit.modeling_vit import ViTPatchEmbeddings as cls
        elif kind == "clip":
            config = transformers.CLIPVisionConfig(**sizes)
            from transformers.models.clip.modeling_clip import CLIPVisionEmbeddings as cls
        else:
            config = transformers.SiglipVisionConfig(**sizes)
            from transformers.models.siglip.modeling_siglip import SiglipVisionEmbeddings as cls
        module = cls(config)
        x = torch.randn(batch, 3, image, image)
        return module, lambda m, dtype: m(x.to(dtype))

    return build


CASES = [
    Case("qkv", "Llama-3-8B attention (4096, 32/8 heads), 1 token", _llama_attention(4096, 32, 8, 1)),
    Case("qkv", "Llama-3-8B attention (4096, 32/8 heads), 128 tokens", _llama_attention(4096, 32, 8, 128)),
    Case(
        "qkv", "Qwen2.5-1.5B attention (1536, 12/2 heads, bias), 512 tokens", _llama_attention(1536, 12, 2, 512, True)
    ),
    Case("gate_up", "Llama-3-8B MLP (4096 -> 14336), 1 token", _mlp(4096, 14336, 1)),
    Case("gate_up", "Llama-3-8B MLP (4096 -> 14336), 128 tokens", _mlp(4096, 14336, 128), quick=False),
    Case("gate_up", "Qwen2.5-1.5B MLP (1536 -> 8960), 512 tokens", _mlp(1536, 8960, 512)),
    Case("patch_embeddings_2d", "ViT-B/16 224px, batch 8", _patch("vit", 768, 16, 224, 8)),
    Case("patch_embeddings_2d", "CLIP-L/14 336px, batch 1", _patch("clip", 1024, 14, 336, 1)),
    Case("patch_embeddings_2d", "SigLIP-so400m/14 384px, batch 4", _patch("siglip", 1152, 14, 384, 4)),
]


def _fused_copy(module: nn.Module, family: str) -> nn.Module:
    from fusion_core.families import get_family

    spec = get_family(family)
    fused = copy.deepcopy(module)
    target = next((m for _p, m in fused.named_modules() if spec.judge(m).ok), None)
    if target is None:
        raise RuntimeError(f"{type(module).__name__} has nothing {family!r} can fuse")
    spec.fuse_module(target)
    return fused


def measure(case: Case, dtype_name: str, budget: float) -> dict[str, Any]:
    """Speedup of the fused module over the original, with its 95% interval (the engine's timing)."""
    from fusion_core.boundary.options import TimingOptions
    from fusion_core.run.timing import measure as timed

    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    module, run = case.build()
    module = module.to(dtype).eval()
    fused = _fused_copy(module, case.family)
    # the A/A floor's A' is a copy of the original (two, alternating round by round): the fused
    # side is a copy too, and where a module's weights sit moves its time by up to 19% on a
    # large-L3 Xeon (docs/timing.md); the floor spans placements, not one object's repeats
    twins = itertools.cycle([copy.deepcopy(module), copy.deepcopy(module)])
    with torch.inference_mode():
        ref, out = run(module, dtype).float(), run(fused, dtype).float()
        diff = (ref - out).abs().max().item()
        t = timed(
            lambda: run(module, dtype), lambda: run(fused, dtype), TimingOptions(min_rounds=7, budget_s=budget),
            again=lambda: run(next(twins), dtype),
        )  # fmt: skip
    return {
        "family": case.family,
        "case": case.label,
        "dtype": dtype_name,
        "original_ms": t.original_ms,
        "fused_ms": t.fused_ms,
        "speedup": t.speedup,
        "speedup_low": t.speedup_low,
        "speedup_high": t.speedup_high,
        "noise_low": t.noise_low,
        "noise_high": t.noise_high,
        "verdict": t.verdict + (" (noisy)" if t.noisy else ""),
        "verdict_text": t.verdict_text(),
        "max_abs_diff": diff,
        "rounds": t.repeats,
        "warmup_rounds": t.warmup_rounds,
        "first_call_ms": t.first_call_ms,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer cases and a smaller time budget")
    parser.add_argument("--family", action="append", default=[], help="only these families (repeatable)")
    parser.add_argument("--budget", type=float, default=None, help="seconds per case and dtype (default 3, quick 1)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    budget = args.budget or (1.0 if args.quick else 3.0)
    cases = [c for c in CASES if (not args.family or c.family in args.family) and (c.quick or not args.quick)]
    # other processes skew every ratio: say how busy the machine was
    load = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs" if hasattr(os, "getloadavg") else ""
    from _machine import machine, machine_line

    print(f"{machine_line()}; {load}", file=sys.stderr)
    rows = []
    for case in cases:
        for dtype in DTYPES:
            rows.append({**measure(case, dtype, budget), "machine": machine()})
            r = rows[-1]
            print(f"  {case.family} {case.label} {dtype}: {r['verdict_text']}", file=sys.stderr)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    print(machine_line())
    print(_table(rows))
    if hasattr(os, "getloadavg"):
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    bad = [r for r in rows if r["verdict"].startswith("slower")]
    if bad:
        print("\nslower on this machine:")
        for r in bad:
            print(f"  {r['family']}: {r['case']}, {r['dtype']} ({r['verdict_text']})")
    return 0


def _table(rows: list[dict[str, Any]]) -> str:
    headers = ["family", "case", "dtype", "original ms", "fused ms", "speedup [95%] verdict (A/A noise floor)"]
    headers += ["max |diff|"]
    cells = [
        [
            r["family"],
            r["case"],
            r["dtype"],
            f"{r['original_ms']:.3f}",
            f"{r['fused_ms']:.3f}",
            r["verdict_text"] + (" noisy" if r["verdict"].endswith("(noisy)") else ""),
            f"{r['max_abs_diff']:.1e}",
        ]
        for r in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(headers, *cells)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
