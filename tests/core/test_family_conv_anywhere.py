"""Non-overlapping convolutions decided by structure, wherever they sit (issue 22).

Bare patch convolutions (Pixtral's ``patch_conv`` on the model itself), mid-network ones
(GLM-4V's ``downsample``, fed a permuted feature map; SegFormer's spatial reduction, present
only in some instances of its class), and the reasons each family gives: only for modules
that look like its own target.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fusion_core import inspect_model
from fusion_core.conformance import check_family
from fusion_core.families import _samples as samples
from fusion_core.families import families
from fusion_core.families._conv_patch import PatchLinear, owned_convs
from fusion_core.families.patch_embeddings_2d import PatchEmbeddings2dFusion

FAMILY = "patch_embeddings_2d"


class _Anywhere(PatchEmbeddings2dFusion):
    """The built-in family, run by the kit on models where the convolution is no patch embedding."""

    def sample_configs(self):
        return [samples.pixtral_vision(), samples.segformer(), samples.glm4v_vision()]


def test_bare_and_mid_network_convolutions_pass_the_kit():
    # in place == original, fused layout == in place, original -> fused -> original bitwise, no leak
    order = [spec.name for spec in families()]
    report = check_family(_Anywhere(), demos=[])
    assert report.passed, report.summary()
    assert [spec.name for spec in families()] == order  # the built-in family is back in its own place
    fused_on = report.by_name("matches_a_model")[0].detail
    assert all(f"sample:{t}" in fused_on for t in ("pixtral", "segformer", "glm4v_vision")), fused_on
    ran = {p.name for p in report.properties if p.passed and not p.skipped}
    assert {"export_round_trip", "in_place_equals_fused_layout", "fused_forward_equals_original"} <= ran


@pytest.mark.parametrize(
    ("arch", "family", "path", "key"),
    [
        ("pixtral", FAMILY, "", "linear_patch_conv.weight"),
        ("mllama", FAMILY, "vision_model", "vision_model.linear_patch_embedding.weight"),
        ("glm4v", FAMILY, "visual", "visual.linear_downsample.weight"),
        ("glm4v", "patch_embeddings", "visual.patch_embed", "visual.patch_embed.linear_proj.weight"),
        ("sam", FAMILY, "prompt_encoder.mask_embed", "prompt_encoder.mask_embed.linear_conv2.weight"),
        (
            "pvt",
            FAMILY,
            "encoder.block.0.0.attention.self",
            "encoder.block.0.0.attention.self.linear_sequence_reduction.weight",
        ),
    ],
)
def test_matched_wherever_it_sits(arch, family, path, key):
    plan = inspect_model(f"arch:{arch}").plan({family: True})
    [fam] = plan.families
    assert path in fam.discovery.matched_paths
    assert key in {k for t in fam.discovery.transforms for k in t.targets}


def test_reasons_under_the_right_family():
    mllama = inspect_model("arch:mllama")
    # the Conv3d family says nothing about a Conv2d
    conv3d = mllama.discovery("patch_embeddings")
    assert not conv3d.rejected and not conv3d.near_misses
    llama4 = inspect_model("arch:llama4")
    assert not llama4.discovery("patch_embeddings").rejected
    [near] = llama4.discovery(FAMILY).near_misses
    assert near.path == "vision_model.patch_embedding" and "already a Linear" in near.reason
    # a keyed container: a concrete reason, under the 2-D family
    convnext = inspect_model("arch:dinov3_convnext").discovery(FAMILY)
    assert convnext.rejected and all("ModuleList" in r.reason for r in convnext.rejected)


def test_patch_linear_takes_channels_last_and_permuted_feature_maps():
    torch.manual_seed(0)
    conv = nn.Conv2d(16, 8, kernel_size=2, stride=2)
    linear = PatchLinear.from_conv(conv)
    x = torch.randn(3, 16, 6, 10)
    with torch.no_grad():
        for feed in (x.to(memory_format=torch.channels_last), x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)):
            torch.testing.assert_close(linear(feed), conv(feed), atol=1e-5, rtol=1e-5)
        one = x[:, :, :2, :2].permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)  # GLM-4V: one patch each
        torch.testing.assert_close(linear(one), conv(one), atol=1e-5, rtol=1e-5)


def test_one_by_one_and_overlapping_convolutions_are_not_targets():
    sam = inspect_model("arch:sam").model.get_submodule("prompt_encoder.mask_embed")
    problems = {rel: p for rel, _c, p in owned_convs(sam, nn.Conv2d)}
    assert problems["conv1"] is None and problems["conv2"] is None
    assert "kernel 1" in problems["conv3"]
