"""Issue 13, item 2: the bytes we validate are the bytes that get loaded.

Each hostile folder holds a second set of weights whose values differ from the validated
``model.safetensors`` (all 7.0, or the validated values plus one), so that a load that
took the other file would show in the tensors. Every ambiguous folder is refused with one
line naming the file; the unambiguous ones load exactly the validated file.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from fusion_core import load, resolve
from fusion_core.cli.main import main
from fusion_core.errors import CheckpointError, UnsafeModelError
from fusion_core.model.checkpoint import INDEX_FILE, SINGLE_FILE


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for p in src.iterdir():
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


def _sevens(folder: Path) -> dict[str, torch.Tensor]:
    return {k: torch.full_like(v, 7.0) for k, v in load_file(folder / SINGLE_FILE).items()}


def _set(folder: Path, **fields: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(fields)
    (folder / "config.json").write_text(json.dumps(config))


def _cli_refuses(capsys: pytest.CaptureFixture[str], folder: Path, *words: str) -> None:
    code = main(["load", str(folder)])
    _out, err = capsys.readouterr()
    assert code == 1, err
    assert err.count("\n") == 1 and err.startswith("fusion-core: error: "), err
    for word in words:
        assert word in err, err


def test_transformers_weights_naming_a_pickle_is_refused(llama_dir: Path, tmp_path: Path, capsys) -> None:
    folder = _copy(llama_dir, tmp_path / "m")
    torch.save(_sevens(folder), folder / "adapter_model.bin")  # benign pickle, all 7.0
    _set(folder, transformers_weights="adapter_model.bin")
    with pytest.raises(UnsafeModelError, match=re.escape("transformers_weights names 'adapter_model.bin'")):
        resolve(str(folder))
    _cli_refuses(capsys, folder, "transformers_weights", "adapter_model.bin", "model.safetensors")


def test_transformers_weights_naming_another_safetensors_is_refused(llama_dir: Path, tmp_path: Path) -> None:
    folder = _copy(llama_dir, tmp_path / "m")
    save_file(_sevens(folder), str(folder / "other.safetensors"))
    _set(folder, transformers_weights="other.safetensors")
    with pytest.raises(UnsafeModelError, match=re.escape("other.safetensors")):
        resolve(str(folder))


def test_transformers_weights_naming_the_validated_file_loads_it(llama_dir: Path, tmp_path: Path) -> None:
    folder = _copy(llama_dir, tmp_path / "m")
    save_file(_sevens(folder), str(folder / "other.safetensors"))  # present, but not named
    _set(folder, transformers_weights=SINGLE_FILE)
    model = load(str(folder), {}).model
    expected = load_file(folder / SINGLE_FILE)
    state = model.state_dict()
    for key, tensor in expected.items():
        assert torch.equal(state[key], tensor), key


def test_index_beside_a_single_file_is_refused(llama_dir: Path, tmp_path: Path, capsys) -> None:
    folder = _copy(llama_dir, tmp_path / "m")
    tensors = load_file(folder / SINGLE_FILE)
    # the index's shard holds the validated values plus one; model.safetensors stays
    save_file({k: v + 1 for k, v in tensors.items()}, str(folder / "model-00001-of-00001.safetensors"))
    index = {"metadata": {}, "weight_map": dict.fromkeys(tensors, "model-00001-of-00001.safetensors")}
    (folder / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=re.escape("both model.safetensors and model.safetensors.index.json")):
        resolve(str(folder))
    _cli_refuses(capsys, folder, "ambiguous", INDEX_FILE)


def test_single_file_linking_out_is_refused(llama_dir: Path, tmp_path: Path, capsys) -> None:
    folder = _copy(llama_dir, tmp_path / "m")
    outside = tmp_path / "elsewhere.safetensors"
    save_file(_sevens(folder), str(outside))
    (folder / SINGLE_FILE).unlink()
    os.symlink(outside, folder / SINGLE_FILE)
    with pytest.raises(CheckpointError, match=re.escape("outside the model folder")):
        resolve(str(folder))
    _cli_refuses(capsys, folder, "outside the model folder")


def test_index_linking_out_is_refused(llama_dir: Path, tmp_path: Path) -> None:
    folder = _copy(llama_dir, tmp_path / "m")
    tensors = load_file(folder / SINGLE_FILE)
    (folder / SINGLE_FILE).rename(folder / "model-00001-of-00001.safetensors")
    outside = tmp_path / "index.json"
    outside.write_text(json.dumps({"weight_map": dict.fromkeys(tensors, "model-00001-of-00001.safetensors")}))
    os.symlink(outside, folder / INDEX_FILE)
    with pytest.raises(CheckpointError, match=re.escape("outside the model folder")):
        resolve(str(folder))


def test_config_linking_out_is_refused(llama_dir: Path, tmp_path: Path, capsys) -> None:
    folder = _copy(llama_dir, tmp_path / "m")
    outside = tmp_path / "config.json"
    (folder / "config.json").rename(outside)
    os.symlink(outside, folder / "config.json")
    with pytest.raises(UnsafeModelError, match=re.escape("config.json")):
        resolve(str(folder))
    _cli_refuses(capsys, folder, "outside the model folder")


def test_source_says_which_file_is_loaded(llama_dir: Path) -> None:
    source = resolve(str(llama_dir))
    assert "model.safetensors, the folder's single safetensors checkpoint" in source.describe()
