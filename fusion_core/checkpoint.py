"""Safetensors checkpoints: header index (no tensor data), safe shard resolution.

We parse safetensors headers ourselves (8-byte little-endian length + JSON) so that a
preview never touches tensor data and a hostile file is refused before any large
allocation: the header length is bounded by the file size and a hard cap, offsets must be
in range and must not overlap, dtypes must be known, and each byte range must match its
shape. Tensor data itself is read with ``safetensors.safe_open`` (see :func:`open_shard`).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import struct
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CheckpointError

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# A header is a small JSON document; real ones are < 10 MiB even for 100k tensors.
MAX_HEADER_BYTES = 100 * 1024 * 1024
MAX_INDEX_BYTES = 100 * 1024 * 1024

# safetensors dtype codes -> bytes per element
DTYPE_SIZES: dict[str, float] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "F8_E8M0": 1,
    "F4": 0.5,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
    "C64": 8,
}

# torch dtype names (str(torch.float32) minus "torch.") <-> safetensors codes
TORCH_TO_ST = {
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "float64": "F64",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
}
ST_TO_TORCH = {v: k for k, v in TORCH_TO_ST.items()}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a checkpoint, as its header describes it."""

    key: str
    shape: tuple[int, ...]
    dtype: str  # safetensors code, e.g. "F32"
    file: str  # shard file name, relative to the checkpoint folder
    start: int  # byte offset of the data, from the start of the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    @property
    def torch_dtype(self) -> str:
        return ST_TO_TORCH.get(self.dtype, self.dtype)


@dataclass
class ShardHeader:
    """The parsed header of one safetensors file."""

    path: Path
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]
    data_start: int
    size: int


@dataclass
class CheckpointIndex:
    """Every tensor of a checkpoint folder (single file or sharded), from headers only."""

    folder: Path
    files: list[str]
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    index_file: str | None = None

    @property
    def sharded(self) -> bool:
        return self.index_file is not None

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    @property
    def largest_tensor_bytes(self) -> int:
        return max((t.nbytes for t in self.tensors.values()), default=0)

    def keys(self) -> list[str]:
        return list(self.tensors)


def _fail(path: Path, what: str) -> CheckpointError:
    return CheckpointError(f"{path}: {what}")


def read_header(path: str | os.PathLike[str], relative_name: str | None = None) -> ShardHeader:
    """Parse and validate the header of one safetensors file without reading tensor data.

    Raises:
        CheckpointError: the file is missing, truncated, or its header is not a valid
            safetensors header (the message names the file and the key).
    """
    path = Path(path)
    name = relative_name or path.name
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise _fail(path, f"truncated: {size} bytes, not a safetensors file")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise _fail(
                    path,
                    f"header length {n} is past the end of the file ({size} bytes): truncated or corrupt",
                )
            if n > MAX_HEADER_BYTES:
                raise _fail(path, f"header length {n} exceeds the {MAX_HEADER_BYTES} byte limit")
            raw = f.read(n)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise CheckpointError(f"{path}: is a folder, not a safetensors file") from None
    except PermissionError:
        raise CheckpointError(f"{path}: permission denied") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise _fail(path, f"header is not valid JSON ({e.__class__.__name__}): corrupt file") from None
    if not isinstance(header, dict):
        raise _fail(path, "header is not a JSON object")
    data_start = 8 + n
    data_len = size - data_start
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _fail(path, "__metadata__ must map strings to strings")
    tensors: dict[str, TensorInfo] = {}
    for key, entry in header.items():
        tensors[key] = _tensor_info(path, name, key, entry, data_start, data_len)
    # ranges must not overlap
    ranges = sorted((t.start, t.end, t.key) for t in tensors.values() if t.end > t.start)
    for (_s0, e0, k0), (s1, _e1, k1) in itertools.pairwise(ranges):
        if s1 < e0:
            raise _fail(path, f"tensors {k0!r} and {k1!r} overlap in the data section")
    return ShardHeader(path=path, tensors=tensors, metadata=metadata, data_start=data_start, size=size)


