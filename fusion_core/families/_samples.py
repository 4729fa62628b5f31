"""Tiny configs of real architectures, the built-in families' ``sample_configs`` (see the conformance kit).

Each is a few layers of width 32-64, so that the kit can build, save and load it several
times in about a second. ``architectures`` names the class to build (with its head).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PretrainedConfig

_TEXT = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
_VISION = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "image_size": 32,
    "patch_size": 8,
}


def _make(config_cls: str, architecture: str, **kwargs: Any) -> PretrainedConfig:
    import transformers

    config = getattr(transformers, config_cls)(**kwargs)
    config.architectures = [architecture]
    return config


def qwen2() -> PretrainedConfig:
    """Qwen2: bias on q, k and v; grouped-query attention; gated MLP."""
    return _make("Qwen2Config", "Qwen2ForCausalLM", **_TEXT)


def gemma() -> PretrainedConfig:
    """Gemma: head_dim apart from hidden_size / heads; gated MLP with GELU."""
    return _make("GemmaConfig", "GemmaForCausalLM", head_dim=16, **_TEXT)


def bart() -> PretrainedConfig:
    """BART: encoder-decoder, so cross attention (queries and keys from different inputs)."""
    return _make(
        "BartConfig",
        "BartForConditionalGeneration",
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


def clip_vision() -> PretrainedConfig:
    """CLIP vision tower: Conv2d patch embedding without bias."""
    return _make("CLIPVisionConfig", "CLIPVisionModel", **_VISION)


def dinov2() -> PretrainedConfig:
    """DINOv2: Conv2d patch embedding with bias, under ``embeddings.patch_embeddings``."""
    return _make("Dinov2Config", "Dinov2Model", **_VISION)


def videomae() -> PretrainedConfig:
    """VideoMAE: Conv3d tubelet embedding (2 frames x 8 x 8 pixels)."""
    return _make("VideoMAEConfig", "VideoMAEModel", num_frames=4, tubelet_size=2, **{**_VISION, "num_hidden_layers": 1})
