"""A streaming safetensors writer: the layout first, then the bytes, one tensor at a time.

``safetensors.torch.save_file`` needs a whole shard in memory. Here the shard layout
(keys, dtypes, shapes, offsets, hence the header) is computed from headers alone before
any byte is written; then each tensor is written in turn. A tensor that no transform
touches is copied as a raw byte range from its source file (``copy_file_range`` when the
kernel offers it, else a bounded buffer), so peak memory is the largest *transformed*
tensor plus a small constant, whatever the checkpoint size.

The output follows transformers' ``save_pretrained`` exactly: the same greedy split and
shard names (``model-00001-of-00002.safetensors``; ``model.safetensors`` for one shard),
the same index json, and inside each file the same tensor order and header bytes as
safetensors' own writer, metadata ``{"format": "pt"}`` -- except that a header whose size
changed (renamed keys) is padded with spaces so that copied bytes keep their offset within
a page, which makes the kernel's copy markedly faster (see :func:`_alignment_padding`).
"""

from __future__ import annotations

import errno
import json
import math
import os
import struct
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..boundary.options import parse_size
from ..errors import CheckpointError, ExportError
from ..model.checkpoint import DTYPE_SIZES, INDEX_FILE, SINGLE_FILE, ST_TO_TORCH, TensorInfo, safe_member
from ..progress import Progress
from .staging import fault_point

if TYPE_CHECKING:
    import torch

SHARD_PATTERN = "model{suffix}.safetensors"
METADATA = {"format": "pt"}
# Bytes moved per step: big enough to be fast, small enough for a prompt cancel.
CHUNK_BYTES = 64 * 1024 * 1024
_FALLBACK_BUFFER = 8 * 1024 * 1024
_PAGE = 4096

# safetensors writes tensors sorted by dtype (this order, descending alignment) then name.
_DTYPE_ORDER = [
    "U64",
    "I64",
    "F64",
    "C64",
    "F32",
    "U32",
    "I32",
    "BF16",
    "F16",
    "U16",
    "I16",
    "F8_E8M0",
    "F8_E4M3",
    "F8_E5M2",
    "I8",
    "U8",
    "F4",
    "BOOL",
]
_DTYPE_RANK = {d: i for i, d in enumerate(_DTYPE_ORDER)}
# binary mode matters on Windows only; close-on-exec keeps files out of child processes
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
# copy_file_range refuses some pairs of files (other file systems, devices): use read + write
_NO_FAST_COPY = {errno.EINVAL, errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM}


@dataclass(frozen=True)
class OutTensor:
    """One tensor to write: its output key, dtype (safetensors code) and shape.

    ``raw`` names the source byte range to copy as is; when it is ``None`` the tensor is
    produced by the caller (a transformed tensor).
    """

    key: str
    dtype: str
    shape: tuple[int, ...]
    raw: TensorInfo | None = None

    @property
    def nbytes(self) -> int:
        return tensor_nbytes(self.dtype, self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def tensor_nbytes(dtype: str, shape: Sequence[int]) -> int:
    size = math.prod(shape) * DTYPE_SIZES[dtype]
    if size != int(size):
        raise CheckpointError(f"shape {list(shape)} of {dtype} is not a whole number of bytes")
    return int(size)


@dataclass
class ShardLayout:
    """One output file: its tensors in data order, the header bytes and their offsets."""

    name: str
    tensors: list[OutTensor]
    header: bytes = b""
    offsets: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def data_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def size(self) -> int:
        """The file size: 8-byte length, header, data."""
        return len(self.header) + self.data_bytes


@dataclass
class WritePlan:
    """Every output file and its layout, known before any byte is written."""

    shards: list[ShardLayout]
    total_size: int
    total_parameters: int

    @property
    def sharded(self) -> bool:
        return len(self.shards) > 1

    @property
    def files(self) -> list[str]:
        return [s.name for s in self.shards] + ([INDEX_FILE] if self.sharded else [])

    @property
    def tensors(self) -> dict[str, tuple[str, OutTensor]]:
        """key -> (file, tensor)."""
        return {t.key: (s.name, t) for s in self.shards for t in s.tensors}

    def index(self) -> dict[str, Any] | None:
        """The ``model.safetensors.index.json`` content, as ``save_pretrained`` writes it."""
        if not self.sharded:
            return None
        return {
            "metadata": {"total_parameters": self.total_parameters, "total_size": self.total_size},
            "weight_map": {t.key: s.name for s in self.shards for t in s.tensors},
        }


def plan_shards(
    tensors: Sequence[OutTensor], max_shard_size: int | str, *, total_parameters: int | None = None
) -> WritePlan:
    """Split ``tensors`` (in this order) into shards the way ``save_pretrained`` does.

    A tensor larger than ``max_shard_size`` gets a shard of its own (placed before the
    shard being filled, as huggingface_hub does); otherwise a shard is closed when the
    next tensor would tip it over the limit.

    Returns:
        The plan, with every header already serialized.

    Raises:
        UsageError: a bad ``max_shard_size``.
        ExportError: duplicate output keys.
    """
    limit = parse_size(max_shard_size)
    seen: set[str] = set()
    for t in tensors:
        if t.key in seen:
            raise ExportError(f"two tensors would be written as {t.key!r}; the plan is inconsistent")
        seen.add(t.key)
    groups: list[list[OutTensor]] = []
    current: list[OutTensor] = []
    current_size = 0
    for t in tensors:
        size = t.nbytes
        if size > limit:
            groups.append([t])
            continue
        if current_size + size > limit:
            groups.append(current)
            current, current_size = [], 0
        current.append(t)
        current_size += size
    if current or not groups:
        groups.append(current)
    n = len(groups)
    shards = []
    for i, group in enumerate(groups):
        name = SINGLE_FILE if n == 1 else SHARD_PATTERN.format(suffix=f"-{i + 1:05d}-of-{n:05d}")
        shards.append(layout_shard(name, group))
    total_size = sum(t.nbytes for t in tensors)
    params = total_parameters if total_parameters is not None else sum(t.numel for t in tensors)
    return WritePlan(shards, total_size, params)


def layout_shard(name: str, tensors: Sequence[OutTensor], metadata: dict[str, str] | None = None) -> ShardLayout:
    """Order ``tensors`` as safetensors does (dtype, then name) and serialize the header."""
    ordered = sorted(tensors, key=lambda t: (_DTYPE_RANK.get(t.dtype, len(_DTYPE_RANK)), t.key))
    header: dict[str, Any] = {"__metadata__": dict(METADATA if metadata is None else metadata)}
    offsets: dict[str, tuple[int, int]] = {}
    pos = 0
    for t in ordered:
        end = pos + t.nbytes
        header[t.key] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [pos, end]}
        offsets[t.key] = (pos, end)
        pos = end
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)  # safetensors pads the header to 8 bytes with spaces
    text += b" " * _alignment_padding(8 + len(text), ordered, offsets)
    return ShardLayout(name, ordered, struct.pack("<Q", len(text)) + text, offsets)


