"""Upstream parity: the same checkpoint through transformers' own ``fusion_config``.

transformers (5.24.0 and later) can fuse at load time itself (``from_pretrained(...,
fusion_config=...)``). Its registries are process-wide and never cleared (DESIGN.md,
"Known upstream defects"), so it runs here in a **separate process**: an isolated child
serving this module reads one request on stdin and writes one marked line on stdout, the
:data:`UPSTREAM` operation (:class:`UpstreamParams` in, an
:class:`~fusion_core.run.results.UpstreamReport` out), which both sides build and read. The
worker loads the original model our way (never fused), captures the same synthetic inputs
as the check, loads the upstream fused model, compares, judges each family (did upstream
fuse its modules, which of their keys its load lost), and then loads the checkpoint plainly
once more in the same process to see whether the upstream fusion leaked into it.

The result is information next to our check, never a failure of it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..boundary.ops import Op
from ..boundary.options import Workload
from ..errors import bounded, one_line
from .check_text import upstream_summary
from .isolated import WarmChild, child_for, killed_by
from .results import CheckResult, UpstreamFamily, UpstreamReport

if TYPE_CHECKING:
    from ..plan.fusion_plan import FusionPlan

AGREES, DIFFERS, NOT_FUSED, NOT_AVAILABLE = "agrees", "differs", "not fused upstream", "not available upstream"

TIMEOUT_S = 600


@dataclass(frozen=True)
class UpstreamParams:
    """What the upstream child is asked: load ``folder`` through transformers' own
    ``fusion_config`` and compare with a plain load on the check's inputs."""

    folder: str
    model_class: str
    fusion_config: dict[str, Any]
    dtype: str
    seed: int
    paths: dict[str, str]  # our fused module paths -> their family
    trust_remote_code: bool = False
    workload: Workload | None = None


#: the upstream child's operation (in :data:`fusion_core.host.ops.CHILD_OPS`)
UPSTREAM: Op[UpstreamParams, UpstreamReport] = Op("child/upstream", UpstreamParams, UpstreamReport)


def upstream_knows(family: str) -> tuple[bool, str]:
    """Whether the installed transformers has its own fusion mapping with ``family``."""
    import transformers

    version = transformers.__version__
    if importlib.util.find_spec("transformers.fusion_mapping") is None:
        return False, f"transformers {version} has no fusion mapping (transformers.fusion_mapping)"
    from transformers import fusion_mapping

    registry = getattr(fusion_mapping, "_FUSION_REGISTRY", None)
    if isinstance(registry, dict) and family not in registry:
        return False, f"transformers {version}'s fusion mapping has no {family!r} family"
    return True, ""


def start_upstream(plan: FusionPlan | None = None, workload: Workload | None = None) -> WarmChild | None:
    """The upstream child, started ahead; None when ``plan`` has no family transformers knows
    (no child would be asked anything).

    With ``workload``, the request is sent at once: the request needs only the plan and the
    workload, so the child imports, loads and runs while the check does its own loading, and
    the parent waits for the child's answer before its timings (the two never share the CPU
    while a timing runs). Without it, the child imports and then waits for its request.
    """
    if plan is not None and len(_unknown_families(plan)) == len(plan.fusion_config):
        return None
    child = _spawn()
    if plan is not None and workload is not None:
        child.send(UPSTREAM.request_line(_request(plan, workload)))
    return child


def _spawn() -> WarmChild:
    return child_for("fusion_core.run.upstream", prefix="fusion-upstream-")


def _unknown_families(plan: FusionPlan) -> dict[str, UpstreamFamily]:
    """The plan's families the installed transformers lacks, each "not available upstream"."""
    knows = {family: upstream_knows(family) for family in plan.fusion_config}
    return {family: UpstreamFamily(family, NOT_AVAILABLE, why) for family, (ok, why) in knows.items() if not ok}


