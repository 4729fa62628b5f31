"""The plan: discovery on the meta model, checkpoint key names, and the validated :class:`FusionPlan`.

A plan crosses processes and files as :class:`~.plan_data.PlanData` (what ``plan --json``
writes); load, check and export run the :class:`FusionPlan` it resolves to on the opened
model (:func:`~.plan_file.resolve_plan`). The names below are imported on first use, so that
the plain-data modules of this package (``plan_data``, ``view``, ``diff``'s result types) can
be imported without torch, by the window.
"""

from __future__ import annotations

from ..lazy import lazy_attributes

_API = {
    "FusionConfig": "fusion_config",
    "configured_family": "fusion_config",
    "validate_fusion_config": "fusion_config",
    "CheckpointTransform": "fusion_plan",
    "FamilyPlan": "fusion_plan",
    "FusionPlan": "fusion_plan",
    "Inspection": "fusion_plan",
    "as_plan": "fusion_plan",
    "inspect_model": "fusion_plan",
    "PlanData": "plan_data",
    "resolve_plan": "plan_file",
}
__all__ = sorted(_API)

__getattr__ = lazy_attributes(__name__, _API)
