"""Safetensors checkpoints: header index (no tensor data), safe shard resolution.

We parse safetensors headers ourselves (8-byte little-endian length + JSON) so that a
preview never touches tensor data and a hostile file is refused before any large
allocation: only regular files are opened, the header length is bounded by the file size
and by the cap safetensors itself uses, the JSON must not repeat a key, dtypes must be
known, each byte range must match its shape, and the ranges must tile the data section
exactly (no overlap, no gap, nothing after the end). These are the rules of
``safetensors.safe_open``, checked first so that every file we hand to it (see
:func:`open_shard`) has passed our validation and its errors never surprise a caller.

Each file validated is recorded with its identity (:class:`FileIdentity`: device, inode,
size, mtime, header digest) in :attr:`CheckpointIndex.identities`; every later read goes
through :meth:`CheckpointIndex.open_verified` (or :meth:`~CheckpointIndex.open`,
:meth:`~CheckpointIndex.pinned`), which checks it again on the open descriptor, so what is
loaded is what was validated. Tensor counts are bounded before a header or an index is
parsed (:data:`MAX_TENSORS`, :data:`MAX_INDEX_ENTRIES`).

Shard names come from a JSON file a stranger may have written: :func:`safe_member`
keeps them inside the model folder (no absolute paths, no ``..``, no links out of it,
except the Hugging Face cache's own links into its ``blobs`` folder).
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import struct
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, one_line, quoted
from ..text import printable
from .safety import DuplicateKeyError, open_regular, read_regular_file, strict_json_loads  # noqa: F401 - re-exported

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# A header is a small JSON document; real ones are < 10 MiB even for 100k tensors. The cap
# is the one safetensors applies (so a header we accept, safe_open accepts too).
MAX_HEADER_BYTES = 100_000_000
MAX_INDEX_BYTES = 100 * 1024 * 1024
# Tensors in one header, and entries in one index. The largest public checkpoints have tens
# of thousands (DeepSeek-V3: about 92,000 in its index); a header of 1.48 million one-byte
# tensors fits in 100 MB and would take minutes and gigabytes to parse and plan. Both counts
# are bounded from the raw bytes before the JSON is parsed (a tensor entry needs at least
# five strings, ten quote characters; an index entry two strings, four), then exactly.
MAX_TENSORS = 250_000
MAX_INDEX_ENTRIES = 250_000
_QUOTES_PER_TENSOR = 10
_QUOTES_PER_ENTRY = 4
# safetensors stores sizes and offsets as u64 (usize); anything larger is not a valid header.
_U64 = 2**64

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

# bits per element: F4 packs two values per byte, so byte sizes are computed in bits.
DTYPE_BITS: dict[str, int] = {code: int(size * 8) for code, size in DTYPE_SIZES.items()}

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


@dataclass(frozen=True)
class FileIdentity:
    """What a file was when it was validated: re-checked right before every later read.

    ``head`` bytes from the start (a safetensors header: its 8-byte length and JSON; a JSON
    file: all of it) hash to ``digest``.
    """

    device: int
    inode: int
    size: int
    mtime_ns: int
    head: int
    digest: str

    @classmethod
    def of(cls, st: os.stat_result, head: bytes) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, len(head), hashlib.sha256(head).hexdigest())

    def change(self, st: os.stat_result) -> str:
        """How the file ``st`` describes differs from this one ('' when it looks the same)."""
        if (st.st_dev, st.st_ino) != (self.device, self.inode):
            return "replaced by another file"
        if st.st_size != self.size:
            return f"{self.size:,} bytes then, {st.st_size:,} now"
        if st.st_mtime_ns != self.mtime_ns:
            return "modified"
        return ""


@dataclass
class ShardHeader:
    """The parsed header of one safetensors file."""

    path: Path
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]
    data_start: int
    size: int
    identity: FileIdentity | None = None


@dataclass
class CheckpointIndex:
    """Every tensor of a checkpoint folder (single file or sharded), from headers only."""

    folder: Path
    files: list[str]
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    index_file: str | None = None
    #: each file validated at the open (the shards, the index, side files a load reads), by name
    identities: dict[str, FileIdentity] = field(default_factory=dict)
    #: the weight files the folder held at the open (:data:`WEIGHT_PATTERNS`)
    weight_names: frozenset[str] = frozenset()

    @property
    def sharded(self) -> bool:
        return self.index_file is not None

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def keys(self) -> list[str]:
        return list(self.tensors)

    def verify(self) -> None:
        """Check that every file validated at the open is still the same file, and that no
        other weight file appeared.

        Raises:
            CheckpointError: a file changed, vanished or appeared since the open; the
                message names it and asks to reopen the model.
        """
        for name in self.identities:
            os.close(self.open_verified(name))
        appeared = sorted(_weight_names(self.folder) - self.weight_names)
        if appeared:
            raise CheckpointError(
                f"{self.folder / appeared[0]}: appeared since the model was opened (weights nobody validated); "
                "reopen the model"
            )

    def open_verified(self, name: str) -> int:
        """A read-only descriptor of the validated file ``name``, checked on the open handle
        (device, inode, size, mtime, and the digest of its header) against the open's.

        Raises:
            CheckpointError: the file changed, vanished, or is now a link leaving the folder.
        """
        identity = self.identities[name]
        path = self.folder / name
        stale = "since the model was opened"
        try:
            safe_member(self.folder, name, str(self.folder))  # now a link out of the folder?
        except CheckpointError as e:
            raise CheckpointError(f"{path}: changed {stale} ({e}); reopen the model") from None
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            raise CheckpointError(f"{path}: vanished {stale}; reopen the model") from None
        except OSError as e:
            raise CheckpointError(f"{path}: cannot be read ({e.strerror or e}); reopen the model") from None
        try:
            change = identity.change(os.fstat(fd))
            if not change and hashlib.sha256(os.pread(fd, identity.head, 0)).hexdigest() != identity.digest:
                change = "its header was rewritten"
            if change:
                raise CheckpointError(
                    f"{path}: changed {stale} ({change}); its bytes are not the ones validated, so nothing "
                    "was read from it: reopen the model"
                )
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextmanager
    def open(self, name: str) -> Iterator[Any]:
        """The validated shard ``name`` opened with ``safetensors.safe_open`` (framework ``pt``),
        re-verified right before (:meth:`open_verified`); on Linux safetensors reads the very
        file that was verified (through its descriptor), not whatever the name holds later."""
        from safetensors import SafetensorError, safe_open

        fd = self.open_verified(name)
        try:
            try:
                handle = safe_open(fd_path(fd) or str(self.folder / name), framework="pt", device="cpu")
                reader = handle.__enter__()
            except (OSError, ValueError, RuntimeError, SafetensorError) as e:
                raise CheckpointError(f"{self.folder / name}: cannot read tensors ({e})") from e
            try:
                yield reader
            finally:
                handle.__exit__(None, None, None)
        finally:
            os.close(fd)

    @contextmanager
    def pinned(self) -> Iterator[Path]:
        """A private folder holding exactly the validated files, for a loader that wants a folder.

        Every file is re-verified and held open; on Linux the folder's entries are links to
        those open descriptors, so the loader (``from_pretrained``) reads the very files
        that were verified, finds no other file to choose (an added pickle, an adapter), and
        a later swap in the model folder cannot reach it. Elsewhere: the model folder, after
        :meth:`verify`.
        """
        self.verify()
        if fd_path(0) is None:
            yield self.folder
            return
        fds: list[int] = []
        try:
            with tempfile.TemporaryDirectory(prefix="fusion-validated-") as tmp:
                for name in self.identities:
                    fds.append(self.open_verified(name))
                    link = Path(tmp) / name
                    link.parent.mkdir(parents=True, exist_ok=True)
                    os.symlink(fd_path(fds[-1]), link)
                yield Path(tmp)
        finally:
            for fd in fds:
                os.close(fd)

    @property
    def reason(self) -> str:
        """Which file holds the weights, and why it is the one transformers loads too."""
        if self.index_file:
            return (
                f"{self.index_file} ({len(self.files)} shard(s)), the folder's sharded safetensors checkpoint; "
                "no model.safetensors beside it, so transformers loads the same shards"
            )
        return f"{self.files[0]}, the folder's single safetensors checkpoint (the file transformers loads)"


# files transformers could load weights from: recorded at the open, so one that appears later is refused
WEIGHT_PATTERNS = (
    "*.safetensors",
    "*.safetensors.index.json",
    "*.bin",
    "*.bin.index.json",
    "*.pt",
    "*.pth",
    "*.ckpt",
    "*.h5",
    "*.msgpack",
    "*.gguf",
)


def _weight_names(folder: Path) -> frozenset[str]:
    try:
        with os.scandir(folder) as it:
            names = [e.name for e in it]
    except OSError:
        return frozenset()
    return frozenset(n for n in names if any(fnmatch.fnmatchcase(n, p) for p in WEIGHT_PATTERNS))


def fd_path(fd: int) -> str | None:
    """A path that opens the file of descriptor ``fd`` itself (Linux), or None where there is none."""
    return f"/proc/self/fd/{fd}" if os.path.isdir("/proc/self/fd") else None


def identify(path: Path, limit: int, error: type[Exception] = CheckpointError) -> FileIdentity:
    """The identity of a small file read whole (a JSON side file), as :class:`FileIdentity`."""
    with open_regular(path, error) as (f, size):
        if size > limit:
            raise error(f"{path}: {size:,} bytes, larger than the {limit:,} byte limit for this file; refused")
        return FileIdentity.of(os.fstat(f.fileno()), f.read(limit + 1))


def _fail(path: Path, what: str) -> CheckpointError:
    return CheckpointError(f"{path}: {what}")


def read_header(path: str | os.PathLike[str], relative_name: str | None = None) -> ShardHeader:
    """Parse and validate the header of one safetensors file without reading tensor data.

    Args:
        path: the safetensors file.
        relative_name: its name relative to the checkpoint folder (stored in each TensorInfo).

    Returns:
        The validated header.

    Raises:
        CheckpointError: the file is missing, not a regular file, truncated, or its header
            is not a valid safetensors header (the message names the file and the key).
    """
    path = Path(path)
    name = relative_name or path.name
    with open_regular(path, CheckpointError) as (f, size):
        try:
            head = f.read(8)
            if len(head) < 8:
                raise _fail(path, f"truncated: {size} bytes, too short for a safetensors header")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise _fail(path, f"header length {n} is past the end of the file ({size} bytes): truncated or corrupt")
            if n > MAX_HEADER_BYTES:
                raise _fail(path, f"header length {n} exceeds the {MAX_HEADER_BYTES} byte limit; refused")
            raw = f.read(n)
            st = os.fstat(f.fileno())
        except OSError as e:
            raise _fail(path, f"cannot be read ({e.strerror or e})") from None
    if len(raw) != n:
        raise _fail(path, "changed while it was read (truncated)")
    if raw.count(b'"') // _QUOTES_PER_TENSOR > MAX_TENSORS:
        raise _fail(
            path,
            f"header has room for more than {MAX_TENSORS:,} tensors ({n:,} bytes of JSON), more than any real "
            "checkpoint; refused before parsing it",
        )
    try:
        header = strict_json_loads(raw)
    except DuplicateKeyError as e:
        raise _fail(path, f"header names tensor {quoted(e.key)} twice: corrupt or hostile file") from None
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        reason = "nested too deeply" if isinstance(e, RecursionError) else one_line(e, first=True, limit=200)
        raise _fail(path, f"header is not valid JSON ({reason}): corrupt file") from None
    if not isinstance(header, dict):
        raise _fail(path, f"header is a JSON {type(header).__name__}, not an object: corrupt file")
    if len(header) > MAX_TENSORS + 1:  # + __metadata__
        raise _fail(path, f"header names {len(header):,} tensors, more than the {MAX_TENSORS:,} accepted; refused")
    data_start = 8 + n
    metadata = header.pop("__metadata__", None)
    metadata = {} if metadata is None else metadata  # null is allowed, other empty values are not
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _fail(path, "__metadata__ must map strings to strings")
    tensors = {key: _tensor_info(path, name, key, entry, data_start) for key, entry in header.items()}
    _check_tiling(path, tensors, data_start, size)
    identity = FileIdentity.of(st, head + raw)
    return ShardHeader(
        path=path, tensors=tensors, metadata=metadata, data_start=data_start, size=size, identity=identity
    )


def _is_u64(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _U64


def _tensor_info(path: Path, name: str, key: str, entry: Any, data_start: int) -> TensorInfo:
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\ud800"): valid JSON, not valid text
        raise _fail(path, f"tensor name '{printable(key)}' is not valid Unicode (a lone surrogate); refused") from None
    if not isinstance(entry, dict):
        raise _fail(path, f"tensor {quoted(key)}: entry is not an object")
    dtype = entry.get("dtype")
    shape = entry.get("shape")
    offsets = entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise _fail(path, f"tensor {quoted(key)}: unknown dtype {quoted(dtype)} (known: {', '.join(DTYPE_BITS)})")
    if not isinstance(shape, list) or not all(_is_u64(d) for d in shape):
        raise _fail(path, f"tensor {quoted(key)}: shape {_short(shape)} is not a list of non-negative integers")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_u64(o) for o in offsets):
        raise _fail(path, f"tensor {quoted(key)}: data_offsets {_short(offsets)} must be two non-negative integers")
    begin, end = offsets
    if end < begin:
        raise _fail(path, f"tensor {quoted(key)}: data_offsets {offsets} are not an increasing range")
    # the element count as safetensors computes it: a running product that must fit in u64
    count = 1
    for d in shape:
        count *= d
        if count >= _U64:
            raise _fail(path, f"tensor {quoted(key)}: shape {_short(shape)} has more elements than a file can hold")
    bits = count * DTYPE_BITS[dtype]
    if bits % 8:
        raise _fail(path, f"tensor {quoted(key)}: shape {_short(shape)} of {dtype} is not a whole number of bytes")
    if bits // 8 != end - begin:
        raise _fail(
            path,
            f"tensor {quoted(key)}: shape {_short(shape)} of {dtype} needs {bits // 8} bytes, range holds {end - begin}",
        )
    return TensorInfo(key, tuple(shape), dtype, name, data_start + begin, data_start + end)


def _check_tiling(path: Path, tensors: dict[str, TensorInfo], data_start: int, size: int) -> None:
    """The byte ranges must cover the data section exactly, as safetensors requires."""
    pos, previous = data_start, None
    for t in sorted(tensors.values(), key=lambda t: (t.start, t.end)):
        if t.start < pos:
            raise _fail(path, f"tensors {quoted(previous)} and {quoted(t.key)} overlap in the data section")
        if t.start > pos:
            where = f"after {quoted(previous)}" if previous is not None else "at its start"
            raise _fail(path, f"the data section has a gap {where} (before {quoted(t.key)}): corrupt file")
        pos, previous = t.end, t.key
    if pos > size:  # cannot happen after the checks above unless offsets overflow the file
        raise _fail(path, f"tensor {quoted(previous)}: data ends at byte {pos}, past the end of the file (truncated?)")
    if pos < size:
        last = f"tensor {quoted(previous)}" if previous is not None else "the header"
        raise _fail(
            path,
            f"the file is {size} bytes but {last} ends at byte {pos}: truncated header or extra data; refused",
        )


def _short(value: Any, limit: int = 80) -> str:
    return quoted(value, limit)


def allowed_roots(folder: Path) -> list[Path]:
    """Folders a file of ``folder`` may resolve into through links.

    The folder itself; for a Hugging Face cache snapshot (``snapshots/<rev>``, whose files
    are links into ``../../blobs``), also that repository's ``blobs`` folder. Shard reading
    and export's copy of the other files share this one rule.
    """
    root = folder.resolve()
    roots = [root]
    # The Hugging Face cache stores snapshots as links into the repository's own blobs:
    # <cache>/models--org--name/snapshots/<revision>/<file> -> ../../blobs/<hash>
    snapshots = root.parent
    if snapshots.name == "snapshots" and snapshots.parent.name.startswith(("models--", "datasets--", "spaces--")):
        roots.append(snapshots.parent / "blobs")
    return roots


def safe_member(folder: Path, name: str, what: str) -> Path:
    """Resolve the file ``name`` inside ``folder``, refusing anything that would leave it.

    Args:
        folder: the model folder.
        name: a file name as a checkpoint (index) spells it, relative to ``folder``.
        what: where the name comes from, for the message (e.g. the index file and key).

    Returns:
        ``folder / name`` (unresolved, so messages show the name the user knows).

    Raises:
        CheckpointError: not a plain relative name (absolute, ``..``, a drive, control
            characters, backslashes), the folder itself, or a link resolving outside the
            folder (the Hugging Face cache's links into its blobs folder are allowed).
    """
    if not isinstance(name, str) or not name.strip():
        raise CheckpointError(f"{what}: shard name {quoted(name)} is not a file name; refused")
    if any(ord(c) < 32 or ord(c) == 127 for c in name) or "\\" in name or ":" in name:
        raise CheckpointError(f"{what}: shard name {quoted(name)} is not a plain file name; refused")
    pure = Path(name)
    if pure.is_absolute() or name.startswith("/") or ".." in pure.parts:
        raise CheckpointError(f"{what}: shard name {quoted(name)} leaves the model folder; refused")
    candidate = Path(folder) / pure
    try:
        roots = allowed_roots(Path(folder))
        resolved = candidate.resolve()
    except (OSError, RuntimeError, ValueError) as e:  # link loops, undecodable names
        raise CheckpointError(f"{what}: shard {quoted(name)} cannot be resolved ({e}); refused") from None
    if resolved == roots[0]:
        raise CheckpointError(f"{what}: shard name {quoted(name)} names the model folder itself; refused")
    if not any(resolved == r or r in resolved.parents for r in roots):
        raise CheckpointError(f"{what}: shard {quoted(name)} is a link resolving outside the model folder; refused")
    return candidate


def read_index(folder: Path) -> CheckpointIndex | None:
    """Read the checkpoint of ``folder`` from headers only; ``None`` when it has no weights.

    Args:
        folder: the model folder.

    Returns:
        Every tensor of the sharded (``model.safetensors.index.json``) or single-file
        (``model.safetensors``) checkpoint, or ``None`` when there is neither.

    Raises:
        CheckpointError: a corrupt index or shard, a missing shard, a shard name or a file
            that leaves the folder (the message names the index entry), or both a single
            file and an index (transformers would load the single file, unvalidated).
    """
    folder = Path(folder)
    index_path = folder / INDEX_FILE
    single = folder / SINGLE_FILE
    if os.path.lexists(index_path) and os.path.lexists(single):
        # transformers loads model.safetensors and ignores the index; we would validate the
        # shards: the bytes checked would not be the bytes loaded
        raise CheckpointError(
            f"{folder}: holds both {SINGLE_FILE} and {INDEX_FILE}; transformers would load {SINGLE_FILE} and "
            "ignore the index's shards, so which weights count is ambiguous; refused. Remove one of them"
        )
    names = _weight_names(folder)
    if os.path.lexists(index_path):
        weight_map, index_identity = _read_weight_map(safe_member(folder, INDEX_FILE, str(folder)))
        first_key: dict[str, str] = {}
        for key, fname in weight_map.items():
            first_key.setdefault(fname, key)
        files = sorted(first_key)
        index = CheckpointIndex(folder=folder, files=files, index_file=INDEX_FILE, weight_names=names)
        index.identities[INDEX_FILE] = index_identity
        headers = {}
        for fname in files:
            shard = safe_member(folder, fname, f"{index_path}: weight_map entry {quoted(first_key[fname])}")
            if not os.path.lexists(shard):
                raise CheckpointError(
                    f"{index_path}: entry {quoted(first_key[fname])} names shard {quoted(fname)}, which is missing from {folder}"
                )
            headers[fname] = read_header(shard, fname)
            index.identities[fname] = headers[fname].identity
        for key, fname in weight_map.items():
            info = headers[fname].tensors.get(key)
            if info is None:
                raise CheckpointError(
                    f"{index_path}: key {quoted(key)} is mapped to {quoted(fname)}, which does not contain it"
                )
            index.tensors[key] = info
        return index
    if os.path.lexists(single):
        header = read_header(safe_member(folder, SINGLE_FILE, str(folder)), SINGLE_FILE)
        assert header.identity is not None
        return CheckpointIndex(
            folder=folder,
            files=[SINGLE_FILE],
            tensors=dict(header.tensors),
            identities={SINGLE_FILE: header.identity},
            weight_names=names,
        )
    return None


def _read_weight_map(index_path: Path) -> tuple[dict[str, str], FileIdentity]:
    with open_regular(index_path, CheckpointError) as (f, size):
        if size > MAX_INDEX_BYTES:
            raise CheckpointError(f"{index_path}: {size} bytes, larger than the {MAX_INDEX_BYTES} byte limit; refused")
        try:
            raw = f.read(MAX_INDEX_BYTES + 1)
            st = os.fstat(f.fileno())
        except OSError as e:
            raise CheckpointError(f"{index_path}: cannot be read ({e.strerror or e})") from None
    if len(raw) > MAX_INDEX_BYTES:
        raise CheckpointError(f"{index_path}: larger than the {MAX_INDEX_BYTES} byte limit; refused")
    if raw.count(b'"') // _QUOTES_PER_ENTRY > MAX_INDEX_ENTRIES:
        raise CheckpointError(
            f"{index_path}: has room for more than {MAX_INDEX_ENTRIES:,} weight_map entries ({len(raw):,} bytes), "
            "more than any real checkpoint; refused before parsing it"
        )
    try:
        data = strict_json_loads(raw)
    except (ValueError, RecursionError) as e:
        reason = "nested too deeply" if isinstance(e, RecursionError) else one_line(e, first=True, limit=200)
        raise CheckpointError(f"{index_path}: not valid JSON ({reason})") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, Mapping) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index_path}: 'weight_map' must map tensor names to shard file names")
    if not weight_map:
        raise CheckpointError(f"{index_path}: 'weight_map' names no tensors")
    if len(weight_map) > MAX_INDEX_ENTRIES:
        raise CheckpointError(
            f"{index_path}: 'weight_map' names {len(weight_map):,} tensors, more than the {MAX_INDEX_ENTRIES:,} "
            "accepted; refused"
        )
    return dict(weight_map), FileIdentity.of(st, raw)


@contextmanager
def open_shard(folder: Path, name: str) -> Iterator[Any]:
    """Open one shard lazily with ``safetensors.safe_open`` (framework ``pt``, CPU).

    The name is kept inside ``folder`` (:func:`safe_member`) and the header is validated
    by :func:`read_header` first, so safetensors only ever sees a file we accepted.

    Args:
        folder: the model folder.
        name: the shard's file name, relative to ``folder``.

    Yields:
        The ``safe_open`` handle (``keys()``, ``get_tensor()``, ``get_slice()``).

    Raises:
        CheckpointError: the shard is outside the folder, missing, corrupt or unreadable.
    """
    from safetensors import SafetensorError, safe_open

    path = safe_member(Path(folder), name, str(folder))
    read_header(path, name)
    try:
        handle = safe_open(str(path), framework="pt", device="cpu")
        reader = handle.__enter__()
    except (OSError, ValueError, RuntimeError, SafetensorError) as e:
        raise CheckpointError(f"{path}: cannot read tensors ({e})") from e
    try:
        yield reader
    finally:
        handle.__exit__(None, None, None)
