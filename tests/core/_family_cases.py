"""Tiny real checkpoints of several architectures, shared by the family tests (not a test).

Each case is a small config of a real transformers model class, built with seeded random
weights and saved with ``save_pretrained`` once per test session. Helpers load them
through :mod:`fusion_core.run.loading`, write fused-layout copies, and run synthetic inputs.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

SEED = 0
_saved: dict[str, Path] = {}


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], tuple[Any, type]]  # -> (config, model class)
    kind: str  # "lm" | "seq2seq" | "vision"
    image_size: int = 32


def _lm(config_cls: str, model_cls: str, **extra: Any) -> Callable[[], tuple[Any, type]]:
    def build() -> tuple[Any, type]:
        import transformers

        config = getattr(transformers, config_cls)(
            vocab_size=256,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=128,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            **extra,
        )
        return config, getattr(transformers, model_cls)

    return build


def _bart() -> tuple[Any, type]:
    from transformers import BartConfig, BartForConditionalGeneration

    config = BartConfig(
        vocab_size=256,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
    )
    return config, BartForConditionalGeneration


def _vision(config_cls: str, model_cls: str, **extra: Any) -> Callable[[], tuple[Any, type]]:
    def build() -> tuple[Any, type]:
        import transformers

        kwargs = {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "image_size": 32,
            "patch_size": 8,
        }
        kwargs.update(extra)
        return getattr(transformers, config_cls)(**kwargs), getattr(transformers, model_cls)

    return build


CASES: dict[str, Case] = {
    c.name: c
    for c in (
        Case("llama", _lm("LlamaConfig", "LlamaForCausalLM", tie_word_embeddings=False), "lm"),
        Case("qwen2", _lm("Qwen2Config", "Qwen2ForCausalLM"), "lm"),
        Case("mistral", _lm("MistralConfig", "MistralForCausalLM", sliding_window=None), "lm"),
        Case("gemma", _lm("GemmaConfig", "GemmaForCausalLM", head_dim=16), "lm"),
        Case("bart", _bart, "seq2seq"),
        Case("vit", _vision("ViTConfig", "ViTModel"), "vision"),
        Case("clip_vision", _vision("CLIPVisionConfig", "CLIPVisionModel"), "vision"),
        Case("siglip_vision", _vision("SiglipVisionConfig", "SiglipVisionModel"), "vision"),
        Case("dinov2", _vision("Dinov2Config", "Dinov2Model", image_size=32), "vision"),
    )
}


def checkpoint(name: str, root: Path) -> Path:
    """The saved tiny checkpoint of case ``name`` (built once per session under ``root``)."""
    folder = _saved.get(name)
    if folder is not None and folder.is_dir():
        return folder
    config, cls = CASES[name].build()
    state = torch.random.get_rng_state()
    torch.manual_seed(SEED)
    try:
        model = cls(config)
    finally:
        torch.random.set_rng_state(state)
    folder = root / name
    model.save_pretrained(folder)
    _saved[name] = folder
    return folder


def inputs(name: str, batch: int = 2) -> dict[str, torch.Tensor]:
    """Deterministic synthetic inputs of the right kind for case ``name``."""
    case = CASES[name]
    g = torch.Generator().manual_seed(1)
    if case.kind == "vision":
        return {"pixel_values": torch.randn(batch, 3, case.image_size, case.image_size, generator=g)}
    ids = torch.randint(3, 250, (batch, 9), generator=g)
    if case.kind == "seq2seq":
        return {"input_ids": ids, "decoder_input_ids": torch.randint(3, 250, (batch, 5), generator=g)}
    return {"input_ids": ids}


def output(model: torch.nn.Module, name: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    batch = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in inputs(name).items()}
    with torch.no_grad():
        out = model(**batch)
    logits = getattr(out, "logits", None)
    return (logits if logits is not None else out.last_hidden_state).float()


def write_fused(src: Path, dst: Path, fusion_config: dict[str, Any]) -> Path:
    """A fused-layout copy of ``src``: the plan's transforms applied to every tensor group."""
    from safetensors.torch import load_file, save_file

    from fusion_core import inspect_model

    plan = inspect_model(str(src)).plan(fusion_config)
    tensors = load_file(src / "model.safetensors")
    for ct in plan.checkpoint_transforms:
        outs = ct.transform.forward([tensors.pop(k) for k in ct.source_keys])
        tensors.update(zip(ct.target_keys, outs))
    dst.mkdir(parents=True)
    save_file(tensors, dst / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    config["fusion_config"] = fusion_config
    (dst / "config.json").write_text(json.dumps(config))
    for extra in ("generation_config.json",):
        if (src / extra).is_file():
            shutil.copy(src / extra, dst / extra)
    return dst
