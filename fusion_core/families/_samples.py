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


def pixtral_vision() -> PretrainedConfig:
    """Pixtral's vision model: a bare ``patch_conv`` Conv2d on the model itself (the root)."""
    return _make("PixtralVisionConfig", "PixtralVisionModel", **_VISION, head_dim=8)


def segformer() -> PretrainedConfig:
    """SegFormer: spatial-reduction Conv2d (kernel == stride == sr_ratio) inside attention,
    only where the ratio is above 1 (the last stage has none), beside overlapping patch embeddings."""
    return _make(
        "SegformerConfig",
        "SegformerModel",
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[16, 32],
        num_attention_heads=[1, 2],
        mlp_ratios=[2, 2],
        patch_sizes=[7, 3],
        strides=[4, 2],
        decoder_hidden_size=32,
        image_size=32,
    )


def glm4v_vision() -> PretrainedConfig:
    """GLM-4V's vision tower: a Conv3d patch embedding, then a mid-network ``downsample``
    Conv2d (kernel == stride == spatial merge) fed a permuted, channels-last feature map."""
    return _make(
        "Glm4vVisionConfig",
        "Glm4vVisionModel",
        depth=1,
        hidden_size=32,
        intermediate_size=64,
        num_heads=4,
        out_hidden_size=32,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
        image_size=56,
    )
