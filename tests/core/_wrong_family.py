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
