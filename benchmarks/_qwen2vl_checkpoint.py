"""A large random-weight Qwen2-VL-style checkpoint for the load and export benchmarks."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def generate(
    folder: Path, layers: int, *, vision_depth: int = 2, vision_dim: int = 1280, vision_heads: int = 16
) -> None:
    """Write the checkpoint with transformers' own ``save_pretrained`` (atomically: tmp + rename).

    Weights are drawn from a seeded generator on an uninitialized CPU model, which is much
    faster than the model's own init for a >= 1 GB checkpoint.
    """
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    config = Qwen2VLConfig(
        text_config={
            "vocab_size": 32000,
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_hidden_layers": layers,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
            "tie_word_embeddings": False,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 0,
        },
        vision_config={
            "depth": vision_depth,
            "embed_dim": vision_dim,
            "hidden_size": 1024,
            "num_heads": vision_heads,
            "in_channels": 3,
        },
        image_token_id=31990,
        video_token_id=31991,
        vision_start_token_id=31992,
        vision_end_token_id=31993,
    )
    save_random(Qwen2VLForConditionalGeneration, config, folder)


def save_random(cls: type, config: object, folder: Path) -> None:
    """Save ``cls(config)`` with seeded random weights into ``folder`` (atomically: tmp + rename).

    The model is built on the meta device and filled on an uninitialized CPU copy, which is
    much faster than the model's own init for a >= 1 GB checkpoint.
    """
    import torch

    with torch.device("meta"):
        model = cls(config)
    model.to_empty(device="cpu")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02, generator=gen)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    os.replace(tmp, folder)
