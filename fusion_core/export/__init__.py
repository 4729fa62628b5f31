"""Export: write converted checkpoints (fused or original layout), streamed, then verified.

``pipeline`` drives an export, ``writer`` writes sharded safetensors, ``files`` handles the
destination and the folder's other files, ``verify`` re-reads what was written.

This package is callable: ``fusion_core.export(source, dest, ...)`` is
:func:`fusion_core.export.pipeline.export` (the package and the public function share the
name ``fusion_core.export``).
"""

from __future__ import annotations

import sys
import types
from typing import Any

from .pipeline import LAYOUTS, ExportResult, ExportVerification, export, iter_export

__all__ = ["LAYOUTS", "ExportResult", "ExportVerification", "export", "iter_export"]


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> ExportResult:
        return export(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
