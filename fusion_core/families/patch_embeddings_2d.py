"""``patch_embeddings_2d``: Conv2d patch embeddings (stride == kernel) -> one flattened Linear.

ViT, DeiT, BEiT, CLIP, SigLIP, DINOv2, Swin, SAM and the vision towers of many
image-text models cut images into non-overlapping patches with a Conv2d. The equivalent
Linear over flattened patches has the same numbers, reshaped; it is called like the Conv2d
(:class:`fusion_core.families._conv_patch.PatchLinear`), so the embedding module's own
forward runs unchanged. Whether it pays depends on dtype and machine (on CPU it helps in
bfloat16 more than in float32): the checks measure it.

Candidates are modules named like patch embeddings (``patch_embed``, ``patch_embeddings``,
``patch_embedding``, ``embeddings``, ``embed_patches``) that have a direct Conv2d child; the
Conv3d family (``patch_embeddings``) only takes Conv3d children, so no module is claimed by
both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from . import _samples as samples
from ._conv_patch import ConvPatchFusion

if TYPE_CHECKING:
    from transformers import PretrainedConfig


class PatchEmbeddings2dFusion(ConvPatchFusion):
    name = "patch_embeddings_2d"
    description = (
        "Conv2d patch embeddings whose stride equals the kernel (ViT, CLIP, SigLIP, DINOv2...; no padding, "
        "dilation 1, groups 1) become one Linear over flattened patches: same numbers."
    )
    target_modules_patterns = (
        r"(^|\.)patch_embed(s|ding|dings)?$",
        r"(^|\.)embeddings$",
        r"(^|\.)embed_patches$",
    )
    conv_type = nn.Conv2d

    def is_candidate(self, path: str, module: nn.Module) -> bool:
        # a name match alone would make every text `embeddings` module a (rejected) candidate
        return any(type(c) is nn.Conv2d for c in module._modules.values()) and super().is_candidate(path, module)

    def sample_configs(self) -> list[PretrainedConfig]:
        return [samples.clip_vision(), samples.dinov2()]
