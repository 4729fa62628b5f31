"""Discovery: which modules of a meta-initialized model a family would replace, and why not.

Like the reference mechanism, fusion is class-level (one compatible class -> one fused
class), but unlike it *every* instance of a class is checked: one non-fusable instance
keeps the whole class unpatched, and the reason names that instance. Results are cached
per (family, model class, config fingerprint), never per class alone.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn
    from transformers import PretrainedConfig

    from .families.base import FusionSpec
    from .transforms import KeyTransform


@dataclass(frozen=True)
class Match:
    """A module the family replaces."""

    path: str
    original_class: type
    fused_class: type
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "module": self.path,
            "class": self.original_class.__name__,
            "fused_class": self.fused_class.__name__,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Rejection:
    """A candidate the family does not replace, with the reason."""

    path: str
    class_name: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"module": self.path, "class": self.class_name, "reason": self.reason}


@dataclass
class Discovery:
    """The result of scanning one model for one family."""

    family: str
    model_name: str
    matches: list[Match] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    transforms: list[KeyTransform] = field(default_factory=list)
    empty_message: str = ""

    @property
    def patch_mapping(self) -> dict[type, type]:
        return {m.original_class: m.fused_class for m in self.matches}

    @property
    def matched_paths(self) -> list[str]:
        return [m.path for m in self.matches]

    def __bool__(self) -> bool:
        return bool(self.matches)


_cache: OrderedDict[tuple[str, type, str], Discovery] = OrderedDict()
_cache_lock = threading.Lock()
_CACHE_SIZE = 256


def discover(
    model: nn.Module,
    spec: FusionSpec,
    *,
    config: PretrainedConfig | None = None,
    fingerprint: str | None = None,
    model_name: str | None = None,
) -> Discovery:
    """Scan ``model`` (usually on the meta device) for modules ``spec`` can fuse.

    Args:
        model: the model to scan.
        spec: the family.
        config: passed to ``spec.make_transforms``.
        fingerprint: the config fingerprint; with it, results are cached per
            (family, model class, fingerprint).
        model_name: for messages.
    """
    name = model_name or type(model).__name__
    key = (spec.name, type(model), fingerprint) if fingerprint else None
    if key is not None:
        with _cache_lock:
            hit = _cache.get(key)
            if hit is not None:
                _cache.move_to_end(key)
                return hit
    result = _scan(model, spec, config if config is not None else getattr(model, "config", None), name)
    if key is not None:
        with _cache_lock:
            _cache[key] = result
            while len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
    return result


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


def _scan(model: nn.Module, spec: FusionSpec, config: Any, name: str) -> Discovery:
    by_class: dict[type, list[tuple[str, nn.Module, str]]] = {}
    failing: dict[type, tuple[str, str]] = {}
    rejected: list[Rejection] = []
    seen: set[int] = set()
    for path, module in model.named_modules():
        if id(module) in seen or not spec.is_candidate(path, module):
            continue
        seen.add(id(module))
        cls = type(module)
        verdict = spec.check(module)
        if verdict.ok:
            by_class.setdefault(cls, []).append((path, module, verdict.reason))
        else:
            rejected.append(Rejection(path, cls.__name__, verdict.reason))
            failing.setdefault(cls, (path, verdict.reason))
    matches: list[Match] = []
    modules: dict[str, nn.Module] = {}
    for cls, items in by_class.items():
        if cls in failing:
            bad_path, bad_reason = failing[cls]
            for path, _module, _reason in items:
                rejected.append(
                    Rejection(
                        path,
                        cls.__name__,
                        f"class {cls.__name__} is not patched: its instance {bad_path} is not fusable ({bad_reason})",
                    )
                )
            continue
        fused = spec.fused_class(cls)
        for path, module, reason in items:
            matches.append(Match(path, cls, fused, reason))
            modules[path] = module
    rejected.sort(key=lambda r: r.path)
    transforms = spec.make_transforms(config, modules) if modules else []
    return Discovery(
        family=spec.name,
        model_name=name,
        matches=matches,
        rejected=rejected,
        transforms=transforms,
        empty_message="" if matches else spec.empty_message(name),
    )