def run_upstream(
    plan: FusionPlan, workload: Workload, ours: CheckResult | None = None, child: WarmChild | None = None
) -> UpstreamReport:
    """Load the model of ``plan`` through upstream fusion in a child process and report what it did.

    Only the families transformers knows are compared (others are listed as "not available
    upstream" and never make the report "differs"). The child runs isolated: ``python -I``
    (no working directory, ``PYTHONPATH`` or user site on ``sys.path``) from a fresh empty
    directory, with this package's root put on ``sys.path`` explicitly, so no file in the
    model folder or the working directory is ever imported.

    Args:
        plan: our plan (its model must have weights in a folder; the child judges each of
            its families on the modules we fuse).
        workload: the check's dtype, seed and sizes (the same inputs as ours).
        ours: our check result, for the side-by-side summary.
        child: a child from :func:`start_upstream` (default: one started when needed).
    """
    import transformers

    version = transformers.__version__
    unknown = _unknown_families(plan)
    if len(unknown) == len(plan.fusion_config):
        why = "; ".join(f.detail for f in unknown.values()) or "no family to compare"
        return UpstreamReport(available=False, transformers_version=version, summary=why, families=[*unknown.values()])
    t0 = time.perf_counter()
    report = _run_worker(_request(plan, workload), child or _spawn())
    report.available, report.transformers_version = True, version
    report.seconds = time.perf_counter() - t0
    if ours is not None and ours.end_to_end is not None and ours.end_to_end.comparison is not None:
        report.ours_max_abs_diff = ours.end_to_end.comparison.max_abs_diff
    judged = {f.name: f for f in report.families}  # the child's judgement (none after an error)
    report.families = [
        unknown.get(name) or judged.get(name) or UpstreamFamily(name, DIFFERS, report.error or "not judged")
        for name in plan.fusion_config
    ]
    report.summary = upstream_summary(report)
    return report


def _request(plan: FusionPlan, workload: Workload) -> UpstreamParams:
    """What the worker is asked: everything it needs to load, fuse and run the model of ``plan``."""
    unknown = _unknown_families(plan)
    source = plan.source
    if source.checkpoint is not None:  # the child loads the folder itself: it must still hold what was validated
        source.checkpoint.verify()
    return UpstreamParams(
        folder=str(Path(source.folder).resolve()),  # the worker runs in a neutral directory
        model_class=source.model_class.__name__,
        fusion_config={k: v for k, v in plan.fusion_config.items() if k not in unknown},
        dtype=workload.dtype,
        seed=workload.seed,
        paths={p: fam for p, fam in plan.matched_paths.items() if fam not in unknown},
        trust_remote_code=source.trust_remote_code,
        workload=workload,
    )


