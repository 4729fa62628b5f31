"""Coverage: which architectures transformers knows each fusion family applies to.

For every model type of ``CONFIG_MAPPING`` (or the ones named with ``only``): default
config, model class (:func:`fusion_core.coverage.worker.resolve_model_class`), meta init,
discovery for each family. The work runs in worker children (:mod:`fusion_core.coverage.worker`,
our isolated children: forked from the zygote where the process uses one) that import
transformers once and scan many types each; types are handed out in chunks of one ``transformers.models.<name>`` package, so a
modeling module is imported by one worker only, costliest chunks first
(:mod:`fusion_core.coverage.pool`).

A type that takes longer than ``timeout`` seconds becomes a ``timeout`` result (an alarm
inside the worker; a watchdog kills a worker stuck in native code); a worker that dies
is replaced and the type it was building is reported as ``crash``. The scan never hangs
on one pathological type.

:func:`coverage_scan` is the progress generator; :func:`scan` drives it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..boundary.convert import converter, from_plain
from ..boundary.options import OptionError
from ..errors import UsageError
from ..progress import CancelToken, Progress, ProgressCallback, drive

SCHEMA_VERSION = 1
DEFAULT_TIMEOUT = 30.0  # seconds per model type


@dataclass(frozen=True)
class TypeResult:
    """What the scan found for one model type (``status``: ``"ok"`` or ``"failed"``)."""

    model_type: str
    status: str
    model_class: str = ""
    class_source: str = ""  # "auto", a modeling_auto task mapping name, or "config_class"
    modules: int = 0
    seconds: float = 0.0
    stage: str = ""  # failed: "config" | "class" | "init" | "discovery" | "timeout" | "crash"
    error_type: str = ""
    error: str = ""
    #: family -> {"matches": [{class, fused_class, modules}], "rejected": [{class, reason, modules}]}
    families: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    #: with a convolution family scanned: ``{"non_overlapping": count, "unexplained": [paths]}``,
    #: the non-overlapping convolutions and those no such family matched or gave a reason for
    convolutions: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def matches(self, family: str) -> list[dict[str, Any]]:
        """Fused classes of ``family``: ``{"class", "fused_class", "modules": [paths]}``."""
        return self.families.get(family, {}).get("matches", [])

    def rejected(self, family: str) -> list[dict[str, Any]]:
        """Rejected candidates of ``family``: ``{"class", "reason", "modules": [paths]}``."""
        return self.families.get(family, {}).get("rejected", [])


@dataclass
class CoverageReport:
    """The scan's results, sorted by model type."""

    families: list[str]
    results: list[TypeResult]
    jobs: int
    seconds: float
    transformers_version: str = ""
    torch_version: str = ""

    def fusable(self, family: str) -> list[TypeResult]:
        """Types where ``family`` replaces at least one module."""
        return [r for r in self.results if r.matches(family)]

    def rejected(self, family: str) -> list[TypeResult]:
        """Types where ``family`` rejected at least one candidate (with reasons)."""
        return [r for r in self.results if r.rejected(family)]

    @property
    def failed(self) -> list[TypeResult]:
        """Types that could not be instantiated (or timed out / crashed)."""
        return [r for r in self.results if not r.ok]

    @property
    def instantiated(self) -> list[TypeResult]:
        return [r for r in self.results if r.ok]


