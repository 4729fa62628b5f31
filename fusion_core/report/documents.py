"""Reports of a comparison or a check: one self-contained HTML file (inline SVG chart, tables,
verdicts, no external resource) or Markdown for a pull request.

Every string from a model (names, keys, classes, messages) is escaped: ``html.escape`` in
HTML, table-cell escaping (pipes, backticks, brackets, line breaks) in Markdown, control
characters written as escapes (:func:`fusion_core.text.printable`) in both.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..text import elide_dotted, human_count, printable
from .tree_image import write_text

STATUS_COLOURS = {
    "equal": "#2e7d32", "renamed": "#1565c0", "transformed": "#6a1b9a", "close": "#f9a825", "changed": "#ef6c00",
    "added": "#00838f", "removed": "#c62828", "different": "#c62828", "skipped": "#757575", "passed": "#2e7d32",
    "failed": "#c62828",
}  # fmt: skip
MAX_CELL = 300
STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#212121}table{border-collapse:collapse;margin:.5em 0 1.5em}"
    "td,th{border:1px solid #ccc;padding:2px 8px;font-size:13px;text-align:left}th{background:#f5f5f5}"
    "td.n{text-align:right;font-variant-numeric:tabular-nums}.ok{color:#2e7d32}.bad{color:#c62828}"
    "code{font-size:12px}.verdict{font-size:1.2em;font-weight:bold}"
)


# -- escaping ---------------------------------------------------------------------------
def _h(value: Any, limit: int = MAX_CELL) -> str:
    text = printable(str(value))
    return html.escape(text if len(text) <= limit else text[: limit - 1] + "…")


def _m(value: Any, limit: int = MAX_CELL) -> str:
    """A Markdown table cell: plain text, nothing it holds can start markup or end the cell."""
    text = printable(str(value)).replace("\\", "\\\\")
    for ch in "|`*_[]<>#":
        text = text.replace(ch, "\\" + ch)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _shape(shape: Any) -> str:
    return "x".join(map(str, shape)) if shape is not None else ""


def _g(x: float | None) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


# -- building blocks ---------------------------------------------------------------------
def _html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], numeric: Sequence[int] = ()) -> str:
    if not rows:
        return "<p><i>none</i></p>"
    head = "".join(f"<th>{_h(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            colour = STATUS_COLOURS.get(str(v)) if i == 0 else None
            style = f' style="color:{colour}"' if colour else ""
            cls = ' class="n"' if i in numeric else ""
            cells.append(f"<td{cls}{style}>{_h(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    if not rows:
        return "_none_\n"
    out = ["| " + " | ".join(_m(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(_m(v) for v in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def bar_chart(groups: Sequence[tuple[str, dict[str, float]]], title: str = "", unit: str = "") -> str:
    """An inline SVG of stacked horizontal bars: one bar per group, one segment per status."""
    width, left, bar_h = 720, 110, 22
    height = 30 + len(groups) * (bar_h + 10) + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        f'font-size="12" role="img" aria-label="{_h(title)}">'
    ]
    if title:
        parts.append(f'<text x="0" y="16" font-weight="bold">{_h(title)}</text>')
    y = 28
    used: dict[str, None] = {}
    for name, counts in groups:
        total = sum(counts.values())
        parts.append(f'<text x="0" y="{y + 15}">{_h(name)}</text>')
        x = float(left)
        for status, n in counts.items():
            if not n or total <= 0:
                continue
            w = (width - left - 10) * n / total
            colour = STATUS_COLOURS.get(status, "#90a4ae")
            parts.append(
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colour}">'
                f"<title>{_h(status)}: {n:g}{unit}</title></rect>"
            )
            if w > 28:
                parts.append(f'<text x="{x + 4:.1f}" y="{y + 15}" fill="#ffffff">{n:g}</text>')
            used[status] = None
            x += w
        y += bar_h + 10
    x = float(left)
    for status in used:
        parts.append(
            f'<rect x="{x:.0f}" y="{y + 2}" width="10" height="10" fill="{STATUS_COLOURS.get(status, "#90a4ae")}"/>'
        )
        parts.append(f'<text x="{x + 14:.0f}" y="{y + 11}">{_h(status)}</text>')
        x += 30 + 7 * len(status)
    parts.append("</svg>")
    return "".join(parts)


def _page(title: str, body: list[str]) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_h(title)}</title>'
        f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


# -- a comparison ------------------------------------------------------------------------
def _comparison_tables(c: Any) -> list[tuple[str, list[str], list[tuple[Any, ...]], tuple[int, ...]]]:
    modules = [
        (m.status, m.path or "(root)", m.class_a or "", m.class_b or "",
         "" if m.params_a is None else f"{m.params_a:,}", "" if m.params_b is None else f"{m.params_b:,}",
         ", ".join(m.changes))
        for m in c.modules if m.status != "equal"
    ]  # fmt: skip
    keys = [
        (k.status, k.name, k.key_a or "", f"{_shape(k.stored('a'))} {k.dtype_a or ''}".strip(), k.key_b or "",
         f"{_shape(k.stored('b'))} {k.dtype_b or ''}".strip(), ", ".join(v for v in (k.via_a, k.via_b) if v),
         ", ".join(k.changes))
        for k in c.keys if k.status != "equal"
    ]  # fmt: skip
    tables = [
        (
            "Modules that differ",
            ["status", "module", "class A", "class B", "params A", "params B", "what"],
            modules,
            (4, 5),
        ),
        (
            "Keys that are not stored alike",
            ["status", "model key", "key A", "A", "key B", "B", "via", "what"],
            keys,
            (),
        ),
    ]
    if c.values is not None:
        values = [
            (v.status, v.name, f"{v.differing:.4%}", _g(v.max_abs), _g(v.max_rel), f"{v.atol:g} / {v.rtol:g}", v.how, v.note)
            for v in c.values if v.status != "equal"
        ]  # fmt: skip
        tables.append(
            ("Tensors whose values differ", ["status", "key", "differing", "max abs", "max rel", "atol / rtol", "how", "note"],
             values, (2, 3, 4))
        )  # fmt: skip
    return tables


def _side_line(label: str, s: Any) -> str:
    weights = f"{s.keys} tensors, {human_count(s.bytes)}B" if s.has_checkpoint else "no checkpoint"
    fused = f"; fused layout: {', '.join(s.fusion_config)}" if s.fusion_config else ""
    return f"{label}: {s.name} — {s.model_class}, {s.modules} modules, {human_count(s.params)} parameters, {weights}{fused}"


def _count_groups(c: Any) -> list[tuple[str, dict[str, float]]]:
    groups = [("modules", c.module_counts()), ("keys", c.key_counts())]
    if c.values is not None:
        groups.append(("values", c.value_counts()))
    return groups


def comparison_html(c: Any) -> str:
    """A :class:`~fusion_core.compare.result.Comparison` as one self-contained HTML page."""
    verdict_cls = "ok" if c.equal else "bad"
    body = [
        f"<h1>{_h(c.a.name)} vs {_h(c.b.name)}</h1>",
        f"<p>{_h(_side_line('A', c.a))}<br>{_h(_side_line('B', c.b))}</p>",
        f'<p class="verdict {verdict_cls}">{_h(c.verdict)}</p>',
        bar_chart(_count_groups(c), "what matches"),
        "<h2>Folded repeats</h2>",
        "<ul>" + "".join(f"<li>{_h(f.text)}</li>" for f in c.folds) + "</ul>" if c.folds else "<p><i>none</i></p>",
    ]
    for title, headers, rows, numeric in _comparison_tables(c):
        body += [f"<h2>{_h(title)} ({len(rows)})</h2>", _html_table(headers, rows, numeric)]
    if c.messages:
        body += ["<h2>Notes</h2>", "<ul>" + "".join(f"<li>{_h(m)}</li>" for m in c.messages) + "</ul>"]
    return _page(f"{c.a.name} vs {c.b.name}", body)


def comparison_markdown(c: Any) -> str:
    """A comparison as Markdown (a pull-request comment)."""
    out = [
        f"## {_m(c.a.name)} vs {_m(c.b.name)}\n",
        f"- {_m(_side_line('A', c.a))}\n- {_m(_side_line('B', c.b))}\n",
        f"**Verdict: {_m(c.verdict)}**\n",
        _md_table(
            ["", *_statuses(c)],
            [(name, *(counts.get(s, 0) for s in _statuses(c))) for name, counts in _count_groups(c)],
        ),
    ]
    if c.folds:
        out.append("\n".join(f"- {_m(f.text)}" for f in c.folds) + "\n")
    for title, headers, rows, _ in _comparison_tables(c):
        out += [f"### {_m(title)} ({len(rows)})\n", _md_table(headers, rows)]
    if c.messages:
        out += ["### Notes\n", "\n".join(f"- {_m(m)}" for m in c.messages) + "\n"]
    return "\n".join(out)


def _statuses(c: Any) -> list[str]:
    seen: dict[str, None] = {}
    for _, counts in _count_groups(c):
        seen.update(dict.fromkeys(counts))
    return list(seen)


# -- a check -----------------------------------------------------------------------------
#: a line of prose (an upstream summary, a generation line) is cut here; a table cell at MAX_CELL
MAX_LINE = 1500
#: rows of a list from the model folder (an upstream family's findings...) before "… N more"
MAX_ROWS = 40
#: characters of a module's name in the speed chart (its layer indices always kept)
CHART_LABEL = 34

CHECK_HEADERS = [
    "result", "module", "family", "classes", "verified by", "inputs", "max abs diff", "limit", "original ms",
    "fused ms", "speed-up [95%]", "verdict", "A/A noise floor", "share of end to end [95%]", "note",
]  # fmt: skip
CHECK_NUMERIC = (6, 7, 8, 9)


def _check_rows(r: Any) -> list[tuple[Any, ...]]:
    """The CLI's rows (:func:`~fusion_core.run.check_text.check_rows`), every column whole."""
    from ..run.check_text import check_rows

    rows = []
    for row in check_rows(r):
        t = row.timing
        rows.append(
            ("passed" if row.passed else "failed", elide_dotted(row.module, MAX_CELL, len), row.family, row.classes,
             row.verified_by, row.inputs, row.max_abs, row.limit, row.original_ms or "not timed", row.fused_ms,
             t.interval_text() if t else "", (t.verdict + (", noisy" if t.noisy else "")) if t else "",
             t.floor_text() if t else "", row.share, row.note)
        )  # fmt: skip
    return rows


