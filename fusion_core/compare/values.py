"""Tensor values of matched keys, streamed: byte ranges first, decoded only where they differ.

Memory is bounded by two chunks of :data:`CHUNK_BYTES` for keys stored as is (the same
byte range of each file is read with ``pread``, compared without decoding, and decoded
only where the bytes differ or the dtypes do), and by the tensors of one transform group
where a family's fused layout must be undone first (read with ``safetensors.safe_open``
through :func:`~fusion_core.model.checkpoint.open_shard`, shard by shard). Each file's
header is validated again before it is read and must still describe the tensors that
were opened.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Generator, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CheckpointError
from ..progress import Progress
from .result import ValueRow

if TYPE_CHECKING:
    import torch

    from ..model.checkpoint import CheckpointIndex, TensorInfo
    from .keys import Entry

# Small enough that a chunk pair stays in the CPU's cache between its read and its compare
# (1 MiB: faster than 16 MiB chunks, which leave the cache between read and compare; comparing
# in a memory map instead measured no faster here, its page faults cost what the copy saves).
CHUNK_BYTES = 1 << 20
PROGRESS_BYTES = 16 << 20  # a progress step (and a chance to cancel) at least this often
MAX_SPARSE_GAP = 1 << 30  # declared bytes beyond the allocated ones a shard may have (see _Files.check_allocated)
SPARSE_RATIO = 4
#: (atol, rtol) by safetensors dtype: torch.testing's defaults; integers and bools exact
DEFAULT_TOLERANCE: dict[str, tuple[float, float]] = {
    "F64": (1e-7, 1e-7),
    "F32": (1e-5, 1.3e-6),
    "F16": (1e-5, 1e-3),
    "BF16": (1e-5, 1.6e-2),
    "F8_E4M3": (1e-5, 0.125),
    "F8_E5M2": (1e-5, 0.25),
}
_DECODABLE = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
    "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}  # fmt: skip


def tolerance_for(dtype_a: str, dtype_b: str, atol: float | None, rtol: float | None) -> tuple[float, float]:
    """The tolerance for a pair: what was asked for, else the coarser dtype's default."""
    da = DEFAULT_TOLERANCE.get(dtype_a, (0.0, 0.0))
    db = DEFAULT_TOLERANCE.get(dtype_b, (0.0, 0.0))
    coarse = da if da[1] >= db[1] else db
    return (coarse[0] if atol is None else atol, coarse[1] if rtol is None else rtol)


class _Files:
    """The validated shard files of one side, opened once each for ``pread``."""

    def __init__(self, index: CheckpointIndex, stack: ExitStack) -> None:
        self.index = index
        self.stack = stack
        self._fds: dict[str, int] = {}
        self._shards: dict[str, Any] = {}

    def _check(self, name: str) -> Path:
        from ..model.checkpoint import read_header, safe_member

        path = safe_member(self.index.folder, name, str(self.index.folder))
        header = read_header(path, name)
        for key, info in self.index.tensors.items():
            if info.file == name and header.tensors.get(key) != info:
                raise CheckpointError(f"{path}: changed since it was opened (tensor {key!r}); open it again")
        return path

    def fd(self, name: str) -> int:
        fd = self._fds.get(name)
        if fd is None:
            path = self._check(name)
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
            self.stack.callback(os.close, fd)
            self._fds[name] = fd
        return fd

    def check_allocated(self) -> None:
        """Refuse a shard that declares far more bytes than it holds on disk (a sparse file), before reading.

        Reading a sparse file's holes costs the time of their declared size (10^12 bytes: half
        an hour) for zeros nobody wrote (issue 32). Compressed file systems hold less than
        they declare too, so only a gap over :data:`MAX_SPARSE_GAP` of more than
        :data:`SPARSE_RATIO` times the allocated bytes is refused.

        Raises:
            CheckpointError: naming the file, its declared and its allocated bytes.
        """
        for name in sorted({info.file for info in self.index.tensors.values()}):
            st = os.fstat(self.fd(name))
            blocks = getattr(st, "st_blocks", None)
            if blocks is None:  # Windows: no allocation to compare with
                return
            held = blocks * 512
            if st.st_size - held > MAX_SPARSE_GAP and st.st_size > SPARSE_RATIO * held:
                raise CheckpointError(
                    f"{self.index.folder / name}: declares {st.st_size:,} bytes but holds {held:,} on disk (a sparse "
                    "file: its holes read as zeros, at the speed of the disk); values not compared, refused before "
                    "reading. Compare without the values, or a real copy of the file"
                )

    def read_into(self, info: TensorInfo, offset: int, out: memoryview) -> None:
        """Fill ``out`` with the tensor's bytes from ``offset`` on (``preadv``: no copy, no allocation)."""
        fd = self._fds.get(info.file)
        if fd is None:
            fd = self.fd(info.file)
        pos, done = info.start + offset, 0
        while done < len(out):
            if hasattr(os, "preadv"):
                got = os.preadv(fd, [out[done:]], pos + done)
            else:  # pragma: no cover - platforms without preadv
                data = os.pread(fd, len(out) - done, pos + done)
                out[done : done + len(data)] = data
                got = len(data)
            if got <= 0:
                raise CheckpointError(f"{self.index.folder / info.file}: truncated while it was read ({info.key!r})")
            done += got

    def tensor(self, key: str) -> torch.Tensor:
        from ..model.checkpoint import open_shard

        info = self.index.tensors[key]
        shard = self._shards.get(info.file)
        if shard is None:
            self._check(info.file)
            shard = self.stack.enter_context(open_shard(self.index.folder, info.file))
            self._shards[info.file] = shard
        return shard.get_tensor(key)


