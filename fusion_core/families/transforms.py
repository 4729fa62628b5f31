"""Key transforms between the original and the fused checkpoint layouts.

A transform maps a group of *source* keys (original layout) to a group of *target* keys
(fused layout) with an exact inverse and shape inference, so that previews need no tensor
data and export can stream tensor by tensor. Keys are full state-dict keys of the model
(``model.visual.patch_embed.proj.weight``); :mod:`fusion_core.plan.fusion_plan` maps them onto the
keys that a checkpoint actually uses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch

Shape = tuple[int, ...]


@dataclass(frozen=True)
class KeyTransform:
    """Base: ``sources`` (original layout) <-> ``targets`` (fused layout)."""

    #: the plain form (``to_plain``): the family, both ops, and the keys on each side
    PLAIN_KEYS: ClassVar[tuple[str, ...]] = ("family", "op", "inverse_op", "sources", "targets")

    family: str
    sources: tuple[str, ...]
    targets: tuple[str, ...]

    op = "identity"
    inverse_op = "identity"

    def forward_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        """Target shapes for source ``shapes`` (no tensor data needed).

        Args:
            shapes: one shape per source key, in order.

        Returns:
            One shape per target key.

        Raises:
            ValueError: the shapes do not match the model's (the message names the key).
        """
        raise NotImplementedError

    def inverse_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        """Source shapes for target ``shapes``: :meth:`forward_shapes` the other way."""
        raise NotImplementedError

    def forward(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Original layout -> fused layout (one tensor per target key).

        Raises:
            ValueError: wrong number of tensors, or shapes that do not match.
        """
        raise NotImplementedError

    def inverse(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Fused layout -> original layout; ``inverse(forward(x))`` is bitwise ``x``.

        Raises:
            ValueError: wrong number of tensors, or shapes that do not match.
        """
        raise NotImplementedError

    def describe(self) -> str:
        """One line for logs: ``op: sources -> targets``."""
        return f"{self.op}: {', '.join(self.sources)} -> {', '.join(self.targets)}"

    def _check_count(self, items: Sequence[object], keys: tuple[str, ...]) -> None:
        if len(items) != len(keys):
            raise ValueError(f"{self.op} expects {len(keys)} tensor(s) for {keys}, got {len(items)}")


def _one_to_one(t: KeyTransform) -> None:
    if len(t.sources) != 1 or len(t.targets) != 1:
        raise ValueError(f"{type(t).__name__} maps one key to one key, got {t.sources} -> {t.targets}")


@dataclass(frozen=True)
class Rename(KeyTransform):
    """One key renamed; the tensor is unchanged."""

    op = "rename"
    inverse_op = "rename"

    def __post_init__(self) -> None:
        _one_to_one(self)

    def forward_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        return [tuple(shapes[0])]

    def inverse_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        return [tuple(shapes[0])]

    def forward(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        self._check_count(tensors, self.sources)
        return [tensors[0]]

    def inverse(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        self._check_count(tensors, self.targets)
        return [tensors[0]]


@dataclass(frozen=True)
class Reshape(KeyTransform):
    """One key renamed and reshaped (a view when the tensor is contiguous).

    ``source_shape`` is the original layout (e.g. a Conv weight ``(O, C, kT, kH, kW)``),
    ``target_shape`` the fused one (``(O, C*kT*kH*kW)``).
    """

    source_shape: Shape = ()
    target_shape: Shape = ()
    name: str = "reshape"
    inverse_name: str = "reshape"

    @property
    def op(self) -> str:  # type: ignore[override]
        return self.name

    @property
    def inverse_op(self) -> str:  # type: ignore[override]
        return self.inverse_name

    def __post_init__(self) -> None:
        _one_to_one(self)
        if math.prod(self.source_shape) != math.prod(self.target_shape):
            raise ValueError(f"cannot reshape {self.source_shape} into {self.target_shape}")

    def forward_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        self._expect(shapes[0], self.source_shape, self.sources[0])
        return [self.target_shape]

    def inverse_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        self._expect(shapes[0], self.target_shape, self.targets[0])
        return [self.source_shape]

    def forward(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        self._check_count(tensors, self.sources)
        self._expect(tuple(tensors[0].shape), self.source_shape, self.sources[0])
        return [tensors[0].reshape(self.target_shape)]

    def inverse(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        self._check_count(tensors, self.targets)
        self._expect(tuple(tensors[0].shape), self.target_shape, self.targets[0])
        return [tensors[0].reshape(self.source_shape)]

    @staticmethod
    def _expect(shape: Sequence[int], expected: Shape, key: str) -> None:
        if tuple(shape) != tuple(expected):
            raise ValueError(f"{key}: shape {tuple(shape)} does not match the model's {tuple(expected)}")


@dataclass(frozen=True)
class Concat(KeyTransform):
    """Several keys concatenated along ``dim`` into one (inverse: split by ``sizes``)."""

    dim: int = 0
    source_shapes: tuple[Shape, ...] = ()

    op = "concat"
    inverse_op = "split"

    def __post_init__(self) -> None:
        # an invalid group would only fail later, mid-export: refuse it when it is made
        if len(self.targets) != 1:
            raise ValueError(f"concat has one target key, got {self.targets}")
        if len(self.source_shapes) != len(self.sources) or not self.sources:
            raise ValueError(f"concat needs one shape per source key: {self.sources} vs {self.source_shapes}")
        ranks = {len(s) for s in self.source_shapes}
        if len(ranks) != 1 or not -min(ranks) <= self.dim < min(ranks):
            raise ValueError(
                f"concat along dim {self.dim} of shapes {self.source_shapes}: ranks differ or dim out of range"
            )
        dim = self.dim % min(ranks)
        rest = {tuple(d for i, d in enumerate(s) if i != dim) for s in self.source_shapes}
        if len(rest) != 1:
            raise ValueError(f"concat along dim {self.dim}: shapes {self.source_shapes} differ in another dimension")

    @property
    def sizes(self) -> list[int]:
        return [s[self.dim] for s in self.source_shapes]

    @property
    def target_shape(self) -> Shape:
        first = list(self.source_shapes[0])
        first[self.dim] = sum(self.sizes)
        return tuple(first)

    def forward_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        for got, want, key in zip(shapes, self.source_shapes, self.sources):
            Reshape._expect(got, want, key)
        return [self.target_shape]

    def inverse_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        Reshape._expect(shapes[0], self.target_shape, self.targets[0])
        return [tuple(s) for s in self.source_shapes]

    def forward(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        import torch

        self._check_count(tensors, self.sources)
        self.forward_shapes([tuple(t.shape) for t in tensors])
        return [torch.cat(list(tensors), dim=self.dim)]

    def inverse(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        self._check_count(tensors, self.targets)
        self.inverse_shapes([tuple(tensors[0].shape)])
        return [t.contiguous() for t in tensors[0].split(self.sizes, dim=self.dim)]