def _bounded(items: Sequence[str], limit: int = MAX_ROWS) -> list[str]:
    return [*items[:limit], f"… {len(items) - limit} more"] if len(items) > limit else list(items)


def _upstream(r: Any) -> tuple[list[str], list[tuple[str, list[str], list[tuple[Any, ...]]]]]:
    """Upstream parity: its verdict, the diff and the leak, and each family's finding (a row a
    finding: what upstream loaded, each key its load lost for the family's modules...)."""
    from ..run.check_text import upstream_lines

    u = r.upstream
    if u is None:
        return ["upstream parity: not run: not asked (turned off for this check)"], []
    if not u.available:
        return [f"upstream parity: not run: {u.summary}"], []
    if u.error:
        return [u.summary], []
    rows: list[tuple[Any, ...]] = []
    for f in u.families:
        parts = _bounded(f.detail.split("; "))
        rows += [(f.name, f.status, parts[0]), *(("", "", part) for part in parts[1:])]
    return upstream_lines(u), [("Families", ["family", "upstream", "finding"], rows)]


def _inputs(r: Any) -> tuple[list[str], list[tuple[Any, ...]]]:
    e = r.end_to_end
    if e is None:
        return ["end to end: not run"], []
    rows = [(f.run, f.modality, f.count, f.size, f.source) for f in e.inputs]
    lines = [f"inputs: {note}" for note in e.notes]
    if not e.ran:
        lines.insert(0, f"end to end: {e.skipped}")
    return lines, rows


