"""A check result as plain text, one formatting for every reader: the CLI's ``check`` output
(:func:`fusion_core.cli.execute.format_check`), the HTML / Markdown report
(:mod:`fusion_core.report.documents`), the app's Checks tab (its table, chart labels, banners
and verdict lines: ``fusion_gui/panels/checks.py``) and the tree's check column
(``fusion_gui/models/overlay.py``) build their rows, cells, verdict words and intervals here.

Plain strings only: no torch, no Qt. The strings keep what came from the model folder as it
is; each reader escapes for where it writes (the terminal, HTML, Markdown, Qt's plain text).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
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
    path: str | None = None  # the module's path ("" at the model's root); None on the end-to-end row
    family: str = ""
    note: str = ""  # why it failed, and the comparison's note ("NaN at the same positions ...")
    passed: bool = False


#: the model end to end, where a name is short (a chart's bar, a list of what failed)
END_TO_END = "end to end"

#: the words of a speed verdict in a banner
SPEED_WORDS = {"faster": "faster", "slower": "SLOWER", "same": "no measurable difference"}


def module_name(path: str) -> str:
    """A module's name as every reader shows it: its path, ``(model)`` at the model's root."""
    return path or MODEL_ENTRY


def entry_name(entry: str) -> str:
    """Where end to end entered: a submodule, or the whole model."""
    return "the whole model" if entry in ("", MODEL_ENTRY) else entry


def pass_word(passed: bool) -> str:
    return "pass" if passed else "FAIL"


def speed_words(verdict: str) -> str:
    """``faster``, ``SLOWER``, ``no measurable difference`` or the verdict itself ("undetermined")."""
    return SPEED_WORDS.get(verdict, verdict)


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
                module_name(m.path),
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
                m.path,
                m.family,
                "; ".join(x for x in (m.error, c.note if c else "") if x),
                m.passed,
            )
        )
    e = result.end_to_end
    if e is not None and e.ran:
        rows.append(
            CheckRow(
                f"{END_TO_END} ({e.output})",
                e.entry or result.model_class,
                f"{e.input_kind} inputs",
                " ".join(f"{k}:{'x'.join(map(str, v))}" for k, v in e.input_shapes.items()),
                g2(e.comparison.max_abs_diff),
                g2(e.comparison.limit),
                f"{e.timing.original_ms:.3f}" if e.timing else "",
                f"{e.timing.fused_ms:.3f}" if e.timing else "",
                e.timing,
                "100%",
                pass_word(e.passed),
                None,
                "",
                e.comparison.note,
                e.passed,
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
    return f"end to end: measured {e.timing.verdict_text()}; projected from module shares {projected_text(e)}"


def projected_text(e: Any) -> str:
    """``1.02x [1.01, 1.03]``: end to end as projected from the module shares ("" without a projection)."""
    if e.projected_speedup is None:
        return ""
    projected = f"{e.projected_speedup:.2f}x"
    if e.projected_low is not None and e.projected_high is not None:
        projected += f" [{e.projected_low:.2f}, {e.projected_high:.2f}]"
    return projected


def peak_lines(result: Any) -> list[str]:
    """Peak memory per timed module and end to end, where the device measures it (CUDA)."""
    peaks = [
        (module_name(m.path), m.timing) for m in result.modules if m.timing and m.timing.original_peak_mb is not None
    ]
    e = result.end_to_end
    if e is not None and e.timing is not None and e.timing.original_peak_mb is not None:
        peaks.append((END_TO_END, e.timing))
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
        return f"exact: NO, not exact or not verified: {', '.join(failed_parts(result))}"
    speed = result.faster
    e = result.end_to_end
    if speed:
        return (
            f"exact: yes; speed: end to end {speed_words(speed)} ({e.timing.interval_text()}, {e.timing.floor_text()})"
        )
    return f"exact: yes; speed: end to end {e.skipped if e is not None else 'not run'}"


def failed_parts(result: Any) -> list[str]:
    """What is not exact or not verified: modules by name, then end to end, generation, compiled."""
    failed = [module_name(m.path) for m in result.modules if not m.passed]
    if result.end_to_end is not None and not result.end_to_end.passed:
        failed.append(END_TO_END)
    if result.generation is not None and not result.generation.passed:
        failed.append("generation")
    if result.compiled is not None and not result.compiled.passed:
        failed.append("compiled")
    return failed


# the app's summary lines: a kind ("ok", "warn", "error", "info": the reader picks the colour),
# the words it shows first (bold in the app), the rest, and notes on lines of their own
class Line(NamedTuple):
    kind: str
    head: str
    rest: str = ""
    notes: tuple[str, ...] = ()


def tolerance_text(result: Any) -> str:
    """``limit for float32: atol 1e-05 × min(1, max |original|) + rtol 1e-05 × max |original|``."""
    tol = result.tolerance
    return f"limit for {result.dtype}: atol {tol.atol} × min(1, max |original|) + rtol {tol.rtol} × max |original|"


def exact_line(result: Any) -> Line:
    """Exact or not: every fused module verified (and how), or what is not; nothing checked is no pass."""
    if result.nothing_to_fuse:
        return Line("warn", " ".join(result.messages) or "Nothing to check.")
    rule = tolerance_text(result)
    if result.passed:
        ways = ", ".join(f"{n} on {k}" for k, n in Counter(m.verified_by for m in result.modules).items())
        return Line("ok", f"Exact: all {len(result.modules)} fused module(s) verified", f" ({ways}; {rule}).")
    return Line("error", "NOT exact or not verified", f": {', '.join(failed_parts(result))} ({rule}).")


def speed_line(result: Any) -> Line | None:
    """The end-to-end speed verdict, apart from exactness, with the check's warnings (None: no end to end)."""
    e = result.end_to_end
    if result.nothing_to_fuse or e is None:
        return None
    if not e.ran:
        line = Line("info", f"Speed end to end: {e.skipped}")
    else:
        t = e.timing
        rest = f" — {t.interval_text()} (95% interval; {t.floor_text()})"
        if e.projected_speedup is not None:
            rest += f"; projected from the fused modules' shares: {projected_text(e)}"
        kind = {"faster": "ok", "slower": "warn"}.get(t.verdict, "info")
        line = Line(kind, f"Speed end to end: {speed_words(t.verdict)}", rest)
    if result.warnings:
        line = line._replace(kind="warn", notes=tuple(f"⚠ {w}" for w in result.warnings))
    return line


