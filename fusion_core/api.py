"""The library's convenient forms: plan here, then run the plan.

Inside the engine, loading (:mod:`fusion_core.run.loading`), checking
(:mod:`fusion_core.run.checks`) and export take a :class:`~fusion_core.plan.fusion_plan.FusionPlan`,
the value a user previewed; nothing downstream plans again. These functions are for a
script that starts from a model: they accept a plan as it is, or plan a source with
``fusion_config`` once (:func:`~fusion_core.plan.fusion_plan.as_plan`) and hand that plan
to the stage. ``fusion_core.load``, ``fusion_core.load_plain`` and ``fusion_core.check``
are these.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .boundary.options import CheckOptions, OptionError, parse_size
from .plan.fusion_plan import as_plan
from .progress import drive

if TYPE_CHECKING:
    import torch
    from torch import nn

    from .model.sources import ModelSource
    from .plan.fusion_plan import FusionConfig, FusionPlan, Inspection
    from .progress import CancelToken, ProgressCallback
    from .run.checks import CheckResult
    from .run.loading import LoadResult


__all__ = ["check", "load", "load_plain"]


def load(
    source: FusionPlan | Inspection | ModelSource | str | os.PathLike[str],
    fusion_config: FusionConfig | None = None,
    *,
    dtype: str | torch.dtype = "float32",
    device: str = "cpu",
    max_memory: int | str | None = None,
    trust_remote_code: bool = False,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
) -> LoadResult:
    """Load ``source`` fused, with an optional progress callback and cancel token.

    The convenient form of :func:`~fusion_core.run.loading.iter_load`: ``source`` is a
    :class:`FusionPlan`, or an opened model, a resolved :class:`ModelSource` or a model spec
    (with weights) planned here with ``fusion_config`` (``None``: the config's own
    ``fusion_config``, else nothing is fused); ``trust_remote_code``: see
    :func:`fusion_core.model.sources.resolve`.

    Raises:
        Cancelled: ``cancel`` was set before loading finished (nothing is left patched).
        UsageError: a bad ``fusion_config`` or dtype.
        LoadError, CheckpointError, ModelSourceError: see :func:`~fusion_core.run.loading.iter_load`.
    """
    from .run.loading import iter_load

    budget = None if max_memory is None else parse_size(max_memory, "max_memory")
    plan = as_plan(source, fusion_config, trust_remote_code=trust_remote_code)
    return drive(iter_load(plan, dtype=dtype, device=device, max_memory=budget), progress, cancel)


def load_plain(
    source: FusionPlan | Inspection | ModelSource | str | os.PathLike[str],
    *,
    dtype: str | torch.dtype = "float32",
    device: str = "cpu",
    trust_remote_code: bool = False,
) -> nn.Module:
    """The original, unfused model of ``source`` (the convenient form of
    :func:`~fusion_core.run.loading.load_original`).

    ``source`` is a plan (its model and transforms are used), or an opened model, a
    resolved source or a spec, planned here with the config's own ``fusion_config`` (so a
    fused-layout export loads back in the original layout).

    Raises:
        LoadError, CheckpointError, ModelSourceError, UsageError: see
        :func:`~fusion_core.run.loading.iter_load`.
    """
    from .run.loading import load_original

    return load_original(as_plan(source, trust_remote_code=trust_remote_code), dtype=dtype, device=device)


def check(
    source: FusionPlan | Inspection | ModelSource | str | os.PathLike[str],
    fusion_config: FusionConfig | None = None,
    *,
    options: CheckOptions | None = None,
    trust_remote_code: bool = False,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
    **settings: Any,
) -> CheckResult:
    """Check ``source`` fused against the original: the convenient form of
    :func:`~fusion_core.run.checks.iter_check`.

    Args:
        source: a :class:`FusionPlan`, or an opened model, a resolved source or a model
            spec (with weights), planned here with ``fusion_config`` (``None``: the
            config's own ``fusion_config``).
        fusion_config: the families, when ``source`` is not a plan.
        options: a :class:`CheckOptions`; or, instead, its flat ``settings``
            (:meth:`CheckOptions.build`): ``dtype``, ``device``, ``seed``, ``batch``,
            ``seq_len``, ``image_size``, ``frames``, ``repeats``, ``time_budget``,
            ``upstream``, ``threads``, ``image``, ``images``, ``video``, ``audio``, ``prompt``,
            ``modules_only``.
        trust_remote_code: see :func:`fusion_core.model.sources.resolve` (specs only).
        progress, cancel: a progress callback and a cancel token.

    Raises:
        OptionError: a bad setting (named by its option), or options and settings both given.
        The errors of :func:`~fusion_core.run.checks.iter_check`.
    """
    from .run.checks import iter_check

    if options is not None and settings:
        raise OptionError(sorted(settings)[0], "given next to an options object")
    opts = options if options is not None else CheckOptions.build(**settings)
    plan = as_plan(source, fusion_config, trust_remote_code=trust_remote_code)
    return drive(iter_check(plan, opts), progress, cancel)
