"""A Qwen2-VL-7B-shaped checkpoint with random weights, written shard by shard (issue 35).

Text: hidden 3584, 28 layers, intermediate 18944, 28/4 heads, vocabulary 152064; vision:
depth 32, embed 1280; 8.3B parameters, bfloat16, 16.6 GB in 4 GB shards. The processor and
tokenizer files are the demo's (``demo:qwen2-vl``), and the config's image/video token ids
are the demo tokenizer's (500-503), so a check can feed it a real image and text.

The model is never materialized: names and shapes come from a meta model, each tensor is
drawn (normal 0.02, norms 1, seeded) and written into the current shard, and a shard is
saved with safetensors as soon as it holds 4 GB. Keys are stored as transformers saves
them (``visual.*``, ``model.*``, ``lm_head.weight``); :func:`saved_name` is checked against
the demo's own ``save_pretrained`` output before anything is written.

Usage: ``python benchmarks/_big_checkpoint.py FOLDER [--layers N] [--vision-depth N]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

SHARD_BYTES = 4 * 1024**3


def big_config(layers: int = 28, vision_depth: int = 32) -> object:
    from transformers import Qwen2VLConfig

    return Qwen2VLConfig(
        text_config={
            "vocab_size": 152064,
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_hidden_layers": layers,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
            "tie_word_embeddings": False,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 0,
            "rms_norm_eps": 1e-6,
        },
        vision_config={
            "depth": vision_depth,
            "embed_dim": 1280,
            "hidden_size": 3584,
            "num_heads": 16,
            "mlp_ratio": 4,
            "in_channels": 3,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        image_token_id=500,
        video_token_id=501,
        vision_start_token_id=502,
        vision_end_token_id=503,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )


def saved_name(key: str) -> str:
    """The checkpoint key transformers 5 writes for a Qwen2-VL state-dict key."""
    if key.startswith("model.visual."):
        return key[len("model.") :]
    if key.startswith("model.language_model."):
        return "model." + key[len("model.language_model.") :]
    return key


def _check_names(demo: Path) -> None:
    import safetensors
    import torch
    from transformers import AutoConfig, Qwen2VLForConditionalGeneration

    with torch.device("meta"):
        model = Qwen2VLForConditionalGeneration(AutoConfig.from_pretrained(demo))
    with safetensors.safe_open(str(demo / "model.safetensors"), "pt") as f:
        stored = set(f.keys())
    names = {saved_name(k) for k in model.state_dict()}
    if names != stored:
        raise SystemExit(f"key naming changed in this transformers: {sorted(names ^ stored)[:5]}")


def build(folder: Path, *, layers: int = 28, vision_depth: int = 32, shard_bytes: int = SHARD_BYTES) -> None:
    """Write the checkpoint into ``folder`` (atomically: a temp sibling, then a rename)."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen2VLForConditionalGeneration

    from fusion_core.model.demo import demo_path

    demo = demo_path("qwen2-vl")
    _check_names(demo)
    config = big_config(layers, vision_depth)
    with torch.device("meta"):
        model = Qwen2VLForConditionalGeneration(config)
    params = list(model.state_dict().items())
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    gen = torch.Generator().manual_seed(0)
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    t0 = time.perf_counter()

    def flush() -> None:
        n = len(shards)
        save_file(shards[-1], str(tmp / f"part-{n}.safetensors"), metadata={"format": "pt"})
        print(f"  shard {n}: {size / 1e9:.1f} GB, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    for key, meta in params:
        t = torch.empty(meta.shape, dtype=torch.float32)
        if key.endswith("norm.weight") or "norm1" in key or "norm2" in key or key.endswith("ln_q.weight"):
            t.fill_(1.0) if key.endswith("weight") else t.zero_()
        elif key.endswith("bias"):
            t.zero_()
        else:
            t.normal_(0.0, 0.02, generator=gen)
        t = t.to(torch.bfloat16)
        if size + t.nbytes > shard_bytes and shards[-1]:
            flush()
            shards.append({})
            size = 0
        shards[-1][saved_name(key)] = t
        size += t.nbytes
    flush()
    total = len(shards)
    weight_map: dict[str, str] = {}
    for i, shard in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{total:05d}.safetensors"
        os.replace(tmp / f"part-{i}.safetensors", tmp / name)
        weight_map.update(dict.fromkeys(shard, name))
    total_bytes = sum(t.nbytes for s in shards for t in s.values())
    index = {"metadata": {"total_size": total_bytes}, "weight_map": dict(sorted(weight_map.items()))}
    (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    config.architectures = ["Qwen2VLForConditionalGeneration"]
    config.save_pretrained(tmp)
    for name in ("tokenizer.json", "tokenizer_config.json", "preprocessor_config.json", "generation_config.json"):
        if (demo / name).is_file():
            shutil.copyfile(demo / name, tmp / name)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    print(
        f"wrote {folder}: {total_bytes / 1e9:.1f} GB in {total} shards, {time.perf_counter() - t0:.0f} s",
        file=sys.stderr,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--vision-depth", type=int, default=32)
    args = ap.parse_args()
    build(args.folder, layers=args.layers, vision_depth=args.vision_depth)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
