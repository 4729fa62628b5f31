"""Reading a PEFT LoRA adapter folder: its config as PEFT resolves it, its tensors from the header.

A PEFT adapter is ``adapter_config.json`` and ``adapter_model.safetensors``, whose keys are
``base_model.model.<module>.lora_A.weight`` / ``.lora_B.weight`` (the adapter name left out),
``...lora_embedding_A`` / ``_B`` for embeddings, ``...lora_magnitude_vector`` for DoRA, and
the full weights of ``modules_to_save``. Ranks and alphas are resolved per module the way
PEFT's ``LoraModel`` does (``rank_pattern`` / ``alpha_pattern`` through
``peft.utils.other.get_pattern_key``), and checked against the tensors' shapes. Only the
header is read here: no tensor data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AdapterError, ConfigError
from ..model.checkpoint import TensorInfo, read_header, safe_member
from ..model.safety import read_json_object
from .patterns import check_config_patterns, check_name

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
RECORD = "fusion_adapter.json"  # what a conversion to the fused layout wrote (families, parts' ranks)
PREFIX = "base_model.model."
_CONFIG_LIMIT = 4 * 1024 * 1024


@dataclass
class LoraModule:
    """One adapted module: its name as the adapter spells it, and its tensors."""

    name: str  # the module path in the adapter's own naming (keys without ``base_model.model.``)
    rank: int
    alpha: float
    scale: float
    keys: dict[str, TensorInfo] = field(default_factory=dict)  # suffix ("lora_A.weight") -> tensor

    @property
    def kind(self) -> str:
        if "lora_A.weight" in self.keys:
            return "lora"
        if "lora_embedding_A" in self.keys:
            return "embedding"
        return "other"


@dataclass
class AdapterSource:
    """An opened adapter folder."""

    folder: Path
    config: dict[str, Any]  # adapter_config.json as written
    tensors: dict[str, TensorInfo]
    modules: dict[str, LoraModule]  # by adapter name; LoRA modules only
    other_keys: list[str]  # keys outside any LoRA module (modules_to_save, trained biases)
    record: dict[str, Any] | None  # fusion_adapter.json, if a conversion wrote one

    @property
    def rslora(self) -> bool:
        return bool(self.config.get("use_rslora"))

    @property
    def name(self) -> str:
        return str(self.folder)


def scale_of(alpha: float, rank: int, rslora: bool) -> float:
    """PEFT's LoRA scaling: ``alpha / r``, or ``alpha / sqrt(r)`` with rslora (``LoraLayer.update_layer``)."""
    return alpha / math.sqrt(rank) if rslora else alpha / rank


def alpha_for(scale: float, rank: int, rslora: bool) -> float:
    """An alpha for which PEFT computes exactly ``scale`` at ``rank`` (whole when one is)."""
    guess = scale * math.sqrt(rank) if rslora else scale * rank
    near = [round(guess)] if abs(guess - round(guess)) < 1e-9 else []
    cand = [*near, guess]
    up = down = guess
    for _ in range(8):  # the float next to the guess when a product rounded
        up, down = math.nextafter(up, math.inf), math.nextafter(down, -math.inf)
        cand += [up, down]
    for a in cand:
        if scale_of(a, rank, rslora) == scale:
            return int(a) if float(a).is_integer() else float(a)
    return guess


