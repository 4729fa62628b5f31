"""Built-in demo checkpoints: tiny real models with seeded random weights.

The vision demos ship processor files made offline: ``demo:qwen2-vl`` a tokenizer (built
with the ``tokenizers`` library: one token a character plus the model's special tokens,
under Qwen2-VL's own token strings) and an image processor config matching the tiny
model; ``demo:vit`` an image processor config. ``--image`` then goes through the real
processor path.

Generated on first use into the user cache folder (``platformdirs``; override with the
``FUSION_INSPECTOR_CACHE`` environment variable), deterministic, in well under a second.
A folder is written to a temporary sibling and renamed into place, so an interrupted
generation never leaves a half-written demo.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ModelSourceError

DEMO_VERSION = 2  # 2: processor and tokenizer files
SEED = 0
_lock = threading.Lock()


@dataclass(frozen=True)
class Demo:
    """A built-in checkpoint: ``build()`` returns (config, model class); weights are seeded."""

    name: str
    description: str
    build: Callable[[], Any]  # -> (config, model class)
    processor: Callable[[Any, Path], None] | None = None  # writes processor files for the config


def _qwen2_vl() -> Any:
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    config = Qwen2VLConfig(
        text_config={
            "vocab_size": 512,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 512,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 0,
        },
        vision_config={
            "depth": 2,
            "embed_dim": 32,
            "hidden_size": 64,
            "num_heads": 4,
            "mlp_ratio": 2,
            "patch_size": 14,
            "temporal_patch_size": 2,
            "in_channels": 3,
            "spatial_merge_size": 2,
        },
        image_token_id=500,
        video_token_id=501,
        vision_start_token_id=502,
        vision_end_token_id=503,
    )
    return config, Qwen2VLForConditionalGeneration


def _qwen2_vl_processor(config: Any, folder: Path) -> None:
    from transformers import Qwen2VLImageProcessorPil

    from .tokenizer import synthetic_tokenizer

    strings = {
        "image_token": "<|image_pad|>",
        "video_token": "<|video_pad|>",
        "vision_start_token": "<|vision_start|>",
        "vision_end_token": "<|vision_end|>",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|pad|>",
    }
    synthetic_tokenizer(config, strings).save_pretrained(folder)
    # images of 56x56 to 448x448 px: at most 256 patches of 14 px
    size = {"shortest_edge": 56 * 56, "longest_edge": 448 * 448}
    Qwen2VLImageProcessorPil(patch_size=14, temporal_patch_size=2, merge_size=2, size=size).save_pretrained(folder)


def _vit_processor(config: Any, folder: Path) -> None:
    from transformers import SiglipImageProcessorPil

    side = int(config.image_size)
    SiglipImageProcessorPil(size={"height": side, "width": side}).save_pretrained(folder)


def _llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    return config, LlamaForCausalLM


def _vit() -> Any:
    # a SigLIP vision tower: a plain ViT (Conv2d patch embedding with padding="valid", q/k/v
    # attention, no classification head), whose checkpoint keys are the module names
    from transformers import SiglipVisionConfig, SiglipVisionModel

    config = SiglipVisionConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_channels=3,
        image_size=32,
        patch_size=8,
    )
    return config, SiglipVisionModel


DEMOS: dict[str, Demo] = {
    "qwen2-vl": Demo(
        "qwen2-vl", "tiny Qwen2-VL (vision tower with a Conv3d patch embedding)", _qwen2_vl, _qwen2_vl_processor
    ),
    "llama": Demo("llama", "tiny Llama decoder LM (no patch embedding)", _llama),
    "vit": Demo(
        "vit", "tiny ViT-style vision encoder (SigLIP vision tower: Conv2d patch embedding)", _vit, _vit_processor
    ),
}
DEFAULT_DEMO = "qwen2-vl"


def register_demo(demo: Demo) -> None:
    """Add a demo (used by families that bring their own example model).

    Raises:
        ValueError: another demo already has that name.
    """
    old = DEMOS.get(demo.name)
    if old is not None and old is not demo:
        raise ValueError(f"a demo named {demo.name!r} is already registered")
    DEMOS[demo.name] = demo


def cache_root() -> Path:
    """The user cache folder (``FUSION_INSPECTOR_CACHE`` overrides the platform default)."""
    env = os.environ.get("FUSION_INSPECTOR_CACHE")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("fusion-inspector", appauthor=False))


def demo_path(name: str) -> Path:
    """The folder of demo ``name``, generated on first use.

    Args:
        name: a key of :data:`DEMOS` (empty: the default demo).

    Returns:
        The checkpoint folder (``config.json`` and ``model.safetensors``).

    Raises:
        ModelSourceError: unknown demo name (the message lists the demos), or the cache
            folder cannot be written.
    """
    name = name or DEFAULT_DEMO
    demo = DEMOS.get(name)
    if demo is None:
        raise ModelSourceError(f"unknown demo {name!r}; demos: {', '.join(sorted(DEMOS))}")
    import transformers

    demos = _own_demos_folder()
    folder = demos / f"{name}-v{DEMO_VERSION}-tf{transformers.__version__}"
    if (folder / "config.json").is_file() and _not_ours(folder) is None:
        return folder
    with _lock:
        why = _not_ours(folder) if os.path.lexists(folder) else None
        if why is not None:  # planted by another user, or open to them: set aside, made again
            DEMO_NOTES[name] = f"the cached demo {folder} was not used ({why}); it was generated again"
            aside = folder.with_name(f".{folder.name}-untrusted-{os.getpid()}-{time.monotonic_ns()}")
            try:
                os.rename(folder, aside)
            except OSError as e:
                raise ModelSourceError(
                    f"demo {name!r}: {folder} is not yours ({why}) and cannot be moved aside ({e.strerror or e}); "
                    "set FUSION_INSPECTOR_CACHE to a folder of your own"
                ) from None
            shutil.rmtree(aside, ignore_errors=True)
        if not (folder / "config.json").is_file():
            try:
                _generate(demo, folder)
            except OSError as e:
                raise ModelSourceError(
                    f"demo {name!r}: cannot write {folder.parent} ({e.strerror or e}); "
                    "set FUSION_INSPECTOR_CACHE to a writable folder"
                ) from e
    return folder


#: what :func:`demo_path` said about a cached demo it did not trust, by demo name (a source's note)
DEMO_NOTES: dict[str, str] = {}


def _not_ours(folder: Path) -> str | None:
    """Why a cached demo folder cannot be trusted (a link, another user's, writable by others), or None.

    A shared ``FUSION_INSPECTOR_CACHE`` is writable by others: a demo another user put there
    must not be opened as ours (issue 32). Checked without following links: the folder and
    each of its entries.
    """
    if not hasattr(os, "getuid"):  # Windows: the cache is in the user's own profile
        return None
    uid = os.getuid()
    try:
        paths = [folder, *sorted(folder.iterdir())] if not folder.is_symlink() else [folder]
        for path in paths:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                return f"{path.name} is a link"
            if st.st_uid != uid:
                return f"{path.name} belongs to another user (uid {st.st_uid})"
            if st.st_mode & 0o022:
                return f"{path.name} can be written by other users (mode {stat.S_IMODE(st.st_mode):o})"
    except OSError as e:
        return f"it cannot be checked ({e.strerror or e})"
    return None


def _own_demos_folder() -> Path:
    """``<cache>/demos``, made ours: created, or kept only when it is our own folder that others cannot write.

    Others' write access is removed from a folder of ours; a folder of another user (a
    shared cache) is not used: ``<cache>/demos-<uid>`` is, with the same checks.
    """
    root = cache_root()
    demos = root / "demos"
    if not hasattr(os, "getuid"):
        return demos
    uid = os.getuid()
    for candidate in (demos, root / f"demos-{uid}"):
        try:
            candidate.mkdir(parents=True, exist_ok=True)
            st = os.lstat(candidate)
        except OSError:
            return demos  # not writable: demo_path says so when it generates
        if stat.S_ISLNK(st.st_mode) or st.st_uid != uid:
            continue
        if st.st_mode & 0o022:
            try:
                os.chmod(candidate, stat.S_IMODE(st.st_mode) & ~0o022)
            except OSError:
                continue
        return candidate
    raise ModelSourceError(
        f"{root}: its demos folders belong to another user; set FUSION_INSPECTOR_CACHE to a folder of your own"
    )


def _generate(demo: Demo, folder: Path) -> None:
    import torch

    from ..patching import patch_lock

    folder.parent.mkdir(parents=True, exist_ok=True)
    config, cls = demo.build()
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        # under the patching lock: a fused load in another thread must not leak into the demo
        with patch_lock():
            state = torch.random.get_rng_state()
            torch.manual_seed(SEED)
            try:
                model = cls(config)
            finally:
                torch.random.set_rng_state(state)
        model.save_pretrained(tmp)
        if demo.processor is not None:
            demo.processor(config, tmp)
        for path in tmp.iterdir():  # never writable by others, whatever the umask (see _not_ours)
            os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & ~0o022)
        os.chmod(tmp, 0o755)
        try:
            os.replace(tmp, folder)
        except OSError:
            if not (folder / "config.json").is_file():  # lost a race to another process
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
