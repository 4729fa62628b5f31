"""Helpers shared by the export tests: model folders with extra files, tensor comparisons."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import torch
from safetensors import safe_open

from fusion_core.model.checkpoint import read_index

FUSION = {"patch_embeddings": True}
EXTRA_FILES = {
    "tokenizer.json": '{"version": "1.0", "model": {"type": "BPE"}}\n',
    "tokenizer_config.json": '{"model_max_length": 512}\n',
    "preprocessor_config.json": '{"patch_size": 14}\n',
    "chat_template.jinja": "{% for m in messages %}{{ m.content }}{% endfor %}\n",
    "README.md": "# tiny test model\n",
}


def copy_model(src: Path, dst: Path, extra: bool = True) -> Path:
    """A private copy of a model folder (tests may break it), with tokenizer-like files."""
    shutil.copytree(src, dst)
    if extra:
        for name, text in EXTRA_FILES.items():
            (dst / name).write_text(text)
    return dst


def tensors_of(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint folder, read through safetensors itself."""
    index = read_index(folder)
    assert index is not None
    out = {}
    for name in index.files:
        with safe_open(str(folder / name), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open handles are not mappings
                out[key] = f.get_tensor(key)
    return out


def raw_bytes_of(folder: Path) -> dict[str, bytes]:
    """Each tensor's raw byte range, straight from the files."""
    index = read_index(folder)
    assert index is not None
    out = {}
    for key, info in index.tensors.items():
        with open(folder / info.file, "rb") as f:
            f.seek(info.start)
            out[key] = f.read(info.nbytes)
    return out


def folder_digest(folder: Path) -> dict[str, str]:
    """name -> sha256 of every file below ``folder`` (to prove it was not modified)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def leftovers(parent: Path) -> list[str]:
    """Hidden temporary folders an export may have left next to its destination."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".") and "export-" in p.name)
