"""Inference checks: fused vs original, per fused module and end to end, error and speed.

The original model (:func:`fusion_core.run.loading.load_original`, on the same plan) runs
once per modality it takes (image+text, video+text, audio+text: :mod:`fusion_core.run.modal`),
the media (the user's files, else seeded synthetic ones) through the model's own processor
(:mod:`fusion_core.run.processors`), else on inputs made from the config
(:mod:`fusion_core.run.inputs`), at the requested :class:`~fusion_core.boundary.options.Workload`;
forward pre-hooks capture the real inputs of every module to be fused (from the first run
that reaches it). Each fused module
then runs on exactly those inputs next to its original ("verified by end-to-end inputs").
A module the end-to-end run does not reach (text-only inputs of a VL model, inputs the
model refuses) runs on inputs its family makes for it ("module sample inputs",
:meth:`~fusion_core.families.base.FusionSpec.sample_inputs`, the family as the plan
configured it); one for which none can be made carries that error: a check that passes
never leaves a fused module unverified.

``modules_only`` (or a model too large for memory) materializes only the matched modules
from the checkpoint (:mod:`fusion_core.run.modules`) and checks them on sample inputs.

Timings are paired, interleaved rounds with a 95% interval (:mod:`fusion_core.run.timing`);
each module's share of the original end-to-end time gives a projected end-to-end speedup
and one verdict line per family (:mod:`fusion_core.run.verdicts`). Upstream parity
(transformers' own ``fusion_config``) is computed in a separate, isolated process
(:mod:`fusion_core.run.upstream`); it is information, never a failure of ours.
"""

from __future__ import annotations

import contextlib
import copy
import os
import subprocess
import time
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..boundary.options import CheckOptions, OptionError, TimingOptions, Workload
from ..errors import Cancelled, CheckError
from ..model.upstream_state import upstream_fusion_suspended
from ..plan.fusion_plan import unpolluted
from ..progress import Progress
from .capture import FORWARD_SEED, fresh, shapes_of
from .loading import load_original
from .machine import this_machine
from .results import (
    FLOOR_FACTOR,
    MIN_VERDICT_ROUNDS,
    MODEL_ENTRY,
    CheckedWorkload,
    CheckResult,
    Comparison,
    CompiledRun,
    EndToEndCheck,
    FusedModule,
    Generation,
    LoadReport,
    ModuleCheck,
    Timing,
    Tolerance,
    compare,
    main_output,
    tensors_of,
)
from .timing import measure

__all__ = [
    "CheckResult",
    "Comparison",
    "EndToEndCheck",
    "ModuleCheck",
    "Timing",
    "compare",
    "iter_check",
    "main_output",
    "tensors_of",
]

if TYPE_CHECKING:
    from torch import nn

    from ..model.sources import ModelSource
    from ..plan.fusion_plan import FusionPlan
    from .offload import MemoryPlan

BY_END_TO_END = "end-to-end inputs"
BY_SAMPLES = "module sample inputs"


