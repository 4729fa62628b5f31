"""Key transforms: exact inverse, shape inference without data, clear errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_core.boundary.convert import to_plain
from fusion_core.families.transforms import Concat, Rename, Reshape

dims = st.integers(min_value=1, max_value=4)


def _conv_reshape(shape: tuple[int, ...]) -> Reshape:
    return Reshape(
        family="f",
        sources=("p.proj.weight",),
        targets=("p.linear_proj.weight",),
        source_shape=shape,
        target_shape=(shape[0], math.prod(shape[1:])),
        name="conv3d_to_linear",
        inverse_name="linear_to_conv3d",
    )


@settings(max_examples=40, deadline=None)
@given(st.tuples(dims, dims, dims, dims, dims))
def test_reshape_round_trip_is_bitwise(shape):
    t = _conv_reshape(shape)
    x = torch.randn(shape)
    [fused] = t.forward([x])
    assert tuple(fused.shape) == t.forward_shapes([shape])[0]
    [back] = t.inverse([fused])
    assert torch.equal(back, x)
    assert t.inverse_shapes(t.forward_shapes([shape])) == [shape]
    assert fused.data_ptr() == x.data_ptr()  # contiguous: a view, no copy
    assert (t.op, t.inverse_op) == ("conv3d_to_linear", "linear_to_conv3d")


@settings(max_examples=40, deadline=None)
@given(st.lists(dims, min_size=1, max_size=4), dims, st.integers(min_value=0, max_value=1))
def test_concat_round_trip_and_shapes(sizes, other, dim):
    shapes = tuple((s, other) if dim == 0 else (other, s) for s in sizes)
    keys = tuple(f"m.{i}.weight" for i in range(len(sizes)))
    t = Concat(family="f", sources=keys, targets=("m.fused.weight",), dim=dim, source_shapes=shapes)
    xs = [torch.randn(s) for s in shapes]
    [fused] = t.forward(xs)
    assert tuple(fused.shape) == t.forward_shapes(shapes)[0] == t.target_shape
    back = t.inverse([fused])
    assert all(torch.equal(a, b) for a, b in zip(back, xs))
    assert t.inverse_shapes([t.target_shape]) == list(shapes)
    assert t.sizes == list(sizes)


def test_rename_keeps_the_tensor():
    t = Rename(family="f", sources=("a.bias",), targets=("b.bias",))
    x = torch.arange(3.0)
    assert t.forward([x])[0] is x and t.inverse([x])[0] is x
    assert t.forward_shapes([(3,)]) == [(3,)]
    assert to_plain(t) == {
        "family": "f",
        "op": "rename",
        "inverse_op": "rename",
        "sources": ["a.bias"],
        "targets": ["b.bias"],
    }


def test_shape_mismatch_names_the_key():
    t = _conv_reshape((4, 3, 2, 2, 2))
    with pytest.raises(ValueError, match=r"p\.proj\.weight: shape \(4, 3, 2, 2, 1\)"):
        t.forward_shapes([(4, 3, 2, 2, 1)])
    with pytest.raises(ValueError, match=r"p\.linear_proj\.weight"):
        t.inverse([torch.zeros(4, 23)])
    with pytest.raises(ValueError, match="expects 1 tensor"):
        t.forward([torch.zeros(4, 3, 2, 2, 2)] * 2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source_shapes": ((2, 3), (2, 4)), "dim": 0}, "differ in another dimension"),
        ({"source_shapes": ((2, 3), (2, 3, 1)), "dim": 0}, "ranks differ"),
        ({"source_shapes": ((2, 3), (2, 3)), "dim": 2}, "out of range"),
        ({"source_shapes": ((2, 3),), "dim": 0}, "one shape per source"),
    ],
)
def test_invalid_concat_is_refused_when_made(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Concat(family="f", sources=("a.w", "b.w"), targets=("ab.w",), **kwargs)


def test_invalid_reshape_and_rename_are_refused():
    with pytest.raises(ValueError, match="cannot reshape"):
        Reshape(family="f", sources=("a",), targets=("b",), source_shape=(2, 3), target_shape=(5,))
    with pytest.raises(ValueError, match="one key to one key"):
        Rename(family="f", sources=("a", "b"), targets=("c",))
