"""The plan: discovery on the meta model, checkpoint key names, and the validated :class:`FusionPlan`.

What the user previews is the object that load, check and export run.
"""

from __future__ import annotations

from .fusion_config import FusionConfig, configured_family, validate_fusion_config
from .fusion_plan import CheckpointTransform, FamilyPlan, FusionPlan, Inspection, as_plan, inspect_model

__all__ = [
    "CheckpointTransform",
    "FamilyPlan",
    "FusionConfig",
    "FusionPlan",
    "Inspection",
    "as_plan",
    "configured_family",
    "inspect_model",
    "validate_fusion_config",
]
