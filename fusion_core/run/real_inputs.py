"""Real inputs: an image file and a prompt through the checkpoint's own processor files.

Data only: the processor and tokenizer are built from the folder's JSON and tokenizer
files with ``trust_remote_code=False`` and ``local_files_only=True``; a folder without
them, or a processor that fails, falls back to synthetic inputs with a note saying why.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from ..errors import one_line
from .inputs import ModelInputs, entry_module

if TYPE_CHECKING:
    from torch import nn

    from ..families.base import Workload

PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def processor_inputs(
    model: nn.Module, source: Any, image: Any, prompt: str | None, workload: Workload
) -> tuple[list[ModelInputs] | None, list[str]]:
    """Candidate inputs made by the checkpoint's processor, or ``None`` and a note why not."""
    folder = getattr(source, "folder", None)
    has_proc = folder is not None and any((folder / n).is_file() for n in PROCESSOR_FILES)
    has_tok = folder is not None and any((folder / n).is_file() for n in TOKENIZER_FILES)
    wanted = "processor" if image is not None else "tokenizer"
    if (image is not None and not has_proc) or (image is None and not has_tok):
        return None, [f"the checkpoint has no {wanted} files: synthetic inputs instead of the given image/prompt"]
    try:
        kwargs = _encode(folder, image, prompt, has_proc)
    except Exception as e:  # any processor failure: synthetic inputs, and say why
        why = one_line(e, first=True, named=True, limit=200)
        return None, [f"the checkpoint's {wanted} failed ({why}): synthetic inputs instead"]
    entry_path = entry_module(model, [])
    entry = model.get_submodule(entry_path) if entry_path else model
    params = inspect.signature(entry.forward).parameters
    floating = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    kept = {}
    for k, v in kwargs.items():
        if k not in params or not hasattr(v, "to"):
            continue
        v = v.to(workload.device)
        kept[k] = v.to(floating) if v.is_floating_point() and floating is not None else v
    if "use_cache" in params:
        kept["use_cache"] = False
    what = " and ".join(x for x in (f"image {image}" if image else "", "a prompt" if prompt else "") if x)
    note = f"real inputs: {what} through the checkpoint's own {wanted} ({', '.join(sorted(kept))})"
    return [ModelInputs(entry_path, kept, "processor", [note])], []


def _encode(folder: Any, image: Any, prompt: str | None, has_proc: bool) -> dict[str, Any]:
    if image is None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False, local_files_only=True)
        return dict(tok(prompt or "", return_tensors="pt"))
    from PIL import Image
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(str(folder), trust_remote_code=False, local_files_only=True)
    with Image.open(image) as img:
        picture = img.convert("RGB")
    text = prompt or ""
    if hasattr(proc, "apply_chat_template") and getattr(proc, "chat_template", None):
        content = [{"type": "image"}, {"type": "text", "text": text}]
        text = proc.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
    if hasattr(proc, "tokenizer"):
        return dict(proc(images=picture, text=text, return_tensors="pt"))
    return dict(proc(images=picture, return_tensors="pt"))