def _report_plain(self: CoverageReport) -> dict[str, Any]:
    """The plain form of a coverage report (``fusion-core coverage --json``; schema in docs/cli-json.md)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "transformers_version": self.transformers_version,
        "torch_version": self.torch_version,
        "jobs": self.jobs,
        "seconds": round(self.seconds, 2),
        "model_types": len(self.results),
        "instantiated": len(self.instantiated),
        "failed_count": len(self.failed),
        "families": [
            {
                "name": name,
                "fusable": [
                    {"model_type": r.model_type, "model_class": r.model_class, "classes": r.matches(name)}
                    for r in self.fusable(name)
                ],
                "rejected": [
                    {"model_type": r.model_type, "model_class": r.model_class, "rejected": r.rejected(name)}
                    for r in self.rejected(name)
                ],
            }
            for name in self.families
        ],
        "scanned": [
            {"model_type": r.model_type, "model_class": r.model_class, "class_source": r.class_source}
            for r in self.instantiated
        ],
        "failed": [
            {
                "model_type": r.model_type,
                "model_class": r.model_class,
                "stage": r.stage,
                "error_type": r.error_type,
                "error": r.error,
            }
            for r in self.failed
        ],
    }


converter.register_unstructure_hook(CoverageReport, _report_plain)


def scan(
    families: Sequence[str] | None = None,
    jobs: int | None = None,
    only: Sequence[str] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
) -> CoverageReport:
    """Scan model types for every family (see :func:`coverage_scan`) and return the report."""
    return drive(coverage_scan(families, jobs, only, timeout=timeout), progress, cancel)


def coverage_scan(
    families: Sequence[str] | None = None,
    jobs: int | None = None,
    only: Sequence[str] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> Generator[Progress, None, CoverageReport]:
    """Scan model types in worker processes, yielding progress; return a :class:`CoverageReport`.

    Args:
        families: family names (default: every registered family).
        jobs: worker processes (default: the CPUs available); ``0`` scans in this process,
            one type after the other, without a timeout guard (for debugging).
        only: model types to scan (default: every type transformers knows).
        timeout: seconds allowed per model type.

    Raises:
        UnknownFamilyError: a family name that is not registered.
        UsageError: an unknown model type in ``only``, or a negative ``jobs``.
    """
    from ..families import REGISTRY, get_family

    family_names = list(dict.fromkeys(get_family(n).name for n in families)) if families else list(REGISTRY)
    types = _model_types(only)
    if jobs is None:
        jobs = _cpus()
    if jobs < 0:
        raise OptionError("jobs", f"must be 0 or more, got {jobs}")
    t0 = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    if jobs == 0:
        from .worker import scan_type

        for i, model_type in enumerate(types):
            yield Progress(i, len(types), model_type)
            results[model_type] = scan_type(model_type, family_names, 0)
    else:
        jobs = min(jobs, len(types)) or 1
        from .pool import save_costs, scan_in_pool

        yield from scan_in_pool(types, family_names, jobs, timeout, results)
        save_costs(results)
    yield Progress(len(types), len(types), "done")
    import torch
    import transformers

    return CoverageReport(
        families=family_names,
        results=[from_plain(TypeResult, results[t]) for t in sorted(results)],  # the workers' answers
        jobs=jobs,
        seconds=time.perf_counter() - t0,
        transformers_version=transformers.__version__,
        torch_version=torch.__version__,
    )


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _model_types(only: Iterable[str] | None) -> list[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    known = list(CONFIG_MAPPING_NAMES)
    if not only:
        return known
    wanted = list(dict.fromkeys(only))
    unknown = [t for t in wanted if t not in CONFIG_MAPPING_NAMES]
    if unknown:
        close = [k for k in known if any(u in k or k in u for u in unknown)][:5]
        hint = f" (similar: {', '.join(close)})" if close else ""
        raise UsageError(f"unknown model type(s) {', '.join(map(repr, unknown))}{hint}; see `fusion-core coverage`")
    return wanted


def format_report(report: CoverageReport) -> str:
    """The report as readable text: per family, the fusable and rejected types, then failures."""
    from ..text import table

    out = [
        f"coverage: {len(report.results)} model types, {len(report.instantiated)} instantiated on the meta device, "
        f"{len(report.failed)} could not be; {report.jobs} worker(s), {report.seconds:.1f} s "
        f"(transformers {report.transformers_version})"
    ]
    for name in report.families:
        fusable, rejected = report.fusable(name), report.rejected(name)
        out.append(f"\n[{name}] fusable in {len(fusable)} model type(s)")
        if fusable:
            rows = [(r.model_type, r.model_class, _modules(m)) for r in fusable for m in r.matches(name)]
            out.append(table(rows, ["model type", "class", "fused modules"]))
        out.append(f"\n[{name}] candidates rejected in {len(rejected)} model type(s)")
        if rejected:
            rows = [(r.model_type, _modules(c), c["reason"]) for r in rejected for c in r.rejected(name)]
            out.append(table(rows, ["model type", "rejected modules", "reason"]))
    convs = [r for r in report.results if r.convolutions]
    if convs:
        total = sum(r.convolutions["non_overlapping"] for r in convs)
        loose = [
            (r.model_type, ", ".join(r.convolutions["unexplained"])) for r in convs if r.convolutions["unexplained"]
        ]
        out.append(
            f"\nnon-overlapping convolutions: {total} in {sum(1 for r in convs if r.convolutions['non_overlapping'])} "
            f"model type(s); without a match or a reason: {len(loose)} type(s)"
        )
        if loose:
            out.append(table(loose, ["model type", "convolutions"]))
    failed = report.failed
    out.append(f"\ncould not instantiate: {len(failed)} model type(s)")
    if failed:
        rows = [(r.model_type, r.stage, f"{r.error_type}: {r.error}"[:160]) for r in failed]
        out.append(table(rows, ["model type", "stage", "error"]))
    return "\n".join(out)


def _modules(entry: dict[str, Any]) -> str:
    paths = entry["modules"]
    more = f" x{len(paths)} ({paths[0]}, ...)" if len(paths) > 1 else f" ({paths[0]})"
    return f"{entry['class']}{more}"
