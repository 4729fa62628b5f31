"""Export faults: each ends in one clear message, no partial output, the source untouched."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
from _export_helpers import FUSION, copy_model, folder_digest, leftovers, tensors_of
from safetensors.torch import save_file

import fusion_core.export.writer as writer
from fusion_core import Cancelled, CancelToken, CheckpointError, ExportError, FusionError, Progress, export
from fusion_core.errors import UsageError
from fusion_core.model.checkpoint import INDEX_FILE


@pytest.fixture
def src(qwen2_vl_dir: Path, tmp_path: Path) -> Path:
    return copy_model(qwen2_vl_dir, tmp_path / "src")


def _sharded(src: Path, tmp_path: Path) -> Path:
    """The source re-exported (original layout) in small shards: a sharded original checkpoint."""
    out = tmp_path / "sharded"
    export(src, out, FUSION, layout="original", max_shard_size="200KB", verify_outputs=False)
    assert (out / INDEX_FILE).is_file()
    return out


def _fails(source: Path, out: Path, error: type[Exception], *words: str, **options: object) -> str:
    """Export must raise ``error`` mentioning ``words``, leave nothing at ``out``, touch nothing."""
    before = folder_digest(source)
    with pytest.raises(error) as info:
        export(source, out, FUSION, verify_outputs=False, **options)
    message = str(info.value)
    for word in words:
        assert word in message, message
    assert folder_digest(source) == before
    if out.parent.is_dir():
        assert leftovers(out.parent) == []
    return message


def test_corrupt_shard(src: Path, tmp_path: Path) -> None:
    data = bytearray((src / "model.safetensors").read_bytes())
    data[8:40] = b"{ this is not json at all ......"
    (src / "model.safetensors").write_bytes(bytes(data))
    _fails(src, tmp_path / "out", FusionError, "model.safetensors")
    assert not (tmp_path / "out").exists()


def test_truncated_shard(src: Path, tmp_path: Path) -> None:
    sharded = _sharded(src, tmp_path)
    last = sorted(sharded.glob("model-*.safetensors"))[-1]
    last.write_bytes(last.read_bytes()[:-100])
    _fails(sharded, tmp_path / "out", FusionError, last.name)
    assert not (tmp_path / "out").exists()


def test_index_naming_a_missing_shard(src: Path, tmp_path: Path) -> None:
    sharded = _sharded(src, tmp_path)
    index = json.loads((sharded / INDEX_FILE).read_text())
    key = next(iter(index["weight_map"]))
    index["weight_map"][key] = "model-00009-of-00009.safetensors"
    (sharded / INDEX_FILE).write_text(json.dumps(index))
    _fails(sharded, tmp_path / "out", FusionError, "model-00009-of-00009.safetensors", "missing")


def test_shapes_that_do_not_match_the_config(src: Path, tmp_path: Path) -> None:
    config = json.loads((src / "config.json").read_text())
    config["vision_config"]["embed_dim"] = 48  # the checkpoint holds 32
    (src / "config.json").write_text(json.dumps(config))
    _fails(src, tmp_path / "out", FusionError, "visual.blocks.0.attn.qkv.weight", "do not match config.json")


def test_checkpoint_in_neither_layout(src: Path, tmp_path: Path) -> None:
    tensors = tensors_of(src)
    tensors["visual.patch_embed.other.weight"] = tensors.pop("visual.patch_embed.proj.weight")
    save_file(tensors, src / "model.safetensors", metadata={"format": "pt"})
    _fails(src, tmp_path / "out", FusionError, "visual.patch_embed.proj.weight", "neither")


def test_destination_not_writable(src: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("a regular file, not a folder\n")
    message = _fails(src, blocker / "out", ExportError, str(blocker))
    assert "not a folder" in message


def test_disk_full_during_export(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shard goes to /dev/full: the kernel's own ENOSPC, raised from the real write path."""

    class FullDisk(writer.ShardSink):
        def _open(self, path: Path) -> int:
            super()._open(path)  # the real file is created (and must be cleaned up)
            return os.open("/dev/full", os.O_WRONLY)

    monkeypatch.setattr(writer, "ShardSink", FullDisk)
    _fails(src, tmp_path / "out", ExportError, "no space left", str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_disk_full_while_overwriting_keeps_the_old_folder(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    export(src, out, FUSION, verify_outputs=False)  # a previous export: --overwrite may replace it
    (out / "precious.txt").write_text("keep me\n")
    before = folder_digest(out)

    class FullDisk(writer.ShardSink):
        def _open(self, path: Path) -> int:
            os.close(super()._open(path))
            return os.open("/dev/full", os.O_WRONLY)

    monkeypatch.setattr(writer, "ShardSink", FullDisk)
    _fails(src, out, ExportError, "no space left", overwrite=True)
    assert folder_digest(out) == before
    monkeypatch.undo()
    export(src, out, FUSION, overwrite=True, verify_outputs=False)
    assert not (out / "precious.txt").exists() and (out / "model.safetensors").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_cancel_mid_export(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer, "CHUNK_BYTES", 4096)  # many steps, so the cancel lands mid-file
    token = CancelToken()
    seen: list[Progress] = []

    def on_progress(p: Progress) -> None:
        seen.append(p)
        if p.total and p.done > p.total // 3:
            token.cancel()

    before = folder_digest(src)
    with pytest.raises(Cancelled):
        export(src, tmp_path / "out", FUSION, progress=on_progress, cancel=token, verify_outputs=False)
    assert 0 < seen[-1].done < seen[-1].total
    assert not (tmp_path / "out").exists()
    assert leftovers(tmp_path) == []
    assert folder_digest(src) == before


@pytest.mark.parametrize("where", ["itself", "inside", "link-to-source", "link-elsewhere", "parent"])
def test_refused_destinations(src: Path, tmp_path: Path, where: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if where == "itself":
        out, words = src, ("inside the source",)
    elif where == "inside":
        out, words = src / "sub" / "out", ("inside the source",)
    elif where == "link-to-source":
        out, words = tmp_path / "link", ("symbolic link",)
        out.symlink_to(src)
    elif where == "link-elsewhere":
        out, words = tmp_path / "link", ("symbolic link",)
        out.symlink_to(elsewhere)
    else:
        out, words = tmp_path, ("contains the source",)
    error = UsageError if where == "parent" else ExportError  # an ancestor of the source: exit 2
    _fails(src, out, error, *words, overwrite=True)
    assert list(elsewhere.iterdir()) == []
    assert not (src / "sub").exists()


def test_destination_resolving_into_the_source_through_a_linked_parent(src: Path, tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to(src)
    _fails(src, tmp_path / "alias" / "out", ExportError, "inside the source")
    assert not (src / "out").exists()


def test_non_empty_destination_needs_overwrite(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old\n")
    _fails(src, out, ExportError, "not empty", "set overwrite")
    assert (out / "old.txt").read_text() == "old\n"
    (tmp_path / "empty").mkdir()
    export(src, tmp_path / "empty", FUSION, verify_outputs=False)  # an empty folder is fine
    assert (tmp_path / "empty" / "model.safetensors").is_file()


def test_nothing_to_fuse_refused_unless_copy_as_is(llama_dir: Path, tmp_path: Path) -> None:
    _fails(llama_dir, tmp_path / "out", ExportError, "nothing to fuse", "allow_copy_as_is")
    assert not (tmp_path / "out").exists()
    result = export(llama_dir, tmp_path / "out", FUSION, allow_copy_as_is=True)
    assert result.transformed == [] and result.verification.outputs["max_abs_diff"] == 0.0
    for name in ("model.safetensors", "config.json", "generation_config.json"):
        assert (tmp_path / "out" / name).read_bytes() == (llama_dir / name).read_bytes()


def test_hostile_shard_header_is_refused_before_writing(src: Path, tmp_path: Path) -> None:
    path = src / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(struct.pack("<Q", 10**15) + data[8:])
    _fails(src, tmp_path / "out", CheckpointError, "model.safetensors")


def test_overwrite_never_follows_links_in_the_old_folder(src: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("outside the destination\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "link").symlink_to(outside)
    (out / "model.safetensors").symlink_to(outside / "keep.txt")
    (out / "config.json").write_text("{}")  # it looks like an export: --overwrite may replace it
    export(src, out, FUSION, overwrite=True, verify_outputs=False)
    assert (outside / "keep.txt").read_text() == "outside the destination\n"
    assert not (out / "model.safetensors").is_symlink() and not (out / "link").exists()
