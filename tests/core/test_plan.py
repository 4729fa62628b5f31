"""Plans: fusion_config validation, patch mapping, key transforms both ways, conflicts."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping

import pytest
from safetensors.torch import load_file, save_file
from torch import nn

from fusion_core import (
    FamilyConflictError,
    InvalidFusionConfigError,
    UnknownFamilyError,
    inspect_model,
    validate_fusion_config,
)
from fusion_core.boundary.convert import to_plain
from fusion_core.families import REGISTRY, register, unregister
from fusion_core.families.base import FusionSpec, Verdict
from fusion_core.families.transforms import Rename

# the smoke subset: also run against the oldest transformers pyproject.toml admits (scripts/test_oldest.sh)
pytestmark = pytest.mark.smoke

# --- validation ------------------------------------------------------------------------


def test_unknown_family_names_the_known_ones():
    with pytest.raises(UnknownFamilyError) as err:
        validate_fusion_config({"patch_embeddings": True, "nope": True})
    assert "'nope'" in str(err.value)
    for name in REGISTRY:
        assert name in str(err.value)


def test_false_skips_true_and_mappings_enable_in_user_order():
    names = list(REGISTRY)
    assert len(names) >= 2
    config = {names[1]: True, names[0]: {}}  # a mapping of options (built-in families declare none)
    assert validate_fusion_config(config) == [(names[1], {}), (names[0], {})]
    assert validate_fusion_config({names[0]: False, names[1]: True}) == [(names[1], {})]
    assert validate_fusion_config(None) == []
    assert validate_fusion_config({}) == []


@pytest.mark.parametrize("value", [1, 0, "yes", None, [True], 1.0])
def test_option_must_be_bool_or_mapping(value):
    with pytest.raises(InvalidFusionConfigError) as err:
        validate_fusion_config({"patch_embeddings": value})
    assert "patch_embeddings" in str(err.value)
    assert "True, False or a mapping" in str(err.value)


def test_fusion_config_must_be_a_mapping():
    with pytest.raises(InvalidFusionConfigError):
        validate_fusion_config(["patch_embeddings"])  # type: ignore[arg-type]


def test_unknown_name_is_reported_before_a_bad_value_of_a_later_entry():
    # validated entry by entry, in the user's order
    with pytest.raises(UnknownFamilyError):
        validate_fusion_config({"nope": True, "patch_embeddings": 3})
    with pytest.raises(InvalidFusionConfigError):
        validate_fusion_config({"patch_embeddings": 3, "nope": True})


# --- the plan --------------------------------------------------------------------------


def test_plan_of_the_demo_both_directions(qwen2_vl_dir):
    plan = inspect_model(str(qwen2_vl_dir)).plan({"patch_embeddings": True})
    assert plan.layout == "original" and plan.has_checkpoint
    assert {o.__name__: f.__name__ for o, f in plan.patch_mapping.items()} == {"PatchEmbed": "FusedPatchEmbed"}
    [row] = plan.rows("load")
    assert (row["source_key"], row["source_shape"], row["target_key"], row["target_shape"], row["op"]) == (
        "visual.patch_embed.proj.weight",
        [32, 3, 2, 14, 14],
        "visual.patch_embed.linear_proj.weight",
        [32, 1176],
        "conv3d_to_linear",
    )
    [back] = plan.rows("save")
    assert (back["source_key"], back["source_shape"], back["target_key"], back["target_shape"], back["op"]) == (
        "visual.patch_embed.linear_proj.weight",
        [32, 1176],
        "visual.patch_embed.proj.weight",
        [32, 3, 2, 14, 14],
        "linear_to_conv3d",
    )
    [ct] = plan.checkpoint_transforms  # the checkpoint's own key names, both ways
    assert (ct.source_keys, ct.target_keys) == (
        ("visual.patch_embed.proj.weight",),
        ("visual.patch_embed.linear_proj.weight",),
    )


def test_plan_json_schema(qwen2_vl_dir):
    data = json.loads(json.dumps(to_plain(inspect_model(str(qwen2_vl_dir)).plan({"patch_embeddings": True}))))
    assert data["model"] == qwen2_vl_dir.name
    [fam] = data["families"]
    assert fam["name"] == "patch_embeddings"
    assert fam["matches"] == [
        {
            "module": "model.visual.patch_embed",
            "class": "PatchEmbed",
            "fused_class": "FusedPatchEmbed",
            "reason": fam["matches"][0]["reason"],
            "class_path": "transformers.models.qwen2_vl.modeling_qwen2_vl.PatchEmbed",
        }
    ]
    assert fam["rejected"] == []
    assert data["patch_mapping"] == {"PatchEmbed": "FusedPatchEmbed"}
    assert data["patch_mapping_modules"] == {"PatchEmbed": ["model.visual.patch_embed"]}
    for key in ("source_key", "target_key", "op", "source_shape", "target_shape", "dtype", "family"):
        assert key in data["transforms"][0]
        assert key in data["reverse_transforms"][0]


def test_fused_layout_checkpoint_is_recognized(qwen2_vl_dir, tmp_path):
    folder = tmp_path / "fused"
    shutil.copytree(qwen2_vl_dir, folder)
    tensors = load_file(folder / "model.safetensors")
    weight = tensors.pop("visual.patch_embed.proj.weight")
    tensors["visual.patch_embed.linear_proj.weight"] = weight.reshape(weight.shape[0], -1).contiguous()
    if "visual.patch_embed.proj.bias" in tensors:
        tensors["visual.patch_embed.linear_proj.bias"] = tensors.pop("visual.patch_embed.proj.bias")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    plan = inspect_model(str(folder)).plan({"patch_embeddings": True})
    assert plan.layout == "fused"
    [row] = plan.rows("load")
    # the original shape is inferred from the fused header and the model, no tensor data
    assert row["source_shape"] == [32, 3, 2, 14, 14] and row["target_shape"] == [32, 1176]


def test_nothing_fusable_is_not_an_error(llama_dir):
    plan = inspect_model(str(llama_dir)).plan({"patch_embeddings": True})
    assert plan.is_empty and plan.rows() == [] and plan.layout == "none"
    assert plan.messages == [plan.families[0].discovery.empty_message]


def test_arch_source_without_weights_uses_model_shapes():
    plan = inspect_model("arch:qwen2_vl").plan({"patch_embeddings": True})
    assert not plan.has_checkpoint
    [row] = plan.rows()
    assert row["source_key"] == "visual.patch_embed.proj.weight"
    assert row["source_shape"] == [1280, 3, 2, 14, 14] and row["target_shape"] == [1280, 1176]


# --- conflicts -------------------------------------------------------------------------


class _RenameProj(FusionSpec):
    """A test family claiming the same checkpoint key as patch_embeddings, on another module."""

    name = "test_rename_proj"
    description = "test only"
    target_modules_patterns = (r"patch_embed\.proj$",)

    def judge(self, module: nn.Module) -> Verdict:
        return Verdict.yes("any Conv3d") if isinstance(module, nn.Conv3d) else Verdict.no("not a Conv3d")

    def make_fused_class(self, original_cls: type) -> type:
        return type(f"Renamed{original_cls.__name__}", (original_cls,), {})

    def make_transforms(self, config: object, modules: Mapping[str, nn.Module]) -> list:
        return [Rename(self.name, (f"{p}.weight",), (f"{p}.renamed_weight",)) for p in modules]

    def fuse_module(self, module: nn.Module) -> None:
        module.__class__ = self.fused_class(type(module))


class _SamePatchEmbed(_RenameProj):
    """A test family replacing the very modules patch_embeddings replaces."""

    name = "test_same_module"
    target_modules_patterns = (r"patch_embed$",)

    def judge(self, module: nn.Module) -> Verdict:
        return Verdict.yes("test")

    def make_transforms(self, config: object, modules: Mapping[str, nn.Module]) -> list:
        return []


@pytest.fixture
def test_family(request):
    spec = register(request.param())
    yield spec.name
    unregister(spec.name)


@pytest.mark.parametrize("test_family", [_RenameProj, _SamePatchEmbed], indirect=True)
def test_conflicting_families_fail_fast_naming_both(qwen2_vl_dir, test_family):
    insp = inspect_model(str(qwen2_vl_dir))
    assert insp.plan({test_family: True}).families[0].discovery.matches  # alone it is fine
    with pytest.raises(FamilyConflictError) as err:
        insp.plan({"patch_embeddings": True, test_family: True})
    assert "'patch_embeddings'" in str(err.value) and f"'{test_family}'" in str(err.value)
    assert "patch_embed" in str(err.value)


def test_omni_model_nests_its_vision_tower_under_the_thinker():
    # the transform's shapes come from the module, not from config.vision_config (absent here)
    insp = inspect_model("arch:qwen2_5_omni")
    plan = insp.plan({"patch_embeddings": True})
    assert plan.model_class == "Qwen2_5OmniForConditionalGeneration"
    # transformers 5.21 moved the tower from thinker.visual to thinker.model.visual
    [path] = [p for p in ("thinker.model.visual.patch_embed", "thinker.visual.patch_embed") if p in insp.tree.by_path]
    assert plan.matched_paths == {path: "patch_embeddings"}
    [row] = plan.rows()
    conv = insp.tree.by_path[f"{path}.proj"].params[0]
    assert row["source_key"] == f"{path}.proj.weight"
    assert row["source_shape"] == list(conv.shape) and row["target_shape"] == [conv.shape[0], 3 * 2 * 14 * 14]
