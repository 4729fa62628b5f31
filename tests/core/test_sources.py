"""Model sources: the bad-input list of issue 2 and the config guards, through the API.

Each case is a real folder written by the test; the CLI side of the same cases is in
test_security.py.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import torch
from _hostile import copy_model, sharded_model, write_index

from fusion_core import inspect_model, resolve
from fusion_core.errors import CheckpointError, ConfigError, ModelSourceError, RemoteCodeError
from fusion_core.model.sources import (
    MAX_CONFIG_BYTES,
    check_model_size,
    config_from_dict,
    estimate_modules,
    model_class_for,
    module_budget,
)

TINY_LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 32,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
}


def _config_folder(tmp_path: Path, config, name: str = "model") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    text = config if isinstance(config, (str, bytes)) else json.dumps(config)
    path = folder / "config.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return folder


# --- the bad-input list of issue 2 -------------------------------------------------------


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelSourceError, match=r"no config\.json in this folder"):
        resolve(str(tmp_path))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{not json", "not valid JSON (line 1, column 2"),
        (b"\xff\xfe{}", "not UTF-8"),
        ("[1, 2]", "must hold a JSON object, found list"),
        ('{"model_type": "llama", "x": ' + "1" * 5000 + "}", "not a usable JSON document"),
        ('{"a": ' + "[" * 50 + "]" * 50 + "}", "nested too deeply"),
        ('{"a": ' * 40 + "1" + "}" * 40, "nested too deeply"),
    ],
)
def test_config_not_json(tmp_path, text, words):
    folder = _config_folder(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        resolve(str(folder))
    assert words in str(info.value)
    assert str(folder / "config.json") in str(info.value)


def test_config_too_large_is_not_read(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    with open(folder / "config.json", "wb") as f:
        f.truncate(MAX_CONFIG_BYTES + 1)  # sparse: nothing is written, nothing may be read
    with pytest.raises(ConfigError, match="byte limit"):
        resolve(str(folder))


@pytest.mark.timeout(30)
def test_config_that_is_a_pipe_does_not_block(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    os.mkfifo(folder / "config.json")
    for spec in (folder, folder / "config.json"):
        with pytest.raises(ConfigError, match="not a regular file"):
            resolve(str(spec))


def test_unknown_or_missing_model_type(tmp_path):
    folder = _config_folder(tmp_path, {"model_type": "no_such_arch_xyz"})
    with pytest.raises(ConfigError, match="unknown model_type 'no_such_arch_xyz'"):
        resolve(str(folder))
    folder = _config_folder(tmp_path, {"hidden_size": 8}, "untyped")
    with pytest.raises(ConfigError, match="no 'model_type'"):
        resolve(str(folder))


def test_arch_of_unknown_type():
    with pytest.raises(ConfigError, match=r"arch:no_such_arch: unknown model_type.*coverage"):
        resolve("arch:no_such_arch")
    with pytest.raises(ConfigError, match=r"did you mean: .*llama"):
        resolve("arch:lla")
    # the same name without its separators comes first (issue 33: qwen25_vl suggested qwen2)
    with pytest.raises(ConfigError, match=r"did you mean: qwen2_5_vl, "):
        resolve("arch:qwen25_vl")


def test_corrupt_and_truncated_safetensors(llama_dir, tmp_path):
    folder = copy_model(llama_dir, tmp_path / "corrupt")
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:8] + b"#" + data[9:])  # the header's first byte: not JSON any more
    with pytest.raises(CheckpointError, match=r"model\.safetensors: header is not valid JSON"):
        resolve(str(folder))
    folder = copy_model(llama_dir, tmp_path / "truncated")
    weights = folder / "model.safetensors"
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: .*past the end of the file \(truncated"):
        resolve(str(folder))
    weights.write_bytes(data[:6])
    with pytest.raises(CheckpointError, match="truncated: 6 bytes"):
        resolve(str(folder))


def test_index_naming_a_missing_shard(llama_dir, tmp_path):
    folder = sharded_model(llama_dir, tmp_path / "sharded")
    assert resolve(str(folder)).checkpoint.sharded
    os.unlink(folder / "model-00002-of-00002.safetensors")
    with pytest.raises(CheckpointError, match=r"names shard 'model-00002-of-00002\.safetensors', which is missing"):
        resolve(str(folder))


def test_hub_id_not_cached_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelSourceError, match="not in the local Hugging Face cache, and the hub is offline"):
        resolve("fusion-inspector-tests/not-a-cached-model")


@pytest.mark.parametrize("spec", ["", "   ", "bad\x00name", "~no_such_user_xyz/x/y", "x" * 5000])
def test_odd_specs_are_clean_errors(spec):
    with pytest.raises(ModelSourceError):
        resolve(spec)


# --- remote code, hub kernels, model classes ------------------------------------------


def test_remote_code_error_names_the_files():
    data = {
        **TINY_LLAMA,
        "auto_map": {
            "AutoConfig": "configuration_x.XConfig",
            "AutoModel": ["modeling_x.XModel", None],
            "AutoTokenizer": "other/repo--tokenization_x.XTokenizer",
        },
    }
    with pytest.raises(RemoteCodeError) as info:
        config_from_dict(data, "here/config.json")
    assert info.value.files == ["configuration_x.py", "modeling_x.py", "other/repo:tokenization_x.py"]
    assert "trust_remote_code" in str(info.value) and "here/config.json" in str(info.value)
    assert info.value.options == ("trust_remote_code",)  # the CLI shows it as --trust-remote-code
    notes: list[str] = []
    config = config_from_dict(data, "here", trust_remote_code=True, notes=notes)
    assert not hasattr(config, "auto_map") and "was not run" in notes[0]
    assert config_from_dict({**TINY_LLAMA, "auto_map": {}}, "x").model_type == "llama"  # asks for nothing


@pytest.mark.parametrize("key", ["attn_implementation", "_attn_implementation", "experts_implementation"])
@pytest.mark.parametrize("value", ["kernels-community/flash-attn3", "evil/kernel@main:fn", "flash_attention_2"])
def test_attention_from_the_hub_is_dropped(key, value):
    notes: list[str] = []
    data = {**TINY_LLAMA, key: value, "text_config": {key: value}}
    config = config_from_dict(data, "x", notes=notes)
    assert config._attn_implementation in (None, "sdpa", "eager")
    assert len(notes) == 2 and "ignored" in notes[0]
    # plain local implementations are kept
    assert config_from_dict({**TINY_LLAMA, "attn_implementation": "eager"}, "x")._attn_implementation == "eager"


def test_hub_kernel_never_reaches_the_model(tmp_path):
    folder = _config_folder(tmp_path, {**TINY_LLAMA, "attn_implementation": "evil-org/evil-kernel"})
    insp = inspect_model(str(folder))  # without the guard, the model's __init__ asks for the kernel
    assert "evil-org/evil-kernel" in insp.source.notes[0]


@pytest.mark.parametrize("name", ["__class__", "AutoModel", "PreTrainedModel", "os", "LlamaConfig", "Llama Model", 3])
def test_architectures_only_select_model_classes(name):
    config = config_from_dict({**TINY_LLAMA, "architectures": [name]}, "x")
    cls = model_class_for(config)
    assert cls.__name__ == "LlamaModel"  # the Auto class, not what the config named
    with pytest.raises(ConfigError, match="not a model class transformers ships"):
        model_class_for(config, "AutoModel")


# --- config size guards -------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "data",
    [
        {**TINY_LLAMA, "num_hidden_layers": 10**7},
        {**TINY_LLAMA, "num_hidden_layers": 10**18},
        {**TINY_LLAMA, "text_config": {"num_layers": 10**9}},
        {**TINY_LLAMA, "layer_types": ["full_attention"] * 20_000},
        {**TINY_LLAMA, "depths": [5000, 6000]},
    ],
    ids=["layers-1e7", "layers-1e18", "nested", "layer-types", "depths"],
)
def test_absurd_layer_counts_are_refused_before_building(tmp_path, data):
    folder = _config_folder(tmp_path, data)
    with pytest.raises(ConfigError, match="more than 10000 layers") as info:
        inspect_model(str(folder))
    assert str(folder / "config.json") in str(info.value)


def test_many_deep_sub_configs_are_refused_by_the_estimate():
    data = {**TINY_LLAMA, **{f"part{i}": {"num_hidden_layers": 9000} for i in range(6)}}
    assert estimate_modules(data)[0] > 200_000
    with pytest.raises(ConfigError, match="make a model of at least"):
        check_model_size(data, "x")


def test_real_configs_pass_the_estimate():
    from transformers import CONFIG_MAPPING

    for model_type in ("llama", "qwen2_vl", "deepseek_v3", "qwen3_moe", "doge", "swin", "qwen3_omni_moe"):
        check_model_size(CONFIG_MAPPING[model_type](), model_type)


def test_module_budget_stops_a_build_and_counts_this_thread_only():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{k: v for k, v in TINY_LLAMA.items() if k != "model_type"} | {"num_hidden_layers": 50})
    with (
        pytest.raises(ModelSourceError, match="grows past 100 modules"),
        module_budget(100, "big"),
        torch.device("meta"),
    ):
        LlamaForCausalLM(config)
    built = []
    with module_budget(10, "small"):
        # another thread's modules are not counted against this budget
        worker = threading.Thread(target=lambda: built.append(LlamaForCausalLM(config)))
        worker.start()
        worker.join()
    assert built
    with torch.device("meta"):
        LlamaForCausalLM(config)  # the hook is gone


def test_build_meta_model_uses_the_budget(llama_dir, monkeypatch):
    from fusion_core.model import tree

    monkeypatch.setattr(tree, "MAX_MODULES", 20)
    with pytest.raises(ModelSourceError, match="grows past 20 modules"):
        inspect_model(str(llama_dir))


def test_index_with_absolute_shard_name_via_resolve(llama_dir, tmp_path):
    folder = sharded_model(llama_dir, tmp_path / "sharded")
    weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    key = sorted(weight_map)[0]
    weight_map[key] = str(llama_dir / "model.safetensors")
    write_index(folder, weight_map)
    with pytest.raises(CheckpointError, match=f"weight_map entry {key!r}.*leaves the model folder"):
        resolve(str(folder))


def test_arch_opens_a_vision_sub_config_the_coverage_scan_knows():
    """Sub-configs have no Auto entry; ``arch:`` resolves them as the coverage scan does."""
    from fusion_core import inspect_model

    insp = inspect_model("arch:qwen2_vl_vision")
    assert insp.source.model_class.__name__ == "Qwen2VisionTransformerPretrainedModel"
    plan = insp.plan({"patch_embeddings": True})
    assert [m.path for m in plan.families[0].discovery.matches] == ["patch_embed"]
    assert plan.rows("load")[0]["target_shape"] == [1280, 1176]


def test_a_part_saved_alone_opens_through_its_own_modeling_module(tmp_path):
    """A vision tower saved alone names a class transformers does not export; it is found in
    the config's own modeling module, and only there: the same name in another model's
    config.json selects nothing."""
    import torch
    from transformers import Idefics2Config, LlamaConfig

    from fusion_core import inspect_model

    vision = Idefics2Config().vision_config
    vision.update({"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2})
    vision.update({"image_size": 28, "patch_size": 14})
    torch.manual_seed(0)
    from transformers.models.idefics2.modeling_idefics2 import Idefics2VisionTransformer

    Idefics2VisionTransformer(vision).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["Idefics2VisionTransformer"]
    insp = inspect_model(str(tmp_path))
    assert insp.source.model_class is Idefics2VisionTransformer
    assert [m.path for m in insp.discovery("patch_embeddings_2d").matches] == ["embeddings"]
    other = LlamaConfig(**{**TINY_LLAMA, "architectures": ["Idefics2VisionTransformer"]})
    assert model_class_for(other).__name__ == "LlamaModel"
