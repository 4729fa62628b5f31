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