def _alignment_padding(data_start: int, tensors: Sequence[OutTensor], offsets: dict[str, tuple[int, int]]) -> int:
    """Spaces to add to the header so that copied bytes keep their offset within a page.

    The kernel copies a byte range several times faster when source and destination sit
    at the same offset within a page; a header that grew or shrank (renamed keys) shifts
    every byte after it. Padding with spaces is valid safetensors (the header is JSON);
    it is never needed when the header kept its size, so a round trip reproduces the
    source byte for byte, and a shard made only of produced tensors is never padded.
    """
    weight: dict[int, int] = {}
    for t in tensors:
        if t.raw is not None and t.nbytes:
            shift = (t.raw.start - data_start - offsets[t.key][0]) % _PAGE
            weight[shift] = weight.get(shift, 0) + t.nbytes
    if not weight:
        return 0
    shift = max(weight, key=lambda k: (weight[k], -k))
    return shift if shift % 8 == 0 else 0  # keep the data 8-byte aligned, as safetensors does


class ShardSink:
    """One output file, created exclusively; every byte of a shard goes through here."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = self._open(path)
        self.written = 0
        self._fast_copy = hasattr(os, "copy_file_range")

    def _open(self, path: Path) -> int:
        return os.open(path, _CREATE_FLAGS, 0o666)

    def write(self, data: memoryview | bytes) -> None:
        view = memoryview(data).cast("B")
        while view:
            n = os.write(self.fd, view)
            self.written += n
            view = view[n:]

    def copy_range(self, src_fd: int, offset: int, length: int, buffer: bytearray) -> int:
        """Copy up to ``length`` bytes from ``src_fd`` at ``offset``; return how many."""
        if self._fast_copy:
            try:
                n = os.copy_file_range(src_fd, self.fd, length, offset)
                self.written += n
                return n
            except OSError as e:
                # not supported for this pair of files: fall back to read + write
                if e.errno not in _NO_FAST_COPY:
                    raise
                self._fast_copy = False
        view = memoryview(buffer)[: min(length, len(buffer))]
        n = _pread_into(src_fd, view, offset)
        if n:
            self.write(view[:n])
        return n

    def finish(self, sync: bool) -> None:
        """Close the file once complete (fsync first, so that a later rename is durable)."""
        try:
            if sync:
                os.fsync(self.fd)
        finally:
            self.abort()

    def abort(self) -> None:
        """Close without syncing (an error is on its way; the caller removes the file)."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    """Read into ``view`` at ``offset`` without moving a shared file position (where possible)."""
    if hasattr(os, "preadv"):
        return os.preadv(fd, [view], offset)
    if hasattr(os, "pread"):
        data = os.pread(fd, len(view), offset)
    else:  # Windows
        os.lseek(fd, offset, os.SEEK_SET)
        data = os.read(fd, len(view))
    view[: len(data)] = data
    return len(data)


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The raw little-endian bytes of ``tensor`` (a view when it is contiguous)."""
    import torch

    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return memoryview(b"")
    return memoryview(flat.view(torch.uint8).numpy()).cast("B")


Producer = Callable[[OutTensor], "torch.Tensor"]


