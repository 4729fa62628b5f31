"""The meta-initialized module tree as plain data."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from fusion_core import ModelSourceError, inspect_model, resolve
from fusion_core.boundary.convert import to_plain
from fusion_core.model.tree import build_meta_model, module_tree, tree_plain


@pytest.fixture(scope="module")
def qwen_tree(qwen2_vl_dir):
    return inspect_model(str(qwen2_vl_dir))


def test_paths_classes_kinds_and_params(qwen_tree):
    tree = qwen_tree.tree
    root = tree.root
    assert root.path == "" and root.class_name == "Qwen2VLForConditionalGeneration"
    proj = tree.by_path["model.visual.patch_embed.proj"]
    assert (proj.class_name, proj.kind, proj.name) == ("Conv3d", "conv", "proj")
    assert [(p.name, p.shape, p.dtype) for p in proj.params] == [("weight", (32, 3, 2, 14, 14), "float32")]
    assert proj.own_params == proj.total_params == 32 * 3 * 2 * 14 * 14
    assert proj.parent is tree.by_path["model.visual.patch_embed"]
    assert [c.path for c in tree.by_path["model.visual.patch_embed"].children] == ["model.visual.patch_embed.proj"]
    assert tree.by_path["model.language_model.embed_tokens"].kind == "embedding"
    # every path is a node, and children hang under their dotted parent
    assert set(tree.by_path) == {p for p, _ in qwen_tree.model.named_modules(remove_duplicate=False)}
    for node in root.walk():
        for child in node.children:
            assert child.path.rsplit(".", 1)[0] == node.path or (node.path == "" and "." not in child.path)


def test_parameter_counts_and_buffers(qwen_tree):
    tree, model = qwen_tree.tree, qwen_tree.model
    assert tree.total_params == model.num_parameters()
    for node in tree.root.walk():
        assert node.total_params == node.own_params + sum(c.total_params for c in node.children)
    rotary = tree.by_path["model.visual.rotary_pos_emb"]
    assert rotary.own_params == 0 and "inv_freq" in [b.name for b in rotary.buffers]


def test_same_class_instances_are_marked(qwen_tree):
    tree = qwen_tree.tree
    layers = [n for n in tree.root.walk() if n.class_name == "Qwen2VLDecoderLayer"]
    assert len(layers) == 2 and all(n.same_class_count == 2 for n in layers)
    assert tree.by_path["model.visual.patch_embed"].same_class_count == 1
    assert tree.class_counts[layers[0].class_qualname] == 2


def test_tied_weights_are_counted_once():
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    tree = module_tree(model)
    assert tree.total_params == model.num_parameters()
    [head] = tree.by_path["lm_head"].params
    assert head.tied_to == "model.embed_tokens.weight"
    assert tree.by_path["lm_head"].own_params == 0
    data = to_plain(tree.by_path["lm_head"])
    assert data["params"] == [
        {"name": "weight", "shape": [64, 16], "dtype": "float32", "tied_to": "model.embed_tokens.weight"}
    ]


def test_to_dict_depth_and_json(qwen_tree):
    root = qwen_tree.tree.root
    full = json.loads(json.dumps(to_plain(root)))
    assert full["path"] == "" and full["class"] == "Qwen2VLForConditionalGeneration"
    assert {
        "path",
        "name",
        "class",
        "kind",
        "params",
        "buffers",
        "own_params",
        "total_params",
        "same_class_count",
    } <= set(full)
    shallow = tree_plain(root, depth=1)
    assert [c["path"] for c in shallow["children"]] == ["model", "lm_head"]
    assert shallow["children"][0]["children"] is None  # cut off, not empty
    assert shallow["children"][1]["children"] == []  # a leaf


def test_unbuildable_model_names_the_class():
    source = resolve("arch:llama")
    source.config.num_attention_heads = 7  # hidden_size 4096 is not divisible by it
    source.config.head_dim = None
    with pytest.raises(ModelSourceError) as err:
        build_meta_model(source)
    assert "LlamaModel" in str(err.value) and "arch:llama" in str(err.value)
