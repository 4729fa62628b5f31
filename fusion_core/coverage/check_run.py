"""``fusion-core coverage --check``: the parent side (which types, workers, resume, report).

The types checked are those whose meta model has a module some family fuses (the meta scan
of :mod:`fusion_core.coverage.scan` finds them, or ``--types`` names them). Each one is
checked in a worker process (:mod:`fusion_core.coverage.checked`), through the coverage pool:
a type that hangs is killed and reported, one that crashes its worker is one row. Every
answer is written to a results file as it comes, so an interrupted run resumes where it
stopped (``resume=True``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..boundary.convert import converter
from ..progress import CancelToken, Progress, ProgressCallback, drive
from .checked import FAILED, FALLBACK, NOT_BUILT, STATUSES, VERIFIED
from .pool import write_json

SCHEMA_VERSION = 1
#: seconds per model type (a few variants, each built, saved and checked): Mistral Large 4's tiny
#: model took 709 s on its 1540 px image and 3000 tokens, on a core shared with other work
DEFAULT_CHECK_TIMEOUT = 900.0


@dataclass(frozen=True)
class CheckedType:
    """One model type's end-to-end coverage (``status``: one of :data:`STATUSES`)."""

    model_type: str
    status: str
    reason: str = ""
    input_kinds: list[str] = field(default_factory=list)
    families: list[str] = field(default_factory=list)
    seconds: float = 0.0
    variant: str = ""  # the shrunk config checked ("tiny", "tiny, wider heads", "shallow")
    params: int = 0
    model_class: str = ""
    tried: list[str] = field(default_factory=list)


@dataclass
class CheckCoverage:
    """The checked types, sorted by model type, and the run's facts."""

    checked: list[CheckedType]
    jobs: int
    seconds: float
    resumed: int = 0  # types taken from an earlier run's results file
    transformers_version: str = ""
    torch_version: str = ""

    def count(self, status: str) -> int:
        return sum(1 for c in self.checked if c.status == status)

    @property
    def built(self) -> int:
        return len(self.checked) - self.count(NOT_BUILT)


def _plain(self: CheckCoverage) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "transformers_version": self.transformers_version,
        "torch_version": self.torch_version,
        "jobs": self.jobs,
        "seconds": round(self.seconds, 1),
        "resumed": self.resumed,
        "counts": {s: self.count(s) for s in STATUSES},
        "checked": [
            {
                "model_type": c.model_type,
                "status": c.status,
                "input_kinds": c.input_kinds,
                "families": c.families,
                "reason": c.reason,
                "seconds": c.seconds,
                "variant": c.variant,
                "params": c.params,
                "model_class": c.model_class,
            }
            for c in self.checked
        ],
    }


converter.register_unstructure_hook(CheckCoverage, _plain)


def results_file() -> Path:
    """Where answers are kept as they come (per transformers version: a resumed run matches)."""
    import transformers

    from ..model.demo import cache_root

    return cache_root() / f"coverage-check-tf{transformers.__version__}.json"


def _load_results(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict) and v.get("status") in STATUSES}


def fusable_types(only: Sequence[str] | None = None, jobs: int | None = None) -> list[str]:
    """Model types whose meta model has a module some registered family fuses."""
    from .scan import scan

    report = scan(None, jobs, only)
    return sorted({r.model_type for r in report.results for f in report.families if r.matches(f)})


def check_coverage(
    types: Sequence[str] | None = None,
    jobs: int | None = None,
    *,
    timeout: float = DEFAULT_CHECK_TIMEOUT,
    resume: bool = False,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
) -> CheckCoverage:
    """Check tiny models of ``types`` (see :func:`coverage_check`) and return the report."""
    return drive(coverage_check(types, jobs, timeout=timeout, resume=resume), progress, cancel)


def coverage_check(
    types: Sequence[str] | None = None,
    jobs: int | None = None,
    *,
    timeout: float = DEFAULT_CHECK_TIMEOUT,
    resume: bool = False,
) -> Generator[Progress, None, CheckCoverage]:
    """Build and check a tiny model of each type, in worker processes, yielding progress.

    Args:
        types: model types (default: every type with a fusable module, found by the meta scan).
        jobs: worker processes (default: the CPUs available); ``0`` checks in this process.
        timeout: seconds allowed per type.
        resume: keep the answers of an earlier run (its results file) and check only the rest.

    Raises:
        UsageError: an unknown model type.
        OptionError: a negative ``jobs``.
    """
    from ..boundary.options import OptionError
    from ..families import REGISTRY
    from .scan import _cpus, _model_types

    t0 = time.perf_counter()
    if jobs is not None and jobs < 0:
        raise OptionError("jobs", f"must be 0 or more, got {jobs}")
    if types:
        wanted = _model_types(types)
    else:
        yield Progress(0, 0, "finding the types with a fusable module")
        wanted = fusable_types(jobs=jobs)
    path = results_file()
    stored = _load_results(path)  # other types' answers stay in the file
    earlier = stored if resume else {}
    results: dict[str, dict[str, Any]] = {t: earlier[t] for t in wanted if t in earlier}
    resumed = len(results)
    todo = [t for t in wanted if t not in results]
    families = list(REGISTRY)
    jobs = _cpus() if jobs is None else jobs
    started = time.perf_counter()
    if todo and jobs == 0:
        from .checked import check_type

        for i, model_type in enumerate(todo):
            yield Progress(resumed + i, len(wanted), _eta(model_type, i, len(todo), started))
            results[model_type] = check_type(model_type, families, timeout)
            write_json(path, {**stored, **results})
    elif todo:
        from .pool import scan_in_pool

        fresh: dict[str, dict[str, Any]] = {}
        saved = 0
        try:
            for p in scan_in_pool(todo, families, min(jobs, len(todo)) or 1, timeout, fresh, task="check", build=True):
                if len(fresh) != saved:
                    saved = len(fresh)
                    results.update({t: _from_pool(r) for t, r in fresh.items()})
                    write_json(path, {**stored, **results})
                yield Progress(resumed + len(fresh), len(wanted), _eta(p.message, len(fresh), len(todo), started))
        finally:
            results.update({t: _from_pool(r) for t, r in fresh.items()})
            write_json(path, {**stored, **results})
    yield Progress(len(wanted), len(wanted), "done")
    import torch
    import transformers

    checked = [converter.structure(_known(results[t]), CheckedType) for t in sorted(results)]
    return CheckCoverage(
        checked=checked,
        jobs=jobs,
        seconds=time.perf_counter() - t0,
        resumed=resumed,
        transformers_version=transformers.__version__,
        torch_version=torch.__version__,
    )


