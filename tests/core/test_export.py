"""Export: streaming, layouts both ways, bitwise round trips, config and other files."""

from __future__ import annotations

import json
import os
import re
import struct
import textwrap
from pathlib import Path

import _forked
import pytest
import torch
from _export_helpers import EXTRA_FILES, FUSION, copy_model, raw_bytes_of, tensors_of

from fusion_core import export, load, load_plain
from fusion_core.model.checkpoint import INDEX_FILE, read_index

PATCH_KEY = "visual.patch_embed.proj.weight"
FUSED_KEY = "visual.patch_embed.linear_proj.weight"


@pytest.fixture(scope="module")
def sharded_dir(qwen2_vl_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo model saved by transformers' own save_pretrained in small shards."""
    from transformers import Qwen2VLForConditionalGeneration

    folder = tmp_path_factory.mktemp("sharded") / "qwen2-vl-sharded"
    model = Qwen2VLForConditionalGeneration.from_pretrained(qwen2_vl_dir)
    model.save_pretrained(folder, max_shard_size="200KB")
    assert (folder / INDEX_FILE).is_file()
    return folder


def _assert_same_tensors(a: Path, b: Path) -> None:
    ta, tb = tensors_of(a), tensors_of(b)
    assert sorted(ta) == sorted(tb)
    for key in ta:
        assert ta[key].dtype == tb[key].dtype and torch.equal(ta[key], tb[key]), key
    assert raw_bytes_of(a) == raw_bytes_of(b)


@pytest.mark.smoke
def test_round_trip_single_file_is_bitwise(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    src = copy_model(qwen2_vl_dir, tmp_path / "src")
    fused = export(src, tmp_path / "fused", FUSION, verify_outputs=False)
    assert fused.source_layout == "original" and fused.layout == "fused"
    assert fused.transformed == [FUSED_KEY]
    fused_tensors = tensors_of(tmp_path / "fused")
    assert PATCH_KEY not in fused_tensors
    assert fused_tensors[FUSED_KEY].shape == (32, 3 * 2 * 14 * 14)
    assert fused.verification.transforms_inverted == 1
    # the renamed key grew the header: it is padded so that copied bytes keep their page offset
    starts = [8 + struct.unpack("<Q", (f / "model.safetensors").read_bytes()[:8])[0] for f in (src, tmp_path / "fused")]
    assert starts[0] != starts[1] and starts[0] % 4096 == starts[1] % 4096

    back = export(tmp_path / "fused", tmp_path / "back", FUSION, layout="original", verify_outputs=False)
    assert back.source_layout == "fused" and back.transformed == [PATCH_KEY]
    _assert_same_tensors(src, tmp_path / "back")
    # the same bytes as transformers wrote them: safetensors' order, header and config
    for name in ("model.safetensors", "config.json", *EXTRA_FILES):
        assert (tmp_path / "back" / name).read_bytes() == (src / name).read_bytes(), name


def test_round_trip_sharded_is_bitwise(sharded_dir: Path, tmp_path: Path) -> None:
    fused = export(sharded_dir, tmp_path / "fused", FUSION, max_shard_size="200KB", verify_outputs=False)
    assert fused.files and any(re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", n) for n, _ in fused.files)
    back = export(tmp_path / "fused", tmp_path / "back", FUSION, layout="original", max_shard_size="200KB")
    _assert_same_tensors(sharded_dir, tmp_path / "back")
    src_meta = json.loads((sharded_dir / INDEX_FILE).read_text())["metadata"]
    for folder in (tmp_path / "fused", tmp_path / "back"):
        assert json.loads((folder / INDEX_FILE).read_text())["metadata"] == src_meta
    assert back.verification.outputs is not None and back.verification.outputs["max_abs_diff"] == 0.0


@pytest.mark.smoke
def test_fused_export_loads_fused_and_matches_source(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    result = export(qwen2_vl_dir, tmp_path / "fused", FUSION)
    outputs = result.verification.outputs
    assert outputs is not None and outputs["passed"] and outputs["output"] == "logits"
    assert outputs["max_abs_diff"] <= 1e-5
    config = json.loads((tmp_path / "fused" / "config.json").read_text())
    assert config["fusion_config"] == {"patch_embeddings": True}
    # our loader re-applies the fusion from config.json, no argument needed
    loaded = load(str(tmp_path / "fused"), dtype="float32")
    assert loaded.layout == "fused" and loaded.fused_modules == ["model.visual.patch_embed"]
    fused_weight = loaded.model.model.visual.patch_embed.linear_proj.weight
    plain = load_plain(str(qwen2_vl_dir), dtype="float32")
    conv_weight = plain.model.visual.patch_embed.proj.weight
    assert torch.equal(fused_weight, conv_weight.reshape(32, -1))
    # a plain load of the fused export converts back to the original model, exactly
    restored = load_plain(str(tmp_path / "fused"), dtype="float32")
    assert torch.equal(restored.model.visual.patch_embed.proj.weight, conv_weight)


@pytest.mark.slow  # upstream from_pretrained in a subprocess
def test_upstream_from_pretrained_reads_the_fused_export(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    """transformers' own from_pretrained re-applies the fusion from config.fusion_config.

    Run in a child process: upstream fusion leaves process-wide state behind (DESIGN.md).
    The export found the same by loading it (its consumers), so it wrote the name as is.
    """
    result = export(qwen2_vl_dir, tmp_path / "fused", FUSION)
    assert [(c.name.split()[0], c.status) for c in result.consumers] == [
        ("fusion_core", "loads exactly"),
        ("transformers", "loads exactly"),
    ]
    assert not result.guarded and result.written_fusion_config == FUSION
    script = textwrap.dedent(
        f"""
        import json, torch
        from safetensors import safe_open
        from transformers import Qwen2VLForConditionalGeneration
        model, info = Qwen2VLForConditionalGeneration.from_pretrained({str(tmp_path / "fused")!r},
                                                                    output_loading_info=True)
        pe = model.model.visual.patch_embed
        with safe_open({str(tmp_path / "fused" / "model.safetensors")!r}, "pt") as f:
            same = torch.equal(pe.linear_proj.weight, f.get_tensor({FUSED_KEY!r}))
        print(json.dumps({{"problems": {{k: list(v) for k, v in info.items() if v}},
                          "class": type(pe).__name__, "same": same}}))
        """
    )
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_OFFLINE": "1"}
    done = _forked.run([], code=script, env=env, timeout=120)  # a process of its own, imports done
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"problems": {}, "class": "FusedPatchEmbed", "same": True}


def test_original_layout_export_has_no_fusion_config(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    export(qwen2_vl_dir, tmp_path / "fused", FUSION, verify_outputs=False)
    export(tmp_path / "fused", tmp_path / "orig", FUSION, layout="original", verify_outputs=False)
    config = json.loads((tmp_path / "orig" / "config.json").read_text())
    assert "fusion_config" not in config
    assert config == json.loads((qwen2_vl_dir / "config.json").read_text())


def test_other_files_are_copied_and_outside_links_are_not(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    src = copy_model(qwen2_vl_dir, tmp_path / "src")
    secret = tmp_path / "secret.txt"
    secret.write_text("not part of the model\n")
    (src / "vocab.txt").symlink_to(secret)  # resolves outside the model folder
    (src / "special_tokens_map.json").symlink_to("tokenizer_config.json")  # inside: copied as a file
    (src / "flax_model.msgpack").write_bytes(b"\0" * 16)  # weights in another format
    (src / "extras").mkdir()
    result = export(src, tmp_path / "out", FUSION, verify_outputs=False)
    out = tmp_path / "out"
    for name, text in EXTRA_FILES.items():
        assert (out / name).read_text() == text
    assert (out / "generation_config.json").read_bytes() == (src / "generation_config.json").read_bytes()
    link_copy = out / "special_tokens_map.json"
    assert not link_copy.is_symlink() and link_copy.read_text() == EXTRA_FILES["tokenizer_config.json"]
    assert not (out / "vocab.txt").exists()
    assert not (out / "flax_model.msgpack").exists() and not (out / "extras").exists()
    skipped = dict(result.skipped_files)
    assert "outside the model folder" in skipped["vocab.txt"]
    assert "flax_model.msgpack" in skipped and "extras" in skipped
    assert sorted(result.copied_files) == sorted([*EXTRA_FILES, "generation_config.json", "special_tokens_map.json"])


@pytest.mark.smoke
def test_index_matches_save_pretrained_and_transformers_reads_it(sharded_dir: Path, tmp_path: Path) -> None:
    """Same index json (names, metadata, formatting) as save_pretrained; loadable by transformers."""
    from transformers import Qwen2VLForConditionalGeneration

    export(sharded_dir, tmp_path / "fused", FUSION, max_shard_size="200KB", verify_outputs=False)
    export(
        tmp_path / "fused", tmp_path / "orig", FUSION, layout="original", max_shard_size="200KB", verify_outputs=False
    )
    ours_text = (tmp_path / "orig" / INDEX_FILE).read_text()
    theirs_text = (sharded_dir / INDEX_FILE).read_text()
    ours, theirs = json.loads(ours_text), json.loads(theirs_text)
    assert ours_text == json.dumps(ours, indent=2, sort_keys=True) + "\n"  # save_pretrained's formatting
    assert set(ours) == set(theirs) == {"metadata", "weight_map"}
    assert ours["metadata"] == theirs["metadata"]
    assert sorted(ours["weight_map"]) == sorted(theirs["weight_map"])
    shard = re.compile(r"model-(\d{5})-of-(\d{5})\.safetensors")
    names = sorted(set(ours["weight_map"].values()))
    assert all(shard.fullmatch(n) for n in names)
    assert [int(shard.fullmatch(n).group(1)) for n in names] == list(range(1, len(names) + 1))
    for name in names:
        assert os.path.getsize(tmp_path / "orig" / name) <= 200_000 + 4096  # header on top of the data
    model, info = Qwen2VLForConditionalGeneration.from_pretrained(tmp_path / "orig", output_loading_info=True)
    assert not any(info.values())
    reference = load_plain(str(sharded_dir), dtype="float32")
    for (key, value), (key2, value2) in zip(model.state_dict().items(), reference.state_dict().items()):
        assert key == key2 and torch.equal(value, value2), key


def test_default_max_shard_size_is_save_pretrained_default(sharded_dir: Path, tmp_path: Path) -> None:
    import inspect

    from transformers import PreTrainedModel

    from fusion_core.boundary.options import DEFAULT_MAX_SHARD_SIZE

    default = inspect.signature(PreTrainedModel.save_pretrained).parameters["max_shard_size"].default
    assert default == DEFAULT_MAX_SHARD_SIZE
    # a sharded source fits one file under the default: a single model.safetensors, no index
    result = export(sharded_dir, tmp_path / "one", FUSION, verify_outputs=False)
    names = [n for n, _ in result.files]
    assert "model.safetensors" in names and INDEX_FILE not in names
    index = read_index(tmp_path / "one")
    assert index is not None and not index.sharded and len(index.tensors) == len(read_index(sharded_dir).tensors)


@pytest.mark.smoke
def test_cli_export_json(qwen2_vl_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fusion_core.cli.main import main

    out = tmp_path / "cli-out"
    rc = main(["export", str(qwen2_vl_dir), str(out), "--fusion", "patch_embeddings", "--json", "--no-verify-outputs"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    data = json.loads(captured.out)
    assert data["layout"] == "fused" and data["transformed"] == [FUSED_KEY]
    assert data["verification"]["outputs_checked"] is False
    assert {f["name"] for f in data["files"]} >= {"model.safetensors", "config.json"}

    rc = main(["export", str(qwen2_vl_dir), str(out), "--fusion", "patch_embeddings"])
    err = capsys.readouterr().err
    assert rc == 1 and "not empty" in err and "--overwrite" in err and len(err.strip().splitlines()) == 1
    rc = main(
        ["export", str(qwen2_vl_dir), str(tmp_path / "x"), "--fusion", "patch_embeddings", "--max-shard-size", "lots"]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "--max-shard-size 'lots' is not a size" in err
