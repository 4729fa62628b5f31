"""The plan as data: what ``plan --json`` writes, plan files hold, the window shows and sends back.

A :class:`PlanData` is the plain form of a :class:`~fusion_core.plan.FusionPlan`, typed: the
families with their validated options in the user's order, the modules each one replaces
(their classes by qualified name), the key transforms both ways on the checkpoint's own key
names, and the identity of the source it was made from. The one converter
(:mod:`fusion_core.boundary.convert`) writes and reads it; nothing in it is live (no class,
spec or model), so it crosses processes and files. Only the stage that runs it resolves it
again, by name, against its opened model (:func:`fusion_core.plan.plan_file.resolve_plan`),
and refuses it when the model or the plan differs from what it says.

Importing this module imports neither torch nor transformers (the window reads it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..boundary.convert import plain
from .discovery import Discovery, Match, Rejection

__all__ = ["FamilyData", "KeyRow", "PlanData", "SourceIdentity", "WeightFile", "owner_module", "plan_data"]


@dataclass(frozen=True)
class WeightFile:
    """One weight file of the planned source: its name in the folder, size and SHA-256
    (``""``: not hashed, a plan the engine made for its window; only its size is checked)."""

    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class SourceIdentity:
    """What a plan was made from: checked again before the plan runs."""

    spec: str  # what the user named (a folder, demo:<name>, arch:<type>, a hub id)
    model_class: str
    config_sha256: str  # the config as transformers writes it (use_diff=False), and the class
    files: tuple[WeightFile, ...] = ()


@dataclass(frozen=True)
class KeyRow:
    """One checkpoint key of a transform, in one direction (load: original -> fused)."""

    family: str
    source_key: str
    source_shape: tuple[int, ...]
    dtype: str  # safetensors code ("F32"), torch name without checkpoint, "?" when not found
    target_key: str
    target_shape: tuple[int, ...]
    op: str
    module: str = ""  # the fused module the key belongs to
    present: str = ""  # the side the checkpoint holds: "original" | "fused" | "missing"


@dataclass(frozen=True)
class FamilyData:
    """One enabled family: its effective options (defaults filled in) and its discovery."""

    name: str
    options: dict[str, Any]
    matches: tuple[Match, ...] = ()
    rejected: tuple[Rejection, ...] = ()
    near_misses: tuple[Rejection, ...] = ()
    message: str = ""  # why nothing matched


@dataclass(frozen=True)
class PlanData:
    """A plan as plain data (``fusion-core plan --json``, docs/cli-json.md)."""

    schema_version: int
    model: str
    model_class: str
    fusion_config: dict[str, Any]  # family -> True or its options, in the user's order
    families: tuple[FamilyData, ...]
    patch_mapping: dict[str, str]  # original class -> fused class (bare names unless two share one)
    patch_mapping_modules: dict[str, tuple[str, ...]]
    has_checkpoint: bool
    checkpoint_layout: str  # "original" | "fused" | "mixed" | "none"
    transforms: tuple[KeyRow, ...]  # load: original -> fused
    reverse_transforms: tuple[KeyRow, ...]  # save: fused -> original
    messages: tuple[str, ...] = ()
    matched: dict[str, str] = field(default_factory=dict)  # module path -> family
    identity: SourceIdentity | None = field(default=None, metadata=plain(omit_if_default=True))

    def rows(self, direction: str = "load") -> tuple[KeyRow, ...]:
        return self.transforms if direction == "load" else self.reverse_transforms

    @property
    def missing_transforms(self) -> int:
        """The transforms whose keys the checkpoint does not hold under these names (one
        target key per transform in the load direction)."""
        return len({(r.module, r.target_key) for r in self.transforms if r.present == "missing"})


def owner_module(model_key: str, matched: Mapping[str, str] | set[str]) -> str:
    """The fused module a model key belongs to: the longest matched path that prefixes it."""
    parts = model_key.split(".")
    for n in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in matched:
            return prefix
    return ".".join(parts[:-2]) or model_key


def plan_data(plan: Any, identity: SourceIdentity | None = None) -> PlanData:
    """``plan`` (a :class:`~fusion_core.plan.FusionPlan`, built in the engine) as data, with
    ``identity`` when given (``Any``: fusion_plan imports this module)."""
    mapping = plan.patch_mapping
    names = _class_names(mapping)
    matched = plan.matched_paths
    rows: dict[str, list[KeyRow]] = {"load": [], "save": []}
    for ct in plan.checkpoint_transforms:
        module = owner_module(ct.transform.sources[0], matched)
        for direction, out in rows.items():
            out.extend(_row(r, module, ct.present) for r in ct.rows(direction))
    return PlanData(
        schema_version=1,
        model=plan.model,
        model_class=plan.model_class,
        fusion_config=dict(plan.fusion_config),
        families=tuple(_family(f.name, f.discovery) for f in plan.families),
        patch_mapping={names[o]: f.__name__ for o, f in mapping.items()},
        patch_mapping_modules={
            names[o]: tuple(m.path for fam in plan.families for m in fam.discovery.matches if m.original_class is o)
            for o in mapping
        },
        has_checkpoint=plan.has_checkpoint,
        checkpoint_layout=plan.layout,
        transforms=tuple(rows["load"]),
        reverse_transforms=tuple(rows["save"]),
        messages=tuple(plan.messages),
        matched=dict(matched),
        identity=identity,
    )


def _row(r: dict[str, Any], module: str, present: str) -> KeyRow:
    shapes = tuple(r["source_shape"]), tuple(r["target_shape"])
    return KeyRow(
        r["family"], r["source_key"], shapes[0], r["dtype"], r["target_key"], shapes[1], r["op"], module, present
    )


def _family(name: str, d: Discovery) -> FamilyData:
    found = tuple(d.matches), tuple(d.rejected), tuple(d.near_misses)
    return FamilyData(name, dict(d.options), *found, d.empty_message)


def _class_names(mapping: Mapping[type, type]) -> dict[type, str]:
    """Class names for JSON keys: the bare name, or module.qualname where two classes share one."""
    counts: dict[str, int] = {}
    for cls in mapping:
        counts[cls.__name__] = counts.get(cls.__name__, 0) + 1
    return {c: c.__name__ if counts[c.__name__] == 1 else f"{c.__module__}.{c.__qualname__}" for c in mapping}
