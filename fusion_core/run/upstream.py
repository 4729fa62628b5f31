"""Upstream parity: the same checkpoint through transformers' own ``fusion_config``.

transformers (5.24.0 and later) can fuse at load time itself (``from_pretrained(...,
fusion_config=...)``). Its registries are process-wide and never cleared (DESIGN.md,
"Known upstream defects"), so it runs here in a **separate process**: an isolated child
serving this module reads one request on stdin and writes one marked line on stdout, the
:data:`UPSTREAM` operation (:class:`UpstreamParams` in, an
:class:`~fusion_core.run.results.UpstreamReport` out), which both sides build and read. The worker loads the original model our way (never fused), captures the
same synthetic inputs as the check, loads the upstream fused model, compares, and then
loads the checkpoint plainly once more in the same process to see whether the upstream
fusion leaked into it.

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
from ..errors import one_line
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
    paths: list[str]
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
    if plan is not None and not _known_families(plan)[0]:
        return None
    child = _spawn()
    if plan is not None and workload is not None:
        child.send(UPSTREAM.request_line(_request(plan, workload)))
    return child


def _spawn() -> WarmChild:
    return child_for("fusion_core.run.upstream", prefix="fusion-upstream-")


def _known_families(plan: FusionPlan) -> tuple[list[str], list[UpstreamFamily]]:
    """(the plan's families transformers knows, the others as "not available upstream")."""
    known: list[str] = []
    unknown: list[UpstreamFamily] = []
    for family in plan.fusion_config:
        ok, why = upstream_knows(family)
        if ok:
            known.append(family)
        else:
            unknown.append(UpstreamFamily(family, NOT_AVAILABLE, why))
    return known, unknown


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
        plan: our plan (its model must have weights in a folder; its fused paths are
            compared with upstream's classes).
        workload: the check's dtype, seed and sizes (the same inputs as ours).
        ours: our check result, for the side-by-side summary.
        child: a child from :func:`start_upstream` (default: one started when needed).
    """
    import transformers

    version = transformers.__version__
    known, families = _known_families(plan)
    if not known:
        why = "; ".join(f.detail for f in families) or "no family to compare"
        return UpstreamReport(available=False, transformers_version=version, summary=why, families=families)
    paths = [p for p, fam in plan.matched_paths.items() if fam in known]
    t0 = time.perf_counter()
    report = _run_worker(_request(plan, workload), child or _spawn())
    report.available, report.transformers_version = True, version
    report.seconds = time.perf_counter() - t0
    if ours is not None and ours.end_to_end is not None and ours.end_to_end.comparison is not None:
        report.ours_max_abs_diff = ours.end_to_end.comparison.max_abs_diff
    for family in known:
        family_paths = [p for p in paths if plan.matched_paths[p] == family]
        families.append(_family_status(report, family, family_paths))
    order = list(plan.fusion_config)
    report.families = sorted(families, key=lambda f: order.index(f.name))
    report.summary = summarize(report)
    return report


def _request(plan: FusionPlan, workload: Workload) -> UpstreamParams:
    """What the worker is asked: everything it needs to load, fuse and run the model of ``plan``."""
    known, _ = _known_families(plan)
    source = plan.source
    if source.checkpoint is not None:  # the child loads the folder itself: it must still hold what was validated
        source.checkpoint.verify()
    return UpstreamParams(
        folder=str(Path(source.folder).resolve()),  # the worker runs in a neutral directory
        model_class=source.model_class.__name__,
        fusion_config={k: v for k, v in plan.fusion_config.items() if k in known},
        dtype=workload.dtype,
        seed=workload.seed,
        paths=[p for p, fam in plan.matched_paths.items() if fam in known],
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
    report.families = []  # the parent judges each family
    return report


def _family_status(r: UpstreamReport, family: str, paths: list[str]) -> UpstreamFamily:
    if r.error:
        return UpstreamFamily(family, DIFFERS, r.error)
    classes = {p: r.module_classes.get(p, "") for p in paths}
    if paths and not any(c.startswith("Fused") for c in classes.values()):
        return UpstreamFamily(family, NOT_FUSED, f"upstream left {', '.join(sorted(set(classes.values())))}")
    problems = []
    unfused = [p for p, c in classes.items() if not c.startswith("Fused")]
    if unfused:
        problems.append(f"did not fuse {', '.join(unfused)}")
    touched = [k for k in r.missing_keys + r.unexpected_keys if any(k.endswith(_tail(p)) or p in k for p in paths)]
    if touched:
        problems.append(f"keys missing or unexpected: {', '.join(touched)}")
    if r.within_tolerance is False:
        problems.append("outputs outside the tolerance")
    if problems:
        return UpstreamFamily(family, DIFFERS, "; ".join(problems))
    return UpstreamFamily(family, AGREES, "")


def _tail(path: str) -> str:
    return ".".join(path.split(".")[-2:])


def _short_key(key: str) -> str:
    """``model.visual.patch_embed.linear_proj.weight`` -> ``linear_proj.weight`` for the summary."""
    parts = key.split(".")
    return ".".join(parts[-2:]) if len(parts) > 2 else key


def summarize(r: UpstreamReport) -> str:
    """One plain sentence (or a few clauses) on what upstream did."""
    who = f"upstream (transformers {r.transformers_version})"
    if not r.available:
        return r.summary
    if r.error:
        return f"{who}: {r.error}"
    clauses = []
    if r.missing_keys:
        clauses.append(f"{', '.join(_short_key(k) for k in r.missing_keys)} MISSING, randomly initialized")
    if r.unexpected_keys:
        clauses.append(f"{', '.join(_short_key(k) for k in r.unexpected_keys)} UNEXPECTED, dropped")
    if r.mismatched_keys:
        clauses.append(f"shape mismatch: {', '.join(r.mismatched_keys)}")
    unfused = [p for p, c in r.module_classes.items() if not c.startswith("Fused")]
    if unfused:
        clauses.append(f"did not fuse {', '.join(unfused)}")
    if r.max_abs_diff is not None:
        ours = f" (ours: {r.ours_max_abs_diff:.2g})" if r.ours_max_abs_diff is not None else ""
        verdict = "within" if r.within_tolerance else "OUTSIDE"
        clauses.append(f"max diff {r.max_abs_diff:.2g} vs the original, {verdict} tolerance{ours}")
    if r.leak:
        clauses.append(f"LEAK: {r.leak_detail}")
    elif r.leak is False:
        clauses.append("no leak into a later plain load")
    differs = [f.name for f in r.families if f.status == DIFFERS]
    if differs or (not r.families and not r.matches_ours):
        head = "DIFFERS from ours"
    else:
        head = "matches ours" if r.matches_ours else "fuses none of these families"
    if r.families:
        clauses.append("families: " + ", ".join(f"{f.name} {f.status}" for f in r.families))
    return f"{who} {head}: " + "; ".join(clauses)


# -- the worker (runs in the child process) ---------------------------------------------


def _worker(request: UpstreamParams) -> UpstreamReport:
    import gc

    import torch

    from ..model.sources import resolve
    from ..plan.fusion_plan import as_plan
    from .capture import capture_and_run
    from .loading import load_original, plain_config, torch_dtype, weights_loader
    from .results import compare, main_output

    out = UpstreamReport(available=True, ran=True)
    src = resolve(request.folder, model_class=request.model_class, trust_remote_code=request.trust_remote_code)
    dtype = torch_dtype(request.dtype)
    paths = request.paths
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
    out.missing_keys = sorted(info.get("missing_keys", []))
    out.unexpected_keys = sorted(info.get("unexpected_keys", []))
    out.mismatched_keys = sorted(str(k[0]) for k in info.get("mismatched_keys", []))
    out.module_classes = {p: type(model.get_submodule(p)).__name__ for p in paths}
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