@dataclass
class _Stats:
    elements: int = 0
    differing: int = 0
    over: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0

    def add(self, x: torch.Tensor, y: torch.Tensor, atol: float, rtol: float) -> None:
        """Accumulate one chunk pair (A's values ``x``, B's ``y``, flat, same length).

        One pass finds the elements that differ; only those are widened and measured (a NaN
        on both sides counts as equal).
        """
        import torch

        wide = torch.float64 if torch.float64 in (x.dtype, y.dtype) or not x.is_floating_point() else torch.float32
        try:  # in the stored dtype when torch compares it (not float8)
            ne = x != y if x.dtype == y.dtype else x.to(wide) != y.to(wide)
        except (RuntimeError, NotImplementedError):
            ne = x.to(wide) != y.to(wide)
        if not bool(ne.any()):
            return
        xs, ys = x[ne].to(wide), y[ne].to(wide)
        keep = ~(xs.isnan() & ys.isnan())
        xs, ys = xs[keep], ys[keep]
        k = xs.numel()
        if not k:
            return
        d = (xs - ys).abs().nan_to_num(nan=math.inf)
        self.differing += k
        self.max_abs = max(self.max_abs, float(d.max()))
        self.max_rel = max(self.max_rel, float((d / xs.abs()).nan_to_num(nan=math.inf).max()))
        self.over += int((d > atol + rtol * xs.abs()).sum())

    def row(self, name: str, how: str, tol: tuple[float, float], note: str = "") -> ValueRow:
        if not self.differing:
            return ValueRow(name, "equal", how, self.elements, 0.0, 0.0, 0.0, *tol, note)
        status = "close" if not self.over else "different"
        share = self.differing / self.elements if self.elements else 0.0
        return ValueRow(name, status, how, self.elements, share, self.max_abs, self.max_rel, *tol, note)


def _torch_dtype(dtype: str) -> Any:
    import torch

    return getattr(torch, _DECODABLE[dtype])


def _bits(dtype: str) -> int:
    from ..model.checkpoint import DTYPE_BITS

    return DTYPE_BITS[dtype]


def _memcmp() -> Any:
    """libc's ``memcmp`` through ctypes, or None where it cannot be found."""
    import ctypes
    import ctypes.util

    for name in (None, ctypes.util.find_library("c"), "msvcrt"):
        try:
            fn = ctypes.CDLL(name).memcmp
        except (OSError, AttributeError, TypeError):
            continue
        fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
        fn.restype = ctypes.c_int
        return fn
    return None


