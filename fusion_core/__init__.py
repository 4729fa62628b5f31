"""fusion_core: the engine of Fusion Inspector (no Qt here).

Open a model (:func:`resolve`, :func:`inspect_model`), see what each fusion family would
replace (:meth:`Inspection.discovery`), build a :class:`FusionPlan`, then load, check or
export it. The stages live in sub-packages (``docs/architecture.md``): ``model`` (sources,
safety, checkpoint headers, demos, the module tree), ``families`` (the spec protocol, the
registry, one module per family), ``plan`` (discovery, key names, the validated plan),
``run`` (loading, inputs, checks, results, upstream parity), ``export`` and ``coverage``,
and ``cli`` on top.

The public names below are imported lazily, on first use: ``import fusion_core.errors``
imports neither torch nor transformers nor any third-party family plugin.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> the module that defines it
_API: dict[str, str] = {
    **dict.fromkeys(
        (
            "Cancelled",
            "CheckpointError",
            "ConfigError",
            "ExportError",
            "FamilyConflictError",
            "FusionError",
            "InvalidFusionConfigError",
            "LoadError",
            "ModelSourceError",
            "RemoteCodeError",
            "UnknownFamilyError",
            "UnsafeModelError",
            "UsageError",
        ),
        "fusion_core.errors",
    ),
    **dict.fromkeys(("CancelToken", "Progress", "drive"), "fusion_core.progress"),
    "scoped_patch": "fusion_core.patching",
    **dict.fromkeys(("CheckpointIndex", "TensorInfo", "read_header", "read_index"), "fusion_core.model.checkpoint"),
    **dict.fromkeys(("ModelSource", "cached_hub_models", "known_model_types", "resolve"), "fusion_core.model.sources"),
    **dict.fromkeys(("ModuleNode", "ModuleTree", "build_meta_model", "module_tree"), "fusion_core.model.tree"),
    **dict.fromkeys(
        ("REGISTRY", "FusionSpec", "Verdict", "families", "get_family", "plugin_errors"), "fusion_core.families"
    ),
    **dict.fromkeys(("Discovery", "Match", "Rejection", "discover"), "fusion_core.plan.discovery"),
    **dict.fromkeys(
        ("FusionPlan", "Inspection", "inspect_model", "validate_fusion_config"), "fusion_core.plan.fusion_plan"
    ),
    **dict.fromkeys(("identity_of", "plan_document", "plan_from_file"), "fusion_core.plan.plan_file"),
    **dict.fromkeys(("LoadResult", "iter_load"), "fusion_core.run.loading"),
    **dict.fromkeys(("CheckResult", "iter_check"), "fusion_core.run.checks"),
    **dict.fromkeys(("check", "load", "load_plain"), "fusion_core.api"),
    **dict.fromkeys(("ExportResult", "ExportVerification", "iter_export"), "fusion_core.export.pipeline"),
    **dict.fromkeys(("convert_adapter", "iter_convert_adapter", "plan_adapter"), "fusion_core.adapter.convert"),
    "AdapterResult": "fusion_core.adapter.result",
    **dict.fromkeys(("CoverageReport", "coverage_scan", "format_report", "scan"), "fusion_core.coverage.scan"),
}
# ``fusion_core.export`` is the export sub-package, which is callable: ``fusion_core.export(src, dest, ...)``;
# so is ``fusion_core.compare(a, b, ...)`` (two models compared).
_SUBPACKAGES = ("export", "compare")

__all__ = sorted([*_API, *_SUBPACKAGES])


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
