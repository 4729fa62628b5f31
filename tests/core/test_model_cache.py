"""The model cache: plain data of the tree and discovery, keyed by content, validated on read, torch-free."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from fusion_core.boundary.convert import to_plain
from fusion_core.families import REGISTRY
from fusion_core.families.plugins import GROUP
from fusion_core.model import cache
from fusion_core.plan.fusion_plan import inspect_model
from fusion_core.plan.view import cached_view, inspection_data


def _saved(spec: str):
    insp = inspect_model(spec)
    path = cache.save(spec, inspection_data(spec, insp))
    assert path is not None and path.parent == cache.cache_folder()
    return insp, path


def test_round_trip_is_the_same_tree_and_discovery(qwen2_vl_dir):
    spec = str(qwen2_vl_dir)
    insp, _ = _saved(spec)
    cached = cached_view(spec)
    assert cached is not None and cached.model_class == "Qwen2VLForConditionalGeneration"
    assert to_plain(cached.tree.root) == to_plain(insp.tree.root)
    assert list(cached.tree.by_path) == list(insp.tree.by_path)
    assert cached.tree.class_counts == insp.tree.class_counts
    # same structure signatures: identical layers fold, different ones do not
    assert [n.signature for n in cached.tree.root.walk()] == [n.signature for n in insp.tree.root.walk()]
    node = cached.tree.by_path["model.visual.patch_embed.proj"]
    assert node.parent is cached.tree.by_path["model.visual.patch_embed"]
    assert node.module_name == insp.tree.by_path[node.path].module_name
    assert cached.families == list(REGISTRY)
    for name in REGISTRY:
        live, got = insp.discovery(name), cached.discovery(name)
        assert [(m.path, m.original_class.__name__, m.fused_class.__name__, m.reason) for m in live.matches] == [
            (m.path, m.class_name, m.fused_class_name, m.reason) for m in got.matches
        ]
        assert got.matches == live.matches  # one type: the classes are not compared
        assert [(r.path, r.class_name, r.reason) for r in live.rejected] == [
            (r.path, r.class_name, r.reason) for r in got.rejected
        ]
        assert got.empty_message == live.empty_message
        assert [(r.path, r.reason) for r in live.near_misses] == [(r.path, r.reason) for r in got.near_misses]
        assert cached.info(name).description == REGISTRY[name].description
    assert cached.checkpoint_files == 1 and cached.checkpoint_tensors == len(insp.source.checkpoint.tensors)
    assert cached.folder == str(insp.source.folder) and cached.describe == insp.source.describe()


def test_reading_an_entry_imports_neither_torch_nor_transformers(qwen2_vl_dir):
    _saved(str(qwen2_vl_dir))
    code = (
        "import sys; from fusion_core.plan.view import cached_view; c = cached_view(sys.argv[1]); "
        "print(len(c.tree), 'torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(qwen2_vl_dir)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["65", "False", "False"]


def test_key_follows_the_config_content(tmp_path, qwen2_vl_dir):
    folder = tmp_path / "model"
    shutil.copytree(qwen2_vl_dir, folder)
    key = cache.cache_key(str(folder))
    assert key == cache.cache_key(str(folder / "config.json"))
    assert key != cache.cache_key(str(qwen2_vl_dir))  # the same config in another folder (issue 20, item 3)
    _saved(str(folder))
    config = json.loads((folder / "config.json").read_text())
    config["text_config"]["intermediate_size"] = 96
    (folder / "config.json").write_text(json.dumps(config))
    assert cache.cache_key(str(folder)) != key
    assert cached_view(str(folder)) is None  # the old entry is not used for the edited config
    _saved(str(folder))
    gate = cached_view(str(folder)).tree.by_path["model.language_model.layers.0.mlp.gate_proj"]
    assert gate.params[0].shape == (96, 64)


def test_what_is_not_cached(tmp_path):
    assert cache.cache_key("org/some-model") is None
    assert cache.cache_key("demo:no-such-demo") is None
    (tmp_path / "config.json").write_text('{"model_type": "llama", "auto_map": {"AutoModel": "x.Y"}}')
    assert cache.cache_key(str(tmp_path)) is None  # custom code
    assert cache.cache_key("arch:llama") != cache.cache_key("arch:mistral")
    assert cache.PLUGIN_GROUP == GROUP


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda text: text[: len(text) // 2],  # truncated
        lambda text: text.replace('"version":3', '"version":99'),
        lambda text: text.replace('"version":3', '"version":2'),  # an entry of the old format
        lambda text: text.replace('"key":"', '"key":"x'),
        lambda text: text.replace('"root":{"path":""', '"root":{"path":"model.nowhere"'),  # not the root
        lambda text: text.replace('"own_params":0', '"own_params":"0"', 1),  # a string for a count
        lambda text: text.replace('"families":["', '"families":[7,"'),
        lambda text: json.dumps([1, 2, 3]),
    ],
)
def test_invalid_entries_are_ignored_and_removed(llama_dir, corrupt):
    spec = str(llama_dir)
    _, path = _saved(spec)
    path.write_text(corrupt(path.read_text()))
    assert cached_view(spec) is None
    assert not path.exists()


def test_oversized_entry_is_not_read(llama_dir, monkeypatch):
    spec = str(llama_dir)
    _, path = _saved(spec)
    monkeypatch.setattr(cache, "MAX_BYTES", path.stat().st_size - 1)
    assert cached_view(spec) is None and not path.exists()


# issue 20, items 3 and 7: a key that covers what is shown; entries that cannot block or lie
def test_same_config_with_other_weights_or_folder_is_another_key(tmp_path, llama_dir):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(llama_dir, a)
    shutil.copytree(llama_dir, b)
    _saved(str(a))
    assert cached_view(str(a)) is not None
    assert cached_view(str(b)) is None  # same config bytes, another folder
    (b / "model.safetensors").unlink()
    (b / "pytorch_model.bin").write_bytes(b"pickle")  # the folder B: only pickle weights
    assert cached_view(str(b)) is None
    key = cache.cache_key(str(a))
    (a / "model.safetensors").write_bytes((a / "model.safetensors").read_bytes())  # other bytes, new mtime
    assert cache.cache_key(str(a)) != key
    key = cache.cache_key(str(a))
    (a / "tokenizer_config.json").write_text("{}")  # a side file appears
    assert cache.cache_key(str(a)) != key
    assert cache.cache_key(str(a), trust_remote_code=True) != cache.cache_key(str(a))


def test_custom_code_is_found_in_the_parsed_keys(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama", "auto\\u005fmap": {"AutoModel": "x.Y"}}')
    assert b"auto_map" not in (tmp_path / "config.json").read_bytes()
    assert cache.cache_key(str(tmp_path)) is None


def test_a_fifo_config_is_not_read(tmp_path):
    os.mkfifo(tmp_path / "config.json")
    assert cache.cache_key(str(tmp_path)) is None  # returns at once: the pipe is never opened blocking


@pytest.mark.parametrize("plant", ["fifo", "symlink", "huge"])
def test_planted_entries_are_removed_unread(llama_dir, tmp_path, plant):
    spec = str(llama_dir)
    _, path = _saved(spec)
    real = path.read_bytes()
    path.unlink()
    if plant == "fifo":
        os.mkfifo(path)  # reading it would block start-up for good
    elif plant == "symlink":
        (tmp_path / "elsewhere.json").write_bytes(real)  # a valid entry, but not the cache's own file
        path.symlink_to(tmp_path / "elsewhere.json")
    else:
        with open(path, "wb") as f:
            f.truncate(cache.MAX_BYTES + 1)  # sparse
    assert cached_view(spec) is None
    assert not os.path.lexists(path)
    assert (tmp_path / "elsewhere.json").exists() or plant != "symlink"