class _Buffers:
    """Two reusable chunk buffers (one per side): every chunk is read into them (``preadv``) and
    compared in place (``memcmp``), so streaming allocates nothing per chunk. (Comparing
    memoryviews in Python runs element by element; ``torch.equal`` measured 7x slower than
    ``memcmp`` here.)"""

    def __init__(self) -> None:
        import ctypes

        import torch

        self.raw = (bytearray(CHUNK_BYTES), bytearray(CHUNK_BYTES))
        self._views = tuple(memoryview(b) for b in self.raw)
        self.bytes = tuple(torch.frombuffer(b, dtype=torch.uint8) for b in self.raw)
        self._addr = tuple(ctypes.addressof((ctypes.c_char * CHUNK_BYTES).from_buffer(b)) for b in self.raw)
        self._memcmp = _memcmp()

    def read(self, side: int, files: _Files, info: TensorInfo, offset: int, size: int) -> int:
        files.read_into(info, offset, self._views[side][:size])
        return size

    def tensor(self, side: int, size: int, dtype: str) -> torch.Tensor:
        """The first ``size`` bytes of one buffer as a flat tensor of ``dtype`` (a view, no copy)."""
        return self.bytes[side][:size].view(_torch_dtype(dtype))

    def equal(self, size: int) -> bool:
        """Whether the first ``size`` bytes of both buffers are the same."""
        if self._memcmp is not None:
            return self._memcmp(self._addr[0], self._addr[1], size) == 0
        import torch  # pragma: no cover - no libc

        return bool(torch.equal(self.bytes[0][:size], self.bytes[1][:size]))


