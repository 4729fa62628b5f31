"""Inspection subcommands: tree, plan, families, demo, coverage."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .output import human_count, print_json, table


def register(sub: Any) -> None:
    """Add the inspection subcommands to ``sub`` (argparse subparsers)."""
    p = sub.add_parser("tree", help="show the meta-initialized module tree")
    p.add_argument("model", help="folder, config.json, arch:<type>, demo:<name> or org/name")
    p.add_argument("--depth", type=int, default=None, help="levels below the root to show")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_tree)

    p = sub.add_parser("plan", help="show what the fusion families would change")
    p.add_argument("model")
    p.add_argument(
        "--fusion",
        action="append",
        default=[],
        metavar="NAME",
        help="family to enable (repeatable); default: the checkpoint's own fusion_config",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("families", help="list the registered fusion families")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_families)

    p = sub.add_parser("demo", help="print the folder of a demo checkpoint (generated on first use)")
    p.add_argument("name", nargs="?", default=None)
    p.add_argument("--list", action="store_true", help="list the demos")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("coverage", help="scan every architecture transformers knows for fusable modules")
    p.add_argument("--family", action="append", default=[], metavar="NAME", help="family to scan for (repeatable)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: CPU count; 0: in this process)")
    p.add_argument("--only", action="append", default=[], metavar="MODEL_TYPE", help="scan only these types")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="limit per model type (default 30)")
    p.set_defaults(func=cmd_coverage)


def _open(args: argparse.Namespace):
    from ..plan.fusion_plan import inspect_model

    insp = inspect_model(args.model, trust_remote_code=args.trust_remote_code)
    for note in insp.source.notes:  # e.g. what --trust-remote-code did and did not do
        print(f"fusion-core: note: {note}", file=sys.stderr)
    return insp


def cmd_tree(args: argparse.Namespace) -> int:
    """``tree MODEL [--depth N] [--json]``: the meta-initialized module tree."""
    from ..errors import UsageError

    if args.depth is not None and args.depth < 0:
        raise UsageError(f"tree: --depth must be 0 or more, got {args.depth}")
    insp = _open(args)
    root = insp.tree.root
    if args.json:
        print_json(
            {
                "schema_version": 1,
                "model": insp.name,
                "model_class": insp.source.model_class.__name__,
                "modules": len(insp.tree),
                "total_params": root.total_params,
                "tree": root.to_dict(args.depth),
            }
        )
        return 0
    rows = []
    for node in root.walk():
        level = node.path.count(".") + 1 if node.path else 0
        if args.depth is not None and level > args.depth:
            continue
        weight = node.main_weight
        rows.append(
            (
                "  " * level + node.name,
                node.class_name + (f" (x{node.same_class_count})" if node.same_class_count > 1 else ""),
                human_count(node.total_params),
                node.kind,
                "x".join(map(str, weight.shape)) if weight else "",
                weight.dtype if weight else "",
            )
        )
    print(
        f"{insp.name}: {insp.source.model_class.__name__}, {len(insp.tree)} modules, "
        f"{human_count(root.total_params)} parameters"
    )
    print(table(rows, ["module", "class", "params", "kind", "weight", "dtype"]))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """``plan MODEL [--fusion NAME ...] [--json]``: matches, patch mapping, key transforms.

    Without ``--fusion``, the checkpoint's own ``fusion_config`` (a fused export's).
    """
    from ..errors import UsageError

    insp = _open(args)
    own = getattr(insp.source.config, "fusion_config", None)  # a fused checkpoint names its own
    if not args.fusion and not own:
        raise UsageError("plan: give at least one --fusion NAME (see `fusion-core families`)")
    plan = insp.plan({name: True for name in args.fusion} if args.fusion else own)
    if args.json:
        print_json(plan.to_dict())
        return 0
    print(f"{plan.model}: {plan.model_class}")
    for fam in plan.families:
        d = fam.discovery
        print(f"\n[{fam.name}] {len(d.matches)} module(s) matched, {len(d.rejected)} rejected")
        if d.empty_message:
            print(f"  {d.empty_message}")
        if d.matches:
            print(
                table(
                    [(m.path, m.original_class.__name__, m.fused_class.__name__) for m in d.matches],
                    ["module", "class", "fused class"],
                )
            )
        if d.rejected:
            print(table([(r.path, r.class_name, r.reason) for r in d.rejected], ["rejected", "class", "reason"]))
    if plan.patch_mapping:
        print("\npatch mapping")
        print(table([(o.__name__, f.__name__) for o, f in plan.patch_mapping.items()], ["original", "fused"]))
    rows = plan.rows("load")
    if rows:
        where = "checkpoint" if plan.has_checkpoint else "model (no checkpoint attached)"
        print(f"\nweight transforms ({where}, layout: {plan.layout})")
        print(
            table(
                [
                    (
                        r["source_key"],
                        "x".join(map(str, r["source_shape"])),
                        r["dtype"],
                        r["op"],
                        r["target_key"],
                        "x".join(map(str, r["target_shape"])),
                    )
                    for r in rows
                ],
                ["source key", "shape", "dtype", "op", "target key", "shape"],
            )
        )
    return 0


def cmd_families(args: argparse.Namespace) -> int:
    """``families [--json]``: the registered fusion families."""
    from ..families import families
    from ..families.plugins import plugin_errors

    specs = families()
    for err in plugin_errors():  # broken plugins are skipped, never fatal: say which and why
        print(f"fusion-core: plugin {err.name} ({err.origin}) skipped: {err.error}", file=sys.stderr)
    if args.json:
        print_json(
            [
                {
                    "name": s.name,
                    "description": s.description,
                    "patterns": list(s.target_modules_patterns),
                    "origin": getattr(s, "origin", "fusion_core"),
                }
                for s in specs
            ]
        )
        return 0
    print(table([(s.name, s.description) for s in specs], ["family", "description"]))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """``demo [NAME] [--list]``: the folder of a demo checkpoint (generated on first use)."""
    from ..model.demo import DEFAULT_DEMO, DEMOS, demo_path

    if args.list:
        print(table([(d.name, d.description) for d in DEMOS.values()], ["demo", "description"]))
        return 0
    print(demo_path(args.name or DEFAULT_DEMO))
    return 0


def cmd_coverage(args: argparse.Namespace) -> int:
    """``coverage [--family NAME] [--only TYPE] [--jobs N] [--json]``: which types each family fits."""
    from ..coverage.scan import DEFAULT_TIMEOUT, coverage_scan, format_report
    from .output import run_with_progress

    gen = coverage_scan(
        args.family or None,
        args.jobs,
        args.only or None,
        timeout=DEFAULT_TIMEOUT if args.timeout is None else args.timeout,
    )
    report = run_with_progress(gen, "coverage")
    if args.json:
        print_json(report.to_dict())
    else:
        print(format_report(report))
    return 0