def _eta(message: str, done: int, total: int, started: float) -> str:
    if not done:
        return message
    left = (time.perf_counter() - started) / done * (total - done)
    return f"{message} · ETA {left / 60:.0f} min" if left >= 60 else f"{message} · ETA {left:.0f} s"


def _from_pool(result: dict[str, Any]) -> dict[str, Any]:
    """A pool's own answer for a type it lost (timeout, crash) in this run's form."""
    if result.get("status") in STATUSES and "reason" in result:
        return result
    why = f"{result.get('stage', 'crash')}: {result.get('error', '')}".strip(": ")
    return {"model_type": result["model_type"], "status": FAILED, "reason": why}


def _known(result: dict[str, Any]) -> dict[str, Any]:
    names = set(CheckedType.__dataclass_fields__)
    return {k: v for k, v in result.items() if k in names}


def format_check(report: CheckCoverage) -> str:
    """The report as text: the counts, then one row per type."""
    from ..text import printable, table

    n = len(report.checked)
    counts = ", ".join(f"{report.count(s)} {s}" for s in STATUSES)
    head = (
        f"coverage, checked end to end: {n} model type(s): {counts}; {report.jobs} worker(s), {report.seconds:.0f} s "
        f"(transformers {report.transformers_version})"
    )
    if report.resumed:
        head += f"; {report.resumed} from an earlier run"
    if n:
        built, verified = report.built, report.count(VERIFIED)
        head += (
            f"\nbuilt tiny {built}/{n} ({100 * built / n:.1f}%); of those, verified end to end {verified}/{built} "
            f"({100 * verified / max(built, 1):.1f}%), fallback {report.count(FALLBACK)}, failed {report.count(FAILED)}"
        )
    rows = [
        (c.model_type, c.status, "+".join(c.input_kinds), ",".join(c.families), printable(c.reason)[:160])
        for c in report.checked
    ]
    return head + "\n" + table(rows, ["model type", "status", "inputs", "families", "reason"])


def markdown(report: CheckCoverage, command: str) -> str:
    """``docs/coverage.md``: the summary, the judged ratios and the table, with the command."""
    n = len(report.checked)
    built = report.built
    verified = report.count(VERIFIED)

    def pct(a: int, b: int) -> str:
        return f"{100 * a / b:.1f}%" if b else "n/a"

    lines = [
        "# Coverage: every architecture with a fusable module, checked end to end",
        "",
        f"Generated by `{command}` with transformers {report.transformers_version}, torch "
        f"{report.torch_version}, {report.jobs} worker(s), in {report.seconds / 60:.1f} min"
        + (
            f" ({report.resumed} types' answers taken from an earlier run's results file; "
            f"the checks of all types took {sum(c.seconds for c in report.checked) / 60:.1f} min of worker time)."
            if report.resumed
            else "."
        ),
        "",
        "Each model type whose meta model has a module a family fuses gets a tiny random model,",
        "built from its default config shrunk (`fusion_core/coverage/tiny.py`), saved with",
        "`save_pretrained`, and checked with every family that applies, on the inputs the check",
        "makes for each modality the model takes. See `docs/checks.md` for what a check verifies.",
        "",
        "| | types | share |",
        "|---|---|---|",
        f"| model types with a fusable module | {n} | |",
        f"| built tiny | {built} | {pct(built, n)} of them |",
    ]
    for status in STATUSES[:3]:
        lines.append(f"| {status} | {report.count(status)} | {pct(report.count(status), built)} of those built |")
    lines.append(f"| not built tiny | {report.count(NOT_BUILT)} | {pct(report.count(NOT_BUILT), n)} of all |")
    lines += [
        "",
        f"Verified end to end: {verified} of {built} built ({pct(verified, built)}).",
        "",
        "| model type | status | inputs fed | families | reason |",
        "|---|---|---|---|---|",
    ]
    for c in report.checked:
        reason = c.reason.replace("|", "\\|").replace("\n", " ")[:300]
        lines.append(
            f"| {c.model_type} | {c.status} | {'+'.join(c.input_kinds)} | {', '.join(c.families)} | {reason} |"
        )
    return "\n".join(lines) + "\n"