def _stored_pair(
    name: str, ia: TensorInfo, ib: TensorInfo, fa: _Files, fb: _Files, tol: tuple[float, float], digest: bool,
    buffers: _Buffers,
) -> Iterator[int | ValueRow]:  # fmt: skip
    """Compare two stored tensors of one shape chunk by chunk; yields bytes done, then the row.

    With ``digest`` each side's bytes are also hashed (BLAKE2b, 128 bits) as they pass.
    """
    import hashlib

    n = math.prod(ia.shape)
    stats = _Stats(elements=n)
    same = ia.dtype == ib.dtype
    decodable = ia.dtype in _DECODABLE and ib.dtype in _DECODABLE
    if not same and not decodable:
        yield ValueRow(name, "skipped", "", n, note=f"cannot decode {ia.dtype} / {ib.dtype}")
        return
    ha, hb = (hashlib.blake2b(digest_size=16), hashlib.blake2b(digest_size=16)) if digest else (None, None)
    bits_a, bits_b = _bits(ia.dtype), _bits(ib.dtype)
    step = max(8, CHUNK_BYTES * 8 // max(bits_a, bits_b) // 8 * 8)  # elements per chunk (whole bytes of sub-byte types)
    decoded = undecoded = False
    for i in range(0, n, step):
        m = min(step, n - i)
        na = buffers.read(0, fa, ia, i * bits_a // 8, (m * bits_a + 7) // 8)
        nb = buffers.read(1, fb, ib, i * bits_b // 8, (m * bits_b + 7) // 8)
        yield na
        if ha is not None and hb is not None:
            ha.update(buffers._views[0][:na])
            hb.update(buffers._views[1][:nb])
        if same and buffers.equal(na):
            continue
        if not decodable:
            undecoded = True
            continue
        decoded = True
        stats.add(buffers.tensor(0, na, ia.dtype), buffers.tensor(1, nb, ib.dtype), *tol)
    if undecoded:
        row = ValueRow(name, "different", "bytes", n, note=f"bytes differ; {ia.dtype} is not decoded")
    else:
        row = stats.row(name, "decoded" if decoded else "bytes", tol)
    if ha is not None and hb is not None:
        row = dataclasses.replace(row, digest_a=ha.hexdigest(), digest_b=hb.hexdigest())
    yield row


def iter_values(
    rows: list[Any], a: dict[str, Entry], b: dict[str, Entry], ia: CheckpointIndex, ib: CheckpointIndex,
    atol: float | None, rtol: float | None, digest: bool = False,
) -> Generator[Progress, None, list[ValueRow]]:  # fmt: skip
    """The values of every matched key of ``rows`` (:class:`~.result.KeyRow`), in A's file order.

    Yields:
        :class:`Progress` in bytes of A read.

    Returns:
        One :class:`ValueRow` per matched key, in the order of ``rows``.
    """
    matched = [r for r in rows if r.key_a is not None and r.key_b is not None]
    out: dict[str, ValueRow] = {}
    for r in matched:
        if r.shape_a != r.shape_b:
            out[r.name] = ValueRow(r.name, "skipped", note="shapes differ")
    todo = [r for r in matched if r.name not in out]
    units = _units(todo, a, b)

    def place(unit: list[Any]) -> tuple[str, int]:
        e = a[unit[0].name]
        info = ia.tensors.get(e.stored)
        return (info.file, info.start) if info is not None else ("", 0)

    units.sort(key=place)
    total = sum(math.prod(r.shape_a) * _bits(r.dtype_a) // 8 for r in todo)
    done = 0
    with ExitStack() as stack:
        fa, fb = _Files(ia, stack), _Files(ib, stack)
        for files in (fa, fb):
            files.check_allocated()
        buffers = _Buffers()
        yield Progress(0, total, "values")
        shown = 0
        for unit in units:
            ea, eb = a[unit[0].name], b[unit[0].name]
            if len(unit) == 1 and ea.group is None and eb.group is None:
                tol = tolerance_for(ea.dtype, eb.dtype, atol, rtol)
                for step in _stored_pair(
                    ea.name, ia.tensors[ea.stored], ib.tensors[eb.stored], fa, fb, tol, digest, buffers
                ):
                    if isinstance(step, ValueRow):
                        out[step.name] = step
                    else:
                        done += step
                        if done - shown >= PROGRESS_BYTES:
                            shown = done
                            yield Progress(done, total, ea.name)
                yield Progress(done, total, ea.name)
                continue
            xs, ys = _decoded(unit, a, fa, "a"), _decoded(unit, b, fb, "b")
            for r in unit:
                tol = tolerance_for(r.dtype_a, r.dtype_b, atol, rtol)
                x, y = xs[r.name].reshape(-1), ys[r.name].reshape(-1)
                stats = _Stats(elements=x.numel())
                if not (x.dtype == y.dtype and _same_bits(x, y)):
                    stats.add(x, y, *tol)
                out[r.name] = stats.row(r.name, "transform", tol)
                done += x.numel() * _bits(r.dtype_a) // 8
            del xs, ys
            yield Progress(done, total, unit[0].name)
    return [out[r.name] for r in matched]


def _same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    import torch

    if x.element_size() == 1:
        return bool(torch.equal(x.view(torch.uint8), y.view(torch.uint8)))
    view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    return bool(torch.equal(x.contiguous().view(view), y.contiguous().view(view)))


def _units(rows: list[Any], a: dict[str, Entry], b: dict[str, Entry]) -> list[list[Any]]:
    """Rows that must be read together: those sharing a transform group on either side."""
    parent: dict[Any, Any] = {}

    def find(x: Any) -> Any:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for r in rows:
        labels = [("row", r.name)]
        for side, e in (("a", a[r.name]), ("b", b[r.name])):
            if e.group is not None:
                labels.append((side, id(e.group)))
        for other in labels[1:]:
            parent[find(other)] = find(labels[0])
        find(labels[0])
    groups: dict[Any, list[Any]] = {}
    for r in rows:
        groups.setdefault(find(("row", r.name)), []).append(r)
    return list(groups.values())


def _decoded(unit: list[Any], entries: dict[str, Entry], files: _Files, side: str) -> dict[str, torch.Tensor]:
    """The original-layout tensors of ``unit`` on one side (a fused group undone by its inverse)."""
    out: dict[str, Any] = {}
    for r in unit:
        e = entries[r.name]
        if r.name in out:
            continue
        if e.group is None:
            out[r.name] = files.tensor(e.stored)
            continue
        t = e.group.transform
        fused = [files.tensor(k) for k in e.group.target_keys]
        for src, tensor in zip(t.sources, t.inverse(fused), strict=True):
            out[src] = tensor
    return out
