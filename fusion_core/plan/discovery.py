"""Discovery: which modules of a meta-initialized model a family would replace, and why not.

The result types (:class:`Match`, :class:`Rejection`, :class:`Discovery`) are also what the
window shows and the model cache keeps: importing this module imports neither torch nor
transformers.

Like the reference mechanism, fusion is class-level (one compatible class -> one fused
class), but unlike it *every* instance of a class is checked: one non-fusable instance
keeps the whole class unpatched, and the reason names that instance. Results are cached
per (family, model class, config fingerprint), never per class alone.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..boundary.convert import plain

if TYPE_CHECKING:
    from torch import nn
    from transformers import PretrainedConfig

    from ..families.base import FusionSpec
    from ..families.transforms import KeyTransform


@dataclass(frozen=True)
class Match:
    """A module the family replaces.

    In the engine it also holds both classes (:meth:`of`); as plain data (the window, the
    model cache, the CLI's JSON) only their names, and the classes are None.
    """

    path: str = field(metadata=plain("module"))
    class_name: str = field(metadata=plain("class"))
    fused_class_name: str = field(metadata=plain("fused_class"))
    reason: str = ""
    class_path: str = ""  # module.qualname of the original class
    original_class: type | None = field(default=None, repr=False, compare=False, metadata=plain(omit=True))
    fused_class: type | None = field(default=None, repr=False, compare=False, metadata=plain(omit=True))

    @classmethod
    def of(cls, path: str, original: type, fused: type, reason: str = "") -> Match:
        """The match of ``path``, whose class ``original`` becomes ``fused``."""
        qualname = f"{original.__module__}.{original.__qualname__}"
        return cls(path, original.__name__, fused.__name__, reason, qualname, original, fused)


@dataclass(frozen=True)
class Rejection:
    """A candidate the family does not replace, with the reason."""

    path: str = field(metadata=plain("module"))
    class_name: str = field(metadata=plain("class"))
    reason: str


@dataclass
class Discovery:
    """The result of scanning one model for one family (the window gets it as plain data,
    without the key transforms)."""

    family: str
    model_name: str = ""
    matches: list[Match] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    transforms: list[KeyTransform] = field(default_factory=list, compare=False, metadata=plain(omit=True))
    empty_message: str = field(default="", metadata=plain("message"))
    #: modules that look like the family's target under other names, not candidates
    #: (reason ``not a candidate: ...``; see :meth:`FusionSpec.near_miss`)
    near_misses: list[Rejection] = field(default_factory=list)
    #: the options the family ran with (defaults filled in)
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def patch_mapping(self) -> dict[type, type]:
        """Original class -> fused class (the engine's discovery; empty as plain data)."""
        return {m.original_class: m.fused_class for m in self.matches if m.original_class and m.fused_class}

    @property
    def matched_paths(self) -> list[str]:
        return [m.path for m in self.matches]

    def __bool__(self) -> bool:
        return bool(self.matches)


# key (family name, id(spec), options, model class, fingerprint) -> (spec, result); the spec is kept so
# that its id cannot be reused by another spec while the entry lives
_cache: OrderedDict[tuple[Any, ...], tuple[FusionSpec, Discovery]] = OrderedDict()
_cache_lock = threading.Lock()
_CACHE_SIZE = 256


def discover(
    model: nn.Module,
    spec: FusionSpec,
    *,
    config: PretrainedConfig | None = None,
    fingerprint: str | None = None,
    model_name: str | None = None,
    named_modules: Sequence[tuple[str, nn.Module]] | None = None,
    with_transforms: bool = True,
) -> Discovery:
    """Scan ``model`` (usually on the meta device) for modules ``spec`` can fuse.

    Candidates are the modules whose path matches the spec's patterns; since patching is
    class-level, every instance of a candidate's class is then checked, wherever it sits.
    A class with one non-fusable instance is not patched at all, and each of its
    instances is rejected with a reason naming that instance.

    Args:
        model: the model to scan.
        spec: the family, configured with its options (:meth:`FusionSpec.with_options`).
        config: passed to ``spec.make_transforms``.
        fingerprint: the config fingerprint (:attr:`ModelSource.fingerprint`); with it,
            results are cached per (family, model class, fingerprint), so two configs of
            one class never share a result.
        model_name: for messages.
        named_modules: ``list(model.named_modules())`` when the caller already has it
            (scanning one model for several families).
        with_transforms: build the key transforms (the coverage scan does not need them).

    Returns:
        The matches (in model order), the rejections with reasons (sorted by path), the
        key transforms of the matched modules and, when nothing matched, the spec's
        empty-result message.
    """
    name = model_name or type(model).__name__
    # per spec object: a family re-registered under the same name never gets the old one's result
    options = tuple(sorted(spec.options.items()))
    key = (spec.name, id(spec), options, type(model), fingerprint) if fingerprint and with_transforms else None
    if key is not None:
        with _cache_lock:
            hit = _cache.get(key)
            if hit is not None:
                _cache.move_to_end(key)
                return hit[1]
    named = list(model.named_modules()) if named_modules is None else named_modules
    result = _scan(named, spec, config if config is not None else getattr(model, "config", None), name, with_transforms)
    if key is not None:
        with _cache_lock:
            _cache[key] = (spec, result)
            while len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
    return result


def clear_cache() -> None:
    """Forget every cached discovery (tests; a family re-registered under the same name)."""
    with _cache_lock:
        _cache.clear()


def _refuse_tied(
    named: Sequence[tuple[str, nn.Module]], instances: dict[type, list[tuple[str, nn.Module, Any]]]
) -> None:
    """A candidate whose weights are tied to another module's (one tensor, stored once in the
    checkpoint: UDOP's two patch embeddings, Zamba2's shared attention) is not fusable: fusing it
    on its own would untie them. Its verdict becomes a rejection naming the other module."""
    from ..families.base import Verdict

    owners: dict[int, str] = {}
    for path, module in named:
        for pname, param in module._parameters.items():
            if param is not None:
                owners.setdefault(id(param), f"{path}.{pname}" if path else pname)
    for items in instances.values():
        for i, (path, module, verdict) in enumerate(items):
            if not verdict.ok:
                continue
            prefix = f"{path}." if path else ""
            for pname, param in module.named_parameters(remove_duplicate=False):
                first = owners.get(id(param), "")
                if first and not first.startswith(prefix):
                    reason = (
                        f"its weight {prefix}{pname} is tied to {first} (one tensor, stored once): fusing it "
                        "would untie weights the model shares"
                    )
                    items[i] = (path, module, Verdict.no(reason))
                    break


def _scan(
    named: Sequence[tuple[str, nn.Module]], spec: FusionSpec, config: Any, name: str, with_transforms: bool
) -> Discovery:
    # 1. candidates by name, decided by the spec
    verdicts: dict[int, Any] = {}
    candidate_classes: list[type] = []
    near: list[Rejection] = []
    for path, module in named:
        if not spec.is_candidate(path, module):
            reason = spec.near_miss(path, module)
            if reason:
                near.append(Rejection(path, type(module).__name__, f"not a candidate: {reason}"))
            continue
        verdicts[id(module)] = spec.judge(module)
        if type(module) not in candidate_classes:
            candidate_classes.append(type(module))
    # 2. patching is class-level: every instance of a candidate class is replaced, also one
    # whose name the patterns do not select, so every instance is checked.
    instances: dict[type, list[tuple[str, nn.Module, Any]]] = {cls: [] for cls in candidate_classes}
    order: dict[str, int] = {}
    for path, module in named:
        items = instances.get(type(module))
        if items is None:
            continue
        verdict = verdicts.get(id(module))
        if verdict is None:
            verdict = verdicts[id(module)] = spec.judge(module)
        items.append((path, module, verdict))
        order[path] = len(order)
    if instances:
        _refuse_tied(named, instances)
    matches: list[Match] = []
    rejected: list[Rejection] = []
    modules: dict[str, nn.Module] = {}
    for cls, items in instances.items():
        bad = [(path, v) for path, _m, v in items if not v.ok]
        if not bad:
            fused = spec.fused_class(cls)
            for path, module, verdict in items:
                if getattr(verdict, "applies", True):  # an instance with nothing to convert is no match
                    matches.append(Match.of(path, cls, fused, verdict.reason))
                    modules[path] = module
            continue
        bad_path, bad_verdict = bad[0]
        for path, _module, verdict in items:
            if not verdict.ok:
                rejected.append(Rejection(path, cls.__name__, verdict.reason))
            elif getattr(verdict, "applies", True):
                rejected.append(
                    Rejection(
                        path,
                        cls.__name__,
                        f"class {cls.__name__} is not patched: its instance {bad_path or '(root)'} "
                        f"is not fusable ({bad_verdict.reason})",
                    )
                )
    matches.sort(key=lambda m: order[m.path])
    rejected.sort(key=lambda r: r.path)
    checked = set(order)  # an instance of a candidate class was decided above, not a near miss
    transforms = spec.make_transforms(config, modules) if modules and with_transforms else []
    return Discovery(
        family=spec.name,
        model_name=name,
        matches=matches,
        rejected=rejected,
        transforms=transforms,
        empty_message="" if matches else spec.empty_message(name),
        near_misses=[r for r in near if r.path not in checked],
        options=dict(spec.options),
    )
