"""fusion_core: the engine of Fusion Inspector (no Qt here).

Open a model (:func:`resolve`, :func:`inspect_model`), see what each fusion family would
replace (:meth:`Inspection.discovery`), and build a :class:`FusionPlan`.
"""

from __future__ import annotations

from .checkpoint import CheckpointIndex, TensorInfo, read_header, read_index
from .checks import CheckResult, check, iter_check
from .coverage import CoverageReport, coverage_scan, format_report, scan
from .discovery import Discovery, Match, Rejection, discover
from .errors import (
    Cancelled,
    CheckpointError,
    ConfigError,
    ExportError,
    FamilyConflictError,
    FusionError,
    InvalidFusionConfigError,
    LoadError,
    ModelSourceError,
    RemoteCodeError,
    UnknownFamilyError,
    UnsafeModelError,
    UsageError,
)
from .export import ExportResult, ExportVerification, export, iter_export
from .families import REGISTRY, FusionSpec, Verdict, families, get_family
from .families.plugins import plugin_errors
from .loading import LoadResult, iter_load, load, load_plain
from .patching import scoped_patch
from .plan import FusionPlan, Inspection, inspect_model, validate_fusion_config
from .progress import CancelToken, Progress, drive
from .sources import ModelSource, cached_hub_models, known_model_types, resolve
from .tree import ModuleNode, ModuleTree, build_meta_model, module_tree

__version__ = "0.1.0"

__all__ = [
    "REGISTRY",
    "CancelToken",
    "Cancelled",
    "CheckResult",
    "CheckpointError",
    "CheckpointIndex",
    "ConfigError",
    "CoverageReport",
    "Discovery",
    "ExportError",
    "ExportResult",
    "ExportVerification",
    "FamilyConflictError",
    "FusionError",
    "FusionPlan",
    "FusionSpec",
    "Inspection",
    "InvalidFusionConfigError",
    "LoadError",
    "LoadResult",
    "Match",
    "ModelSource",
    "ModelSourceError",
    "ModuleNode",
    "ModuleTree",
    "Progress",
    "Rejection",
    "RemoteCodeError",
    "TensorInfo",
    "UnknownFamilyError",
    "UnsafeModelError",
    "UsageError",
    "Verdict",
    "build_meta_model",
    "cached_hub_models",
    "check",
    "coverage_scan",
    "discover",
    "drive",
    "export",
    "families",
    "format_report",
    "get_family",
    "inspect_model",
    "iter_check",
    "iter_export",
    "iter_load",
    "known_model_types",
    "load",
    "load_plain",
    "module_tree",
    "plugin_errors",
    "read_header",
    "read_index",
    "resolve",
    "scan",
    "scoped_patch",
    "validate_fusion_config",
]
