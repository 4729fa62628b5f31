"""A test family replacing the very module patch_embeddings replaces: a conflict (loaded into the engine)."""

from __future__ import annotations

from collections.abc import Mapping

from torch import nn

from fusion_core.families import FusionSpec, Verdict


class SamePatchEmbed(FusionSpec):
    name = "test_gui_conflict"
    description = "test only"
    target_modules_patterns = (r"patch_embed$",)

    def judge(self, module: nn.Module) -> Verdict:
        return Verdict.yes("test")

    def make_fused_class(self, original_cls: type) -> type:
        return type(f"Other{original_cls.__name__}", (original_cls,), {})

    def make_transforms(self, config: object, modules: Mapping[str, nn.Module]) -> list:
        return []

    def fuse_module(self, module: nn.Module) -> None:
        module.__class__ = self.fused_class(type(module))