def open_adapter(folder: str | Path) -> AdapterSource:
    """Open a PEFT adapter folder (config and safetensors header; no tensor data).

    Raises:
        AdapterError: not a LoRA adapter, a variant that is not plain LoRA where it matters
            later, ranks that disagree with the config.
        ConfigError, CheckpointError: unreadable files.
    """
    from peft.utils.other import get_pattern_key

    root = Path(folder)
    if not root.is_dir():
        raise AdapterError(f"{root}: is not a folder (give a PEFT adapter folder with {CONFIG} and {WEIGHTS})")
    cfg_path = root / CONFIG
    if not cfg_path.is_file():
        raise AdapterError(f"{root}: has no {CONFIG}; a PEFT adapter folder holds {CONFIG} and {WEIGHTS}")
    config = read_json_object(cfg_path, _CONFIG_LIMIT, ConfigError)
    kind = config.get("peft_type")
    if kind != "LORA":
        raise AdapterError(f"{cfg_path}: peft_type {str(kind)[:40]!r} is not LORA; only LoRA adapters convert")
    if not (root / WEIGHTS).is_file():
        other = "adapter_model.bin (pickle: never loaded)" if (root / "adapter_model.bin").exists() else "none"
        raise AdapterError(f"{root}: has no {WEIGHTS} (found {other}); convert it to safetensors first")
    header = read_header(safe_member(root, WEIGHTS, str(root)), WEIGHTS)
    r0, a0 = config.get("r", 8), config.get("lora_alpha", 8)
    for name, v in (("r", r0), ("lora_alpha", a0)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise AdapterError(f"{cfg_path}: {name} is {str(v)[:40]!r}, not a positive number")
    check_config_patterns(config, str(cfg_path))  # before PEFT or we match anything with them
    ranks = _pattern(config, "rank_pattern", cfg_path)
    alphas = _pattern(config, "alpha_pattern", cfg_path)
    rslora = bool(config.get("use_rslora"))
    modules: dict[str, LoraModule] = {}
    other: list[str] = []
    for key, info in header.tensors.items():
        if not key.startswith(PREFIX):
            raise AdapterError(f"{root / WEIGHTS}: key {key[:120]!r} does not start with {PREFIX!r} (not PEFT's)")
        rest = key[len(PREFIX) :]
        cut = rest.find(".lora_")
        if cut < 0:
            other.append(key)
            continue
        name, suffix = rest[:cut], rest[cut + 1 :]
        mod = modules.get(name)
        if mod is None:
            check_name(name, str(root / WEIGHTS))
            r = ranks.get(get_pattern_key(list(ranks), name), r0)
            a = alphas.get(get_pattern_key(list(alphas), name), a0)
            mod = modules[name] = LoraModule(name, int(r), a, scale_of(a, int(r), rslora))
        mod.keys[suffix] = info
    for mod in modules.values():
        _check_ranks(mod, root / WEIGHTS)
    record = None
    if (root / RECORD).is_file():
        record = read_json_object(root / RECORD, _CONFIG_LIMIT, ConfigError)
    return AdapterSource(root, config, dict(header.tensors), modules, other, record)


def _pattern(config: dict[str, Any], name: str, path: Path) -> dict[str, Any]:
    value = config.get(name) or {}
    if not isinstance(value, dict) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in value.values()
    ):
        raise AdapterError(f"{path}: {name} must map module patterns to positive numbers")
    return value


def _check_ranks(mod: LoraModule, path: Path) -> None:
    """The tensors' ranks must be the config's (PEFT would refuse them, or load a slice)."""
    pairs = [("lora_A.weight", 0, "lora_B.weight", 1), ("lora_embedding_A", 0, "lora_embedding_B", 1)]
    for a_key, a_dim, b_key, b_dim in pairs:
        a, b = mod.keys.get(a_key), mod.keys.get(b_key)
        if a is None and b is None:
            continue
        if a is None or b is None:
            raise AdapterError(f"{path}: {mod.name} has {a_key if a else b_key} without {b_key if a else a_key}")
        got = {a.shape[a_dim] if len(a.shape) > a_dim else -1, b.shape[b_dim] if len(b.shape) > b_dim else -1}
        if got != {mod.rank}:
            raise AdapterError(
                f"{path}: {mod.name}: tensors of rank {sorted(got)} but the config says r={mod.rank} "
                "(r, rank_pattern); ranks disagreeing with the config are refused"
            )


__all__ = ["CONFIG", "PREFIX", "RECORD", "WEIGHTS", "AdapterError", "AdapterSource", "LoraModule", "open_adapter"]
