"""Export: write converted checkpoints (fused or original layout), streamed, then verified.

``pipeline`` drives an export, ``writer`` writes sharded safetensors, ``files`` handles the
destination and the folder's other files, ``verify`` re-reads what was written, ``result``
holds what an export reports (plain data).

This package is callable: ``fusion_core.export(source, dest, ...)`` is
:func:`fusion_core.export.pipeline.export` (the package and the public function share the
name ``fusion_core.export``). Its names are imported on first use, so that ``result`` can
be imported without torch, by the window.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from ..lazy import lazy_attributes

_API = {
    "LAYOUTS": "pipeline",
    "export": "pipeline",
    "iter_export": "pipeline",
    "ExportResult": "result",
    "ExportVerification": "result",
}
__all__ = sorted(_API)

__getattr__ = lazy_attributes(__name__, _API)


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from .pipeline import export

        return export(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
