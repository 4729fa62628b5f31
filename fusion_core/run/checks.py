"""Inference checks: fused vs original, per fused module and end to end, error and speed.

The original model (:func:`fusion_core.run.loading.load_plain`) runs on seeded synthetic
inputs of the right kind (:mod:`fusion_core.run.inputs`); forward pre-hooks capture the real
inputs of every module to be fused. Each fused module of the fused model
(:func:`fusion_core.run.loading.load`) then runs on exactly those inputs next to its original,
and the whole fused model runs on the same synthetic inputs. Errors are judged against a
tolerance by dtype; timings are medians over repeated, interleaved runs.

Upstream parity (transformers' own ``fusion_config``) is reported alongside, computed in a
separate process (:mod:`fusion_core.run.upstream`); it is information, never a failure of ours.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from ..progress import CancelToken, Progress, ProgressCallback, drive
from .capture import capture_and_run, shapes_of
from .loading import iter_load, load_plain, torch_dtype
from .results import (
    TOLERANCES,
    CheckResult,
    Comparison,
    EndToEndCheck,
    ModuleCheck,
    Timing,
    compare,
    main_output,
    tensors_of,
)

__all__ = [
    "TOLERANCES",
    "CheckResult",
    "Comparison",
    "EndToEndCheck",
    "ModuleCheck",
    "Timing",
    "check",
    "compare",
    "iter_check",
    "main_output",
    "tensors_of",
]

if TYPE_CHECKING:
    from torch import nn

    from ..model.sources import ModelSource
    from ..plan.fusion_plan import FusionConfig, FusionPlan, Inspection


def median_ms(fn: Callable[[], Any], repeats: int, sync: Callable[[], None]) -> float:
    times = []
    for _ in range(max(1, repeats)):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _timing(run_a: Callable[[], Any], run_b: Callable[[], Any], repeats: int, sync: Callable[[], None]) -> Timing:
    # one warm-up each, then interleaved blocks so that drift hits both sides alike
    run_a(), run_b()
    a, b = [], []
    for _ in range(max(1, repeats)):
        a.append(median_ms(run_a, 1, sync))
        b.append(median_ms(run_b, 1, sync))
    return Timing(statistics.median(a), statistics.median(b), max(1, repeats))


def _sync_for(device: str) -> Callable[[], None]:
    import torch

    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.synchronize
    return lambda: None


def iter_check(
    source: FusionPlan | Inspection | ModelSource | str | os.PathLike[str],
    fusion_config: FusionConfig | None = None,
    *,
    dtype: str = "float32",
    repeats: int = 5,
    upstream: bool = True,
    device: str = "cpu",
    seed: int = 0,
    trust_remote_code: bool = False,
) -> Generator[Progress, None, CheckResult]:
    """Check ``source`` fused with ``fusion_config`` against the original, as a progress generator.

    Args:
        source: the :class:`FusionPlan` to check, or an opened model, source or spec with weights.
        fusion_config: families to check when ``source`` is not a plan (``None``: the config's own ``fusion_config``).
        dtype: ``float32``, ``bfloat16`` or ``float16``; sets the tolerance (see :data:`TOLERANCES`).
        repeats: timed runs per side (medians are reported).
        upstream: also load through transformers' own fusion in a separate process.
        device: where both models run.
        seed: seed of the synthetic inputs.
        trust_remote_code: see :func:`fusion_core.model.sources.resolve`.

    Returns:
        A :class:`CheckResult`; ``result.passed`` says whether every check of ours passed.

    Raises:
        CheckError: no synthetic input fits the model.
        LoadError, CheckpointError, ModelSourceError, UsageError: from loading.
    """
    from ..plan.fusion_plan import as_plan
    from .loading import require_weights

    t0 = time.perf_counter()
    dtype_name = str(torch_dtype(dtype)).removeprefix("torch.")
    yield Progress(0, 6, "opening model")
    # one meta model and one plan for the whole check: the fused load, the original and upstream use them
    plan = as_plan(source, fusion_config, trust_remote_code=trust_remote_code)
    src = plan.source
    require_weights(src)
    atol, rtol = TOLERANCES[dtype_name]
    result = CheckResult(
        model=src.name,
        model_class=src.model_class.__name__,
        fusion_config=plan.fusion_config,
        dtype=dtype_name,
        device=str(device),
        repeats=repeats,
        seed=seed,
        tolerance={"atol": atol, "rtol": rtol, "rule": "max|fused-original| <= atol + rtol * max|original|"},
        messages=list(plan.messages),
    )
    if not plan.matched_paths:
        result.nothing_to_fuse = True
        result.messages.append(f"nothing to fuse in {src.model_class.__name__}: no check to run")
        result.seconds = time.perf_counter() - t0
        return result
    yield Progress(1, 6, "loading the fused model")
    loaded = yield from _relay(iter_load(plan, dtype=dtype_name, device=device), 1, 6)
    result.load = loaded.report()
    yield Progress(2, 6, "loading the original model")
    original = load_plain(plan.inspection, dtype=dtype_name, device=device)
    paths = list(loaded.fused_modules)
    yield Progress(3, 6, "running the original model on synthetic inputs")
    inputs, captured, out_original = capture_and_run(original, paths, seed, device)
    sync = _sync_for(device)
    fused = loaded.model
    for path in paths:
        yield Progress(4, 6, f"checking {path}")
        result.modules.append(_check_module(path, plan, original, fused, captured.get(path), dtype_name, repeats, sync))
    yield Progress(5, 6, "end to end")
    result.end_to_end = _check_end_to_end(inputs, original, fused, out_original, dtype_name, repeats, sync)
    if upstream:
        yield Progress(5, 6, "upstream parity (separate process)")
        from .upstream import run_upstream

        result.upstream = run_upstream(src, plan, dtype_name, seed, result)
    result.seconds = time.perf_counter() - t0
    yield Progress(6, 6, "checked")
    return result


def _relay(gen: Generator[Progress, None, Any], stage: int, total: int) -> Generator[Progress, None, Any]:
    """Re-yield a sub-operation's steps as messages of one stage of this one."""
    while True:
        try:
            step = next(gen)
        except StopIteration as stop:
            return stop.value
        yield Progress(stage, total, step.message)


def _check_module(
    path: str,
    plan: Any,
    original: nn.Module,
    fused: nn.Module,
    inputs: tuple[tuple, dict] | None,
    dtype: str,
    repeats: int,
    sync: Callable[[], None],
) -> ModuleCheck:
    import torch

    mod_o, mod_f = original.get_submodule(path), fused.get_submodule(path)
    check = ModuleCheck(path, plan.matched_paths[path], type(mod_o).__name__, type(mod_f).__name__)
    if inputs is None:
        check.error = "not called when the model ran on the synthetic inputs: not verified"
        return check
    args, kwargs = inputs
    check.input_shapes = shapes_of(args, kwargs)
    with torch.inference_mode():
        out_o = mod_o(*args, **kwargs)
        out_f = mod_f(*args, **kwargs)
        check.comparison = compare(out_o, out_f, dtype)
        check.timing = _timing(lambda: mod_o(*args, **kwargs), lambda: mod_f(*args, **kwargs), repeats, sync)
    return check


def _check_end_to_end(
    inputs: Any, original: nn.Module, fused: nn.Module, out_original: Any, dtype: str, repeats: int, sync: Callable
) -> EndToEndCheck:
    import torch

    entry_o = original.get_submodule(inputs.entry) if inputs.entry else original
    entry_f = fused.get_submodule(inputs.entry) if inputs.entry else fused
    with torch.inference_mode():
        out_fused = entry_f(**inputs.kwargs)
        name, main_o = main_output(out_original)
        _, main_f = main_output(out_fused)
        comparison = compare(main_o, main_f, dtype)
        timing = _timing(lambda: entry_o(**inputs.kwargs), lambda: entry_f(**inputs.kwargs), repeats, sync)
    notes = list(inputs.notes)
    if inputs.entry:
        notes.append(f"{type(original).__name__} has no forward of its own; ran its submodule {inputs.entry}")
    return EndToEndCheck(inputs.entry, name, inputs.kind, inputs.shapes(), comparison, timing, notes)


def check(
    source: FusionPlan | Inspection | ModelSource | str | os.PathLike[str],
    fusion_config: FusionConfig | None = None,
    *,
    dtype: str = "float32",
    repeats: int = 5,
    upstream: bool = True,
    device: str = "cpu",
    seed: int = 0,
    trust_remote_code: bool = False,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
) -> CheckResult:
    """Run :func:`iter_check` to completion (with an optional progress callback and cancel token)."""
    gen = iter_check(
        source,
        fusion_config,
        dtype=dtype,
        repeats=repeats,
        upstream=upstream,
        device=device,
        seed=seed,
        trust_remote_code=trust_remote_code,
    )
    return drive(gen, progress, cancel)
