"""The streaming writer: byte-identical to safetensors' own writer, sharded like save_pretrained."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.torch import save_file

from fusion_core import UsageError
from fusion_core.export.writer import OutTensor, iter_write, parse_size, plan_shards
from fusion_core.model.checkpoint import read_index

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int8, torch.bool, torch.float64]


def _write(plan, folder: Path, source: Path, produce=None) -> None:
    gen = iter_write(plan, folder, source, produce or (lambda t: None), sync=False)
    for _ in gen:
        pass


def _tensor(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if not dtype.is_floating_point:
        return torch.randint(-100, 100, shape, generator=g).to(dtype)
    return torch.randn(shape, generator=g).to(dtype)


names = st.text(alphabet="abcxyz._0123456789é", min_size=1, max_size=12)
entries = st.dictionaries(
    names,
    st.tuples(st.sampled_from(range(len(DTYPES))), st.lists(st.integers(0, 4), max_size=3)),
    min_size=1,
    max_size=8,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=entries)
def test_bytes_equal_safetensors_save_file(spec: dict, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Raw copies and produced tensors both give the exact file safetensors would write."""
    folder = tmp_path_factory.mktemp("w")
    tensors = {k: _tensor(DTYPES[d], tuple(shape), i) for i, (k, (d, shape)) in enumerate(spec.items())}
    src = folder / "src"
    src.mkdir()
    save_file(tensors, src / "model.safetensors", metadata={"format": "pt"})
    index = read_index(src)
    assert index is not None
    raw = [OutTensor(k, i.dtype, i.shape, raw=i) for k, i in index.tensors.items()]
    for out, items, produce in (
        ("copied", raw, None),
        ("produced", [OutTensor(t.key, t.dtype, t.shape) for t in raw], lambda t: tensors[t.key]),
    ):
        (folder / out).mkdir()
        _write(plan_shards(items, "50GB"), folder / out, src, produce)
        assert (folder / out / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()


def test_sharding_matches_huggingface_hub(tmp_path: Path) -> None:
    from huggingface_hub import split_torch_state_dict_into_shards

    sizes = [600, 100, 2000, 300, 300, 50, 900, 10]  # one tensor larger than the limit
    tensors = {f"t{i}": torch.zeros(n // 4) for i, n in enumerate(sizes)}
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    index = read_index(tmp_path)
    assert index is not None
    items = [OutTensor(k, "F32", index.tensors[k].shape, raw=index.tensors[k]) for k in tensors]
    plan = plan_shards(items, 1000)
    split = split_torch_state_dict_into_shards(tensors, max_shard_size=1000)
    assert {s.name: sorted(t.key for t in s.tensors) for s in plan.shards} == {
        name: sorted(keys) for name, keys in split.filename_to_tensors.items()
    }
    assert plan.total_size == split.metadata["total_size"]
    out = tmp_path / "out"
    out.mkdir()
    _write(plan, out, tmp_path)
    written = read_index(out)
    assert written is not None and written.sharded
    for key, tensor in tensors.items():
        with safe_open(str(out / written.tensors[key].file), "pt") as f:
            assert torch.equal(f.get_tensor(key), tensor)


def test_transformed_tensor_must_match_the_plan(tmp_path: Path) -> None:
    from fusion_core import ExportError

    plan = plan_shards([OutTensor("w", "F32", (2, 3))], "50GB")
    with pytest.raises(ExportError, match="shape"):
        _write(plan, tmp_path, tmp_path, lambda t: torch.zeros(3, 2))
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(ExportError, match="bfloat16"):
        _write(plan, tmp_path, tmp_path, lambda t: torch.zeros(2, 3, dtype=torch.bfloat16))


@pytest.mark.parametrize(
    ("text", "size"),
    [("5GB", 5 * 10**9), ("200MB", 200 * 10**6), ("1.5GB", 15 * 10**8), ("100kb", 10**5), ("123", 123), (7, 7)],
)
def test_parse_size(text: str | int, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "GB", "5XB", "-1GB", "0", True, "1e3MB"])
def test_parse_size_rejects(text: object) -> None:
    with pytest.raises(UsageError):
        parse_size(text)  # type: ignore[arg-type]