def check_device(device: str) -> str:
    """``device`` if torch can use it here.

    Raises:
        OptionError: an unknown device, or one this machine does not have (option ``device``).
    """
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as e:
        raise OptionError("device", f"{device!r:.40}: not a torch device (cpu, cuda, cuda:N, mps)") from e
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise OptionError("device", f"{device}: CUDA is not available on this machine")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise OptionError("device", f"{device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise OptionError("device", f"{device}: MPS is not available on this machine")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise OptionError("device", f"{device}: only cpu, cuda and mps are supported")
    return str(dev)


def available_devices() -> list[str]:
    """cpu, plus cuda / mps where this machine has them (the devices a check accepts here)."""
    import torch

    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += ["cuda"] + [f"cuda:{i}" for i in range(1, torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        devices.append("mps")
    return devices


def iter_check(plan: FusionPlan, options: CheckOptions) -> Generator[Progress, None, CheckResult]:
    """Check ``plan`` (fused) against the original model, as a progress generator.

    Args:
        plan: the :class:`FusionPlan` to check (what the user previewed; a model with
            weights). :func:`fusion_core.api.check` builds one from a source and a ``fusion_config``.
        options: the workload (dtype, device, seed, sizes), the timing, upstream parity,
            threads, real inputs (``image``, ``prompt``) and ``modules_only``.

    Returns:
        A :class:`CheckResult`; ``result.passed`` says whether every check of ours passed.

    Raises:
        OptionError: a device this machine does not have, or an image file that is not there.
        LoadError, CheckpointError, ModelSourceError: from loading.
    """
    import torch

    device = check_device(options.workload.device)
    if options.compile:
        from .compiled import require_backend

        require_backend(options.compile)
    if device != options.workload.device:
        from dataclasses import replace

        options = replace(options, workload=replace(options.workload, device=device))
    # a plan made while transformers' own fusion had patched classes: rebuilt first (a new
    # plan, said in the result), before the patches are suspended for the check
    plan, rebuilt = unpolluted(plan)
    saved_threads = torch.get_num_threads()
    if options.threads:
        torch.set_num_threads(options.threads)
    try:
        with upstream_fusion_suspended() as polluted:
            result = yield from _run(plan, options, rebuilt)
        result.messages[:0] = polluted
        result.workload = CheckedWorkload.of(
            options.workload,
            torch.get_num_threads(),
            torch_version=torch.__version__,
            load_before=result.workload.load_before,
            load_after=result.workload.load_after,
            time_budget=options.timing.budget_s,
            max_memory=options.max_memory,
            generate=options.generate,
            cpu=this_machine().brief(),
        )
    finally:
        torch.set_num_threads(saved_threads)
    return result


def _run(plan: FusionPlan, options: CheckOptions, rebuilt: str) -> Generator[Progress, None, CheckResult]:
    from .loading import require_weights

    t0 = time.perf_counter()
    workload = options.workload
    dtype, device = workload.dtype, workload.device
    yield Progress(0, 6, "opening model")
    # one meta model and one plan for the whole check: the fused load, the original and upstream use them
    src = plan.source
    require_weights(src)
    result = CheckResult(
        model=src.name,
        model_class=src.model_class.__name__,
        fusion_config=plan.fusion_config,
        dtype=dtype,
        device=device,
        repeats=options.timing.min_rounds,
        seed=workload.seed,
        tolerance=Tolerance.of(dtype),
        messages=[rebuilt, *plan.messages] if rebuilt else list(plan.messages),
        workload=CheckedWorkload.of(workload),
    )
    if not plan.matched_paths:
        result.nothing_to_fuse = True
        families = ", ".join(plan.fusion_config)
        result.messages.append(  # like pytest's "no tests ran": not a pass
            f"nothing to check: no module of {src.model_class.__name__} matches {families}"
            if families
            else "nothing to check: no family enabled"
        )
        result.seconds = time.perf_counter() - t0
        return result
    child = None
    room = _upstream_room(plan, workload) if options.upstream else ""
    if room == "beside":  # asked at once: its imports and its run overlap our loading
        from .upstream import start_upstream

        # None when transformers knows none of the plan's families
        child = start_upstream(plan, workload)
    try:
        yield from _checks(plan, options, result, child, room)
    finally:
        if child is not None:
            child.close()
    result.seconds = time.perf_counter() - t0
    yield Progress(6, 6, "checked")
    return result


def _upstream_room(plan: FusionPlan, workload: Workload) -> str:
    """When upstream parity can run: ``"beside"`` ours (two copies of the weights fit),
    ``"after"`` ours is freed (one fits), else why it is skipped. Its child holds one model
    at a time; it never offloads."""
    from .modules import available_bytes, model_bytes
    from .offload import HEADROOM, gib

    if not str(workload.device).startswith("cpu"):
        return "beside"
    need = model_bytes(plan, workload.dtype) * HEADROOM
    have = available_bytes()
    if have is None or 2 * need <= have:
        return "beside"
    if need <= have:
        return "after"
    return f"skipped: transformers' own fused load needs the whole model in memory ({gib(need)}), {gib(have)} available"


def _checks(
    plan: FusionPlan, options: CheckOptions, result: CheckResult, child: Any, room: str = "beside"
) -> Generator[Progress, None, None]:
    """The checks of :func:`_run` past the plan: modules, end to end, verdicts, upstream (``child``)."""
    from dataclasses import replace

    from .timing import load_average
    from .upstream import TIMEOUT_S
    from .verdicts import family_verdicts, project

    workload, timing = options.workload, options.timing

    def settle() -> None:  # timings never share the CPU with the child: its answer comes first
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # run_upstream reports it
                child.finish(TIMEOUT_S)
        result.workload = replace(result.workload, load_before=load_average())

    memory = None if options.modules_only else _memory(plan, options, result)
    too_big = "" if memory is None or not memory.offloaded else _cannot_offload(plan)
    if options.modules_only or too_big:
        result.modules_only = True
        reason = "modules only (each fused module alone, read from the checkpoint)" if options.modules_only else too_big
        if too_big and _user_files(options):
            raise CheckError(f"cannot run the model on {_user_files(options)}: {too_big}; nothing was checked")
        result.end_to_end = EndToEndCheck("", "", "", {}, None, None, skipped=f"not run: {reason}")
        settle()
        for i, path in enumerate(plan.matched_paths):
            yield Progress(2, 6, f"checking {path} ({i + 1}/{len(plan.matched_paths)}, alone)")
            result.modules.append(_module_alone(plan, path, workload, timing))
    else:
        assert memory is not None
        yield from _one_copy(plan, options, result, memory, settle)
    import torch

    result.workload = replace(result.workload, load_after=load_average(), threads=torch.get_num_threads())
    busy = _busy(result.workload)
    e = result.end_to_end
    if busy:  # no verdict from rounds that shared the CPUs with other work
        result.warnings.append(f"{busy}: no speed verdict (close other programs, or use fewer threads)")
        compiled = result.compiled.timing if result.compiled is not None else None
        for t in [m.timing for m in result.modules] + [e.timing if e is not None else None, compiled]:
            if t is not None:
                t.busy = busy
    if options.compile and result.compiled is None:
        why = e.skipped if e is not None and e.skipped else "end to end did not run fused"
        result.compiled = CompiledRun(options.compile, skipped=why if why.startswith("not run") else f"not run: {why}")
    project(result)
    result.family_verdicts = family_verdicts(result)
    noisy = [m.path or MODEL_ENTRY for m in result.modules if m.timing is not None and m.timing.noisy]
    if e is not None and e.timing is not None and e.timing.noisy:
        noisy.append("end to end")
    if noisy:
        result.warnings.append(
            f"too noisy to tell: the 95% interval stayed wider than ±25% for {', '.join(noisy)} "
            "(a busy machine? raise the rounds, set the threads, or close other programs)"
        )
    timed = [(m.path or MODEL_ENTRY, m.timing) for m in result.modules] + [
        ("end to end", e.timing if e is not None else None)
    ]
    few = [(name, t) for name, t in timed if t is not None and t.repeats < MIN_VERDICT_ROUNDS]
    if few:
        result.warnings.append(
            f"no speed verdict for {', '.join(n for n, _ in few)}: {few[0][1].verdict_reason} "
            "(raise the rounds or the time budget)"
        )
    if options.upstream and room.startswith("skipped"):
        import transformers

        from .results import UpstreamReport

        result.upstream = UpstreamReport(available=False, transformers_version=transformers.__version__, summary=room)
    elif options.upstream:
        after = " (after ours was freed: one copy of the weights at a time)" if room == "after" else ""
        yield Progress(5, 6, f"upstream parity (separate process){after}")
        from .upstream import run_upstream

        result.upstream = run_upstream(plan, workload, result, child)


def _memory(plan: FusionPlan, options: CheckOptions, result: CheckResult) -> MemoryPlan:
    """Where the weights go for this check, said in the result when they do not all fit (or a budget was set)."""
    from .offload import memory_plan

    w = options.workload
    max_memory = options.max_memory if isinstance(options.max_memory, int) else None
    memory = memory_plan(plan, w.dtype, w.device, max_memory)
    if memory.offloaded or memory.asked:
        result.messages.append(f"memory: {memory.describe()}")
    return memory


def _cannot_offload(plan: FusionPlan) -> str:
    """Why a model that needs offloading cannot be (``""``: it can)."""
    if any(ct.present == "fused" for ct in plan.checkpoint_transforms):
        return "the checkpoint holds fused keys, which are read whole into memory to be unfused, and it does not fit"
    return ""


def _user_files(options: CheckOptions) -> str:
    """The files the user named for the check (``""``: none)."""
    names = [*options.images, options.video, options.audio]
    return ", ".join(Path(n).name for n in names if n)


def _one_copy(
    plan: FusionPlan, options: CheckOptions, result: CheckResult, memory: MemoryPlan, settle: Any
) -> Generator[Progress, None, None]:
    """The model loaded once; each matched module switched between its two forms (:mod:`fusion_core.run.switch`)."""
    import gc

    from .switch import Switch, offloaded_paths

    workload, timing, src = options.workload, options.timing, plan.source
    dtype, device = workload.dtype, workload.device
    where = "; blocks beyond the budget read from disk" if memory.offloaded else ""
    yield Progress(1, 6, f"loading the model once (original and fused share its weights{where})")
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:  # what an offloaded model reads from lives until the check ends
        original = load_original(plan, dtype=dtype, device=device, device_map=memory.device_map, keep=stack)
        paths = list(plan.matched_paths)
        on_disk = offloaded_paths(original, paths) if memory.offloaded else []
        yield Progress(2, 6, "running the original model end to end")
        runs, captured, skipped = _end_to_end_inputs(original, paths, workload, src, options)
        yield Progress(3, 6, "fusing: twins that share the original's weights")
        switch = Switch(original, plan, [p for p in paths if p not in on_disk])
        on_disk += list(switch.untwinned)  # checked alone too
        result.load = _load_report(plan, switch, dtype, device, time.perf_counter() - t0)
        settle()
        for i, path in enumerate(paths):
            alone = ", alone: its weights are on disk" if path in on_disk else ""
            yield Progress(4, 6, f"checking {path} ({i + 1}/{len(paths)}{alone})")
            if path in switch.fused:
                mod_o, mod_f = switch.original[path], switch.fused[path]
                check = _check_module(path, plan, mod_o, mod_f, captured.get(path), workload, timing, bool(skipped))
            else:
                check = _module_alone(plan, path, workload, timing, captured.get(path))
            result.modules.append(check)
        yield Progress(5, 6, "end to end")
        if skipped:
            result.end_to_end = EndToEndCheck("", "", "", {}, None, None, skipped=f"not run: {skipped}")
        elif not switch.fused:
            why = "every fused module's weights are on disk (each was checked alone on its end-to-end inputs)"
            result.end_to_end = EndToEndCheck("", "", "", {}, None, None, skipped=f"not run fused: {why}")
        else:
            exact = all(m.passed for m in result.modules)
            result.end_to_end = _check_end_to_end(runs, original, switch, workload, timing, exact)
            if memory.offloaded:
                result.end_to_end.notes.append(f"offloaded: {memory.describe()}; its timings include the disk reads")
            if on_disk:
                result.end_to_end.notes.append(
                    f"{len(on_disk)} fused module(s) with weights on disk ran in their original form end to end; "
                    "each was checked alone on its end-to-end inputs"
                )
            _shares(result, original, runs[0][0], workload, timing)
            if options.compile:
                from .compiled import compiled_run

                yield Progress(5, 6, f"torch.compile ({options.compile}): the original, then the fused model")
                e = result.end_to_end
                result.compiled = compiled_run(
                    runs[0][0], original, switch, workload, timing, options.compile, e.comparison
                )
        if options.generate:
            yield Progress(5, 6, f"generating {options.generate} token(s), original and fused")
            result.generation = _generation(original, switch, runs[0][0] if runs else None, options)
        switch.close()
        del original, switch, runs, captured
        gc.collect()


def _generation(model: nn.Module, switch: Any, inputs: Any, options: CheckOptions) -> Generation:
    """Greedy decoding of ``options.generate`` tokens with the KV cache, original then fused,
    on the end-to-end run's inputs; compared token by token (:class:`~fusion_core.run.results.Generation`)."""
    import torch

    from .results import NEAR_TIE, Generation

    n, cache = options.generate, options.cache
    if inputs is None or inputs.entry or "input_ids" not in inputs.kwargs:
        why = "the end-to-end run has no token inputs" if inputs is not None else "the end-to-end run did not run"
        return Generation(0, False, "skipped", cache=cache, note=why)
    if not getattr(model, "can_generate", lambda: False)():
        return Generation(0, False, "skipped", cache=cache, note=f"{type(model).__name__} does not generate")
    kwargs: dict[str, Any] = {"max_new_tokens": n, "min_new_tokens": n, "do_sample": False, "num_beams": 1}
    kwargs.update(output_scores=True, return_dict_in_generate=True)
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    # the forward's own switches are not generate's: a check runs forwards with use_cache=False,
    # and generation is judged with the KV cache
    feed = {k: v for k, v in inputs.kwargs.items() if k not in ("use_cache", "return_dict")}
    note = ""
    tensors = {k for k, v in feed.items() if isinstance(v, torch.Tensor)}
    if tensors <= {"input_ids", "attention_mask"} and feed["input_ids"].shape[0] == 1:
        feed, note = _left_padded_pair(model, feed["input_ids"])
        kwargs["pad_token_id"] = int(feed["input_ids"][1, 0])
    outs = []
    try:
        with torch.inference_mode():
            for fused in (False, True):
                switch.use(fused)
                outs.append(model.generate(**feed, **kwargs))
    except Cancelled:
        raise
    except Exception as e:  # a model whose generate needs what the check did not give it
        return Generation(0, False, "skipped", cache=cache, note=f"generate fails: {str(e).strip()[:300]}")
    finally:
        switch.use(False)
    start = feed["input_ids"].shape[-1]
    a, b = (o.sequences[:, start:] for o in outs)
    if getattr(outs[0], "past_key_values", None) is None:  # said, never silently a cacheless run
        note = "; ".join(filter(None, [note, "ran without a KV cache (the model returned none)"]))
    out = Generation(int(a.shape[-1]), bool(torch.equal(a, b)), "identical", cache=cache, note=note)
    if out.identical:
        return out
    steps = min(a.shape[-1], b.shape[-1])
    diff = (a[:, :steps] != b[:, :steps]).nonzero()
    if len(diff) == 0:  # one side stopped early
        out.verdict, out.note = "diverges", f"lengths differ: {a.shape[-1]} and {b.shape[-1]} new tokens"
        return out
    row, step = (int(v) for v in min(diff.tolist(), key=lambda rc: (rc[1], rc[0])))
    ta, tb = int(a[row, step]), int(b[row, step])
    lp_a = torch.log_softmax(outs[0].scores[step][row].float(), -1)
    lp_b = torch.log_softmax(outs[1].scores[step][row].float(), -1)

    def top(lp: Any) -> list[list[float]]:
        values, ids = lp.topk(5)
        return [[int(i), round(float(v), 4)] for v, i in zip(values, ids)]

    out.first_divergence = {"step": step, "row": row, "original": ta, "fused": tb}
    out.original_top, out.fused_top = top(lp_a), top(lp_b)
    out.margin = float(lp_a[ta] - lp_a[tb])
    crossed = tb in [t for t, _ in out.original_top] and ta in [t for t, _ in out.fused_top]
    out.verdict = "near tie" if crossed and out.margin < NEAR_TIE else "diverges"
    return out


def _left_padded_pair(model: nn.Module, ids: Any) -> tuple[dict[str, Any], str]:
    """Text generation on a batch of two: the row, and the row shifted right behind pad tokens
    (left padding, as a server batches prompts of different lengths), with its attention mask."""
    import torch

    n = int(ids.shape[-1])
    pad = max(1, min(4, n // 2))
    config = getattr(model, "generation_config", None)
    pad_id = getattr(config, "pad_token_id", None)
    if pad_id is None:
        pad_id = getattr(model.config, "pad_token_id", None)
    pad_id = int(pad_id[0] if isinstance(pad_id, (list, tuple)) else (pad_id if pad_id is not None else 0))
    second = torch.cat([torch.full((1, pad), pad_id, dtype=ids.dtype, device=ids.device), ids[:, : n - pad]], 1)
    mask = torch.ones(2, n, dtype=torch.long, device=ids.device)
    mask[1, :pad] = 0
    note = f"text: a batch of two, the second row left-padded by {pad} token(s)"
    return {"input_ids": torch.cat([ids, second], 0), "attention_mask": mask}, note


def _load_report(plan: FusionPlan, switch: Any, dtype: str, device: str, seconds: float) -> LoadReport:
    """The check's load: the original loaded once, the matched modules fused as twins."""
    from .loading import peak_rss_mb

    layout = plan.layout if plan.layout in ("original", "fused") else "none"
    return LoadReport(
        model=plan.model,
        model_class=plan.model_class,
        fusion_config=plan.fusion_config,
        checkpoint_layout=layout,
        fused_modules=[FusedModule(p, plan.matched_paths[p], type(m).__name__) for p, m in switch.fused.items()],
        dtype=dtype,
        device=device,
        transforms=plan.rows("load") if layout == "original" else [],
        seconds=seconds,
        peak_rss_mb=peak_rss_mb(),
        messages=["loaded once: each fused module is a twin sharing the original's weights"],
    )


def _busy(workload: CheckedWorkload) -> str:
    """A "machine busy: ..." reason when other work contended the CPUs during the timings ("" when it did not).

    Contended: the load average (1 minute, before or after the timings) less the check's own
    threads is above the cores the check does not use, i.e. the load exceeds the CPUs. The
    check's timings then get no verdict (:attr:`~fusion_core.run.results.Timing.busy`).
    """
    cpus = os.cpu_count() or 1
    loads = [x for x in (workload.load_before, workload.load_after) if x is not None]
    threads = workload.threads or 1
    free = max(cpus - threads, 0)
    if not loads or max(loads) - threads <= free:
        return ""
    return (
        f"machine busy: load average {workload.load_before or 0:.1f} before, {workload.load_after or 0:.1f} after, "
        f"on {cpus} CPU(s) with {threads} thread(s) for the check"
    )


def _end_to_end_inputs(
    original: nn.Module, paths: list[str], workload: Workload, src: ModelSource, options: CheckOptions
) -> tuple[list[tuple[Any, Any]], dict[str, tuple[tuple, dict]], str]:
    """([(inputs, original output) per run], captured module inputs, "" or why end to end cannot run).

    One run per modality the model takes (:func:`fusion_core.run.modal.end_to_end_groups`);
    the user's files that cannot be used raise (never replaced by synthetic inputs).
    """
    from .capture import capture_runs
    from .modal import end_to_end_groups

    user = bool(options.images or options.video or options.audio or options.prompt is not None)
    groups = end_to_end_groups(original, paths, src, options)  # raises for the user's files
    try:
        runs, captured, notes = capture_runs(original, paths, workload.device, groups)
    except CheckError as e:
        if user:
            raise
        return [], {}, str(e)
    runs[0][0].notes[:0] = notes
    return runs, captured, ""


def _check_module(
    path: str,
    plan: FusionPlan,
    mod_o: nn.Module,
    mod_f: nn.Module,
    captured: tuple[tuple, dict] | None,
    workload: Workload,
    timing: TimingOptions,
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
    _compare_and_time(check, mod_o, mod_f, args, kwargs, workload, timing)
    return check


def _samples(
    check: ModuleCheck, module: nn.Module, plan: FusionPlan, workload: Workload, end_to_end_failed: bool
) -> tuple[tuple, dict]:
    why = "end to end did not run" if end_to_end_failed else "the end-to-end run did not call it"
    try:  # the family as the plan configured it: its options shape the sample inputs too
        return plan.spec(check.family).sample_inputs(module, plan.source.config, workload)
    except (NotImplementedError, ValueError) as e:
        check.error = f"not verified: {why}, and no sample inputs: {e}"
        return (), {}


def _compare_and_time(
    check: ModuleCheck,
    mod_o: nn.Module,
    mod_f: nn.Module,
    args: tuple,
    kwargs: dict,
    workload: Workload,
    timing: TimingOptions,
) -> None:
    import torch

    check.input_shapes = shapes_of(args, kwargs)
    w = workload

    def call(module: nn.Module) -> Any:  # each call from the captured state: a cache in the inputs is copied
        a, k = fresh(args, kwargs)
        return module(*a, **k)

    try:
        with torch.inference_mode():
            check.comparison = compare(call(mod_o), call(mod_f), w.dtype)
            check.timing = measure(lambda: call(mod_o), lambda: call(mod_f), timing, device=w.device, seed=w.seed)
    except Cancelled:
        raise
    except Exception as e:  # a fused module that fails where its original runs is a finding, not a crash
        check.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"


def _module_alone(
    plan: FusionPlan,
    path: str,
    workload: Workload,
    timing: TimingOptions,
    captured: tuple[tuple, dict] | None = None,
) -> ModuleCheck:
    """One module materialized from the checkpoint, fused on a copy, on ``captured`` inputs
    (an end-to-end run's, when it reached the module) or its family's sample inputs."""
    from .modules import materialize

    family = plan.matched_paths[path]
    spec = plan.spec(family)  # configured with the plan's options, as the fused load would be
    try:
        mod_o = materialize(plan, path, workload.dtype, workload.device)
    except CheckError as e:
        meta = plan.inspection.model.get_submodule(path)
        return ModuleCheck(path, family, type(meta).__name__, "", error=f"not verified: {e}")
    mod_f = copy.deepcopy(mod_o)
    spec.fuse_module(mod_f)
    return _check_module(path, plan, mod_o, mod_f, captured, workload, timing, True)


def _check_end_to_end(
    runs: list[tuple[Any, Any]],
    original: nn.Module,
    switch: Any,
    workload: Workload,
    timing: TimingOptions,
    modules_exact: bool,
) -> EndToEndCheck:
    """Fused vs original on every run; timed on the first. The comparison shown is the worst run's.

    A difference beyond the tolerance where every fused module passed (``modules_exact``) is
    judged against its rounding floor (:func:`_rounding_floor`); one where a module failed is not.

    One model: ``switch`` (:class:`fusion_core.run.switch.Switch`) puts the fused twins in
    place for the fused runs, and each timed call puts its own form in place first.
    """
    import torch

    notes: list[str] = []
    worst: tuple[float, str, Any] | None = None
    shapes: dict[str, list[int]] = {}
    fed: list[Any] = []
    kinds: list[str] = []
    for inputs, out_original in runs:
        entry_f = original.get_submodule(inputs.entry) if inputs.entry else original
        try:
            with torch.inference_mode(), switch.using(True):
                torch.manual_seed(FORWARD_SEED)  # the noise the original's run drew (capture_runs)
                out_fused = entry_f(**inputs.kwargs)
        except Exception as e:  # the fused model breaks where the original ran: a failed check, with why
            return _fused_raised(inputs, out_original, e, workload.dtype, notes)
        name, main_o = main_output(out_original)
        _, main_f = main_output(out_fused)
        comparison = compare(main_o, main_f, workload.dtype)
        badness = comparison.max_abs_diff / comparison.limit if comparison.limit else comparison.max_abs_diff
        if not comparison.passed:
            badness = float("inf")
        if worst is None or badness > worst[0]:
            worst = (badness, name, comparison)
            worst_run = (inputs, main_o)
        notes += inputs.notes
        if len(runs) > 1:
            label = inputs.fed[0].run if inputs.fed else inputs.kind
            notes.append(f"{label}: {name} max abs diff {comparison.max_abs_diff:.2g} (limit {comparison.limit:.2g})")
        for key, value in inputs.shapes().items():
            shapes.setdefault(key, value)
        fed += inputs.fed
        if inputs.kind not in kinds:
            kinds.append(inputs.kind)
    _, name, comparison = worst  # type: ignore[misc]
    if not comparison.passed and (modules_exact or workload.dtype != "float32"):
        _rounding_floor(worst_run, original, switch, comparison, workload.dtype)
    first = runs[0][0]
    entry = original.get_submodule(first.entry) if first.entry else original

    def run(fused: bool) -> Any:
        switch.use(fused)
        return entry(**first.kwargs)

    with torch.inference_mode():
        try:
            measured = measure(
                lambda: run(False), lambda: run(True), timing, device=workload.device, seed=workload.seed
            )
        finally:
            switch.use(False)
    if first.entry:
        notes.append(f"{type(original).__name__} has no forward of its own; ran its submodule {first.entry}")
    return EndToEndCheck(first.entry, name, ", ".join(kinds), shapes, comparison, measured, notes, inputs=fed)


def _fused_raised(inputs: Any, out_original: Any, error: Exception, dtype: str, notes: list[str]) -> EndToEndCheck:
    """The end-to-end result when the fused model raises on inputs the original ran: it fails.

    The fused modules may pass alone, yet code around them can rely on what fusion changed
    (ViLT's embeddings read the patch convolution's 4-D weight shape from its parent)."""
    import dataclasses

    from ..errors import one_line

    name, main_o = main_output(out_original)
    why = one_line(error, first=True, named=True, limit=300)
    failed = dataclasses.replace(
        compare(main_o, main_o, dtype),
        max_abs_diff=float("inf"),
        max_rel_diff=float("inf"),
        note=f"the fused model raised where the original ran ({why})",
    )
    label = inputs.fed[0].run if inputs.fed else inputs.kind
    notes = [*notes, *inputs.notes, f"{label}: the fused model raised where the original ran: {why}"]
    return EndToEndCheck(inputs.entry, name, inputs.kind, inputs.shapes(), failed, None, notes, inputs=list(inputs.fed))


def _rounding_floor(run: tuple[Any, Any], original: nn.Module, switch: Any, comparison: Comparison, dtype: str) -> None:
    """Judge an end-to-end difference beyond its tolerance against its rounding floor, in place.

    Through dozens of layers a bfloat16 model amplifies any change of rounding: a fused
    module within one unit in the last place of its original can move the logits beyond the
    dtype's tolerance. So can a few float32 layers whose random weights make attention sharp
    (a tiny model of ``coverage --check``: 4.5e-6 at the patch embedding, 7.5e-4 at the output).
    The floor is how far the original's own output moves when the fused modules' originals
    are computed in a wider dtype (:class:`fusion_core.run.switch.Precise`), a change of
    rounding that is correct by construction; the fused model passes when it stays within
    :data:`~fusion_core.run.results.FLOOR_FACTOR` times that. It is only tried when every
    fused module passed its own comparison; a wrong fusion moves the output by the order of
    the output itself, far beyond it.
    """
    import torch

    from .loading import torch_dtype
    from .switch import wider

    inputs, main_o = run
    entry = original.get_submodule(inputs.entry) if inputs.entry else original
    with torch.inference_mode(), switch.precise(torch_dtype(dtype)):
        torch.manual_seed(FORWARD_SEED)
        out = entry(**inputs.kwargs)
    floor = compare(main_o, main_output(out)[1], dtype).max_abs_diff
    if floor == floor:  # not NaN
        comparison.floor = floor
        verdict = "within" if comparison.passed else "beyond"
        comparison.note = (
            f"beyond the {dtype} tolerance; {verdict} {FLOOR_FACTOR:g}x the rounding floor: the original with its "
            f"fused modules computed in {str(wider(torch_dtype(dtype))).removeprefix('torch.')} moves the output "
            f"by {floor:.2g}"
        )


def _shares(result: CheckResult, original: nn.Module, inputs: Any, workload: Workload, timing: TimingOptions) -> None:
    """Each fused module's share of the original end-to-end time, with its interval
    (:func:`fusion_core.run.shares.measure_shares`). A module verified on sample inputs
    has no share in a forward that never reached it (``None``)."""
    import torch

    from .shares import measure_shares

    paths = [m.path for m in result.modules if m.verified_by == BY_END_TO_END]
    if not paths:
        return
    entry = original.get_submodule(inputs.entry) if inputs.entry else original
    with torch.inference_mode():
        shares = measure_shares(
            lambda: entry(**inputs.kwargs),
            {p: original.get_submodule(p) for p in paths},
            timing,
            device=workload.device,
            seed=workload.seed,
        )
    for m in result.modules:
        if m.path in shares:
            m.share_of_end_to_end, m.share_low, m.share_high = shares[m.path]