def end_line(result: Any) -> Line | None:
    """End to end: what ran (output, entry, inputs), its difference against the limit, the medians."""
    e = result.end_to_end
    if e is None:
        return None
    if not e.ran:
        return Line("info", "End to end", f": {e.skipped}")
    c, t = e.comparison, e.timing
    ms = f"; original {t.original_ms:.2f} ms, fused {t.fused_ms:.2f} ms" if t is not None else ""
    rest = (
        f" ({e.output} of {entry_name(e.entry)}, {e.input_kind} inputs): max abs diff {c.max_abs_diff:.2e}"
        f" (limit {c.limit:.1e}) — {pass_word(e.passed)}{ms}"
    )
    return Line("ok" if e.passed else "error", "End to end", rest, tuple(e.notes))


def verdict_lines(result: Any) -> list[tuple[str, str]]:
    """(kind, line): one per family, then generation and compiled when asked; kind "pass", "fail" or "other"."""
    lines = [("pass" if v.exact else "fail", v.line) for v in result.family_verdicts]
    g, compiled = result.generation, result.compiled
    if g is not None:  # greedy decoding, original against fused
        lines.append(({"identical": "pass", "diverges": "fail"}.get(g.verdict, "other"), g.line))
    if compiled is not None:  # both models under torch.compile
        kind = "other" if compiled.comparison is None else "pass" if compiled.passed else "fail"
        lines.append((kind, compiled.line))
    return lines


def upstream_lines(up: Any) -> list[str]:
    """Upstream's verdict against ours, how far its fused output is from the original (ours
    beside it) and the leak, a line each (the report's; the summary joins them)."""
    differs = any(f.status == "differs" for f in up.families)
    head = "DIFFERS from ours" if differs else "matches ours" if up.matches_ours else "fuses none of these families"
    lines = [f"upstream (transformers {up.transformers_version}) {head}"]
    if up.max_abs_diff is not None:
        ours = f" (ours: {up.ours_max_abs_diff:.2g})" if up.ours_max_abs_diff is not None else ""
        within = "within" if up.within_tolerance else "OUTSIDE"
        lines.append(f"upstream fused vs the original: max abs diff {up.max_abs_diff:.2g}, {within} tolerance{ours}")
    if up.leak is not None:
        lines.append(f"LEAK: {up.leak_detail}" if up.leak else "no leak into a later plain load")
    return lines