def _floors(r: Any) -> list[str]:
    tol = r.tolerance
    lines = [f"tolerance ({r.dtype}): {tol.rule}, atol {tol.atol:g}, rtol {tol.rtol:g}"]
    e = r.end_to_end
    if e is not None and e.ran:
        c = e.comparison
        if c.floor:
            lines.append(f"rounding floor end to end: {c.floor:.3g} (limit {c.limit:.3g}); {c.note}".rstrip("; "))
        else:
            why = "float32" if r.dtype == "float32" else f"within the {r.dtype} tolerance"
            lines.append(f"rounding floor end to end: not measured ({why})")
        if e.timing is not None:
            lines.append(f"timing noise floor end to end (A/A): {e.timing.floor_text()}")
    timed = [m.timing for m in r.modules if m.timing]
    if timed:
        lows = sorted(t.noise_low for t in timed)
        highs = sorted(t.noise_high for t in timed)
        lines.append(
            f"timing noise floor per module (A/A, median of {len(timed)}): "
            f"[{lows[len(lows) // 2]:.3f}, {highs[len(highs) // 2]:.3f}]; each module's in the table"
        )
    return lines


def _not_run(r: Any) -> list[str]:
    out = []
    e = r.end_to_end
    if e is not None and not e.ran:
        out.append(f"end to end: {e.skipped}")
    if r.upstream is None:
        out.append("upstream parity: not run: not asked")
    elif not r.upstream.available:
        out.append(f"upstream parity: not run: {r.upstream.summary}")
    if r.generation is not None and r.generation.verdict == "skipped":
        out.append(r.generation.line)
    if r.compiled is not None and r.compiled.comparison is None:
        out.append(r.compiled.line)
    out += [f"{m.path}: not verified: {m.error or 'no inputs reached it'}" for m in r.modules if not m.verified_by]
    untimed = [m.path for m in r.modules if m.timing is None]
    if untimed:
        out.append(f"timing: not run for {', '.join(_bounded(untimed, 10))}")
    return out


