"""Execution subcommands: ``load`` (fused loading, prints the load report) and ``check``
(fused vs original: error and speed per module and end to end, upstream parity)."""

from __future__ import annotations

import argparse
from typing import Any

from ..boundary.options import DTYPES, parse_size
from ..run.check_text import TIMINGS_NOTE, banner, check_rows, end_to_end_line, machine_line, peak_lines, speed_text
from .args import device_arg, seed_arg
from .output import print_json, printable, run_with_progress, say, table, wide

#: ``check``'s exit status when no module matched the families: nothing checked is not a pass
#: (pytest's "no tests ran" is 5 too)
EXIT_NOTHING_CHECKED = 5

MAX_MEMORY_HELP = (
    "memory the weights may take, e.g. 6GiB (accelerate's max_memory); beyond it they stay on disk and are "
    "read for each call (default: the memory available)"
)


PLAN_HELP = (
    "a plan written by `fusion-core plan MODEL --fusion ... --json`: runs exactly its modules, "
    "refused if the model or a weight file changed since (MODEL, if given, is where the model is now)"
)


def register(sub: Any) -> None:
    p = sub.add_parser("load", help="load a model with fusion applied and print the load report")
    p.add_argument("model", help="folder, config.json, demo:<name> or org/name (with weights)")
    _common(p)
    p.add_argument("--max-memory", metavar="SIZE", help=MAX_MEMORY_HELP)
    p.set_defaults(func=cmd_load)

    p = sub.add_parser("check", help="check fused vs original: error and speed, per module and end to end")
    p.add_argument("model", nargs="?", help="folder, config.json, demo:<name> or org/name (with weights)")
    _common(p)
    p.add_argument("--plan", metavar="PLAN.json", help=PLAN_HELP)
    p.add_argument(
        "--repeats", type=int, default=5, metavar="N",
        help="timed rounds always run per timing; more follow until the 95%% interval is tight (default 5)",
    )  # fmt: skip
    p.add_argument(
        "--time-budget", type=float, default=2.0, metavar="S",
        help="seconds each timing may spend tightening its interval (default 2)",
    )  # fmt: skip
    p.add_argument("--seed", type=seed_arg, default=0, help="seed of the synthetic inputs (default 0)")
    w = p.add_argument_group("workload (default: the model's own sizes)")
    w.add_argument("--image-size", type=int, metavar="PX", help="image side in pixels (default: processor/config)")
    w.add_argument("--frames", type=int, metavar="N", help="video frames (default: the model's)")
    w.add_argument("--seq-len", type=int, metavar="N", help="text tokens (default 128)")
    w.add_argument("--batch", type=int, default=1, metavar="N", help="rows per run (default 1)")
    w.add_argument("--threads", type=int, metavar="N", help="CPU threads for torch (default: torch's)")
    w.add_argument(
        "--image", action="append", default=[], metavar="PATH",
        help="a real image, through the model's own processor (repeatable)",
    )  # fmt: skip
    w.add_argument(
        "--video", metavar="PATH", help="a real video (frames read with PyAV), through the model's processor"
    )
    w.add_argument(
        "--audio", metavar="PATH", help="a real audio file (read with soundfile), through the model's processor"
    )
    w.add_argument("--prompt", metavar="TEXT", help="real text, through the model's own tokenizer")
    w.add_argument(
        "--modules-only", action="store_true",
        help="check only the fused modules, read alone from the checkpoint (bounded memory; no end to end)",
    )  # fmt: skip
    w.add_argument(
        "--max-memory", metavar="SIZE",
        help=MAX_MEMORY_HELP,
    )  # fmt: skip
    w.add_argument(
        "--generate", type=int, default=0, metavar="N",
        help="also decode N tokens greedily with the KV cache, original against fused, token by token",
    )  # fmt: skip
    w.add_argument(
        "--cache", choices=("dynamic", "static"), default="dynamic",
        help="the KV cache of --generate (static: transformers' static cache)",
    )  # fmt: skip
    w.add_argument(
        "--compile", nargs="?", const="inductor", default="", metavar="BACKEND",
        help="also time both models under torch.compile (default backend inductor; its first calls take minutes)",
    )  # fmt: skip
    p.add_argument(
        "--no-upstream", action="store_true", help="skip the upstream parity check (transformers' own fusion)"
    )
    p.add_argument("--report", metavar="OUT.html|OUT.md", default=None, help="also write a report (HTML or Markdown)")
    p.set_defaults(func=cmd_check)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--fusion",
        action="append",
        default=[],
        metavar="NAME[:OPTION=VALUE,...]",
        help="family to apply, with its options if any (repeatable; default: the config's own fusion_config)",
    )
    p.add_argument("--dtype", default="float32", choices=DTYPES, help="weights and compute dtype")
    p.add_argument("--device", type=device_arg, default="cpu", help="torch device (default cpu)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _fusion_config(args: argparse.Namespace) -> dict[str, Any] | None:
    from .inspect import fusion_config_of  # NAME or NAME:OPTION=VALUE,... as for `plan`

    return fusion_config_of(args.fusion) if args.fusion else None


def _plan(args: argparse.Namespace) -> Any:
    from ..plan.fusion_plan import as_plan

    return as_plan(args.model, _fusion_config(args), trust_remote_code=args.trust_remote_code)


def cmd_load(args: argparse.Namespace) -> int:
    from ..run.loading import iter_load

    budget = None if args.max_memory is None else parse_size(args.max_memory, "max_memory")
    gen = iter_load(_plan(args), dtype=args.dtype, device=args.device, max_memory=budget)
    result = run_with_progress(gen, desc="load", quiet=args.json)
    report = result.report()
    if args.json:
        print_json(report)
        return 0
    say(f"{report.model}: {report.model_class}, {report.dtype} on {report.device}")
    say(f"checkpoint layout: {report.checkpoint_layout}; fusion_config: {report.fusion_config or 'none'}")
    say(f"missing keys: {len(report.missing_keys)}, unexpected keys: {len(report.unexpected_keys)}")
    if report.fused_modules:
        say(table([(m.module, m.family, m.class_name) for m in report.fused_modules], ["fused", "family", "class"]))
    else:
        say("no module fused")
    if report.transforms:
        say(
            table(
                [(r["source_key"], r["op"], r["target_key"]) for r in report.transforms],
                ["checkpoint key", "op", "fused key"],
            )
        )
    for message in report.messages:
        say(f"note: {message}")
    rss = f", peak RSS {report.peak_rss_mb:.0f} MiB" if report.peak_rss_mb is not None else ""
    say(f"loaded in {report.seconds:.2f} s{rss}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from ..boundary.options import CheckOptions
    from ..errors import UsageError
    from ..model.sources import resolve
    from ..plan.fusion_plan import as_plan
    from ..run.checks import iter_check

    options = CheckOptions.build(  # validated before the model opens: an OptionError names the flag
        dtype=args.dtype,
        device=args.device,
        seed=args.seed,
        batch=args.batch,
        seq_len=args.seq_len,
        image_size=args.image_size,
        frames=args.frames,
        repeats=args.repeats,
        time_budget=args.time_budget,
        upstream=not args.no_upstream,
        threads=args.threads,
        images=tuple(args.image),
        video=args.video,
        audio=args.audio,
        prompt=args.prompt,
        modules_only=args.modules_only,
        max_memory=args.max_memory,
        generate=args.generate,
        cache=args.cache,
        compile=args.compile,
    )
    if args.report and not args.report.lower().endswith((".html", ".htm", ".md")):
        raise UsageError(f"check: --report {printable(args.report)}: give a file ending in .html or .md")
    if args.plan:
        plan = planned(args, "check")
    else:
        if not args.model:
            raise UsageError("check: give a MODEL, or --plan PLAN.json")
        source = resolve(args.model, trust_remote_code=args.trust_remote_code)
        if not args.fusion and getattr(source.config, "fusion_config", None) is None:
            raise UsageError("check: give at least one --fusion NAME (see `fusion-core families`); the config has none")
        plan = as_plan(source, _fusion_config(args))
    gen = iter_check(plan, options)
    result = run_with_progress(gen, desc="check", quiet=args.json)
    if args.report:
        from ..report import write_report

        write_report(result, args.report)
        say(f"fusion-core: wrote {printable(args.report)}", err=True)
    if args.json:
        print_json(result)
    else:
        say(format_check(result))
    if result.nothing_to_fuse:
        return EXIT_NOTHING_CHECKED
    return 0 if result.passed else 1


def planned(args: argparse.Namespace, command: str) -> Any:
    """The plan of ``--plan FILE``, its source checked (``--fusion`` would contradict it)."""
    from ..errors import UsageError
    from ..plan.plan_file import plan_from_file

    if args.fusion:
        raise UsageError(f"{command}: --plan already says which families run; drop --fusion")
    from .output import ByteBar

    with ByteBar("hashing the weights (are they the planned ones?)") as bar:
        return plan_from_file(args.plan, args.model, trust_remote_code=args.trust_remote_code, hashed=bar)


def _check_table(rows: list[Any]) -> list[str]:
    """The check's table (:func:`~fusion_core.run.check_text.check_rows`): every column on one
    row with ``--wide``; else the numbers in a table that fits 120 columns, and each row's
    classes, inputs and noise floor below it."""
    if wide():
        headers = ["module", "classes", "verified by", "inputs", "max abs", "limit", "orig ms", "fused ms"]
        headers += ["speedup [95% interval] verdict (A/A noise floor)", "share [95%]", "result"]
        return [
            table(
                [(*r[:8], speed_text(r.timing), r.share, r.result) for r in rows],
                headers,
            )
        ]
    short = [
        (r.module, r.max_abs, r.limit, r.original_ms, r.fused_ms, _speed_short(r.timing), r.share, r.result[:4])
        for r in rows
    ]
    headers = ["module", "max abs", "limit", "orig ms", "fused ms", "speedup [95%] verdict", "share [95%]", "result"]
    out = [table(short, headers)]
    for r in rows:
        t = r.timing
        floor = f"; A/A {t.floor_text()}{', noisy' if t.noisy else ''}" if t else ""
        failure = f"; {r.result}" if r.result.startswith("FAIL ") else ""  # the reason, whole
        out.append(
            f"  {r.module}: {r.classes}; verified by {r.verified_by}; inputs {r.inputs or 'none'}{floor}{failure}"
        )
    return out


def _speed_short(t: Any) -> str:
    return f"{t.interval_text()} {t.verdict}" if t else ""


def format_check(result: Any) -> str:
    """The human report of a :class:`~fusion_core.run.checks.CheckResult`."""
    tol = result.tolerance
    lines = [
        f"{result.model}: {result.model_class}, {', '.join(result.fusion_config) or 'no fusion'}, "
        f"{result.dtype} on {result.device} (pass: max|diff| <= {tol.atol:g} x min(1, max|original|) + {tol.rtol:g} x max|original|)"
    ]
    if result.nothing_to_fuse:
        lines += result.messages
        lines.append("NOTHING CHECKED")
        return "\n".join(lines)
    rows = check_rows(result)
    e = result.end_to_end
    lines += _check_table(rows)
    lines += [
        line for line in (end_to_end_line(result), *peak_lines(result), TIMINGS_NOTE, machine_line(result)) if line
    ]
    lines += [f"verdict: {v.line}" for v in result.family_verdicts]
    if e is not None:
        lines += [f"inputs: {note}" for note in e.notes]
    lines += [f"note: {m}" for m in result.messages]
    lines += [f"warning: {w}" for w in result.warnings]
    if result.upstream is not None:
        from ..run.check_text import upstream_detail

        lines.append(upstream_detail(result.upstream))  # the summary, then each family's finding
    if result.generation is not None:
        lines.append(result.generation.line)
    if result.compiled is not None:
        lines.append(result.compiled.line)
    lines.append(banner(result))
    lines.append("PASSED" if result.passed else "FAILED")
    return "\n".join(lines)