def upstream_summary(up: Any) -> str:
    """One line: the verdict, the diff, the leak and each family's status (or the error)."""
    if up.error:
        return f"upstream (transformers {up.transformers_version}): {up.error}"
    verdict, *findings = upstream_lines(up)
    families = "families: " + ", ".join(f"{f.name} {f.status}" for f in up.families)
    return f"{verdict}: " + "; ".join([*findings, families])


def upstream_line(up: Any) -> Line:
    """transformers' own fusion against ours, one family a part (``up.summary`` when none)."""
    differs = any(f.status == "differs" for f in up.families)
    verdict = " — differs from ours" if differs else (" — matches ours" if up.matches_ours else "")
    families = "; ".join(f"{f.name}: {f.status}" for f in up.families)
    kind = "warn" if differs else "ok" if up.matches_ours else "info"
    return Line(kind, f"transformers' own fusion (upstream){verdict}:", f" {families or up.summary}")


def upstream_detail(up: Any) -> str:
    """The summary, then every family's finding on a line of its own (indented: the CLI's prose
    continues so)."""
    if up.error or not up.available:
        return up.summary
    return up.summary + "".join(f"\n  {f.name} {f.status}" + (f": {f.detail}" if f.detail else "") for f in up.families)


# the tree's check column -------------------------------------------------------------------
VERIFIED_SHORT = {"end-to-end inputs": "e2e", "module sample inputs": "alone"}


def tree_cell(m: Any) -> str:
    """``1.42x [1.30, 1.55] pass · 4% · e2e``: a checked module's speedup with its interval, its
    result, its share of end-to-end time and how it was verified; ``error`` when it failed to run."""
    if m.error:
        return "error"
    parts = [f"{m.timing.interval_text() if m.timing is not None else '—'} {pass_word(m.passed)}"]
    if m.share_of_end_to_end is not None:
        parts.append(f"{m.share_of_end_to_end:.0%}")
    if m.verified_by in VERIFIED_SHORT:
        parts.append(VERIFIED_SHORT[m.verified_by])
    return " · ".join(parts)


def tree_summary(checks: Iterable[Any]) -> str:
    """``all 3 pass · 12% of time`` or ``1 of 3 FAIL ...`` over the checked modules below a node."""
    checks = list(checks)
    if not checks:
        return ""
    fails = sum(1 for m in checks if not m.passed)
    share = sum(m.share_of_end_to_end for m in checks if m.share_of_end_to_end is not None)
    verdict = f"{fails} of {len(checks)} FAIL" if fails else f"all {len(checks)} pass"
    return f"{verdict} · {share:.0%} of time" if share else verdict


def module_detail(m: Any) -> str:
    """A checked module in one line, after its name: the speed verdict, the share, the difference
    against its limit, the result and how it was verified."""
    if m.error:
        return f"error: {m.error}"
    speed = speed_text(m.timing) or "not timed"
    share = share_text(m.share_of_end_to_end, m.share_low, m.share_high)
    share = f", {share} of end-to-end time" if share else ""
    c = m.comparison
    diff = f"; max |diff| {c.max_abs_diff:.2e} vs tolerance {c.limit:.2e}" if c is not None else "; not compared"
    by = f", verified by {m.verified_by}" if m.verified_by else ""
    return f"{speed}{share}{diff}: {pass_word(m.passed)}{by}"


def tree_verdict(checks: Iterable[Any], summary: bool = False) -> str:
    """One word for the checked modules a row holds: ``FAIL`` when any failed; over a summary
    (ancestors, folds) ``checked``; else ``faster`` (all faster), ``slower`` (any), or ``same``."""
    checks = list(checks)
    if not checks:
        return ""
    if any(not m.passed for m in checks):
        return "FAIL"
    if summary:
        return "checked"
    verdicts = {m.timing.verdict if m.timing is not None else "" for m in checks}
    if verdicts == {"faster"}:
        return "faster"
    return "slower" if "slower" in verdicts else "same"
