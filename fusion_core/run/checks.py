"""Inference checks: fused vs original, per fused module and end to end, error and speed.

The original model (:func:`fusion_core.run.loading.load_plain`) runs on seeded inputs of
the right kind at the requested :class:`~fusion_core.families.base.Workload`
(:mod:`fusion_core.run.inputs`, or the checkpoint's own processor for ``image=``/``prompt=``);
forward pre-hooks capture the real inputs of every module to be fused. Each fused module
then runs on exactly those inputs next to its original ("verified by end-to-end inputs").
A module the end-to-end run does not reach (text-only inputs of a VL model, inputs the
model refuses) runs on inputs its family makes for it ("module sample inputs",
:meth:`~fusion_core.families.base.FusionSpec.sample_inputs`); one for which none can be
made carries that error: a check that passes never leaves a fused module unverified.

``modules_only`` (or a model too large for memory) materializes only the matched modules
from the checkpoint (:mod:`fusion_core.run.modules`) and checks them on sample inputs.

Timings are paired, interleaved rounds with a 95% interval (:mod:`fusion_core.run.timing`);
each module's share of the original end-to-end time gives a projected end-to-end speedup
and one verdict line per family (:mod:`fusion_core.run.verdicts`). Upstream parity
(transformers' own ``fusion_config``) is computed in a separate, isolated process
(:mod:`fusion_core.run.upstream`); it is information, never a failure of ours.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CheckError, UsageError
from ..progress import CancelToken, Progress, ProgressCallback, drive
from .capture import capture_and_run, shapes_of
from .loading import iter_load, load_plain, torch_dtype, unpolluted, upstream_fusion_suspended
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
from .timing import measure

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

    from ..families.base import Workload
    from ..model.sources import ModelSource
    from ..plan.fusion_plan import FusionConfig, FusionPlan, Inspection

BY_END_TO_END = "end-to-end inputs"
BY_SAMPLES = "module sample inputs"


def check_device(device: str) -> str:
    """``device`` if torch can use it here.

    Raises:
        UsageError: an unknown device, or one this machine does not have (one line).
    """
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as e:
        raise UsageError(f"--device {device!r}: not a torch device (cpu, cuda, cuda:N, mps)") from e
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {device}: CUDA is not available on this machine")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UsageError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"--device {device}: MPS is not available on this machine")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise UsageError(f"--device {device}: only cpu, cuda and mps are supported")
    return str(dev)


def available_devices() -> list[str]:
    """cpu, plus cuda / mps where this machine has them (what ``--device`` accepts here)."""
    import torch

    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += ["cuda"] + [f"cuda:{i}" for i in range(1, torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        devices.append("mps")
    return devices


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
    image_size: int | None = None,
    frames: int | None = None,
    seq_len: int | None = None,
    batch: int = 1,
    threads: int | None = None,
    image: str | os.PathLike[str] | None = None,
    prompt: str | None = None,
    modules_only: bool = False,
    time_budget: float = 2.0,
) -> Generator[Progress, None, CheckResult]:
    """Check ``source`` fused with ``fusion_config`` against the original, as a progress generator.

    Args:
        source: the :class:`FusionPlan` to check, or an opened model, source or spec with weights.
        fusion_config: families to check when ``source`` is not a plan (``None``: the config's own ``fusion_config``).
        dtype: ``float32``, ``bfloat16`` or ``float16``; sets the tolerance (see :data:`TOLERANCES`).
        repeats: timed rounds always run per timing (more follow until the interval is tight).
        upstream: also load through transformers' own fusion in a separate process.
        device: where both models run (``cpu``, ``cuda``, ``cuda:N``, ``mps``).
        seed: seed of the synthetic inputs.
        trust_remote_code: see :func:`fusion_core.model.sources.resolve`.
        image_size: image side in pixels (``None``: the model's processor or config size).
        frames: video frames (``None``: the model's).
        seq_len: text tokens (``None``: 128, within the model's positions).
        batch: rows per run.
        threads: CPU threads for torch during the check (``None``: torch's default).
        image: an image file for real inputs, through the checkpoint's own processor files.
        prompt: text for real inputs, through the checkpoint's own tokenizer files.
        modules_only: check only the matched modules, materialized from the checkpoint by key.
        time_budget: seconds each timing may spend tightening its interval.

    Returns:
        A :class:`CheckResult`; ``result.passed`` says whether every check of ours passed.

    Raises:
        UsageError: a bad workload value or device.
        LoadError, CheckpointError, ModelSourceError: from loading.
    """
    import torch

    from ..families.base import Workload

    for name, value in (("--batch", batch), ("--image-size", image_size), ("--frames", frames), ("--seq-len", seq_len)):
        if value is not None and value < 1:
            raise UsageError(f"check: {name} must be at least 1")
    if threads is not None and threads < 1:
        raise UsageError("check: --threads must be at least 1")
    if image is not None and not Path(image).is_file():
        raise UsageError(f"check: --image {image}: no such file")
    device = check_device(device)
    dtype_name = str(torch_dtype(dtype)).removeprefix("torch.")
    workload = Workload(batch, seq_len, image_size, frames, dtype_name, device, seed)
    saved_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        with upstream_fusion_suspended() as polluted:
            result = yield from _run(
                source, fusion_config, workload, repeats, upstream, trust_remote_code, image, prompt,
                modules_only, time_budget,
            )  # fmt: skip
        result.messages[:0] = polluted
        result.workload["threads"] = torch.get_num_threads()
    finally:
        torch.set_num_threads(saved_threads)
    return result


def _run(
    source: Any,
    fusion_config: Any,
    workload: Workload,
    repeats: int,
    upstream: bool,
    trust_remote_code: bool,
    image: Any,
    prompt: str | None,
    modules_only: bool,
    budget: float,
) -> Generator[Progress, None, CheckResult]:
    from dataclasses import asdict

    from ..plan.fusion_plan import as_plan
    from .loading import require_weights
    from .modules import fits_in_memory
    from .verdicts import family_verdicts, project

    t0 = time.perf_counter()
    dtype, device = workload.dtype, workload.device
    yield Progress(0, 6, "opening model")
    # one meta model and one plan for the whole check: the fused load, the original and upstream use them
    source, fusion_config = unpolluted(source, fusion_config)
    plan = as_plan(source, fusion_config, trust_remote_code=trust_remote_code)
    src = plan.source
    require_weights(src)
    atol, rtol = TOLERANCES[dtype]
    result = CheckResult(
        model=src.name,
        model_class=src.model_class.__name__,
        fusion_config=plan.fusion_config,
        dtype=dtype,
        device=device,
        repeats=repeats,
        seed=workload.seed,
        tolerance={"atol": atol, "rtol": rtol, "rule": "max|fused-original| <= atol + rtol * max|original|"},
        messages=list(plan.messages),
        workload={k: v for k, v in asdict(workload).items() if k not in ("dtype", "device")},
    )
    if not plan.matched_paths:
        result.nothing_to_fuse = True
        result.messages.append(f"nothing to fuse in {src.model_class.__name__}: no check to run")
        result.seconds = time.perf_counter() - t0
        return result
    timing = {"min_rounds": repeats, "budget_s": budget, "device": device, "seed": workload.seed}
    too_big = "" if modules_only else fits_in_memory(plan, dtype, device)
    if modules_only or too_big:
        result.modules_only = True
        reason = "--modules-only" if modules_only else too_big
        result.end_to_end = EndToEndCheck("", "", "", {}, None, None, skipped=f"not run: {reason}")
        for i, path in enumerate(plan.matched_paths):
            yield Progress(2, 6, f"checking {path} ({i + 1}/{len(plan.matched_paths)}, alone)")
            result.modules.append(_module_alone(plan, path, workload, timing))
    else:
        yield Progress(1, 6, "loading the fused model")
        loaded = yield from _relay(iter_load(plan, dtype=dtype, device=device), 1, 6)
        result.load = loaded.report()
        yield Progress(2, 6, "loading the original model")
        original = load_plain(plan.inspection, dtype=dtype, device=device)
        paths = list(loaded.fused_modules)
        yield Progress(3, 6, "running the original model end to end")
        inputs, captured, out_original, skipped = _end_to_end_inputs(original, paths, workload, src, image, prompt)
        for i, path in enumerate(paths):
            yield Progress(4, 6, f"checking {path} ({i + 1}/{len(paths)})")
            mod_o, mod_f = original.get_submodule(path), loaded.model.get_submodule(path)
            result.modules.append(
                _check_module(path, plan, mod_o, mod_f, captured.get(path), workload, timing, bool(skipped))
            )
        yield Progress(5, 6, "end to end")
        if skipped:
            result.end_to_end = EndToEndCheck("", "", "", {}, None, None, skipped=f"not run: {skipped}")
        else:
            result.end_to_end = _check_end_to_end(inputs, original, loaded.model, out_original, dtype, timing)
            _shares(result, original, inputs, device)
        del original, loaded
    project(result)
    result.family_verdicts = family_verdicts(result)
    noisy = [m.path for m in result.modules if m.timing is not None and m.timing.noisy]
    e = result.end_to_end
    if e is not None and e.timing is not None and e.timing.noisy:
        noisy.append("end to end")
    if noisy:
        result.warnings.append(
            f"too noisy to tell: the 95% interval stayed wider than ±25% for {', '.join(noisy)} "
            "(a busy machine? raise --repeats, use --threads, or close other programs)"
        )
    if upstream:
        yield Progress(5, 6, "upstream parity (separate process)")
        from .upstream import run_upstream

        result.upstream = run_upstream(src, plan, dtype, workload.seed, result, workload)
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


def _end_to_end_inputs(
    original: nn.Module, paths: list[str], workload: Workload, src: Any, image: Any, prompt: str | None
) -> tuple[Any, dict[str, tuple[tuple, dict]], Any, str]:
    """(inputs, captured module inputs, original output, "" or why end to end cannot run)."""
    candidates = None
    notes: list[str] = []
    if image is not None or prompt is not None:
        from .real_inputs import processor_inputs

        candidates, notes = processor_inputs(original, src, image, prompt, workload)
    try:
        inputs, captured, out = capture_and_run(
            original, paths, workload.seed, workload.device, workload, candidates=candidates
        )
    except CheckError as e:
        if candidates is None:
            return None, {}, None, str(e)
        notes.append(f"the processor's inputs do not run ({e}); synthetic inputs instead")
        try:
            inputs, captured, out = capture_and_run(original, paths, workload.seed, workload.device, workload)
        except CheckError as e2:
            return None, {}, None, str(e2)
    inputs.notes[:0] = notes
    return inputs, captured, out, ""


def _check_module(
    path: str,
    plan: Any,
    mod_o: nn.Module,
    mod_f: nn.Module,
    captured: tuple[tuple, dict] | None,
    workload: Workload,
    timing: dict[str, Any],
    end_to_end_failed: bool,
) -> ModuleCheck:
    family = plan.matched_paths[path]
    check = ModuleCheck(path, family, type(mod_o).__name__, type(mod_f).__name__)
    if captured is not None:
        check.verified_by = BY_END_TO_END
        args, kwargs = captured
    else:
        args, kwargs = _samples(check, mod_o, plan, workload, end_to_end_failed)
        if check.error:
            return check
        check.verified_by = BY_SAMPLES
    _compare_and_time(check, mod_o, mod_f, args, kwargs, workload.dtype, timing)
    return check


def _samples(
    check: ModuleCheck, module: nn.Module, plan: Any, workload: Workload, end_to_end_failed: bool
) -> tuple[tuple, dict]:
    from ..families.registry import get_family

    why = "end to end did not run" if end_to_end_failed else "the end-to-end run did not call it"
    try:
        return get_family(check.family).sample_inputs(module, plan.source.config, workload)
    except (NotImplementedError, ValueError) as e:
        check.error = f"not verified: {why}, and no sample inputs: {e}"
        return (), {}


def _compare_and_time(
    check: ModuleCheck, mod_o: nn.Module, mod_f: nn.Module, args: tuple, kwargs: dict, dtype: str, timing: dict
) -> None:
    import torch

    check.input_shapes = shapes_of(args, kwargs)
    try:
        with torch.inference_mode():
            check.comparison = compare(mod_o(*args, **kwargs), mod_f(*args, **kwargs), dtype)
            check.timing = measure(lambda: mod_o(*args, **kwargs), lambda: mod_f(*args, **kwargs), **timing)
    except Exception as e:  # a fused module that fails where its original runs is a finding, not a crash
        check.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"


def _module_alone(plan: Any, path: str, workload: Workload, timing: dict) -> ModuleCheck:
    from ..families.registry import get_family
    from .modules import materialize

    family = plan.matched_paths[path]
    spec = get_family(family)
    try:
        mod_o = materialize(plan, path, workload.dtype, workload.device)
    except CheckError as e:
        meta = plan.inspection.model.get_submodule(path)
        return ModuleCheck(path, family, type(meta).__name__, "", error=f"not verified: {e}")
    mod_f = copy.deepcopy(mod_o)
    spec.fuse_module(mod_f)
    check = ModuleCheck(path, family, type(mod_o).__name__, type(mod_f).__name__)
    args, kwargs = _samples(check, mod_o, plan, workload, True)
    if not check.error:
        check.verified_by = BY_SAMPLES
        _compare_and_time(check, mod_o, mod_f, args, kwargs, workload.dtype, timing)
    return check


def _check_end_to_end(
    inputs: Any, original: nn.Module, fused: nn.Module, out_original: Any, dtype: str, timing: dict
) -> EndToEndCheck:
    import torch

    entry_o = original.get_submodule(inputs.entry) if inputs.entry else original
    entry_f = fused.get_submodule(inputs.entry) if inputs.entry else fused
    with torch.inference_mode():
        out_fused = entry_f(**inputs.kwargs)
        name, main_o = main_output(out_original)
        _, main_f = main_output(out_fused)
        comparison = compare(main_o, main_f, dtype)
        measured = measure(lambda: entry_o(**inputs.kwargs), lambda: entry_f(**inputs.kwargs), **timing)
    notes = list(inputs.notes)
    if inputs.entry:
        notes.append(f"{type(original).__name__} has no forward of its own; ran its submodule {inputs.entry}")
    return EndToEndCheck(inputs.entry, name, inputs.kind, inputs.shapes(), comparison, measured, notes)


def _shares(result: CheckResult, original: nn.Module, inputs: Any, device: str, rounds: int = 3) -> None:
    """Each fused module's share of the original end-to-end time, timed inside that forward.

    Hooks around each module the end-to-end run reaches add up its time within the same
    forward whose total they are divided by (median of ``rounds`` forwards), so shares are
    consistent with each other and sum to at most 1. A module verified on sample inputs
    has no share in a forward that never reached it (``None``).
    """
    import statistics

    import torch

    from .timing import sync_for

    sync = sync_for(device)
    paths = [m.path for m in result.modules if m.verified_by == BY_END_TO_END]
    if not paths:
        return
    spent: dict[str, float] = {}
    started: dict[str, float] = {}

    def pre(path: str) -> Any:
        def hook(*_a: Any) -> None:
            sync()
            started[path] = time.perf_counter()

        return hook

    def post(path: str) -> Any:
        def hook(*_a: Any) -> None:
            sync()
            spent[path] = spent.get(path, 0.0) + time.perf_counter() - started.pop(path, time.perf_counter())

        return hook

    handles = []
    for path in paths:
        module = original.get_submodule(path)
        handles += [module.register_forward_pre_hook(pre(path)), module.register_forward_hook(post(path))]
    entry = original.get_submodule(inputs.entry) if inputs.entry else original
    per_path: dict[str, list[float]] = {p: [] for p in paths}
    try:
        with torch.inference_mode():
            for _ in range(rounds):
                spent.clear()
                sync()
                t0 = time.perf_counter()
                entry(**inputs.kwargs)
                sync()
                total = time.perf_counter() - t0
                for p in paths:
                    per_path[p].append(spent.get(p, 0.0) / total if total > 0 else 0.0)
    finally:
        for h in handles:
            h.remove()
    for m in result.modules:
        if m.path in per_path:
            m.share_of_end_to_end = min(1.0, statistics.median(per_path[m.path]))


def check(
    source: FusionPlan | Inspection | ModelSource | str | os.PathLike[str],
    fusion_config: FusionConfig | None = None,
    *,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
    **options: Any,
) -> CheckResult:
    """Run :func:`iter_check` to completion (with an optional progress callback and cancel token).

    ``options`` are :func:`iter_check`'s keyword arguments (dtype, repeats, upstream, device,
    seed, image_size, frames, seq_len, batch, threads, image, prompt, modules_only...).
    """
    return drive(iter_check(source, fusion_config, **options), progress, cancel)
