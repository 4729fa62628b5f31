"""The plan diff (original against fused, no tensor data) against real loaded models, and ``fusion-core diff``."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fusion_core.api import load, load_plain
from fusion_core.cli.main import main
from fusion_core.plan.diff import diff_plan
from fusion_core.plan.fusion_plan import inspect_model


def _shapes(model) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _apply(diff, before: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The fused state dict the diff predicts from the original one."""
    after = dict(before)
    for c in diff.keys:
        if c.key:
            assert after.pop(c.key) == c.shape
        if c.new_key:
            after[c.new_key] = c.new_shape
    return after


@pytest.mark.parametrize(
    ("demo", "fusions"),
    [("qwen2_vl_dir", ["patch_embeddings", "qkv", "gate_up"]), ("llama_dir", ["qkv", "gate_up"])],
)
def test_diff_predicts_the_real_fused_model(request, demo, fusions):
    folder = request.getfixturevalue(demo)
    plan = inspect_model(folder).plan(dict.fromkeys(fusions, True))
    diff = diff_plan(plan)
    original = load_plain(plan)
    fused = load(plan).model
    # every key, with its shape, as the real (weights-filled) models have them
    assert _apply(diff, _shapes(original)) == _shapes(fused)
    assert diff.unchanged_keys == len(set(_shapes(original)) & set(_shapes(fused))) - diff.counts()["reshaped"]
    assert not diff.unexplained and diff.params_equal
    assert [m.path for m in diff.modules] == list(plan.matched_paths)
    for m in diff.modules:
        real = fused.get_submodule(m.path)
        assert m.fused_class == type(real).__name__ and m.family == plan.matched_paths[m.path]
        assert m.original_params == sum(p.numel() for p in original.get_submodule(m.path).parameters())
        assert m.fused_params == sum(p.numel() for p in real.parameters()) == m.original_params


def test_qwen2_vl_patch_embedding_is_a_rename_with_reshape(qwen2_vl_dir):
    diff = diff_plan(inspect_model(qwen2_vl_dir).plan({"patch_embeddings": True}))
    [change] = diff.keys
    assert (change.kind, change.family, change.op) == ("renamed", "patch_embeddings", "conv3d_to_linear")
    assert (change.key, change.shape) == ("model.visual.patch_embed.proj.weight", (32, 3, 2, 14, 14))
    assert (change.new_key, change.new_shape) == ("model.visual.patch_embed.linear_proj.weight", (32, 1176))
    assert diff.classes() == [
        {"class": "PatchEmbed", "fused_class": "FusedPatchEmbed", "family": "patch_embeddings", "instances": 1}
    ]


def test_llama_concat_keys(llama_dir):
    diff = diff_plan(inspect_model(llama_dir).plan({"qkv": True, "gate_up": True}))
    assert diff.counts() == {"removed": 10, "added": 4, "renamed": 0, "reshaped": 0}
    attn = [c for c in diff.keys if c.module == "model.layers.0.self_attn"]
    assert [(c.kind, c.key or c.new_key, c.shape or c.new_shape) for c in attn] == [
        ("removed", "model.layers.0.self_attn.q_proj.weight", (64, 64)),
        ("removed", "model.layers.0.self_attn.k_proj.weight", (32, 64)),
        ("removed", "model.layers.0.self_attn.v_proj.weight", (32, 64)),
        ("added", "model.layers.0.self_attn.qkv_proj.weight", (128, 64)),
    ]


def test_changes_without_a_transform_are_unexplained(llama_dir):
    plan = inspect_model(llama_dir).plan({"qkv": True})
    diff = diff_plan(dataclasses.replace(plan, transforms=[]))  # a plan whose transforms were lost
    assert len(diff.unexplained) == len(diff.keys) == 8  # 2 layers x (q, k, v removed + qkv added)
    assert all(c.module.endswith("self_attn") and c.family == "" for c in diff.keys)
    assert "without a transform" in diff.messages[-1]


def test_nothing_to_fuse_is_an_empty_diff(llama_dir):
    diff = diff_plan(inspect_model(llama_dir).plan({"patch_embeddings": True}))
    assert diff.keys == [] and diff.modules == [] and diff.params_equal
    assert diff.unchanged_keys == diff.original_keys == diff.fused_keys


def test_full_size_omni_meta_only():
    diff = diff_plan(inspect_model("arch:qwen2_5_omni").plan({"patch_embeddings": True, "qkv": True, "gate_up": True}))
    assert diff.params_equal and not diff.unexplained
    assert diff.original_params == diff.fused_params > 10**10
    instances = {(r["class"], r["family"]): r["instances"] for r in diff.classes()}
    assert instances[("Qwen2_5OmniAttention", "qkv")] == 56
    assert diff.fused_keys == diff.original_keys - diff.counts()["removed"] + diff.counts()["added"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_diff_table_and_json(capsys, llama_dir):
    code, out, err = run(capsys, "diff", str(llama_dir), "--fusion", "qkv", "--fusion", "gate_up")
    assert code == 0 and err == ""
    assert "21 keys -> 15 keys (11 unchanged; 10 removed, 4 added, 0 renamed, 0 reshaped)" in out
    assert "LlamaAttention -> FusedLlamaAttention  12,288  12,288" in out
    code, out, err = run(capsys, "diff", str(llama_dir), "--fusion", "qkv", "--json")
    data = json.loads(out)
    assert code == 0 and data["schema_version"] == 1
    assert data["summary"]["params_equal"] is True and data["summary"]["removed"] == 6
    assert data["keys"][3] == {
        "change": "added",
        "module": "model.layers.0.self_attn",
        "family": "qkv",
        "op": "concat",
        "key": None,
        "shape": None,
        "fused_key": "model.layers.0.self_attn.qkv_proj.weight",
        "fused_shape": [128, 64],
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["diff", "demo:llama"], "give at least one --fusion NAME"),
        (["diff", "demo:llama", "--fusion", "nope"], "unknown fusion family 'nope'"),
    ],
)
def test_cli_diff_usage_errors(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1
