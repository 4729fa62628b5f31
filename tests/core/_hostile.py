"""Builders of hostile model files for the security tests (real files, written by hand).

Each builder writes what a stranger could put in a model folder: safetensors files with
any header bytes, pickles and custom code that write a marker file when executed, and
folders around a real tiny checkpoint.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "U8": 1, "BOOL": 1}


def write_safetensors(
    path: Path, header: dict[str, Any] | bytes, data: bytes | int = b"", length: int | None = None
) -> Path:
    """Write a safetensors-like file: 8-byte length (``length`` overrides it), header, data.

    ``data`` is the data section, or its size in zero bytes.
    """
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    body = bytes(data) if isinstance(data, int) else data
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + body)
    return path


def tiled(*tensors: tuple[str, str, list[int]]) -> tuple[dict[str, Any], int]:
    """A valid header for ``(key, dtype, shape)`` tensors laid out back to back, and the data size."""
    header: dict[str, Any] = {}
    pos = 0
    for key, dtype, shape in tensors:
        n = DTYPE_BYTES[dtype]
        for d in shape:
            n *= d
        header[key] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + n]}
        pos += n
    return header, pos


class MarkerPayload:
    """Unpickling this object creates the folder ``marker``: proof that a pickle was executed."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.makedirs, (self.marker,))


def evil_pickle_checkpoint(path: Path, marker: Path) -> Path:
    """A real ``torch.save`` checkpoint whose unpickling writes ``marker``."""
    import torch

    torch.save({"model.embed_tokens.weight": torch.zeros(2, 2), "payload": MarkerPayload(marker)}, path)
    return path


def marker_code(marker: Path) -> str:
    """Python source that writes ``marker`` when it is imported."""
    return f"from pathlib import Path\nPath({str(marker)!r}).write_text('executed')\n"


def remote_code_folder(folder: Path, marker: Path, base: Path, model_type: str = "llama") -> Path:
    """A model folder whose config asks for custom code (``auto_map``) that writes ``marker``.

    ``base`` is a real tiny checkpoint folder whose config (and ``architectures``) and
    weights are reused, so the folder is a complete model apart from the custom code,
    which includes a ``custom_generate/generate.py`` (transformers imports it when a
    model is loaded with ``trust_remote_code=True``).
    """
    folder.mkdir(parents=True, exist_ok=True)
    config = json.loads((base / "config.json").read_text())
    config["model_type"] = model_type
    config["auto_map"] = {
        "AutoConfig": "configuration_x.XConfig",
        "AutoModelForCausalLM": "modeling_x.XForCausalLM",
    }
    (folder / "config.json").write_text(json.dumps(config))
    for name in ("configuration_x.py", "modeling_x.py"):
        (folder / name).write_text(marker_code(marker))
    custom = folder / "custom_generate"
    custom.mkdir(exist_ok=True)
    (custom / "generate.py").write_text(marker_code(marker) + "def generate(model, *args, **kwargs):\n    pass\n")
    shutil.copy(base / "model.safetensors", folder / "model.safetensors")
    return folder


def copy_model(base: Path, folder: Path, weights: bool = True) -> Path:
    """A copy of the real checkpoint ``base`` (config.json, and model.safetensors if ``weights``)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(base / "config.json", folder / "config.json")
    if weights:
        shutil.copy(base / "model.safetensors", folder / "model.safetensors")
    return folder


def sharded_model(base: Path, folder: Path) -> Path:
    """``base``'s weights split into two real shards with a ``model.safetensors.index.json``."""
    from safetensors.torch import load_file, save_file

    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(base / "config.json", folder / "config.json")
    tensors = load_file(str(base / "model.safetensors"))
    keys = sorted(tensors)
    half = len(keys) // 2
    weight_map = {}
    for i, part in enumerate((keys[:half], keys[half:]), start=1):
        name = f"model-0000{i}-of-00002.safetensors"
        save_file({k: tensors[k] for k in part}, str(folder / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, name))
    write_index(folder, weight_map)
    return folder


def write_index(folder: Path, weight_map: dict[str, str]) -> Path:
    path = folder / "model.safetensors.index.json"
    path.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return path
