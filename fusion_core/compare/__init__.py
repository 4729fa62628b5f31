"""Compare any two checkpoints: module trees, state-dict keys and tensor values.

:func:`compare` (and the generator :func:`iter_compare`) take two models by any name
``open`` takes (folders, hub ids from the cache, ``arch:`` for structure only) or opened
:class:`~fusion_core.plan.fusion_plan.Inspection` objects, and return a
:class:`~fusion_core.compare.result.Comparison`:

* structure (:mod:`.structure`): the module trees matched by path, folded repeats summarised;
* keys (:mod:`.keys`): matched through transformers' renamings and the families' transforms;
* values (:mod:`.values`, ``values=True``): streamed, byte ranges first, bounded memory.

Importing this package (or :mod:`.result`) imports neither torch nor transformers: the
window reads the result types. Like ``fusion_core.export``, the package is callable:
``fusion_core.compare(a, b, ...)`` is :func:`compare` (the package and the public function
share the name).
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..progress import CancelToken, ProgressCallback, ProgressGenerator
    from .result import Comparison

__all__ = ["compare", "iter_compare"]


def iter_compare(
    a: Any,
    b: Any,
    *,
    values: bool = False,
    atol: float | None = None,
    rtol: float | None = None,
    digest: bool = False,
    trust_remote_code: bool = False,
) -> ProgressGenerator[Comparison]:
    """The comparison of ``a`` with ``b`` as a progress generator (see :func:`compare`)."""
    from .run import iter_compare as run

    return run(a, b, values=values, atol=atol, rtol=rtol, digest=digest, trust_remote_code=trust_remote_code)


def compare(
    a: Any,
    b: Any,
    values: bool = False,
    atol: float | None = None,
    rtol: float | None = None,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
    *,
    digest: bool = False,
    trust_remote_code: bool = False,
) -> Comparison:
    """Compare model ``a`` with model ``b``.

    Args:
        a, b: a model spec (folder, config.json, ``arch:<type>``, ``demo:<name>``, hub id)
            or an opened :class:`~fusion_core.plan.fusion_plan.Inspection`.
        values: also compare every matched tensor's values (streamed).
        atol, rtol: a tolerance: tensors within it count as equal. Either one alone takes
            the other from the dtype's default (:data:`.values.DEFAULT_TOLERANCE`); with
            neither, only bitwise equal tensors are equal.
        progress: called with each :class:`~fusion_core.progress.Progress` step.
        cancel: a token; once set the comparison stops at its next step.
        digest: with ``values``, also hash each stored tensor's bytes on both sides
            (``ValueRow.digest_a``/``digest_b``; costs time).

    Returns:
        The :class:`~fusion_core.compare.result.Comparison`.

    Raises:
        ModelSourceError, CheckpointError: a model cannot be opened or a shard read.
        Cancelled: ``cancel`` was set.
        UsageError: a negative tolerance.
    """
    from ..progress import drive

    gen = iter_compare(a, b, values=values, atol=atol, rtol=rtol, digest=digest, trust_remote_code=trust_remote_code)
    return drive(gen, progress, cancel)


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return compare(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
