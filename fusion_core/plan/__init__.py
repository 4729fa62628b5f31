"""The plan: discovery on the meta model, checkpoint key names, and the validated :class:`FusionPlan`.

What the user previews is the object that load, check and export run.
"""

from __future__ import annotations

from .fusion_plan import (
    CheckpointTransform,
    FamilyPlan,
    FusionConfig,
    FusionPlan,
    Inspection,
    as_plan,
    inspect_model,
    validate_fusion_config,
)

__all__ = [
    "CheckpointTransform",
    "FamilyPlan",
    "FusionConfig",
    "FusionPlan",
    "Inspection",
    "as_plan",
    "inspect_model",
    "validate_fusion_config",
]
