"""The ``patch_embeddings_2d`` family on real tiny vision models (ViT, CLIP, SigLIP, DINOv2)."""

from __future__ import annotations

import pytest
import torch
from _family_cases import checkpoint, output
from torch import nn

from fusion_core import inspect_model
from fusion_core.api import load, load_plain
from fusion_core.families import get_family
from fusion_core.families._conv_patch import PatchLinear

FAMILY = "patch_embeddings_2d"
# architecture -> (embedding module, its Conv2d child, key transforms: weight reshape [+ bias rename])
EXPECTED = {
    "vit": ("embeddings.patch_embeddings", "projection", 2),
    "clip_vision": ("embeddings", "patch_embedding", 1),  # no bias
    "siglip_vision": ("embeddings", "patch_embedding", 2),  # padding="valid"
    "dinov2": ("embeddings.patch_embeddings", "projection", 2),
}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("patch2d-models")


@pytest.mark.parametrize("arch", sorted(EXPECTED))
def test_plan_and_in_place_load(arch, root):
    path, conv, n_transforms = EXPECTED[arch]
    folder = checkpoint(arch, root)
    plan = inspect_model(str(folder)).plan({FAMILY: True})
    assert [m.path for m in plan.families[0].discovery.matches] == [path]
    weight = next(r for r in plan.rows("load") if r["op"] == "conv2d_to_linear")
    assert weight["source_shape"] == [32, 3, 8, 8] and weight["target_shape"] == [32, 192]
    assert weight["target_key"].endswith(f"linear_{conv}.weight")

    reference = output(load_plain(str(folder)), arch)
    fused = load(str(folder), {FAMILY: True}).model
    module = fused.get_submodule(path)
    assert type(module)._fusion_family == FAMILY and type(module).__name__.startswith("Fused")
    linear = module.get_submodule(f"linear_{conv}")
    assert type(linear) is PatchLinear and linear.weight.shape == (32, 192)
    # under its old name, the weight is the Conv's shape over the same storage (ViLT reads its shape)
    seen = getattr(module, conv).weight
    assert seen.shape == (32, 3, 8, 8) and seen.data_ptr() == linear.weight.data_ptr()
    assert torch.equal(seen.flatten(1), linear.weight)
    assert not any(isinstance(m, nn.Conv2d) for m in module.modules())
    torch.testing.assert_close(output(fused, arch), reference, atol=1e-5, rtol=1e-5)
    assert len(plan.checkpoint_transforms) == n_transforms
    # the fused layout's outputs and the bitwise round trip: the conformance kit (test_conformance.py)


def test_with_qkv_in_bfloat16(root):
    folder = checkpoint("clip_vision", root)
    families = {FAMILY: True, "qkv": True}
    reference = output(load_plain(str(folder), dtype="bfloat16"), "clip_vision", torch.bfloat16)
    fused = load(str(folder), families, dtype="bfloat16").model
    assert (
        fused.config.fusion_config == families
        and fused.embeddings.linear_patch_embedding.weight.dtype == torch.bfloat16
    )
    torch.testing.assert_close(output(fused, "clip_vision", torch.bfloat16), reference, atol=3e-2, rtol=3e-2)


def test_not_claimed_by_the_conv3d_family(root, qwen2_vl_dir):
    vit = inspect_model(str(checkpoint("vit", root)))
    assert not vit.discovery("patch_embeddings").matches
    assert vit.plan({"patch_embeddings": True, FAMILY: True}).patch_mapping  # no conflict
    qwen = inspect_model(str(qwen2_vl_dir))
    assert not qwen.discovery(FAMILY).matches and not qwen.discovery(FAMILY).rejected


def test_patch_linear_matches_conv2d_on_odd_sizes_and_unbatched():
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 16, kernel_size=(4, 6), stride=(4, 6))
    linear = PatchLinear.from_conv(conv)
    for shape in [(2, 3, 16, 18), (1, 3, 17, 23), (3, 4, 6)]:  # exact, remainder dropped, unbatched
        x = torch.randn(*shape)
        torch.testing.assert_close(linear(x), conv(x), atol=1e-5, rtol=1e-5)


class _Embeddings(nn.Module):
    def __init__(self, conv: nn.Module):
        super().__init__()
        self.patch_embedding = conv

    def forward(self, x):
        return self.patch_embedding(x).flatten(2).transpose(1, 2)


