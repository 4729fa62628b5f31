"""Tiny real checkpoints of architectures the demos do not cover, for the check tests.

Each builder makes a seeded random model from a transformers config class and
``save_pretrained``s it into ``folder``; nothing is built at import time.
"""

from __future__ import annotations

from pathlib import Path

TEXT = dict(hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2, vocab_size=99)
VISION = dict(hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2)


def _save(model, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    return folder


def llava(folder: Path) -> Path:
    """LLaVA: a CLIP vision tower (Conv2d patch embedding) inside a Llama language model."""
    import torch
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    torch.manual_seed(0)
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(**VISION, image_size=28, patch_size=7, projection_dim=16),
        text_config=LlamaConfig(**{**TEXT, "vocab_size": 120}, num_key_value_heads=2),
        image_token_index=110,
        vision_feature_layer=-1,
    )
    return _save(LlavaForConditionalGeneration(config).eval(), folder)


def clip(folder: Path) -> Path:
    """CLIPModel: two towers; its forward wants pixel values and input ids together."""
    import torch
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(0)
    config = CLIPConfig(
        text_config={**TEXT, "max_position_embeddings": 32},
        vision_config={**VISION, "image_size": 30, "patch_size": 3},
        projection_dim=16,
    )
    return _save(CLIPModel(config).eval(), folder)


def siglip(folder: Path) -> Path:
    """SiglipModel: two towers, ``padding="valid"`` Conv2d."""
    import torch
    from transformers import SiglipConfig, SiglipModel

    torch.manual_seed(0)
    config = SiglipConfig(
        text_config={**TEXT, "max_position_embeddings": 32},
        vision_config={**VISION, "image_size": 32, "patch_size": 4},
    )
    return _save(SiglipModel(config).eval(), folder)


def qwen25_vl_oov(folder: Path) -> Path:
    """Qwen2.5-VL whose image/video/vision-start token ids lie outside its 99-token vocabulary."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    torch.manual_seed(0)
    config = Qwen2_5_VLConfig(
        text_config={
            **TEXT,
            "hidden_size": 64,
            "num_key_value_heads": 2,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
        },
        vision_config=dict(
            depth=2,
            hidden_size=32,
            intermediate_size=37,
            num_heads=4,
            out_hidden_size=64,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            fullatt_block_indexes=[1],
            window_size=56,
        ),
        image_token_id=150000,
        video_token_id=150001,
        vision_start_token_id=150002,
    )
    return _save(Qwen2_5_VLForConditionalGeneration(config).eval(), folder)


def gemma3(folder: Path) -> Path:
    """Gemma3 image-text model: a SigLIP vision tower inside a Gemma3 language model."""
    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    torch.manual_seed(0)
    config = Gemma3Config(
        text_config={
            **TEXT,
            "vocab_size": 300,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "sliding_window": 16,
            "layer_types": ["sliding_attention", "full_attention"],
        },
        vision_config={**VISION, "image_size": 32, "patch_size": 4},
        mm_tokens_per_image=4,
        image_token_index=290,
        boi_token_index=291,
        eoi_token_index=292,
    )
    return _save(Gemma3ForConditionalGeneration(config).eval(), folder)