def _label(path: str) -> str:
    """A module's name short enough for the chart, its layer indices kept (``model.….0.self_attn``)."""
    return elide_dotted(path, CHART_LABEL, len)


def _check_summary(r: Any) -> list[str]:
    from ..run.check_text import banner, end_to_end_line

    lines = [f"{r.model} ({r.model_class}), fusions: {', '.join(r.fusion_config) or 'none'}, {r.dtype} on {r.device}"]
    lines.append(banner(r))
    lines += [x for x in (end_to_end_line(r),) if x]
    lines += [f"verdict: {f.line}" for f in r.family_verdicts if f.line]
    return lines


def _check_parts(r: Any) -> list[tuple[Any, ...]]:
    """The report of a check as parts both formats write: ("h", title), ("lines", [...]),
    ("table", headers, rows, numeric columns), ("chart", svg) (HTML only)."""
    from ..run.check_text import END_TO_END, TIMINGS_NOTE, peak_lines, workload_options

    rows = _check_rows(r)
    speed = [(_label(m.path), m.timing) for m in r.modules if m.timing]
    e = r.end_to_end
    if e is not None and e.ran and e.timing is not None:
        speed.append((END_TO_END, e.timing))
    parts: list[tuple[Any, ...]] = [("lines", _check_summary(r))]
    parts.append(("chart", bar_chart([("modules", {"equal": sum(1 for m in r.modules if m.passed),
                                                   "different": sum(1 for m in r.modules if not m.passed)})],
                                     "modules within tolerance")))  # fmt: skip
    if speed:
        parts.append(("chart", _speed_chart(speed)))
    parts += [("h", f"Fused modules ({len(r.modules)})"), ("table", CHECK_HEADERS, rows, CHECK_NUMERIC)]
    parts += [("lines", [TIMINGS_NOTE, *peak_lines(r)])]
    parts += [("h", "Workload"), ("table", ["option", "value"], workload_options(r), ())]
    lines, fed = _inputs(r)
    parts += [("h", "Inputs")]
    if fed:
        parts.append(("table", ["run", "modality", "count", "size", "source"], fed, (2,)))
    parts.append(("lines", lines or ["synthetic inputs"]))
    parts += [("h", "Floors"), ("lines", _floors(r))]
    lines, tables = _upstream(r)
    parts += [("h", "Upstream parity"), ("lines", lines)]
    for title, headers, table_rows in tables:
        parts += [("h3", title), ("table", headers, table_rows, ())]
    if r.generation is not None:
        parts += [("h", "Generation"), ("lines", [r.generation.line])]
    if r.compiled is not None:
        parts += [("h", "Compiled (torch.compile)"), ("lines", [r.compiled.line])]
    not_run = _not_run(r)
    if not_run:
        parts += [("h", "Not run"), ("lines", not_run)]
    notes = [*r.messages, *r.warnings]
    if notes:
        parts += [("h", "Notes"), ("lines", notes)]
    return parts