@pytest.mark.parametrize(
    ("conv", "reason"),
    [  # Conv2d arguments: the module is built in the test, not at collection time
        ({"stride": 2}, "stride (2, 2) != kernel (4, 4)"),
        ({"stride": 4, "padding": 1}, "padding (1, 1) is not zero"),
        ({"stride": 4, "dilation": 2}, "dilation (2, 2) is not 1"),
        ({"stride": 4, "groups": 2}, "groups 2 != 1"),
    ],
    ids=["stride", "padding", "dilation", "groups"],
)
def test_rejections_say_why(conv, reason):
    spec = get_family(FAMILY)
    module = _Embeddings(nn.Conv2d(4, 8, 4, **conv))
    assert spec.is_candidate("vision.embeddings", module)
    verdict = spec.judge(module)
    assert not verdict.ok and reason in verdict.reason


def test_candidates_are_decided_by_structure():
    spec = get_family(FAMILY)
    ok = _Embeddings(nn.Conv2d(3, 8, 4, stride=4, padding="valid"))
    assert spec.is_candidate("embeddings", ok) and spec.judge(ok).ok
    assert spec.is_candidate("encoder.downsample", ok)  # wherever it sits (issue 22)
    overlapping = _Embeddings(nn.Conv2d(3, 8, 4, stride=2))
    assert spec.is_candidate("embeddings", overlapping)  # a patch embedding by name: rejected, with the reason
    assert not spec.is_candidate("encoder.block.conv", overlapping)  # an ordinary convolution: not a target
    assert not spec.is_candidate("embeddings", _Embeddings(nn.Conv3d(3, 8, 2, stride=2)))
    assert not spec.is_candidate("embeddings", nn.Embedding(4, 4))


def _sampled_and_fused_equal(module: nn.Module, config) -> str:
    """The family's sample inputs for ``module`` run it, and its fused copy gives the same output;
    returns how the inputs were made (the first accepted candidate's name)."""
    import copy

    from fusion_core.families.base import Workload

    spec = get_family("patch_embeddings_2d")
    args, kwargs = spec.sample_inputs(module, config, Workload(seed=0))
    fused = copy.deepcopy(module)
    spec.fuse_module(fused)
    with torch.inference_mode():
        torch.testing.assert_close(fused(*args, **kwargs), module(*args, **kwargs), atol=1e-5, rtol=1e-5)
    return ", ".join(f"{k}={tuple(v.shape)}" for k, v in kwargs.items())


def test_sample_inputs_carry_the_patch_mask_and_grid_a_forward_requires():
    """Idefics3's embeddings (Aria's and Phi-4-multimodal's towers too) require a
    ``patch_attention_mask``; Kimi-K2.5's patch embedding takes each patch as a small image and
    its ``grid_thw``; MiniCPM-V's embeddings need each image's patch grid: the family's sample inputs give both, so the module is verified even
    where no end-to-end run reaches it."""
    from transformers import Idefics3VisionConfig
    from transformers.models.idefics3.modeling_idefics3 import Idefics3VisionEmbeddings
    from transformers.models.kimi_k25.configuration_kimi_k25 import Kimi_K25VisionConfig
    from transformers.models.kimi_k25.modeling_kimi_k25 import Kimi_K25VisionPatchEmbed

    torch.manual_seed(0)
    config = Idefics3VisionConfig(hidden_size=32, image_size=64, patch_size=16)
    made = _sampled_and_fused_equal(Idefics3VisionEmbeddings(config).eval(), config)
    assert made == "patch_attention_mask=(1, 4, 4)"
    config = Kimi_K25VisionConfig(hidden_size=32, patch_size=14, init_pos_emb_height=8, init_pos_emb_width=8)
    made = _sampled_and_fused_equal(Kimi_K25VisionPatchEmbed(config).eval(), config)
    assert made.startswith("grid_thw=")
    # MiniCPM-V's embeddings place their positions by each image's patch grid, ``target_sizes``
    from transformers.models.minicpmv4_6.configuration_minicpmv4_6 import MiniCPMV4_6VisionConfig
    from transformers.models.minicpmv4_6.modeling_minicpmv4_6 import MiniCPMV4_6VisionEmbeddings

    config = MiniCPMV4_6VisionConfig(hidden_size=32, image_size=64, patch_size=16)
    assert _sampled_and_fused_equal(MiniCPMV4_6VisionEmbeddings(config).eval(), config) == "target_sizes=(1, 2)"
