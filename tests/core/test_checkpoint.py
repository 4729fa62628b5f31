"""Safetensors headers and checkpoint folders: read from headers only, hostile files refused.

Every hostile file is written by hand (tests/core/_hostile.py) and must end in a
CheckpointError naming the file and the key, before any large allocation.
"""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest
import torch
from _hostile import sharded_model, tiled, write_index, write_safetensors
from safetensors import safe_open
from safetensors.torch import save_file

from fusion_core.errors import CheckpointError
from fusion_core.model.checkpoint import (
    MAX_HEADER_BYTES,
    open_shard,
    read_header,
    read_index,
    read_regular_file,
    safe_member,
)


def test_header_matches_safetensors(tmp_path):
    tensors = {
        "a.weight": torch.zeros(3, 4, dtype=torch.float32),
        "b.bias": torch.ones(5, dtype=torch.bfloat16),
        "c.index": torch.arange(6, dtype=torch.int64).reshape(2, 3),
        "empty": torch.zeros(0, 7),
    }
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    header = read_header(path)
    assert header.metadata == {"format": "pt"}
    assert {k: (t.shape, t.dtype) for k, t in header.tensors.items()} == {
        "a.weight": ((3, 4), "F32"),
        "b.bias": ((5,), "BF16"),
        "c.index": ((2, 3), "I64"),
        "empty": ((0, 7), "F32"),
    }
    raw = path.read_bytes()
    with safe_open(str(path), framework="pt") as f:
        for key, info in header.tensors.items():
            # our byte range holds exactly the tensor safetensors reads
            expected = f.get_tensor(key).contiguous().view(torch.uint8).flatten().numpy().tobytes()
            assert raw[info.start : info.end] == expected


def _bad(tmp_path: Path, name: str, header, data=b"", length=None) -> Path:
    return write_safetensors(tmp_path / name, header, data, length)


def _one(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


# (case id, header, data size, header length override, words the message must contain)
HOSTILE_HEADERS = [
    ("length-beyond-file", b"{}", 0, 2**62, ["header length", "past the end"]),
    ("truncated-length", None, None, None, ["truncated"]),
    ("not-json", b"\x00\x01garbage{", 0, None, ["not valid JSON"]),
    ("not-utf8", b'{"\xff\xfe": 1}', 0, None, ["not valid JSON"]),
    ("not-an-object", b"[1, 2, 3]", 0, None, ["not an object"]),
    ("deeply-nested", b"[" * 100_000 + b"]" * 100_000, 0, None, ["not valid JSON", "nested too deeply"]),
    ("nan", b'{"w": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 0]}}', 0, None, ["not valid JSON"]),
    ("offsets-past-end", {"w": _one(offsets=(0, 10**12), shape=(25 * 10**10,))}, 8, None, ["'w'"]),
    ("overlap", {"w": _one(), "v": _one(offsets=(4, 12))}, 12, None, ["overlap", "'w'", "'v'"]),
    ("gap", {"w": _one(offsets=(8, 16))}, 16, None, ["gap", "'w'"]),
    ("extra-data", {"w": _one()}, 16, None, ["ends at byte"]),
    ("unknown-dtype", {"w": _one(dtype="F128")}, 8, None, ["'w'", "unknown dtype 'F128'"]),
    ("dtype-not-string", {"w": _one(dtype=["F32"])}, 8, None, ["'w'", "unknown dtype"]),
    ("shape-vs-range", {"w": _one(shape=(3,))}, 8, None, ["'w'", "needs 12 bytes", "range holds 8"]),
    ("huge-shape", {"w": _one(shape=(2**40, 2**40))}, 8, None, ["'w'", "more elements"]),
    ("huge-product", {"w": _one(shape=(2**20, 2**20))}, 8, None, ["'w'", "needs 4398046511104 bytes"]),
    ("shape-over-u64", {"w": _one(shape=(2**64, 0), offsets=(0, 0))}, 0, None, ["'w'", "shape"]),
    ("shape-negative", {"w": _one(shape=(-2,))}, 8, None, ["'w'", "shape"]),
    ("shape-float", {"w": _one(shape=(2.0,))}, 8, None, ["'w'", "shape"]),
    ("shape-bool", {"w": _one(shape=(True, 2))}, 8, None, ["'w'", "shape"]),
    ("offsets-reversed", {"w": _one(offsets=(8, 0))}, 8, None, ["'w'", "increasing"]),
    ("offsets-one", {"w": {"dtype": "F32", "shape": [2], "data_offsets": [8]}}, 8, None, ["'w'", "data_offsets"]),
    ("entry-not-object", {"w": [1, 2]}, 0, None, ["'w'", "not an object"]),
    ("sub-byte", {"w": _one(dtype="F4", shape=(3,), offsets=(0, 2))}, 2, None, ["'w'", "whole number of bytes"]),
    ("metadata-not-strings", {"__metadata__": {"format": 1}}, 0, None, ["__metadata__"]),
    (
        "duplicate-key",
        b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},'
        b' "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
        8,
        None,
        ["'w'", "twice"],
    ),
]


