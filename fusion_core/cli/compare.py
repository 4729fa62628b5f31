"""``fusion-core diff A B``: any two models compared (structure, keys, values), ``diff``-style exit codes."""

from __future__ import annotations

import argparse
from typing import Any

from .output import human_count, print_json, printable, run_with_progress, say, table

MAX_ROWS = 50  # rows of each table in the human output (all of them in --json and the report)


def cmd_compare(args: argparse.Namespace) -> int:
    """``diff A B [--values] [--atol X] [--rtol Y] [--report OUT] [--json]``.

    Returns:
        0 when A and B are equal (after renames and transforms; values too with
        ``--values``), 1 when they differ. Usage errors exit 2 (in ``main``).
    """
    from ..compare import iter_compare
    from ..errors import UsageError

    if args.fusion:
        raise UsageError("diff: --fusion compares one model with its fused form; two models are compared as stored")
    if args.report and not args.report.lower().endswith((".html", ".htm", ".md")):
        raise UsageError(f"diff: --report {printable(args.report)}: give a file ending in .html or .md")
    if args.hash and not args.values:
        raise UsageError("diff: --hash hashes the tensors --values reads: give --values too")
    gen = iter_compare(
        args.model, args.other, values=args.values, atol=args.atol, rtol=args.rtol, digest=args.hash,
        trust_remote_code=args.trust_remote_code,
    )  # fmt: skip
    result = run_with_progress(gen, "compare")
    if args.report:
        from ..report import write_report

        write_report(result, args.report)
        report_hint(args.report)
    if args.json:
        print_json(result)
    else:
        say(format_comparison(result))
    return 0 if result.equal else 1


def _shape(shape: Any) -> str:
    return "x".join(map(str, shape)) if shape is not None else ""


def _cut(rows: list[Any]) -> tuple[list[Any], str]:
    more = len(rows) - MAX_ROWS
    return rows[:MAX_ROWS], (f"... and {more} more (all of them with --json or --report)" if more > 0 else "")


def _side(label: str, s: Any) -> str:
    weights = f"{s.keys} tensors, {human_count(s.bytes)}B" if s.has_checkpoint else "no checkpoint (structure only)"
    fused = f", fused layout: {', '.join(s.fusion_config)}" if s.fusion_config else ""
    return f"{label}: {printable(s.name)} ({s.model_class}, {s.modules} modules, {human_count(s.params)} params, {weights}{fused})"


def format_comparison(c: Any) -> str:
    """The human output of ``diff A B``: the verdict, then what differs, each table cut at ``MAX_ROWS``."""
    out = [_side("A", c.a), _side("B", c.b), f"verdict: {c.verdict}"]
    mc = c.module_counts()
    out.append("\nmodules: " + ", ".join(f"{n} {s}" for s, n in mc.items()))
    for fold in c.folds:
        out.append(f"  {printable(fold.text)}")
    status = {m.path: m.status for m in c.modules}
    # an added (removed) subtree shows as its top module only
    changed = [
        m for m in c.modules
        if m.status != "equal" and not (m.path and status.get(m.path.rpartition(".")[0]) == m.status != "changed")
    ]  # fmt: skip
    if changed:
        rows, more = _cut(changed)
        out.append(
            table(
                [
                    (
                        m.status,
                        printable(m.path) or "(root)",
                        m.class_a or "",
                        m.class_b or "",
                        "" if m.params_a is None else f"{m.params_a:,}",
                        "" if m.params_b is None else f"{m.params_b:,}",
                        ", ".join(m.changes),
                    )
                    for m in rows
                ],
                ["status", "module", "class A", "class B", "params A", "params B", "what"],
            )
        )
        out.append(more) if more else None
    kc = c.key_counts()
    out.append("\nkeys: " + ", ".join(f"{n} {s}" for s, n in kc.items()))
    if c.transforms:
        out.append(f"  equal after transforms: {', '.join(c.transforms)}")
    odd = [k for k in c.keys if k.status != "equal"]
    if odd:
        rows, more = _cut(odd)
        out.append(
            table(
                [
                    (
                        k.status,
                        printable(k.key_a or ""),
                        f"{_shape(k.stored('a'))} {k.dtype_a or ''}".strip(),
                        printable(k.key_b or ""),
                        f"{_shape(k.stored('b'))} {k.dtype_b or ''}".strip(),
                        ", ".join(v for v in (k.via_a, k.via_b) if v) or ", ".join(k.changes),
                    )
                    for k in rows
                ],
                ["status", "key A", "A", "key B", "B", "via / what"],
            )
        )
        out.append(more) if more else None
    if c.values is not None:
        vc = c.value_counts()
        tol = "bitwise" if c.tolerance is None else f"atol {c.tolerance[0]}, rtol {c.tolerance[1]} (None: the dtype's)"
        out.append(f"\nvalues ({tol}): " + ", ".join(f"{n} {s}" for s, n in vc.items()))
        odd_values = [v for v in c.values if v.status != "equal"]
        if odd_values:
            rows, more = _cut(odd_values)
            out.append(
                table(
                    [
                        (v.status, printable(v.name), f"{v.differing:.2%}", _g(v.max_abs), _g(v.max_rel), v.how, v.note)
                        for v in rows
                    ],
                    ["status", "key", "differing", "max abs", "max rel", "how", "note"],
                )
            )
            out.append(more) if more else None
    for m in c.messages:
        out.append(f"note: {printable(m)}")
    return "\n".join(out)


def _g(x: float | None) -> str:
    return "" if x is None else f"{x:.3g}"


def report_hint(path: str) -> None:
    say(f"fusion-core: wrote {printable(path)}", err=True)