def _lines_html(lines: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{_h(x, MAX_LINE)}</li>" for x in lines) + "</ul>"


def check_html(r: Any) -> str:
    """A :class:`~fusion_core.run.results.CheckResult` as one self-contained HTML page."""
    ok = r.passed
    body = [
        f"<h1>Check: {_h(r.model)}</h1>",
        f'<p class="verdict {"ok" if ok else "bad"}">{"passed" if ok else "FAILED"}</p>',
    ]
    for part in _check_parts(r):
        kind = part[0]
        if kind in ("h", "h3"):
            body.append(f"<{'h2' if kind == 'h' else 'h3'}>{_h(part[1])}</{'h2' if kind == 'h' else 'h3'}>")
        elif kind == "lines":
            body.append(_lines_html(part[1]))
        elif kind == "table":
            body.append(_html_table(part[1], part[2], part[3]))
        else:
            body.append(part[1])
    return _page(f"Check: {r.model}", body)


def _speed_chart(items: list[tuple[str, Any]]) -> str:
    """Speed-up per module (original / fused) as bars with their interval, 1.0 marked."""
    width, left, bar_h = 760, 230, 16
    items = items[:60]
    top = max(2.0, *(t.speedup_high for _, t in items if math.isfinite(t.speedup_high)))
    scale = (width - left - 60) / top
    height = 30 + len(items) * (bar_h + 6) + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="11">',
        '<text x="0" y="14" font-weight="bold">speed-up, fused vs original (1.0 = same)</text>',
    ]
    y = 24
    for name, t in items:
        colour = {"faster": "#2e7d32", "slower": "#c62828"}.get(t.verdict, "#90a4ae")
        w = max(1.0, t.speedup * scale) if math.isfinite(t.speedup) else 1.0
        tip = f"{t.verdict_text()}; original {t.original_ms:.3f} ms, fused {t.fused_ms:.3f} ms"
        parts.append(f'<text x="0" y="{y + 12}">{_h(name)}</text>')
        parts.append(
            f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colour}"><title>{_h(tip)}</title></rect>'
        )
        if math.isfinite(t.speedup_low) and math.isfinite(t.speedup_high):
            parts.append(f'<line x1="{left + t.speedup_low * scale:.1f}" x2="{left + t.speedup_high * scale:.1f}" '
                         f'y1="{y + bar_h / 2}" y2="{y + bar_h / 2}" stroke="#212121"/>')  # fmt: skip
        parts.append(f'<text x="{left + w + 4:.1f}" y="{y + 12}">{t.speedup:.2f}x</text>')
        y += bar_h + 6
    one = left + scale
    parts.append(f'<line x1="{one:.1f}" x2="{one:.1f}" y1="20" y2="{y}" stroke="#212121" stroke-dasharray="3,3"/>')
    parts.append("</svg>")
    return "".join(parts)


def check_markdown(r: Any) -> str:
    """A check as Markdown (a pull-request comment)."""
    out = [f"## Check: {_m(r.model)}\n", f"**{'passed' if r.passed else 'FAILED'}**\n"]
    for part in _check_parts(r):
        kind = part[0]
        if kind in ("h", "h3"):
            out.append(f"{'###' if kind == 'h' else '####'} {_m(part[1])}\n")
        elif kind == "lines":
            out.append("\n".join(f"- {_m(x, MAX_LINE)}" for x in part[1]) + "\n")
        elif kind == "table":
            out.append(_md_table(part[1], part[2]))
    return "\n".join(out)


# -- files -------------------------------------------------------------------------------
def render_report(result: Any, fmt: str) -> str:
    """The report of ``result`` (a comparison or a check) in ``fmt`` ("html" or "md")."""
    from ..compare.result import Comparison

    if isinstance(result, Comparison):
        return comparison_html(result) if fmt == "html" else comparison_markdown(result)
    return check_html(result) if fmt == "html" else check_markdown(result)


def write_report(result: Any, path: str | Path) -> Path:
    """Write the report of ``result`` to ``path``: HTML for ``.html``/``.htm``, Markdown for ``.md``.

    Raises:
        UsageError: another suffix, or a folder that does not exist.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".html", ".htm", ".md"):
        raise UsageError(f"report {printable(str(path))}: give a file ending in .html or .md")
    if not path.parent.is_dir():
        raise UsageError(f"report {printable(str(path))}: the folder {printable(str(path.parent))} does not exist")
    write_text(path, render_report(result, "md" if suffix == ".md" else "html"))
    return path
