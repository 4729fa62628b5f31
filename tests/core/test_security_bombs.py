"""Issue 13, item 4: sizes a config controls are bounded before anything is allocated.

The exact bombs of the issue, each run by the CLI in a process of its own (forked with the
imports done: ``tests/_forked.py``) whose peak memory growth (``resource.getrusage``, after
the imports) must stay under 1.2 GB and whose time under 30 s; each ends in one line
naming the field or file.
"""

from __future__ import annotations

import json
from pathlib import Path

import _forked
import pytest

from fusion_core.errors import ConfigError
from fusion_core.model.limits import MAX_GENERATION_CONFIG, check_config_costs

_PROBE = """
import json, resource, sys, time
import torch, transformers, numpy
from fusion_core.cli.main import main
from transformers import CONFIG_MAPPING
CONFIG_MAPPING["llama"], CONFIG_MAPPING["videomae"]  # import the config classes before measuring
open("/proc/self/clear_refs", "w").write("5")  # the peak from here (a forked child's starts at its fork)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
code = main(sys.argv[1:])
seconds = time.perf_counter() - t0
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
print(json.dumps({"code": code, "grown": grown, "seconds": seconds}))
"""


def _probe(*argv: str) -> tuple[dict, str]:
    done = _forked.run(argv, code=_PROBE, timeout=300)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["grown"] <= 1.2e9, result
    assert result["seconds"] <= 30, result
    return result, done.stderr


def _config(folder: Path, config: dict) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _one_line(err: str, code: int, *words: str) -> None:
    assert err.count("\n") == 1 and err.startswith("fusion-core: error: "), err
    for word in words:
        assert word in err, err


def test_five_million_labels(tmp_path: Path) -> None:
    folder = _config(tmp_path / "labels", {"model_type": "llama", "num_hidden_layers": 1, "num_labels": 5_000_000})
    result, err = _probe("tree", str(folder))
    assert result["code"] == 1
    _one_line(err, 1, "num_labels = 5000000")


def test_videomae_image_size_1344(tmp_path: Path) -> None:
    folder = _config(tmp_path / "videomae", {"model_type": "videomae", "image_size": 1344})
    result, err = _probe("tree", str(folder))
    assert result["code"] == 1
    _one_line(err, 1, "image_size", "position table")


def test_one_gigabyte_generation_config(llama_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "gen"
    folder.mkdir()
    for p in llama_dir.iterdir():
        (folder / p.name).write_bytes(p.read_bytes())
    with open(folder / "generation_config.json", "wb") as f:
        f.truncate(2**30)  # sparse: 1 GiB to read, no disk used
    result, err = _probe("load", str(folder))
    assert result["code"] == 1
    _one_line(err, 1, "generation_config.json", f"{MAX_GENERATION_CONFIG:,} byte limit")


def test_label_tables_of_sub_configs_and_real_sizes() -> None:
    with pytest.raises(ConfigError, match=r"text_config\.id2label has 300000 entries"):
        check_config_costs({"text_config": {"id2label": {str(i): "x" for i in range(300_000)}}}, "c")
    # real models pass: ImageNet-22k labels, VideoMAE-huge at 224 px
    check_config_costs({"num_labels": 21841}, "c")
    check_config_costs({"model_type": "videomae", "hidden_size": 1280, "image_size": 224}, "c")
    with pytest.raises(ConfigError, match="max_position_embeddings"):
        check_config_costs({"model_type": "xlm", "sinusoidal_embeddings": True, "max_position_embeddings": 10**6}, "c")


def test_small_bounded_side_files_still_open(llama_dir: Path, tmp_path: Path) -> None:
    from fusion_core import resolve

    folder = tmp_path / "ok"
    folder.mkdir()
    for p in llama_dir.iterdir():
        (folder / p.name).write_bytes(p.read_bytes())
    (folder / "generation_config.json").write_text('{"max_length": 20}')
    assert resolve(str(folder)).checkpoint is not None
    (folder / "generation_config.json").write_text('{"max_length": 20, "max_length": 30}')
    with pytest.raises(ConfigError, match="'max_length' appears twice"):
        resolve(str(folder))
    (folder / "generation_config.json").write_text('{"max_length": 20,')
    with pytest.raises(ConfigError, match=r"generation_config\.json: not valid JSON"):
        resolve(str(folder))


# issue 20, item 5: the parse cost of a header or an index is bounded before the JSON is parsed
def _header_bomb(path: Path, count: int) -> None:
    """A valid safetensors file of ``count`` one-byte tensors (the 99 MB header of the issue), built fast."""
    entries = b",".join(b'"%x":{"dtype":"U8","shape":[1],"data_offsets":[%d,%d]}' % (i, i, i + 1) for i in range(count))
    raw = b"{" + entries + b"}"
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        f.truncate(8 + len(raw) + count)  # the data section: zeros, sparse


def test_header_of_a_million_and_a_half_tensors(llama_dir: Path, tmp_path: Path) -> None:
    from fusion_core.model.checkpoint import MAX_HEADER_BYTES, MAX_TENSORS

    folder = tmp_path / "tensors"
    folder.mkdir()
    (folder / "config.json").write_bytes((llama_dir / "config.json").read_bytes())
    _header_bomb(folder / "model.safetensors", 1_480_000)
    assert 90e6 < (folder / "model.safetensors").stat().st_size - 1_480_000 < MAX_HEADER_BYTES
    result, err = _probe("plan", str(folder))
    assert result["code"] == 1
    _one_line(err, 1, "model.safetensors", f"{MAX_TENSORS:,} tensors", "refused before parsing")


def test_index_of_eight_million_entries(llama_dir: Path, tmp_path: Path) -> None:
    from fusion_core.model.checkpoint import MAX_INDEX_BYTES, MAX_INDEX_ENTRIES

    folder = tmp_path / "entries"
    folder.mkdir()
    (folder / "config.json").write_bytes((llama_dir / "config.json").read_bytes())
    entries = b",".join(b'"%x":"a"' % i for i in range(8_000_000))
    (folder / "model.safetensors.index.json").write_bytes(b'{"weight_map":{' + entries + b"}}")
    assert 80e6 < (folder / "model.safetensors.index.json").stat().st_size < MAX_INDEX_BYTES
    result, err = _probe("plan", str(folder))
    assert result["code"] == 1
    _one_line(err, 1, "model.safetensors.index.json", f"{MAX_INDEX_ENTRIES:,} weight_map entries")


def test_real_sized_headers_and_indexes_still_parse(tmp_path: Path) -> None:
    """The bounds are generous: 60,000 tensors in one header (more than the largest public checkpoints)."""
    from fusion_core.model.checkpoint import read_header

    _header_bomb(tmp_path / "big.safetensors", 60_000)
    assert len(read_header(tmp_path / "big.safetensors").tensors) == 60_000
