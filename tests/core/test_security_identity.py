"""Issue 20, item 4: what is loaded is what was validated.

Opening records each validated file's identity (device, inode, size, mtime, header
digest); load, check and export re-verify it right before reading, and read through the
verified descriptors. Each swap an attacker could make after the open is an error that
names the file and asks to reopen; nothing unvalidated is read.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from _hostile import copy_model, evil_pickle_checkpoint, sharded_model
from safetensors.torch import load_file, save_file

from fusion_core import CheckpointError, inspect_model, load
from fusion_core.boundary.options import ExportOptions
from fusion_core.export.pipeline import iter_export
from fusion_core.model.checkpoint import FileIdentity
from fusion_core.progress import drive

QKV = {"qkv": True}


def _link_out(folder: Path, outside: Path) -> str:
    """model.safetensors becomes a link to a copy outside the folder (with other values)."""
    tensors = load_file(str(folder / "model.safetensors"))
    save_file({k: v + 1 for k, v in tensors.items()}, str(outside / "elsewhere.safetensors"), metadata={"format": "pt"})
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to(outside / "elsewhere.safetensors")
    return "model.safetensors"


def _pickle_added(folder: Path, outside: Path) -> str:
    evil_pickle_checkpoint(folder / "pytorch_model.bin", outside / "MARKER")
    return "pytorch_model.bin"


def _pickle_instead(folder: Path, outside: Path) -> str:
    (folder / "model.safetensors").unlink()
    evil_pickle_checkpoint(folder / "pytorch_model.bin", outside / "MARKER")
    return "model.safetensors"


def _shard_replaced(folder: Path, outside: Path) -> str:
    name = "model-00002-of-00002.safetensors"
    tensors = load_file(str(folder / name))
    save_file({k: torch.full_like(v, 7.0) for k, v in tensors.items()}, str(outside / name), metadata={"format": "pt"})
    os.replace(outside / name, folder / name)  # same names and shapes, other values: a new file
    return name


def _shard_truncated(folder: Path, outside: Path) -> str:
    name = "model-00001-of-00002.safetensors"
    with open(folder / name, "r+b") as f:
        f.truncate(os.path.getsize(folder / name) - 64)  # the same file, cut short in place
    return name


SWAPS = {
    "link_out": (_link_out, False),
    "pickle_added": (_pickle_added, False),
    "pickle_instead": (_pickle_instead, False),
    "shard_replaced": (_shard_replaced, True),
    "shard_truncated": (_shard_truncated, True),
}


def _opened(llama_dir: Path, tmp_path: Path, sharded: bool):
    folder = tmp_path / "model"
    (sharded_model if sharded else copy_model)(llama_dir, folder)
    (tmp_path / "outside").mkdir()
    return folder, inspect_model(str(folder))


def test_opening_records_each_validated_file(llama_dir: Path, tmp_path: Path) -> None:
    folder, insp = _opened(llama_dir, tmp_path, sharded=True)
    ids = insp.source.checkpoint.identities
    assert sorted(ids) == sorted(
        ["config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
         "model-00002-of-00002.safetensors"]
    )  # fmt: skip
    st = (folder / "model-00001-of-00002.safetensors").stat()
    one = ids["model-00001-of-00002.safetensors"]
    assert isinstance(one, FileIdentity)
    assert (one.device, one.inode, one.size, one.mtime_ns) == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    assert one.head == 8 + int.from_bytes((folder / "model-00001-of-00002.safetensors").read_bytes()[:8], "little")


@pytest.mark.parametrize("swap", list(SWAPS))
def test_a_swap_after_the_open_is_refused_by_load(llama_dir: Path, tmp_path: Path, swap: str) -> None:
    make, sharded = SWAPS[swap]
    folder, insp = _opened(llama_dir, tmp_path, sharded)
    plan = insp.plan(QKV)
    assert load(plan).fused_modules  # before the swap: loads
    name = make(folder, tmp_path / "outside")
    with pytest.raises(CheckpointError, match="reopen the model") as caught:
        load(plan)
    assert name in str(caught.value)
    assert not (tmp_path / "outside" / "MARKER").exists()


@pytest.mark.parametrize("swap", ["link_out", "shard_truncated"])
def test_a_swap_after_the_open_is_refused_by_export(llama_dir: Path, tmp_path: Path, swap: str) -> None:
    make, sharded = SWAPS[swap]
    folder, insp = _opened(llama_dir, tmp_path, sharded)
    plan = insp.plan(QKV)
    name = make(folder, tmp_path / "outside")
    with pytest.raises(CheckpointError, match="reopen the model") as caught:
        drive(iter_export(plan, tmp_path / "out", ExportOptions(verify_outputs=False)))
    assert name in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_the_loader_sees_only_the_validated_files(llama_dir: Path, tmp_path: Path) -> None:
    """The folder transformers is handed holds exactly the validated files, pinned to their descriptors."""
    folder, insp = _opened(llama_dir, tmp_path, sharded=False)
    ckpt = insp.source.checkpoint
    with ckpt.pinned() as pinned:
        assert pinned != folder
        assert sorted(p.name for p in pinned.iterdir()) == sorted(ckpt.identities)
        (folder / "model.safetensors").unlink()  # gone by name: the pinned file is still the validated one
        assert (pinned / "model.safetensors").stat().st_ino == ckpt.identities["model.safetensors"].inode
    shutil.rmtree(folder)