@pytest.mark.parametrize(
    ("header", "data", "length", "words"), [c[1:] for c in HOSTILE_HEADERS], ids=[c[0] for c in HOSTILE_HEADERS]
)
def test_hostile_header_refused_without_large_allocation(tmp_path, header, data, length, words):
    if header is None:
        path = tmp_path / "bad.safetensors"
        path.write_bytes(b"\x10\x00\x00")
    else:
        path = _bad(tmp_path, "bad.safetensors", header, data, length)
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError) as info:
            read_header(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(info.value)
    assert str(path) in message
    for word in words:
        assert word in message, message
    # nothing near the sizes the header claims was allocated (the file itself is < 1 MiB)
    assert peak < 64 * 1024 * 1024, peak


def test_header_over_the_cap_is_not_read(tmp_path):
    # a sparse file big enough to hold the claimed header: refused by the cap, never read
    path = tmp_path / "big.safetensors"
    with open(path, "wb") as f:
        f.write((MAX_HEADER_BYTES + 1).to_bytes(8, "little"))
        f.truncate(MAX_HEADER_BYTES + 64)
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match="exceeds the"):
            read_header(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024


def test_zero_size_and_empty_files_are_valid(tmp_path):
    header, size = tiled(("a", "F32", [2]))
    header["z"] = {"dtype": "F32", "shape": [0, 3], "data_offsets": [8, 8]}
    assert set(read_header(_bad(tmp_path, "ok.safetensors", header, size)).tensors) == {"a", "z"}
    assert read_header(_bad(tmp_path, "empty.safetensors", {}, 0)).tensors == {}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_non_regular_files_refused_without_blocking(tmp_path, kind):
    path = tmp_path / "model.safetensors"
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading would wait for a writer forever
    elif kind == "device":
        path.symlink_to("/dev/zero")  # reading it never ends
    else:
        path.mkdir()
    with pytest.raises(CheckpointError, match=r"not a regular file|is a folder"):
        read_header(path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"not a regular file|is a folder|link resolving outside"):
        read_index(tmp_path)


@pytest.mark.timeout(30)
def test_read_regular_file_bounds(tmp_path):
    path = tmp_path / "x.json"
    path.write_bytes(b"x" * 100)
    assert read_regular_file(path, 100) == b"x" * 100
    with pytest.raises(CheckpointError, match="larger than the 99 byte limit"):
        read_regular_file(path, 99)
    with pytest.raises(CheckpointError, match="file not found"):
        read_regular_file(tmp_path / "missing.json", 10)
    link = tmp_path / "dangling.json"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match="broken link"):
        read_regular_file(link, 10)


@pytest.fixture
def sharded(llama_dir, tmp_path) -> Path:
    return sharded_model(llama_dir, tmp_path / "model")


def _weight_map(folder: Path) -> dict[str, str]:
    return json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]


def test_sharded_index_reads_headers_only(sharded):
    index = read_index(sharded)
    assert index.sharded and len(index.files) == 2
    assert set(index.tensors) == set(_weight_map(sharded))
    with open_shard(sharded, index.files[0]) as f:
        key = next(k for k, t in index.tensors.items() if t.file == index.files[0])
        assert tuple(f.get_tensor(key).shape) == index.tensors[key].shape


@pytest.mark.parametrize(
    ("bad_name", "words"),
    [
        ("/etc/passwd", "leaves the model folder"),
        ("../outside.safetensors", "leaves the model folder"),
        ("sub/../../outside.safetensors", "leaves the model folder"),
        ("..\\outside.safetensors", "not a plain file name"),
        ("C:evil.safetensors", "not a plain file name"),
        ("a\x00b.safetensors", "not a plain file name"),
        ("", "not a file name"),
        (".", "names the model folder itself"),
        ("link.safetensors", "link resolving outside"),
        ("linkdir/shard.safetensors", "link resolving outside"),
    ],
)
def test_index_shard_names_stay_in_the_folder(sharded, tmp_path, bad_name, words):
    outside = tmp_path / "outside"
    outside.mkdir()
    first = sorted(os.listdir(sharded))[1]  # a real shard, copied outside
    (outside / "shard.safetensors").write_bytes((sharded / first).read_bytes())
    (sharded / "link.safetensors").symlink_to(outside / "shard.safetensors")
    (sharded / "linkdir").symlink_to(outside)
    weight_map = _weight_map(sharded)
    victim = sorted(weight_map)[0]
    weight_map[victim] = bad_name
    write_index(sharded, weight_map)
    with pytest.raises(CheckpointError) as info:
        read_index(sharded)
    message = str(info.value)
    assert words in message
    assert repr(victim) in message  # names the index entry
    assert "model.safetensors.index.json" in message


