"""Execution subcommands: ``load`` (fused loading, prints the load report) and ``check``
(fused vs original: error and speed per module and end to end, upstream parity)."""

from __future__ import annotations

import argparse
from typing import Any

from .args import device_arg, seed_arg
from .output import print_json, run_with_progress, table

DTYPE_CHOICES = ("float32", "bfloat16", "float16")


def register(sub: Any) -> None:
    p = sub.add_parser("load", help="load a model with fusion applied and print the load report")
    p.add_argument("model", help="folder, config.json, demo:<name> or org/name (with weights)")
    _common(p)
    p.set_defaults(func=cmd_load)

    p = sub.add_parser("check", help="check fused vs original: error and speed, per module and end to end")
    p.add_argument("model", help="folder, config.json, demo:<name> or org/name (with weights)")
    _common(p)
    p.add_argument("--repeats", type=int, default=5, metavar="N", help="timed runs per side (medians; default 5)")
    p.add_argument("--seed", type=seed_arg, default=0, help="seed of the synthetic inputs (default 0)")
    p.add_argument(
        "--no-upstream", action="store_true", help="skip the upstream parity check (transformers' own fusion)"
    )
    p.set_defaults(func=cmd_check)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--fusion",
        action="append",
        default=[],
        metavar="NAME[:OPTION=VALUE,...]",
        help="family to apply, with its options if any (repeatable; default: the config's own fusion_config)",
    )
    p.add_argument("--dtype", default="float32", choices=DTYPE_CHOICES, help="weights and compute dtype")
    p.add_argument("--device", type=device_arg, default="cpu", help="torch device (default cpu)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _fusion_config(args: argparse.Namespace) -> dict[str, Any] | None:
    from .inspect import fusion_config_of  # NAME or NAME:OPTION=VALUE,... as for `plan`

    return fusion_config_of(args.fusion) if args.fusion else None


def cmd_load(args: argparse.Namespace) -> int:
    from ..run.loading import iter_load

    gen = iter_load(
        args.model,
        _fusion_config(args),
        dtype=args.dtype,
        device=args.device,
        trust_remote_code=args.trust_remote_code,
    )
    result = run_with_progress(gen, desc="load", quiet=args.json)
    report = result.report()
    if args.json:
        print_json(report)
        return 0
    print(f"{report['model']}: {report['model_class']}, {report['dtype']} on {report['device']}")
    print(f"checkpoint layout: {report['checkpoint_layout']}; fusion_config: {report['fusion_config'] or 'none'}")
    print("missing keys: 0, unexpected keys: 0")
    if report["fused_modules"]:
        print(
            table(
                [(m["module"], m["family"], m["class"]) for m in report["fused_modules"]], ["fused", "family", "class"]
            )
        )
    else:
        print("no module fused")
    if report["transforms"]:
        print(
            table(
                [(r["source_key"], r["op"], r["target_key"]) for r in report["transforms"]],
                ["checkpoint key", "op", "fused key"],
            )
        )
    for message in report["messages"]:
        print(f"note: {message}")
    rss = f", peak RSS {report['peak_rss_mb']:.0f} MiB" if report["peak_rss_mb"] is not None else ""
    print(f"loaded in {report['seconds']:.2f} s{rss}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from ..errors import UsageError
    from ..run.checks import iter_check
    from ..run.loading import resolve_source

    if args.repeats < 1:
        raise UsageError("check: --repeats must be at least 1")
    source = resolve_source(args.model, args.trust_remote_code)
    if not args.fusion and getattr(source.config, "fusion_config", None) is None:
        raise UsageError("check: give at least one --fusion NAME (see `fusion-core families`); the config has none")
    gen = iter_check(
        source,
        _fusion_config(args),
        dtype=args.dtype,
        repeats=args.repeats,
        upstream=not args.no_upstream,
        device=args.device,
        seed=args.seed,
        trust_remote_code=args.trust_remote_code,
    )
    result = run_with_progress(gen, desc="check", quiet=args.json)
    if args.json:
        print_json(result.to_dict())
    else:
        print(format_check(result))
    return 0 if result.passed else 1


def _g(x: float | None) -> str:
    return "" if x is None else f"{x:.2g}"


def format_check(result: Any) -> str:
    """The human report of a :class:`~fusion_core.run.checks.CheckResult`."""
    tol = result.tolerance
    lines = [
        f"{result.model}: {result.model_class}, {', '.join(result.fusion_config) or 'no fusion'}, "
        f"{result.dtype} on {result.device} (pass: max|diff| <= {tol['atol']:g} + {tol['rtol']:g} x max|original|)"
    ]
    if result.nothing_to_fuse:
        lines += result.messages
        lines.append("PASSED (nothing to fuse)")
        return "\n".join(lines)
    rows = []
    for m in result.modules:
        c, t = m.comparison, m.timing
        rows.append(
            (
                m.path,
                f"{m.original_class} -> {m.fused_class}",
                " ".join("x".join(map(str, s)) for s in m.input_shapes),
                _g(c.max_abs_diff if c else None),
                _g(c.max_rel_diff if c else None),
                f"{t.original_ms:.3f}" if t else "",
                f"{t.fused_ms:.3f}" if t else "",
                f"{t.speedup:.2f}x" if t else "",
                "pass" if m.passed else f"FAIL {m.error}".strip(),
            )
        )
    e = result.end_to_end
    if e is not None:
        rows.append(
            (
                f"end to end ({e.output})",
                e.entry or result.model_class,
                " ".join(f"{k}:{'x'.join(map(str, v))}" for k, v in e.input_shapes.items()),
                _g(e.comparison.max_abs_diff),
                _g(e.comparison.max_rel_diff),
                f"{e.timing.original_ms:.3f}",
                f"{e.timing.fused_ms:.3f}",
                f"{e.timing.speedup:.2f}x",
                "pass" if e.passed else "FAIL",
            )
        )
    headers = ["module", "classes", "inputs", "max abs", "max rel", "orig ms", "fused ms", "speedup", "result"]
    lines.append(table(rows, headers))
    lines.append(f"timings: median of {result.repeats} runs each, interleaved")
    if e is not None:
        lines += [f"inputs: {note}" for note in e.notes]
    lines += [f"note: {m}" for m in result.messages]
    if result.upstream is not None:
        lines.append(result.upstream.summary)
    lines.append("PASSED" if result.passed else "FAILED")
    return "\n".join(lines)