def _run_worker(request: UpstreamParams, child: WarmChild) -> UpstreamReport:
    """Hand ``request`` to the isolated worker (unless it was sent when the child started): its
    report, or one that says why there is none (``error``)."""
    try:
        if not child.sent:
            child.send(UPSTREAM.request_line(request))
        proc = child.finish(TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return UpstreamReport(available=True, error=f"the upstream worker took more than {TIMEOUT_S} s; stopped")
    try:
        report = UPSTREAM.find_answer(proc.stdout)
    except ValueError as e:  # PlainDataError, JSONDecodeError
        return UpstreamReport(available=True, error=f"the upstream worker's answer is not understood: {e}")
    if report is None:
        tail = " ".join(proc.stderr.strip().splitlines()[-3:])[-400:]
        ended = killed_by(proc.returncode) or f"exited with status {proc.returncode}"
        error = f"the upstream worker {ended} without a result: {tail}"
        return UpstreamReport(available=True, error=error)
    return report


# -- the worker (runs in the child process) ---------------------------------------------


def _worker(request: UpstreamParams) -> UpstreamReport:
    import gc

    import torch

    from ..model.sources import resolve
    from ..plan.fusion_plan import as_plan
    from .capture import capture_and_run
    from .loading import load_original, plain_config, torch_dtype, weights_loader
    from .results import compare, main_output

    out = UpstreamReport(available=True)
    src = resolve(request.folder, model_class=request.model_class, trust_remote_code=request.trust_remote_code)
    dtype = torch_dtype(request.dtype)
    paths = list(request.paths)
    workload = request.workload
    if workload is not None:
        workload = replace(workload, device="cpu")
    original = load_original(as_plan(src), dtype=dtype)  # the checkpoint's own layout, read as the original
    inputs, _captured, out_original = capture_and_run(original, paths, request.seed, "cpu", workload)
    _, reference = main_output(out_original)
    original_classes = {p: type(original.get_submodule(p)).__name__ for p in paths}
    del original, _captured, out_original  # one model at a time in this process too (issue 35)
    gc.collect()
    loader, _note = weights_loader(src.model_class)
    kwargs = {"config": plain_config(src.config), "dtype": dtype, "output_loading_info": True}
    try:
        model, info = loader(request.folder, fusion_config=request.fusion_config, **kwargs)
    except Exception as e:
        out.error = f"from_pretrained(fusion_config=...) fails: {one_line(e, first=True, named=True, limit=300)}"
        return out
    keys = [f"{k} MISSING, randomly initialized" for k in sorted(info.get("missing_keys", []))]
    keys += [f"{k} UNEXPECTED, dropped" for k in sorted(info.get("unexpected_keys", []))]
    keys += [f"{k} shape mismatch" for k in sorted(str(m[0]) for m in info.get("mismatched_keys", []))]
    classes = {p: type(model.get_submodule(p)).__name__ for p in paths}
    entry = model.get_submodule(inputs.entry) if inputs.entry else model
    try:
        with torch.inference_mode():
            _, fused_out = main_output(entry(**inputs.kwargs))
    except Exception as e:
        out.error = (
            f"the upstream fused model fails on the check's inputs: {one_line(e, first=True, named=True, limit=300)}"
        )
        return out
    comparison = compare(reference, fused_out, request.dtype)
    out.max_abs_diff = comparison.max_abs_diff
    out.within_tolerance = comparison.passed
    out.families = [
        _judge(family, {p: c for p, c in classes.items() if request.paths[p] == family}, keys, out.within_tolerance)
        for family in request.fusion_config
    ]
    del model, entry, fused_out
    gc.collect()
    # the leak: a plain load of the same checkpoint, same process, after the fused one
    try:
        plain, _info = loader(request.folder, **kwargs)
        classes = {p: type(plain.get_submodule(p)).__name__ for p in paths}
        still = [f"{p} is {c}" for p, c in classes.items() if c != original_classes[p]]
        out.leak = bool(still)
        out.leak_detail = (
            f"a later plain from_pretrained in the same process is still fused ({', '.join(still)})" if still else ""
        )
    except Exception as e:
        out.leak = True
        out.leak_detail = (
            f"a later plain from_pretrained in the same process fails: {one_line(e, first=True, named=True, limit=300)}"
        )
    return out


def _judge(family: str, classes: dict[str, str], keys: list[str], within: bool | None) -> UpstreamFamily:
    """Whether upstream fused ``family`` as we do: ``classes`` (its modules -> the class upstream
    loaded there), ``keys`` (what upstream's load reported: ``"KEY MISSING, ..."``), the outputs."""
    unfused = [p for p, c in classes.items() if not c.startswith("Fused")]
    if classes and len(unfused) == len(classes):
        return UpstreamFamily(family, NOT_FUSED, bounded(f"upstream left {', '.join(sorted(set(classes.values())))}"))
    fused = sorted({c for c in classes.values() if c.startswith("Fused")})
    found = [f"upstream loaded {', '.join(fused)}"] if fused else []
    problems = [f"did not fuse {', '.join(unfused)}"] if unfused else []
    problems += [k for k in keys if any(f".{p}." in f".{k}" for p in classes)]  # keys of its modules
    if within is False:
        problems.append("outputs outside the tolerance")
    return UpstreamFamily(family, DIFFERS if problems else AGREES, bounded("; ".join(found + problems)))


def serve() -> int:
    """The worker, in a child of :mod:`fusion_core.run.child`: one ``child/upstream`` request on
    stdin, its answer on stdout (the report)."""
    line = sys.stdin.readline()
    if not line:  # the parent gave up (an error, a cancel)
        return 0
    try:
        result = _worker(UPSTREAM.read_request(line))
    except Exception as e:  # report, never a traceback on stdout
        result = UpstreamReport(
            available=True, error=f"the worker failed: {one_line(e, first=True, named=True, limit=300)}"
        )
    sys.stdout.write("\n" + UPSTREAM.answer_line(result) + "\n")
    sys.stdout.flush()
    return 0
