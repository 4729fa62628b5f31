"""Diff of a plan: the original model against the fused one, without tensor data.

The fused skeleton is built on the meta device inside
:func:`fusion_core.patching.scoped_patch` (exactly what a fused-layout load builds), and
its state dict and module classes are compared with the original meta model's:

* module classes that change (original -> fused), per matched module and per class;
* state-dict keys with shapes: ``removed``, ``added``, ``renamed`` (one key becomes one
  other key) and ``reshaped`` (same key, other shape), each tied to its module, family
  and the plan's transform op;
* parameter counts per matched module, original and fused, which must be equal (a fusion
  moves weights, it never adds or drops any).

Keys that change without a transform of the plan to explain them are listed too, with no
op: they would be missing or unexpected on load.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..boundary.convert import converter, from_plain, plain, to_plain

if TYPE_CHECKING:
    from torch import nn

    from .fusion_plan import FusionPlan

Shape = tuple[int, ...]
KINDS = ("removed", "added", "renamed", "reshaped")


def _none_if_empty(key: str) -> str | None:
    return key or None


def _empty_if_none(key: str | None) -> str | None:
    return "" if key is None else key


_NONE_IF_EMPTY = plain(dump=_none_if_empty, load=_empty_if_none)  # a key that is absent is null as plain data


@dataclass(frozen=True)
class KeyChange:
    """One state-dict key that differs between the original and the fused model."""

    kind: str = field(metadata=plain("change"))  # one of KINDS
    module: str  # the matched module the key belongs to ("" if none)
    family: str  # the family whose transform explains it ("" if none does)
    op: str  # the transform's op ("concat", "reshape"...; "" if none)
    key: str = field(default="", metadata=_NONE_IF_EMPTY)  # original key ("" for added; null as plain data)
    shape: Shape | None = None
    new_key: str = field(default="", metadata=plain("fused_key", dump=_none_if_empty, load=_empty_if_none))
    new_shape: Shape | None = field(default=None, metadata=plain("fused_shape"))


@dataclass(frozen=True)
class ModuleDiff:
    """One matched module: its class and parameter count before and after fusing."""

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = (
        "path", "family", "original_class", "fused_class", "original_params", "fused_params", "params_equal",
    )  # fmt: skip

    path: str = field(metadata=plain("module"))
    family: str
    original_class: str = field(metadata=plain("class"))
    fused_class: str
    original_params: int = field(metadata=plain("params"))
    fused_params: int

    @property
    def params_equal(self) -> bool:
        return self.original_params == self.fused_params


@dataclass
class PlanDiff:
    """The whole diff of one plan (see the module docstring)."""

    model: str
    model_class: str
    fusion_config: dict[str, Any]
    modules: list[ModuleDiff]
    keys: list[KeyChange]
    original_keys: int
    fused_keys: int
    unchanged_keys: int
    original_params: int
    fused_params: int
    seconds: float = field(default=0.0, compare=False)  # measured; not in the plain form
    messages: list[str] = field(default_factory=list)

    @property
    def params_equal(self) -> bool:
        """Every matched module, and the whole model, keeps its parameter count."""
        return self.original_params == self.fused_params and all(m.params_equal for m in self.modules)

    @property
    def unexplained(self) -> list[KeyChange]:
        """Changed keys that no transform of the plan accounts for (a load would fail on them)."""
        return [c for c in self.keys if not c.op]

    def counts(self) -> dict[str, int]:
        """Number of key changes of each kind (every kind present, 0 if none)."""
        out = dict.fromkeys(KINDS, 0)
        for c in self.keys:
            out[c.kind] += 1
        return out

    def classes(self) -> list[dict[str, Any]]:
        """One row per class change: original class, fused class, family and instances."""
        rows: dict[tuple[str, str, str], int] = {}
        for m in self.modules:
            k = (m.original_class, m.fused_class, m.family)
            rows[k] = rows.get(k, 0) + 1
        return [{"class": o, "fused_class": f, "family": fam, "instances": n} for (o, f, fam), n in rows.items()]


_SUMMARY = ("original_keys", "fused_keys", "unchanged_keys", "original_params", "fused_params")


def _diff_plain(diff: PlanDiff) -> dict[str, Any]:
    """The plain form of a diff: the ``fusion-core diff --json`` document (docs/cli-json.md, "diff")."""
    return {
        "schema_version": 1,
        "model": diff.model,
        "model_class": diff.model_class,
        "fusion_config": diff.fusion_config,
        "summary": {
            "modules": len(diff.modules),
            "original_keys": diff.original_keys,
            "fused_keys": diff.fused_keys,
            "unchanged_keys": diff.unchanged_keys,
            **diff.counts(),
            "unexplained": len(diff.unexplained),
            "original_params": diff.original_params,
            "fused_params": diff.fused_params,
            "params_equal": diff.params_equal,
        },
        "classes": diff.classes(),
        "modules": to_plain(diff.modules),
        "keys": to_plain(diff.keys),
        "messages": list(diff.messages),
    }


def _diff_structure(data: Any, _: Any) -> PlanDiff:
    """A :class:`PlanDiff` from its plain form (the window receives it so); the summary's counts
    that are computed are not read."""
    summary = data["summary"]
    return PlanDiff(
        model=from_plain(str, data["model"]),
        model_class=from_plain(str, data["model_class"]),
        fusion_config=from_plain(dict[str, Any], data["fusion_config"]),
        modules=from_plain(list[ModuleDiff], data["modules"]),
        keys=from_plain(list[KeyChange], data["keys"]),
        **{k: from_plain(int, summary[k]) for k in _SUMMARY},
        messages=from_plain(list[str], data.get("messages", [])),
    )


converter.register_unstructure_hook(PlanDiff, _diff_plain)
converter.register_structure_hook(PlanDiff, _diff_structure)


def _shapes(model: nn.Module) -> dict[str, Shape]:
    return {k: tuple(v.shape) for k, v in model.state_dict(keep_vars=True).items()}


def _param_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _owner(key: str, paths: list[str]) -> str:
    """The longest matched module path that ``key`` lies under ("" if none)."""
    best = ""
    for p in paths:
        if key.startswith(p + ".") and len(p) > len(best):
            best = p
    return best


def build_fused_meta_model(plan: FusionPlan) -> nn.Module:
    """The plan's fused skeleton on the meta device (what a fused-layout load builds).

    Raises:
        ModelSourceError: the model cannot be built (see :func:`fusion_core.model.tree.build_meta_model`).
    """
    from ..model.tree import build_meta_model
    from ..patching import scoped_patch

    with scoped_patch(plan.patch_mapping):
        return build_meta_model(plan.source)


def diff_plan(plan: FusionPlan) -> PlanDiff:
    """Compare the original model with the fused one for ``plan`` (no tensor data is read).

    Args:
        plan: a plan built by :meth:`fusion_core.Inspection.plan` (it carries the meta model).

    Returns:
        The :class:`PlanDiff`.

    Raises:
        ModelSourceError: the fused skeleton cannot be built.
    """
    t0 = time.perf_counter()
    original = plan.inspection.model
    fused = build_fused_meta_model(plan) if plan.patch_mapping else original
    before, after = _shapes(original), _shapes(fused)
    family_of = plan.matched_paths
    paths = list(family_of)
    modules = []
    for fam in plan.families:
        for m in fam.discovery.matches:
            modules.append(
                ModuleDiff(
                    m.path,
                    fam.name,
                    type(original.get_submodule(m.path)).__name__,
                    type(fused.get_submodule(m.path)).__name__,
                    _param_count(original.get_submodule(m.path)),
                    _param_count(fused.get_submodule(m.path)),
                )
            )
    keys, explained = _transform_changes(plan, before, after, paths)
    for key in sorted(before.keys() - after.keys() - explained):
        keys.append(KeyChange("removed", _owner(key, paths), "", "", key, before[key]))
    for key in sorted(after.keys() - before.keys() - explained):
        keys.append(KeyChange("added", _owner(key, paths), "", "", new_key=key, new_shape=after[key]))
    for key in sorted(before.keys() & after.keys() - explained):
        if before[key] != after[key]:
            keys.append(KeyChange("reshaped", _owner(key, paths), "", "", key, before[key], key, after[key]))
    unchanged = sum(1 for k in before.keys() & after.keys() if before[k] == after[k] and k not in explained)
    result = PlanDiff(
        model=plan.model,
        model_class=plan.model_class,
        fusion_config=dict(plan.fusion_config),
        modules=modules,
        keys=keys,
        original_keys=len(before),
        fused_keys=len(after),
        unchanged_keys=unchanged,
        original_params=_param_count(original),
        fused_params=_param_count(fused),
        messages=list(plan.messages),
    )
    if result.unexplained:
        result.messages.append(
            f"{len(result.unexplained)} key(s) change without a transform of the plan: a load would fail on them"
        )
    result.seconds = time.perf_counter() - t0
    return result


def _transform_changes(
    plan: FusionPlan, before: Mapping[str, Shape], after: Mapping[str, Shape], paths: list[str]
) -> tuple[list[KeyChange], set[str]]:
    """The key changes the plan's transforms explain, and every key they cover."""
    changes: list[KeyChange] = []
    covered: set[str] = set()
    for t in plan.transforms:
        module = _owner(t.sources[0], paths)
        if len(t.sources) == 1 and len(t.targets) == 1:
            src, dst = t.sources[0], t.targets[0]
            if src in before and dst in after:
                covered.update((src, dst))
                if src != dst:
                    changes.append(KeyChange("renamed", module, t.family, t.op, src, before[src], dst, after[dst]))
                elif before[src] != after[dst]:
                    changes.append(KeyChange("reshaped", module, t.family, t.op, src, before[src], dst, after[dst]))
                continue
        for src in t.sources:
            if src in before and src not in after:
                covered.add(src)
                changes.append(KeyChange("removed", module, t.family, t.op, src, before[src]))
        for dst in t.targets:
            if dst in after and dst not in before:
                covered.add(dst)
                changes.append(KeyChange("added", module, t.family, t.op, new_key=dst, new_shape=after[dst]))
    return changes, covered
