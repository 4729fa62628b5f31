"""A linear-time ``dir()`` for transformers' lazy modules, for our isolated children.

Once a fusion is registered with transformers (``from_pretrained(..., fusion_config=...)``
does that), every later model construction runs ``monkey_patching.apply_patches``, which
calls ``dir()`` on every loaded ``transformers`` module. ``_LazyModule.__dir__`` (5.24)
appends each name of ``__all__`` that is not yet in a *list*, which is quadratic: about
75 ms per call for the top-level module, 4.5 s of a 5.5 s upstream-parity run on the
demo Qwen2-VL (the child builds three models and each build enters the patches a dozen times).

:func:`install` replaces that method by one that returns the same list, in the same
order, in linear time. Only our child processes call it (upstream parity and the export's
consumers): they exist to run transformers' own loading, and the result they report does not
change, only its cost. The engine and a user's process are left as they are.
``FUSION_NO_HF_SPEEDUPS=1`` in the environment turns it off (``benchmarks/bench_answer.py``
measures what it saves that way).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

__all__ = ["install", "lazy_dir"]


def lazy_dir(module: Any) -> list[str]:
    """What ``_LazyModule.__dir__`` returns, in the same order, without its quadratic scan."""
    result = list(ModuleType.__dir__(module))
    seen = set(result)
    for attr in module.__all__:
        if attr not in seen:
            seen.add(attr)
            result.append(attr)
    return result


def install() -> bool:
    """Use :func:`lazy_dir` for transformers' lazy modules in this process; False when not installed."""
    if os.environ.get("FUSION_NO_HF_SPEEDUPS") == "1":
        return False
    try:
        from transformers.utils.import_utils import _LazyModule
    except ImportError:  # pragma: no cover - another transformers layout: nothing to speed up
        return False
    if "__dir__" not in vars(_LazyModule):
        return False
    _LazyModule.__dir__ = lazy_dir  # type: ignore[method-assign]
    return True
