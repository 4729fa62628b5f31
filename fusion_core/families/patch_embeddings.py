"""``patch_embeddings``: Conv3d patch embeddings (stride == kernel) -> one flattened Linear.

Vision towers of Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V and video models cut frames into
non-overlapping tubelets with a Conv3d. On CPU, the equivalent Linear over flattened
patches is 2.5-5.3x faster in float32 and 4-37x in bfloat16, by CPU class
(docs/benchmarks.md); the weights are the same numbers, reshaped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from . import _samples as samples
from ._conv_patch import ConvPatchFusion

if TYPE_CHECKING:
    from transformers import PretrainedConfig


class PatchEmbeddingsFusion(ConvPatchFusion):
    name = "patch_embeddings"
    description = (
        "Conv3d patch embeddings whose stride equals the kernel (no padding, dilation 1, groups 1) "
        "become one Linear over flattened patches: same numbers, 2.5-5x (float32) and 4-37x (bfloat16) "
        "faster on CPU, by CPU class."
    )
    target_modules_patterns = (r"(^|\.)patch_embed(s|ding|dings)?$", r"(^|\.)tubelet_embed\w*$")
    conv_type = nn.Conv3d

    def sample_configs(self) -> list[PretrainedConfig]:
        return [samples.videomae()]
