"""A deliberately wrong fusion family for tests (not a test): right structure and keys,
outputs 0.1% too large. The checks must catch it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fusion_core.families import register, unregister
from fusion_core.families.patch_embeddings import PatchEmbeddingsFusion


class OffByOnePermille(PatchEmbeddingsFusion):
    name = "test_wrong_patch"

    def make_fused_class(self, original_cls: type) -> type:
        fused = super().make_fused_class(original_cls)

        def forward(module, *args, **kwargs):
            return fused.forward(module, *args, **kwargs) * 1.001

        return type(fused.__name__, (fused,), {"forward": forward, "__module__": fused.__module__})


@contextmanager
def wrong_family() -> Iterator[str]:
    """Register the wrong family for the duration of the block; yields its name."""
    spec = register(OffByOnePermille(), origin="test")
    try:
        yield spec.name
    finally:
        unregister(spec.name)  # also clears the discovery cache, kept per family name


@contextmanager
def scaled_gate_up(factor: float, name: str) -> Iterator[str]:
    """A ``gate_up`` family whose fused MLPs return ``factor`` times the right output, registered
    for the block under ``name``; yields the name."""
    from fusion_core.families.gate_up import GateUpFusion

    class Scaled(GateUpFusion):
        def make_fused_class(self, original_cls: type) -> type:
            fused = super().make_fused_class(original_cls)

            def forward(module, *args, **kwargs):
                return fused.forward(module, *args, **kwargs) * factor

            return type(fused.__name__, (fused,), {"forward": forward, "__module__": fused.__module__})

    Scaled.name = name
    spec = register(Scaled(), origin="test")
    try:
        yield spec.name
    finally:
        unregister(spec.name)


@contextmanager
def flat_weight_2d() -> Iterator[str]:
    """A ``patch_embeddings_2d`` family whose fused host gives the Linear's 2-D weight under the
    Conv's old name (as ours did before it gave the Conv's shape): right numbers module by
    module, but a model that reads the Conv's 4-D weight shape (ViLT) raises. Yields its name."""
    from fusion_core.families._conv_patch import PatchCall
    from fusion_core.families.patch_embeddings_2d import PatchEmbeddings2dFusion

    class FlatWeight:
        def __init__(self, call: PatchCall) -> None:
            self._call = call

        def __call__(self, x):
            return self._call(x)

        def __getattr__(self, name: str):
            if name == "weight":
                return self._call._patch_linear().weight
            return getattr(self._call, name)

    class Flat(PatchEmbeddings2dFusion):
        name = "test_flat_weight_2d"

        def make_fused_class(self, original_cls: type) -> type:
            fused = super().make_fused_class(original_cls)

            def __getattr__(module, name):  # the module's own attribute hook
                value = fused.__getattr__(module, name)
                return FlatWeight(value) if isinstance(value, PatchCall) else value

            return type(fused.__name__, (fused,), {"__getattr__": __getattr__, "__module__": fused.__module__})

    spec = register(Flat(), origin="test")
    try:
        yield spec.name
    finally:
        unregister(spec.name)