def iter_write(
    plan: WritePlan,
    folder: Path,
    source_folder: Path,
    produce: Producer,
    *,
    sync: bool = True,
    total: int | None = None,
    open_source: Callable[[str], int] | None = None,
) -> Generator[Progress, None, list[Path]]:
    """Write every shard of ``plan`` (and the index) into ``folder``, streaming.

    Args:
        plan: from :func:`plan_shards`.
        folder: an existing, empty folder of ours (a temporary sibling of the destination).
        source_folder: where ``OutTensor.raw`` files live.
        produce: returns the tensor for an output without ``raw`` (a transformed tensor).
        sync: fsync each file once written.
        total: the bytes progress counts up to (default: the plan's), when this is part of a larger job.
        open_source: opens a source file by name, returning a descriptor (the checkpoint's
            :meth:`~fusion_core.model.checkpoint.CheckpointIndex.open_verified`: the bytes
            copied are those validated at the open); default: open it by name in ``source_folder``.

    Yields:
        Progress in bytes of tensor data.

    Returns:
        The paths written.

    Raises:
        CheckpointError: a source file shorter than its header says.
        ExportError: a produced tensor whose shape or dtype differs from the plan.
        OSError: from the file system (the caller turns it into a message).
    """
    total = plan.total_size if total is None else total
    done = 0
    written: list[Path] = []
    sources: dict[str, int] = {}
    buffer = bytearray(_FALLBACK_BUFFER)
    try:
        for shard in plan.shards:
            path = folder / shard.name
            sink = ShardSink(path)
            written.append(path)
            try:
                sink.write(shard.header)
                for run in _runs(shard.tensors):
                    if isinstance(run, OutTensor):
                        data = _produced_bytes(run, produce(run))
                        sink.write(data)
                        done += len(data)
                        del data
                        yield Progress(done, total, f"{shard.name}: {run.key}")
                        continue
                    file, pos, end, last = run
                    src_fd = sources.get(file)
                    if src_fd is None and open_source is not None:
                        src_fd = sources[file] = open_source(file)
                    elif src_fd is None:
                        src_path = safe_member(source_folder, file, str(source_folder))
                        src_fd = sources[file] = os.open(src_path, _READ_FLAGS)
                    while pos < end:
                        n = sink.copy_range(src_fd, pos, min(CHUNK_BYTES, end - pos), buffer)
                        if n == 0:
                            raise CheckpointError(
                                f"{source_folder / file}: ends at byte {pos}, before the data of {last!r} "
                                f"(up to byte {end}); the file is truncated"
                            )
                        pos += n
                        done += n
                        yield Progress(done, total, f"{shard.name}: {last}")
                if sink.written != shard.size:
                    raise ExportError(f"{path}: wrote {sink.written} bytes, expected {shard.size}")
            except BaseException:
                sink.abort()
                raise
            sink.finish(sync)
            fault_point("shard-written")
        index = plan.index()
        if index is not None:
            path = folder / INDEX_FILE
            write_text(path, json.dumps(index, indent=2, sort_keys=True) + "\n", sync=sync)
            written.append(path)
    finally:
        for fd in sources.values():
            os.close(fd)
    return written


def _runs(tensors: Sequence[OutTensor]) -> Generator[OutTensor | tuple[str, int, int, str], None, None]:
    """Tensors to produce, and raw copies merged into runs (file, start, end, last key).

    Neighbours in the output that are neighbours in the same source file are copied in one
    go: a copy per tensor, at unaligned offsets, is markedly slower than one per run.
    """
    run: list[Any] | None = None
    for t in tensors:
        if t.raw is not None and run is not None and run[0] == t.raw.file and run[2] == t.raw.start:
            run[2], run[3] = t.raw.end, t.key
            continue
        if run is not None:
            yield (run[0], run[1], run[2], run[3])
            run = None
        if t.raw is None:
            yield t
        else:
            run = [t.raw.file, t.raw.start, t.raw.end, t.key]
    if run is not None:
        yield (run[0], run[1], run[2], run[3])


def _produced_bytes(t: OutTensor, tensor: torch.Tensor) -> memoryview:
    shape = tuple(tensor.shape)
    if shape != tuple(t.shape):
        raise ExportError(f"{t.key}: the transform produced shape {list(shape)}, the plan says {list(t.shape)}")
    want = ST_TO_TORCH.get(t.dtype)
    got = str(tensor.dtype).removeprefix("torch.")
    if want is not None and got != want:
        raise ExportError(f"{t.key}: the transform produced {got}, the checkpoint holds {want}")
    data = tensor_bytes(tensor)
    if len(data) != t.nbytes:
        raise ExportError(f"{t.key}: the transform produced {len(data)} bytes, the plan says {t.nbytes}")
    return data


def write_text(path: Path, text: str, *, sync: bool = True) -> None:
    """Write a small text file (created exclusively), optionally fsynced."""
    sink = ShardSink(path)
    try:
        sink.write(text.encode("utf-8"))
    except BaseException:
        sink.abort()
        raise
    sink.finish(sync)