def _tensor_info(path: Path, name: str, key: str, entry: Any, data_start: int, data_len: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise _fail(path, f"tensor {key!r}: entry is not an object")
    dtype = entry.get("dtype")
    shape = entry.get("shape")
    offsets = entry.get("data_offsets")
    if dtype not in DTYPE_SIZES:
        raise _fail(path, f"tensor {key!r}: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise _fail(path, f"tensor {key!r}: shape {shape!r} is not a list of non-negative integers")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise _fail(path, f"tensor {key!r}: data_offsets {offsets!r} must be two integers")
    begin, end = offsets
    if begin < 0 or end < begin:
        raise _fail(path, f"tensor {key!r}: data_offsets {offsets} are not an increasing range")
    if end > data_len:
        raise _fail(path, f"tensor {key!r}: data_offsets end {end} is past the end of the file (truncated?)")
    expected = math.prod(shape) * DTYPE_SIZES[dtype]
    if expected != end - begin:
        raise _fail(
            path,
            f"tensor {key!r}: shape {shape} of {dtype} needs {expected:g} bytes, range holds {end - begin}",
        )
    return TensorInfo(key, tuple(shape), dtype, name, data_start + begin, data_start + end)


def safe_member(folder: Path, name: str, what: str) -> Path:
    """Resolve ``name`` inside ``folder``, refusing anything that would leave it.

    Raises:
        CheckpointError: absolute paths, ``..`` components, or symlinks resolving outside.
    """
    if not isinstance(name, str) or not name:
        raise CheckpointError(f"{what}: shard name {name!r} is not a file name")
    pure = Path(name)
    if pure.is_absolute() or name.startswith(("/", "\\")) or ".." in pure.parts or ":" in name:
        raise CheckpointError(f"{what}: shard name {name!r} leaves the model folder; refused")
    candidate = folder / pure
    root = folder.resolve()
    resolved = candidate.resolve()
    if resolved != root and root not in resolved.parents:
        raise CheckpointError(f"{what}: shard {name!r} is a link resolving outside the model folder; refused")
    return candidate


def read_index(folder: Path) -> CheckpointIndex | None:
    """Read the checkpoint of ``folder`` from headers only; ``None`` when it has no weights.

    Raises:
        CheckpointError: a corrupt index or shard, a missing shard, or a path that leaves
            the folder.
    """
    folder = Path(folder)
    index_path = folder / INDEX_FILE
    single = folder / SINGLE_FILE
    if index_path.is_file():
        weight_map = _read_weight_map(index_path)
        files = sorted(set(weight_map.values()))
        index = CheckpointIndex(folder=folder, files=files, index_file=INDEX_FILE)
        headers = {}
        for fname in files:
            shard = safe_member(folder, fname, str(index_path))
            if not shard.is_file():
                raise CheckpointError(f"{index_path}: names shard {fname!r}, which is missing from {folder}")
            headers[fname] = read_header(shard, fname)
        for key, fname in weight_map.items():
            info = headers[fname].tensors.get(key)
            if info is None:
                raise CheckpointError(f"{index_path}: key {key!r} is mapped to {fname!r}, which does not contain it")
            index.tensors[key] = info
        return index
    if single.is_file():
        header = read_header(single, SINGLE_FILE)
        return CheckpointIndex(folder=folder, files=[SINGLE_FILE], tensors=dict(header.tensors))
    return None


def _read_weight_map(index_path: Path) -> dict[str, str]:
    if index_path.stat().st_size > MAX_INDEX_BYTES:
        raise CheckpointError(f"{index_path}: larger than {MAX_INDEX_BYTES} bytes; refused")
    try:
        data = json.loads(index_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CheckpointError(f"{index_path}: not valid JSON ({e})") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise CheckpointError(f"{index_path}: 'weight_map' must map tensor names to shard file names")
    return dict(weight_map)


@contextmanager
def open_shard(folder: Path, name: str) -> Iterator[Any]:
    """Open one shard lazily with ``safetensors.safe_open`` (framework ``pt``, CPU)."""
    from safetensors import safe_open

    path = safe_member(Path(folder), name, str(folder))
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            yield f
    except (OSError, ValueError, RuntimeError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{path}: cannot read tensors ({e})") from e
