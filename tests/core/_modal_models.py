"""Tiny real multimodal checkpoints (seeded random weights) for the end-to-end input tests.

Each builder ``save_pretrained``s a model from a transformers config class into ``folder``;
no processor or tokenizer files: the check builds the processor from the config.
"""

from __future__ import annotations

from pathlib import Path

from _check_models import TEXT, VISION, _save, gemma3, llava  # noqa: F401 - re-exported builders


def mllama(folder: Path) -> Path:
    """Mllama: a tiled vision tower whose states reach the text model only through cross-attention."""
    import torch
    from transformers import MllamaConfig, MllamaForConditionalGeneration

    torch.manual_seed(0)
    config = MllamaConfig(
        vision_config=dict(
            hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_global_layers=1, attention_heads=4,
            image_size=16, patch_size=8, max_num_tiles=2, vision_output_dim=64, intermediate_layers_indices=[0],
            supported_aspect_ratios=[[1, 1], [1, 2], [2, 1]],
        ),
        text_config=dict(
            **{**TEXT, "vocab_size": 140}, num_key_value_heads=2, cross_attention_layers=[1],
            bos_token_id=1, eos_token_id=2, pad_token_id=0,
        ),
        image_token_index=130,
    )  # fmt: skip
    return _save(MllamaForConditionalGeneration(config).eval(), folder)


def smolvlm(folder: Path) -> Path:
    """SmolVLM (Idefics3-style): image splitting with patch attention masks."""
    import torch
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration

    torch.manual_seed(0)
    config = SmolVLMConfig(
        vision_config={**VISION, "image_size": 32, "patch_size": 8},
        text_config={**TEXT, "vocab_size": 140, "num_key_value_heads": 2, "pad_token_id": 0},
        scale_factor=2,
        image_token_id=130,
    )
    return _save(SmolVLMForConditionalGeneration(config).eval(), folder)


def qwen2_vl(folder: Path) -> Path:
    """Qwen2-VL: Conv3d tubelets over a grid, images and videos."""
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    torch.manual_seed(0)
    config = Qwen2VLConfig(
        text_config={
            **TEXT, "vocab_size": 160, "hidden_size": 64, "num_key_value_heads": 2,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
        },
        vision_config=dict(depth=1, embed_dim=32, hidden_size=64, num_heads=4, mlp_ratio=2, patch_size=14,
                           temporal_patch_size=2, spatial_merge_size=2),
        image_token_id=150, video_token_id=151, vision_start_token_id=152, vision_end_token_id=153,
    )  # fmt: skip
    return _save(Qwen2VLForConditionalGeneration(config).eval(), folder)


def qwen2_audio(folder: Path) -> Path:
    """Qwen2-Audio: a Whisper-style audio tower (mel features) inside a Qwen2 language model."""
    import torch
    from transformers import Qwen2AudioConfig, Qwen2AudioForConditionalGeneration

    torch.manual_seed(0)
    config = Qwen2AudioConfig(
        audio_config=dict(d_model=32, encoder_layers=1, encoder_attention_heads=4, encoder_ffn_dim=37,
                          num_mel_bins=16, max_source_positions=100),
        text_config={**TEXT, "vocab_size": 160, "num_key_value_heads": 2},
        audio_token_index=150,
    )  # fmt: skip
    return _save(Qwen2AudioForConditionalGeneration(config).eval(), folder)


def qwen25_omni_thinker(folder: Path) -> Path:
    """The Qwen2.5-Omni thinker: vision (Conv3d grid) and audio towers in one language model."""
    import torch
    from transformers import Qwen2_5OmniThinkerConfig, Qwen2_5OmniThinkerForConditionalGeneration

    torch.manual_seed(0)
    config = Qwen2_5OmniThinkerConfig(
        audio_config=dict(d_model=32, encoder_layers=1, encoder_attention_heads=4, encoder_ffn_dim=37,
                          num_mel_bins=16, max_source_positions=100, n_window=10, output_dim=64),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=37, num_heads=4, out_hidden_size=64,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, fullatt_block_indexes=[0],
                           window_size=56),
        text_config={**TEXT, "vocab_size": 170, "hidden_size": 64, "num_key_value_heads": 2,
                     "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3]}},
        audio_token_index=150, image_token_index=151, video_token_index=152, vision_start_token_id=153,
        vision_end_token_id=154, audio_start_token_id=155, audio_end_token_id=156,
    )  # fmt: skip
    return _save(Qwen2_5OmniThinkerForConditionalGeneration(config).eval(), folder)
