"""The comparison itself: open both models, match structure and keys, then stream values."""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from typing import Any

from ..errors import UsageError
from ..progress import Progress
from .keys import key_view, match_keys
from .result import Comparison, Side
from .structure import compare_trees


def _open(spec: Any, trust_remote_code: bool) -> Any:
    from ..plan.fusion_plan import Inspection, inspect_model

    if isinstance(spec, Inspection):
        return spec
    return inspect_model(os.fspath(spec), trust_remote_code=trust_remote_code)


def _side(insp: Any, keys: int, families: dict[str, Any]) -> Side:
    ckpt = insp.source.checkpoint
    return Side(
        name=insp.name,
        model_class=insp.source.model_class.__name__,
        modules=len(insp.tree),
        params=insp.tree.total_params,
        keys=len(ckpt.tensors) if ckpt is not None else keys,
        has_checkpoint=ckpt is not None,
        bytes=ckpt.total_bytes if ckpt is not None else 0,
        fusion_config=families,
    )


def iter_compare(
    a: Any, b: Any, *, values: bool = False, atol: float | None = None, rtol: float | None = None,
    digest: bool = False, trust_remote_code: bool = False,
) -> Generator[Progress, None, Comparison]:  # fmt: skip
    """See :func:`fusion_core.compare.compare`."""
    for name, value in (("atol", atol), ("rtol", rtol)):
        if value is not None and not value >= 0:
            raise UsageError(f"{name} must be a number >= 0, not {value}")
    t0 = time.perf_counter()
    steps = 4
    yield Progress(0, steps, "opening A")
    ia = _open(a, trust_remote_code)
    yield Progress(1, steps, "opening B")
    ib = _open(b, trust_remote_code)
    yield Progress(2, steps, "structure and keys")
    modules, folds = compare_trees(ia.tree, ib.tree)
    ka, fam_a, notes_a = key_view(ia)
    kb, fam_b, notes_b = key_view(ib)
    rows = match_keys(ka, kb)
    messages = [*ia.source.notes, *ib.source.notes, *notes_a, *notes_b] if hasattr(ia.source, "notes") else []
    tolerance = None if atol is None and rtol is None else (atol, rtol)
    result = Comparison(
        a=_side(ia, len(ka), fam_a),
        b=_side(ib, len(kb), fam_b),
        modules=modules,
        folds=folds,
        keys=rows,
        tolerance=tolerance,
        messages=messages,
    )
    yield Progress(3, steps, "structure and keys compared")
    if values:
        missing = [s.name for s in (result.a, result.b) if not s.has_checkpoint]
        if missing:
            result.messages.append(
                f"values not compared: {', '.join(missing)} has no checkpoint (structure and keys only)"
            )
        else:
            from .values import iter_values

            result.values = yield from iter_values(
                rows, ka, kb, ia.source.checkpoint, ib.source.checkpoint, atol, rtol, digest
            )
    result.seconds = time.perf_counter() - t0
    return result
