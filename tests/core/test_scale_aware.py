"""Comparisons relative to the output's own scale (issue 29, item 1): a module whose outputs
are tiny (a projection initialised with std 1e-10) is never compared vacuously."""

from __future__ import annotations

import torch

from fusion_core.run.results import compare


def test_tiny_outputs_are_judged_relative_to_their_scale() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(16, 1176, generator=gen)
    w = torch.randn(32, 3, 2, 14, 14, generator=gen) * 1e-10  # initializer_range 1e-10
    right = x @ w.reshape(32, -1).T
    # the classic flatten-order bug: columns in (kh, kw, C) order instead of (C, kh, kw)
    wrong = x @ w.permute(0, 2, 3, 4, 1).reshape(32, -1).T
    assert right.abs().max().item() < 1e-7
    bad = compare(right, wrong, "float32")
    assert bad.max_abs_diff < 1e-5  # within a fixed atol of 1e-5: the old rule passed it
    assert not bad.passed and bad.max_rel_diff > 0.1
    # a change of summation order at the same scale still passes
    reordered = (x.double() @ w.reshape(32, -1).double().T).float()
    assert compare(right, reordered, "float32").passed


def test_outputs_of_scale_one_and_above_keep_the_absolute_part() -> None:
    a = torch.full((4,), 3.0)
    c = compare(a, a + 2e-5, "float32")
    assert c.limit == 1e-5 + 1e-5 * 3.0 and c.passed
    half = compare(a / 6, a / 6 + 5e-6, "float32")  # max 0.5: atol scaled by 0.5
    assert half.limit == 1e-5 * 0.5 + 1e-5 * 0.5 and half.passed
    zero = compare(torch.zeros(3), torch.zeros(3), "float32")
    assert zero.limit == 0.0 and zero.passed


def _tiny_std_copy(src, dest):
    """The demo Qwen2-VL with its patch projection scaled to std 1e-10 (an OCR-style tower's init)."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dest)
    weights = load_file(dest / "model.safetensors")
    key = next(k for k in weights if k.endswith("patch_embed.proj.weight"))
    weights[key] = weights[key] * 5e-9  # std 0.02 -> 1e-10
    save_file(weights, dest / "model.safetensors", metadata={"format": "pt"})
    return dest


def test_a_wrong_flatten_order_fails_a_check_on_tiny_outputs(qwen2_vl_dir, tmp_path) -> None:
    """Issue 29: a plugin that lays the fused Linear's columns out as (kh, kw, C) passed on a
    model whose patch outputs are about 1e-8. The right family still passes there."""
    from torch import nn

    from fusion_core import check
    from fusion_core.families import register, unregister
    from fusion_core.families._conv_patch import PatchLinear
    from fusion_core.families.patch_embeddings import PatchEmbeddingsFusion

    class WrongOrder(PatchEmbeddingsFusion):
        name = "test_wrong_flatten_order"

        def fuse_module(self, module: nn.Module) -> None:
            super().fuse_module(module)
            for m in module.modules():
                if isinstance(m, PatchLinear):
                    out = m.weight.shape[0]
                    cols = m.weight.detach().reshape(out, m.in_channels, *m.kernel_size)
                    wrong = cols.permute(0, *range(2, cols.dim()), 1).reshape(out, -1).clone()
                    m.weight = nn.Parameter(wrong, requires_grad=False)

    folder = _tiny_std_copy(qwen2_vl_dir, tmp_path / "tiny-std")
    right = check(str(folder), {"patch_embeddings": True}, upstream=False, time_budget=0)
    assert right.passed and right.modules[0].comparison.max_original < 1e-6
    spec = register(WrongOrder(), origin="test")
    try:
        wrong = check(str(folder), {spec.name: True}, upstream=False, time_budget=0)
    finally:
        unregister(spec.name)
    c = wrong.modules[0].comparison
    assert not wrong.passed and not c.passed
    assert c.max_abs_diff < 1e-5 < c.max_rel_diff * 1e5  # within the old fixed atol; far off relative to its scale
