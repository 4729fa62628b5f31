"""Property-based tests: corrupt headers, files, indexes and specs end in a clean error.

Hypothesis writes real files from generated (mostly broken) headers. Our reader must
raise CheckpointError or accept the file, never another exception, a crash or a hang;
and a file it accepts must open in ``safetensors.safe_open`` with the same tensors, so
that what we later hand to safetensors has passed a validation at least as strict as
its own. Time is bounded by hypothesis' per-example deadline (generous: a hang detector,
not a benchmark).
"""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from fusion_core.errors import CheckpointError, FusionError
from fusion_core.model.checkpoint import DTYPE_BITS, read_header, read_index
from fusion_core.model.sources import config_from_dict, resolve

FUZZ = settings(
    max_examples=250,
    deadline=5000,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

DTYPES = [*DTYPE_BITS, "F128", "f32", "", "Q4"]
u64ish = st.one_of(
    st.integers(0, 64), st.integers(0, 2**64 + 5), st.sampled_from([2**63, 2**64 - 1, 2**64, -1, -(2**63)])
)
json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def headers(draw):
    """A header that starts valid (tensors laid out back to back) and is then damaged."""
    count = draw(st.integers(0, 4))
    header: dict = {}
    pos = 0
    for i in range(count):
        dtype = draw(st.sampled_from(list(DTYPE_BITS)))
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        n = 1
        for d in shape:
            n *= d
        bits = n * DTYPE_BITS[dtype]
        if bits % 8:
            shape, bits = [*shape, 2], bits * 2
        header[f"t{i}"] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + bits // 8]}
        pos += bits // 8
    for _ in range(draw(st.integers(0, 3))):
        if not header:
            break
        key = draw(st.sampled_from(sorted(header)))
        entry = header[key]
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not isinstance(offsets, list) or len(offsets) != 2 or len(entry) != 3:
            continue  # already damaged beyond the field edits below
        field = draw(st.sampled_from(["dtype", "shape", "offsets", "drop", "entry", "begin", "end"]))
        if field == "dtype":
            entry["dtype"] = draw(st.sampled_from(DTYPES) | json_scalars)
        elif field == "shape":
            entry["shape"] = draw(st.lists(u64ish, max_size=4) | json_values)
        elif field == "offsets":
            entry["data_offsets"] = draw(st.lists(u64ish, max_size=3) | json_values)
        elif field == "begin":
            entry["data_offsets"][0] = draw(u64ish)
        elif field == "end":
            entry["data_offsets"][1] = draw(u64ish)
        elif field == "drop":
            entry.pop(draw(st.sampled_from(["dtype", "shape", "data_offsets"])))
        else:
            header[key] = draw(json_values)
    if draw(st.booleans()):
        header["__metadata__"] = draw(st.dictionaries(st.text(max_size=5), st.text(max_size=5)) | json_values)
    data_len = pos + draw(st.sampled_from([0, 0, 0, 1, -1, 7]))
    return header, max(data_len, 0)


def _check_accepted(path: Path) -> None:
    """A file our reader accepts: its ranges tile the file and safetensors agrees."""
    try:
        header = read_header(path)
    except CheckpointError as e:
        assert str(path) in str(e)
        return
    size = path.stat().st_size
    pos = header.data_start
    for t in sorted(header.tensors.values(), key=lambda t: (t.start, t.end)):
        assert t.start == pos and t.end <= size
        pos = t.end
    assert pos == size
    with safe_open(str(path), framework="pt") as f:
        assert set(f.keys()) == set(header.tensors)
        for key, info in header.tensors.items():
            piece = f.get_slice(key)
            assert tuple(piece.get_shape()) == info.shape
            assert piece.get_dtype() == info.dtype


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


@FUZZ
@given(data=st.binary(max_size=200))
def test_random_bytes(scratch, data):
    path = scratch / "random.safetensors"
    path.write_bytes(data)
    _check_accepted(path)


@FUZZ
@given(case=headers(), length_delta=st.sampled_from([0, 0, 0, 1, -1, 8, 2**40]), cut=st.integers(0, 10))
def test_damaged_headers(scratch, case, length_delta, cut):
    header, data_len = case
    raw = json.dumps(header).encode()
    blob = struct.pack("<Q", max(len(raw) + length_delta, 0)) + raw + bytes(data_len)
    if cut:
        blob = blob[: max(len(blob) - cut, 0)] if cut % 2 else blob
    path = scratch / "damaged.safetensors"
    path.write_bytes(blob)
    _check_accepted(path)


@FUZZ
@given(value=json_values, padding=st.sampled_from([b"", b"  ", b"\x00", b"\n"]))
def test_any_json_header(scratch, value, padding):
    raw = json.dumps(value).encode() + padding
    path = scratch / "json.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(16))
    _check_accepted(path)


@FUZZ
@given(
    tensors=st.dictionaries(
        st.text(min_size=1, max_size=8).filter(lambda k: k != "__metadata__"),
        st.tuples(
            st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8, torch.bool]),
            st.lists(st.integers(0, 3), max_size=3),
        ),
        max_size=4,
    )
)
def test_files_written_by_safetensors_are_accepted(scratch, tensors):
    """No false alarms: whatever safetensors writes, we read, with the same shapes and dtypes."""
    path = scratch / "valid.safetensors"
    real = {k: torch.zeros(shape, dtype=dtype) for k, (dtype, shape) in tensors.items()}
    try:
        save_file(real, str(path))
    except (SafetensorError, ValueError):
        assume(False)
    header = read_header(path)
    assert {k: t.shape for k, t in header.tensors.items()} == {k: tuple(v.shape) for k, v in real.items()}


NAMES = st.one_of(
    st.sampled_from(["a.safetensors", "out.safetensors", "../a.safetensors", "/a.safetensors", "sub/../a.safetensors"]),
    st.text(max_size=12),
)


@FUZZ
@given(weight_map=st.dictionaries(st.text(max_size=6), NAMES, max_size=4), raw=st.none() | st.binary(max_size=40))
def test_index_entries(scratch, weight_map, raw):
    folder = scratch / "indexed"
    if not folder.exists():
        folder.mkdir()
        save_file({"w": torch.zeros(2)}, str(folder / "a.safetensors"))
        (scratch / "outside.safetensors").write_bytes((folder / "a.safetensors").read_bytes())
        (folder / "out.safetensors").symlink_to(scratch / "outside.safetensors")
    index = folder / "model.safetensors.index.json"
    if raw is None:
        index.write_text(json.dumps({"weight_map": weight_map}))
    else:
        index.write_bytes(raw)
    try:
        result = read_index(folder)
    except CheckpointError as e:
        assert "model.safetensors.index.json" in str(e)
        return
    root = folder.resolve()
    for name in result.files:
        assert root in (folder / name).resolve().parents


@settings(max_examples=50, deadline=10000, database=None)
@given(spec=st.text(max_size=30) | st.sampled_from(["arch:", "demo:", "arch:../x", "demo:../../x", "a/b", "~"]))
def test_any_spec_is_a_clean_error(spec):
    try:
        resolve(spec)
    except FusionError:
        pass


@settings(max_examples=60, deadline=10000, database=None)
@given(extra=st.dictionaries(st.text(max_size=12), json_values, max_size=4))
def test_config_values_are_a_clean_error(extra):
    data = {"model_type": "llama", "num_hidden_layers": 1, **extra}
    data["model_type"] = "llama"
    try:
        config_from_dict(data, "config.json")
    except FusionError:
        pass
