"""``patch_embeddings_2d``: Conv2d patch embeddings (stride == kernel) -> one flattened Linear.

ViT, DeiT, BEiT, CLIP, SigLIP, DINOv2, Swin, SAM and the vision towers of many
image-text models cut images into non-overlapping patches with a Conv2d. The equivalent
Linear over flattened patches has the same numbers, reshaped; it is called like the Conv2d
(:class:`fusion_core.families._conv_patch.PatchLinear`), so the embedding module's own
forward runs unchanged. Whether it pays depends on dtype and machine (on CPU it helps in
bfloat16 more than in float32): the checks measure it.

Decided by structure (:class:`fusion_core.families._conv_patch.ConvPatchFusion`): any
module hosting a non-overlapping Conv2d is a candidate, wherever it sits: a bare
``patch_conv`` (Pixtral) or ``patch_embedding`` (Mllama) of a vision model, a mid-network
``downsample`` (GLM-4V), a spatial-reduction ``sr`` in attention (SegFormer, PVT, GLPN), a
SAM mask embedding. Modules named like patch embeddings (``patch_embed``,
``patch_embeddings``, ``patch_embedding``, ``embeddings``, ``embed_patches``) are candidates
with any Conv2d, so an overlapping one is rejected with its reason; one that is already a
Linear (Llama-4's unfolded patches) is a near miss. The Conv3d family (``patch_embeddings``)
only looks at Conv3d children, so no module is claimed or explained by both.
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
    explains_linear = True  # Llama-4's unfolded patch embedding is already a Linear

    def sample_configs(self) -> list[PretrainedConfig]:
        return [samples.clip_vision(), samples.dinov2()]
