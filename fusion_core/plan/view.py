"""A plan as plain data: what the window shows of a :class:`~fusion_core.plan.FusionPlan`.

The engine runs in its own process (:mod:`fusion_core.host`); the window receives this
view of the plan it built, never the plan itself (which holds classes, functions and the
meta model). Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model.cache import CachedDiscovery, CachedMatch, CachedRejection, FamilyInfo, to_data


@dataclass
class PlannedTransform:
    """One key transform of the plan, as preview rows in both directions."""

    family: str
    first_source: str  # the model key of its first source (names the module it belongs to)
    present: str  # "original" | "fused" | "missing"
    load_rows: list[dict[str, Any]] = field(default_factory=list)
    save_rows: list[dict[str, Any]] = field(default_factory=list)

    def rows(self, direction: str = "load") -> list[dict[str, Any]]:
        return self.load_rows if direction == "load" else self.save_rows


@dataclass
class PlannedFamily:
    """An enabled family: its options (as given) and its discovery."""

    name: str
    options: dict[str, Any]
    discovery: CachedDiscovery


@dataclass
class PlanView:
    """Everything the window shows of a plan (see :class:`~fusion_core.plan.FusionPlan`)."""

    model: str
    model_class: str
    fusion_config: dict[str, Any]
    families: list[PlannedFamily]
    checkpoint_transforms: list[PlannedTransform]
    has_checkpoint: bool
    layout: str
    patch_mapping: list[tuple[str, str]]  # (original class, fused class), in plan order
    seconds: float = 0.0
    messages: list[str] = field(default_factory=list)

    @property
    def matched_paths(self) -> dict[str, str]:
        """module path -> family name."""
        return {m.path: fam.name for fam in self.families for m in fam.discovery.matches}


def inspection_data(spec: str, insp: Any) -> dict[str, Any]:
    """Plain data of an opened model (``insp``: an Inspection) with every registered family's
    discovery: what the engine answers to "open" and what the model cache stores
    (:func:`fusion_core.model.cache.view_from_data` reads it back)."""
    from ..families import REGISTRY

    info = {
        name: FamilyInfo(name, spec_.description, {k: o.describe() for k, o in spec_.options_schema().items()})
        for name, spec_ in REGISTRY.items()
    }
    return to_data(spec, insp, info)


def _rejections(items: Any) -> list[CachedRejection]:
    return [CachedRejection(r.path, r.class_name, r.reason) for r in items]


def plan_view(plan: Any) -> PlanView:
    """The view of ``plan`` (a :class:`~fusion_core.plan.FusionPlan`), built in the engine."""
    families = []
    for fam in plan.families:
        d = fam.discovery
        matches = [
            CachedMatch(
                m.path,
                m.original_class.__name__,
                m.fused_class.__name__,
                m.reason,
                f"{m.original_class.__module__}.{m.original_class.__qualname__}",
            )
            for m in d.matches
        ]
        discovery = CachedDiscovery(
            d.family, matches, _rejections(d.rejected), d.empty_message, _rejections(d.near_misses)
        )
        families.append(PlannedFamily(fam.name, dict(fam.options), discovery))
    transforms = [
        PlannedTransform(ct.family, ct.transform.sources[0], ct.present, ct.rows("load"), ct.rows("save"))
        for ct in plan.checkpoint_transforms
    ]
    return PlanView(
        model=plan.model,
        model_class=plan.model_class,
        fusion_config=dict(plan.fusion_config),
        families=families,
        checkpoint_transforms=transforms,
        has_checkpoint=plan.has_checkpoint,
        layout=plan.layout,
        patch_mapping=[(a.__name__, b.__name__) for a, b in plan.patch_mapping.items()],
        seconds=plan.seconds,
        messages=list(plan.messages),
    )