def test_single_file_linked_outside_is_refused(llama_dir, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_bytes((llama_dir / "config.json").read_bytes())
    (folder / "model.safetensors").symlink_to(llama_dir / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"'model\.safetensors' is a link resolving outside"):
        read_index(folder)


def test_links_inside_the_folder_and_into_the_hub_cache_blobs_are_allowed(sharded, tmp_path):
    weight_map = _weight_map(sharded)
    shard = sorted(set(weight_map.values()))[0]
    (sharded / "inner").mkdir()
    (sharded / shard).rename(sharded / "inner" / shard)
    (sharded / shard).symlink_to(Path("inner") / shard)
    assert read_index(sharded).files == sorted(set(weight_map.values()))

    # the Hugging Face cache layout: snapshots/<rev>/<file> -> ../../blobs/<hash>
    repo = tmp_path / "hub" / "models--org--name"
    snapshot = repo / "snapshots" / "abc123"
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for i, entry in enumerate(sorted(os.listdir(sharded))):
        src = sharded / entry
        if src.is_dir() and not src.is_symlink():
            continue
        blob = repo / "blobs" / f"blob{i}"
        blob.write_bytes(src.read_bytes())
        (snapshot / entry).symlink_to(Path("..") / ".." / "blobs" / blob.name)
    index = read_index(snapshot)
    assert set(index.tensors) == set(weight_map)
    with open_shard(snapshot, shard) as f:
        assert set(f.keys()) <= set(weight_map)
    # ...but not out of the repository's own cache folder
    (repo.parent / "secret.safetensors").write_bytes((repo / "blobs" / "blob0").read_bytes())
    os.unlink(snapshot / shard)
    (snapshot / shard).symlink_to(Path("..") / ".." / ".." / "secret.safetensors")
    with pytest.raises(CheckpointError, match="link resolving outside"):
        read_index(snapshot)


def test_index_missing_shard_and_wrong_mapping(sharded):
    weight_map = _weight_map(sharded)
    key = sorted(weight_map)[0]
    weight_map[key] = "model-00009-of-00009.safetensors"
    write_index(sharded, weight_map)
    with pytest.raises(CheckpointError, match=r"names shard 'model-00009-of-00009.safetensors', which is missing"):
        read_index(sharded)
    weight_map = {k: v for k, v in _weight_map(sharded).items() if k != key}
    weight_map["ghost.weight"] = sorted(set(weight_map.values()))[0]
    write_index(sharded, weight_map)
    with pytest.raises(CheckpointError, match=r"key 'ghost\.weight' is mapped to"):
        read_index(sharded)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{not json", "not valid JSON"),
        ('{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}', "appears twice"),
        ('{"weight_map": ["x.safetensors"]}', "'weight_map' must map"),
        ('{"weight_map": {"a": 3}}', "'weight_map' must map"),
        ('{"weight_map": {}}', "names no tensors"),
        ("[]", "'weight_map' must map"),
    ],
)
def test_corrupt_index(sharded, text, words):
    (sharded / "model.safetensors.index.json").write_text(text)
    with pytest.raises(CheckpointError, match=words):
        read_index(sharded)


def test_open_shard_validates_before_safetensors(tmp_path):
    header, size = tiled(("w", "F32", [2]))
    # one byte more than the header accounts for: safetensors would refuse it too, but
    # with its own exception type; we refuse it first, by name
    _bad(tmp_path, "model.safetensors", header, size + 1)
    with pytest.raises(CheckpointError, match="ends at byte"), open_shard(tmp_path, "model.safetensors"):
        pass
    with pytest.raises(CheckpointError, match="leaves the model folder"), open_shard(tmp_path, "../x.safetensors"):
        pass


def test_safe_member_plain_names(tmp_path):
    (tmp_path / "sub").mkdir()
    assert safe_member(tmp_path, "sub/a.safetensors", "here") == tmp_path / "sub" / "a.safetensors"
    with pytest.raises(CheckpointError, match="here: shard name"):
        safe_member(tmp_path, None, "here")  # type: ignore[arg-type]
