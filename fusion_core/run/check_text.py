"""A check result as plain text, one formatting for every reader: the CLI's ``check`` output
(:func:`fusion_core.cli.execute.format_check`) and the HTML / Markdown report
(:mod:`fusion_core.report.documents`) build their rows and lines here.

Plain strings only: no torch, no Qt. The strings keep what came from the model folder as it
is; each reader escapes for where it writes (the terminal, HTML, Markdown).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .results import MIN_VERDICT_ROUNDS, MODEL_ENTRY

#: what the timings mean, below every table of them
TIMINGS_NOTE = (
    "timings: after a warm-up, rounds of original, fused and original again in rotating order; speedup ="
    " median ratio original/fused with its 95% bootstrap interval; noise = the same for original/original"
    f" (faster or slower only clear of 1 by more than its widest side, from {MIN_VERDICT_ROUNDS} rounds on,"
    " never on a busy machine)"
)


class CheckRow(NamedTuple):
    """One row of the check's table: a fused module, or the model end to end (the last row)."""

    module: str
    classes: str
    verified_by: str
    inputs: str
    max_abs: str
    limit: str
    original_ms: str
    fused_ms: str
    timing: Any  # a Timing, or None when not timed
    share: str
    result: str  # "pass" or "FAIL <why>"


def g2(x: float | None) -> str:
    """A difference or a limit, two significant digits ("" when there is none)."""
    return "" if x is None else f"{x:.2g}"


def speed_text(t: Any) -> str:
    """A ratio is never printed without its 95% interval and its noise floor."""
    if t is None:
        return ""
    return t.verdict_text() + (" noisy" if t.noisy else "")


def share_text(x: float | None, low: float | None = None, high: float | None = None) -> str:
    if x is None:
        return ""
    return f"{x:.1%} [{low:.1%}, {high:.1%}]" if low is not None and high is not None else f"{x:.1%}"


def check_rows(result: Any) -> list[CheckRow]:
    """The rows of a :class:`~fusion_core.run.results.CheckResult`: its modules, then the
    model end to end when that ran."""
    rows = []
    for m in result.modules:
        c, t = m.comparison, m.timing
        rows.append(
            CheckRow(
                m.path or MODEL_ENTRY,
                f"{m.original_class} -> {m.fused_class}",
                m.verified_by or "not verified",
                " ".join("x".join(map(str, s)) for s in m.input_shapes),
                g2(c.max_abs_diff if c else None),
                g2(c.limit if c else None),
                f"{t.original_ms:.3f}" if t else "",
                f"{t.fused_ms:.3f}" if t else "",
                t,
                share_text(m.share_of_end_to_end, m.share_low, m.share_high),
                "pass" if m.passed else f"FAIL {m.error}".strip(),
            )
        )
    e = result.end_to_end
    if e is not None and e.ran:
        rows.append(
            CheckRow(
                f"end to end ({e.output})",
                e.entry or result.model_class,
                f"{e.input_kind} inputs",
                " ".join(f"{k}:{'x'.join(map(str, v))}" for k, v in e.input_shapes.items()),
                g2(e.comparison.max_abs_diff),
                g2(e.comparison.limit),
                f"{e.timing.original_ms:.3f}" if e.timing else "",
                f"{e.timing.fused_ms:.3f}" if e.timing else "",
                e.timing,
                "100%",
                "pass" if e.passed else "FAIL",
            )
        )
    return rows


def end_to_end_line(result: Any) -> str:
    """``end to end: not run: <why>``, or the measured speed-up with the projection from the
    module shares ("" when there is nothing to say)."""
    e = result.end_to_end
    if e is None:
        return ""
    if not e.ran:
        return f"end to end: {e.skipped}"
    if e.projected_speedup is None or e.timing is None:
        return ""
    projected = f"{e.projected_speedup:.2f}x"
    if e.projected_low is not None and e.projected_high is not None:
        projected += f" [{e.projected_low:.2f}, {e.projected_high:.2f}]"
    return f"end to end: measured {e.timing.verdict_text()}; projected from module shares {projected}"


def peak_lines(result: Any) -> list[str]:
    """Peak memory per timed module and end to end, where the device measures it (CUDA)."""
    peaks = [
        (m.path or MODEL_ENTRY, m.timing) for m in result.modules if m.timing and m.timing.original_peak_mb is not None
    ]
    e = result.end_to_end
    if e is not None and e.timing is not None and e.timing.original_peak_mb is not None:
        peaks.append(("end to end", e.timing))
    return [
        f"peak memory {n}: original {t.original_peak_mb:.1f} MiB, fused {t.fused_peak_mb:.1f} MiB" for n, t in peaks
    ]


def machine_line(result: Any) -> str:
    """``workload: torch 2.x, 2 thread(s), float32 on cpu; load average 0.5 -> 0.7`` ("" before a run)."""
    w = result.workload
    if not w.torch_version:
        return ""
    loads = f"; load average {w.load_before:.1f} -> {w.load_after:.1f}" if w.load_before is not None else ""
    cpu = f"; {w.cpu}" if w.cpu else ""
    return f"workload: torch {w.torch_version}, {w.threads} thread(s), {w.dtype} on {w.device}{cpu}{loads}"


def workload_options(result: Any) -> list[tuple[str, str]]:
    """What the check ran at, option by option (``None`` sizes: the model's own)."""
    w = result.workload
    own = "the model's own"
    budget = "" if w.time_budget is None else f"{w.time_budget:g} s per timing"
    memory = "the memory available" if w.max_memory is None else f"{w.max_memory / 2**30:.2f} GiB"
    generation = result.generation
    generate = f"{w.generate} new tokens" if w.generate else "no"
    if generation is not None and w.generate:
        generate += f" ({generation.cache} cache)"
    rows = [
        ("dtype", result.dtype),
        ("device", result.device),
        ("batch", str(w.batch)),
        ("text tokens", own if w.seq_len is None else str(w.seq_len)),
        ("image size", own if w.image_size is None else f"{w.image_size} px"),
        ("video frames", own if w.frames is None else str(w.frames)),
        ("seed", str(result.seed)),
        ("timed rounds (at least)", str(result.repeats)),
        ("time budget", budget or "not recorded"),
        ("max memory", memory),
        ("generate", generate),
        ("compiled too", f"yes ({result.compiled.backend})" if result.compiled is not None else "no"),
        ("modules only", "yes" if result.modules_only else "no"),
        ("threads", "" if w.threads is None else str(w.threads)),
        ("torch", w.torch_version),
    ]
    if w.load_before is not None and w.load_after is not None:
        rows.append(("load average (before -> after)", f"{w.load_before:.2f} -> {w.load_after:.2f}"))
    return [(k, v) for k, v in rows if v]


def banner(result: Any) -> str:
    """The verdict line: "exact" (the checks) kept apart from "faster" (the timings)."""
    if not result.passed:
        failed = [m.path or MODEL_ENTRY for m in result.modules if not m.passed]
        if result.end_to_end is not None and not result.end_to_end.passed:
            failed.append("end to end")
        if result.generation is not None and not result.generation.passed:
            failed.append("generation")
        if result.compiled is not None and not result.compiled.passed:
            failed.append("compiled")
        return f"exact: NO, not exact or not verified: {', '.join(failed)}"
    speed = result.faster
    e = result.end_to_end
    if speed:
        how = {"faster": "faster", "slower": "SLOWER", "same": "no measurable difference"}.get(speed, speed)
        return f"exact: yes; speed: end to end {how} ({e.timing.interval_text()}, {e.timing.floor_text()})"
    return f"exact: yes; speed: end to end {e.skipped if e is not None else 'not run'}"
