"""Inspection subcommands: tree, plan, families, demo, coverage."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..text import printable
from .output import fold_layers, human_count, print_json, say, table, wide


def register(sub: Any) -> None:
    """Add the inspection subcommands to ``sub`` (argparse subparsers)."""
    p = sub.add_parser("tree", help="show the meta-initialized module tree")
    p.add_argument("model", help="folder, config.json, arch:<type>, demo:<name> or org/name")
    p.add_argument("--depth", type=int, default=None, help="levels below the root to show")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--svg", metavar="OUT.svg", default=None, help="also save the tree as an image, repeats folded")
    p.add_argument(
        "--text", metavar="OUT.txt", default=None, help="also save the tree as indented text, repeats folded"
    )
    p.add_argument(
        "--fusion", action="append", default=[], metavar="NAME",
        help="mark the modules this family fuses (repeatable; highlighted in --svg/--text)",
    )  # fmt: skip
    p.set_defaults(func=cmd_tree)

    p = sub.add_parser("plan", help="show what the fusion families would change")
    p.add_argument("model")
    p.add_argument(
        "--fusion",
        action="append",
        default=[],
        metavar="NAME[:OPTION=VALUE,...]",
        help="family to enable, with its options if any (repeatable; `fusion-core families` lists the options); "
        "default: the checkpoint's own fusion_config",
    )
    p.add_argument(
        "--adapter",
        metavar="ADAPTER",
        help="a PEFT LoRA adapter folder: also list its key transforms into the other layout",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("families", help="list the registered fusion families, or self-test them")
    p.add_argument(
        "names", nargs="*", metavar="NAME", help="families to self-test (with --self-test; default: every one)"
    )
    p.add_argument(
        "--self-test",
        action="store_true",
        help="run the conformance kit on each family (demos and its sample models); exit 1 on any failure",
    )
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
    p.add_argument(
        "--timeout", type=float, default=None, metavar="SECONDS", help="limit per model type (default 30; --check 900)"
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="build a tiny random model of each type with a fusable module and check it end to end",
    )
    p.add_argument("--types", default="", metavar="T,...", help="only these model types (comma-separated)")
    p.add_argument("--workers", type=int, default=None, metavar="N", help="same as --jobs")
    p.add_argument("--resume", action="store_true", help="--check: keep an interrupted run's answers, check the rest")
    p.add_argument(
        "--markdown", default=None, metavar="PATH", help="--check: also write the report page (docs/coverage.md)"
    )
    p.set_defaults(func=cmd_coverage)


def _open(args: argparse.Namespace):
    from ..plan.fusion_plan import inspect_model

    insp = inspect_model(args.model, trust_remote_code=args.trust_remote_code)
    for note in insp.source.notes:  # e.g. what --trust-remote-code did and did not do
        say(f"fusion-core: note: {printable(note)}", err=True)
    return insp


def cmd_tree(args: argparse.Namespace) -> int:
    """``tree MODEL [--depth N] [--json]``: the meta-initialized module tree."""
    from ..errors import UsageError
    from ..model.tree import tree_plain

    if args.depth is not None and args.depth < 0:
        raise UsageError(f"tree: --depth must be 0 or more, got {args.depth}")
    insp = _open(args)
    root = insp.tree.root
    if args.svg or args.text:
        _save_tree(insp, args)
    if args.json:
        print_json(
            {
                "schema_version": 1,
                "model": insp.name,
                "model_class": insp.source.model_class.__name__,
                "modules": len(insp.tree),
                "total_params": root.total_params,
                "tree": tree_plain(root, args.depth),
            }
        )
        return 0
    from ..report.tree_image import tree_rows

    marks = _marks(insp, args.fusion) if args.fusion else {}
    rows = []
    folds = 0
    for r in tree_rows(insp.tree, marks, fold=not wide()):
        if args.depth is not None and r.depth > args.depth:
            continue
        node = insp.tree.by_path.get(r.path, root)
        weight = node.main_weight
        name = r.name.replace("–", "-")
        if r.count > 1:
            folds += 1
            name += f" ×{r.count}"
        instances = node.same_class_count
        fused = ""
        if r.path in marks:
            fused = marks[r.path].label.removeprefix("fused by ")
        elif r.mark is not None:  # a fold, or a layer, with fused modules inside
            fused = f"({r.mark.label.removeprefix('fused by ')} inside)"
        row = (
            "  " * r.depth + name,
            node.class_name,
            str(instances) if instances > 1 else "",
            human_count(r.params),
            *((node.kind,) if wide() else ()),
            "x".join(map(str, weight.shape)) if weight else "",
            weight.dtype if weight else "",
        )
        rows.append((*row, fused) if args.fusion else row)
    say(
        f"{insp.name}: {insp.source.model_class.__name__}, {len(insp.tree)} modules, "
        f"{human_count(root.total_params)} parameters"
    )
    notes = ["'in model': instances of the row's class in the whole model"]
    if folds:
        notes.append("'×N': N identical layers folded into one row, parameters summed (--wide: every layer)")
    if args.fusion:
        notes.append("'fused by': the family that fuses the module")
    headers = ["module", "class", "in model", "params", *(["kind"] if wide() else []), "weight", "dtype"]
    say(table(rows, [*headers, "fused by"] if args.fusion else headers))
    say("\n" + "\n".join(notes))
    return 0


def _marks(insp: Any, fusion: list[str]) -> dict:
    """The tree marks of the modules the ``--fusion`` families fuse."""
    from ..report.tree_image import plan_marks

    plan = insp.plan(fusion_config_of(fusion))
    return plan_marks(plan.matched_paths, [f.name for f in plan.families])


def _save_tree(insp: Any, args: argparse.Namespace) -> None:
    """``tree --svg/--text``: the folded tree, the plan's fused modules highlighted (``--fusion``)."""
    from ..report.tree_image import tree_rows, tree_svg, tree_text, write_text

    marks = _marks(insp, args.fusion) if args.fusion else {}
    rows = tree_rows(insp.tree, marks)
    subtitle = (
        f"{insp.source.model_class.__name__}, {len(insp.tree)} modules, {human_count(root_params(insp))} parameters"
        f"; repeats folded: {len(rows)} rows"
    )
    for path, text in ((args.svg, lambda: tree_svg(rows, insp.name, subtitle)), (args.text, lambda: tree_text(rows))):
        if path:
            try:
                write_text(path, text())
            except OSError as e:
                from ..errors import UsageError

                raise UsageError(f"tree: cannot write {printable(path)} ({e.strerror or e})") from None
            say(f"fusion-core: wrote {printable(path)}", err=True)


def root_params(insp: Any) -> int:
    return insp.tree.root.total_params


def fusion_config_of(values: list[str]) -> dict[str, Any]:
    """``--fusion`` values -> ``fusion_config``: ``NAME`` is ``True``, ``NAME:a=1,b=x`` a mapping.

    A value is read as JSON when it parses (``1``, ``true``, ``0.5``, ``"x"``), else as a
    string. The options are validated later, against the family's schema.

    Raises:
        UsageError: an option without ``=``.
    """
    import json

    from ..errors import UsageError

    config: dict[str, Any] = {}
    for value in values:
        name, sep, rest = value.partition(":")
        if "," in name:  # "qkv,gate_up": one unknown name, unless a family is really called so
            from ..families import REGISTRY

            if name not in REGISTRY:
                parts = [p for p in name.split(",") if p]
                repeat = " ".join(f"--fusion {p}" for p in parts)
                raise UsageError(f"--fusion {value}: one family per --fusion; to enable several, repeat it: {repeat}")
        if not sep:
            config[name] = True
            continue
        options: dict[str, Any] = {}
        for item in filter(None, rest.split(",")):
            key, eq, raw = item.partition("=")
            if not eq or not key:
                raise UsageError(f"--fusion {value}: write options as {name}:OPTION=VALUE[,OPTION=VALUE]")
            try:
                options[key] = json.loads(raw)
            except ValueError:
                options[key] = raw
        config[name] = options or True
    return config


def cmd_plan(args: argparse.Namespace) -> int:
    """``plan MODEL [--fusion NAME[:OPT=VALUE,...] ...] [--json]``: matches, patch mapping, key transforms.

    Without ``--fusion``, the checkpoint's own ``fusion_config`` (a fused export's).
    """
    from ..errors import UsageError
    from ..plan.fusion_plan import as_plan, validate_fusion_config

    fusion_config = fusion_config_of(args.fusion) if args.fusion else None
    validate_fusion_config(fusion_config)  # a bad family or option is a usage error before the model opens
    insp = _open(args)
    if fusion_config is None and not getattr(insp.source.config, "fusion_config", None):
        raise UsageError("plan: give at least one --fusion NAME (see `fusion-core families`)")
    plan = as_plan(insp, fusion_config)  # without --fusion: the checkpoint's own fusion_config
    adapter = None
    if getattr(args, "adapter", None):
        from ..adapter.convert import plan_adapter

        adapter = plan_adapter(plan, args.adapter).plan
    if args.json:
        if adapter is None:
            from ..plan.plan_file import plan_document
            from .output import ByteBar

            with ByteBar("hashing the weights (the plan's identity)") as bar:
                document = plan_document(plan, bar)  # with its source's identity: `check --plan` runs exactly it
            print_json(document)
        else:
            from ..boundary.convert import to_plain

            print_json({**to_plain(plan), "adapter": {**to_plain(adapter), "rows": adapter.rows()}})
        return 0
    say(f"{plan.model}: {plan.model_class}")
    for fam in plan.families:
        d = fam.discovery
        near = f", {len(d.near_misses)} near miss(es)" if d.near_misses else ""
        say(f"\n[{fam.name}] {len(d.matches)} module(s) matched, {len(d.rejected)} rejected{near}")
        if fam.effective_options:
            say("  options: " + ", ".join(f"{k}={v!r}" for k, v in fam.effective_options.items()))
        if d.empty_message:
            say(f"  {d.empty_message}")
        if d.matches:
            say(
                table(
                    _folded([(m.path, m.original_class.__name__, m.fused_class.__name__) for m in d.matches]),
                    ["module", "class", "fused class"],
                )
            )
        if d.rejected:
            _reasons("rejected", [(r.path, r.class_name, r.reason) for r in d.rejected])
        if d.near_misses:
            _reasons("near miss", [(r.path, r.class_name, r.reason) for r in d.near_misses])
    if plan.patch_mapping:
        say("\npatch mapping")
        say(table([(o.__name__, f.__name__) for o, f in plan.patch_mapping.items()], ["original", "fused"]))
    rows = plan.rows("load")
    if rows:
        where = "checkpoint" if plan.has_checkpoint else "model (no checkpoint attached)"
        say(f"\nweight transforms ({where}, layout: {plan.layout})")
        say(
            table(
                _folded(
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
                    ]
                ),
                ["source key", "shape", "dtype", "op", "target key", "shape"],
            )
        )
    if adapter is not None:
        _print_adapter(adapter)
    return 0


def _reasons(title: str, rows: list[tuple]) -> None:
    """Rejections or near misses: a table with ``--wide``; else one line each, ``path (class):
    reason``, repeated layers folded, the reason whole (broken over lines if need be)."""
    if wide():
        say(table(rows, [title, "class", "reason"]))
        return
    say(f"{title}:")
    for path, class_name, reason in _folded(rows):
        say(f"  {path} ({class_name}): {reason}")


def _folded(rows: list[tuple]) -> list:
    """``rows`` with the rows of repeated layers folded into one ("model.layers.{0–27}.self_attn ×28"),
    unless ``--wide`` (every row)."""
    return rows if wide() else fold_layers(rows)


def _print_adapter(adapter: Any) -> None:
    """The adapter's key transforms (``plan --adapter``)."""
    say(f"\nadapter {printable(adapter.adapter)} ({adapter.source_layout} layout -> {adapter.layout})")
    rows = [
        (
            r["source_key"],
            "x".join(map(str, r["source_shape"])),
            r["op"],
            r["target_key"],
            "x".join(map(str, r["target_shape"])),
            str(r["rank"]),
        )
        for r in adapter.rows()
    ]
    if rows:
        say(
            table(
                _folded([tuple(printable(c) for c in r) for r in rows]),
                ["source key", "shape", "op", "target key", "shape", "rank"],
            )
        )
    say(f"{adapter.copied_keys} other tensor(s) copied bitwise")
    for m in adapter.messages:
        say(f"note: {printable(m)}")


def cmd_families(args: argparse.Namespace) -> int:
    """``families [--json]``: the registered fusion families; ``families --self-test [NAME ...]``: the kit."""
    from ..errors import UsageError
    from ..families import families
    from ..families.plugins import plugin_errors

    specs = families()
    for err in plugin_errors():  # broken plugins are skipped, never fatal: say which and why
        say(f"fusion-core: plugin {err.name} ({err.origin}) skipped: {err.error}", err=True)
    if args.self_test:
        return _self_test(args)
    if args.names:
        raise UsageError("families: family names are for --self-test; `fusion-core families` lists them all")
    if args.json:
        print_json(
            [
                {
                    "name": s.name,
                    "description": s.description,
                    "patterns": list(s.target_modules_patterns),
                    "origin": getattr(s, "origin", "fusion_core"),
                    "options": s.options_schema(),
                }
                for s in specs
            ]
        )
        return 0
    rows = [(s.name, s.description, _options_text(s)) for s in specs]
    if wide():
        say(table(rows, ["family", "description", "options"]))
        return 0
    for name, description, options in rows:  # sentences: one paragraph each, broken at 120 columns
        say(f"{name}: {description}" + (f"\n  options: {options}" if options else ""))
    return 0


def _options_text(spec: Any) -> str:
    return "; ".join(f"{k} ({o.type.__name__}, default {o.default!r})" for k, o in spec.options_schema().items())


def _self_test(args: argparse.Namespace) -> int:
    """Run the conformance kit on the named (default: every) family; exit 1 on any failure."""
    from ..conformance import check_family
    from ..families import families, get_family

    specs = [get_family(n) for n in dict.fromkeys(args.names)] if args.names else families()
    reports = []
    for spec in specs:
        if not args.json:
            say(f"self-test {spec.name} ...", err=True, flush=True)
        reports.append(check_family(spec))
    failed = [(r.family, p) for r in reports for p in r.failures]
    if args.json:
        print_json({"schema_version": 1, "passed": not failed, "families": reports})
    else:
        for report in reports:
            say(f"\n[{report.family}] {'pass' if report.passed else 'FAIL'} ({report.seconds:.1f} s)")
            say(
                table(
                    [(p.name, p.model, p.status, p.detail) for p in report.properties],
                    ["property", "model", "result", "detail"],
                )
            )
    for family, prop in failed:
        say(
            f"fusion-core: self-test failed: family {family!r}, {prop.name} on {prop.model}: {prop.detail}",
            err=True,
        )
    return 1 if failed else 0


def cmd_demo(args: argparse.Namespace) -> int:
    """``demo [NAME] [--list]``: the folder of a demo checkpoint (generated on first use)."""
    from ..model.demo import DEFAULT_DEMO, DEMOS, demo_path

    if args.list:
        say(table([(d.name, d.description) for d in DEMOS.values()], ["demo", "description"]))
        return 0
    say(demo_path(args.name or DEFAULT_DEMO))
    return 0


def cmd_coverage(args: argparse.Namespace) -> int:
    """``coverage [--family NAME] [--only TYPE] [--jobs N] [--json]``: which types each family fits."""
    from ..coverage.scan import DEFAULT_TIMEOUT, coverage_scan, format_report
    from ..errors import UsageError
    from .output import run_with_progress

    jobs = args.workers if args.workers is not None else args.jobs
    only = [*args.only, *(t.strip() for t in args.types.split(",") if t.strip())] or None
    if args.check:
        return _coverage_check(args, jobs, only)
    if args.resume or args.markdown:
        raise UsageError(f"{'--resume' if args.resume else '--markdown'} goes with --check")
    gen = coverage_scan(
        args.family or None,
        jobs,
        only,
        timeout=DEFAULT_TIMEOUT if args.timeout is None else args.timeout,
    )
    report = run_with_progress(gen, "coverage")
    if args.json:
        print_json(report)
    else:
        say(format_report(report))
    return 0


def _coverage_check(args: argparse.Namespace, jobs: int | None, only: list[str] | None) -> int:
    """``coverage --check``: tiny models checked end to end; progress with an ETA on stderr."""
    from ..coverage.check_run import DEFAULT_CHECK_TIMEOUT, coverage_check, format_check, markdown
    from ..errors import UsageError
    from .output import run_with_progress

    if args.family:
        raise UsageError("--family does not go with --check: every family that applies is checked")
    gen = coverage_check(
        only, jobs, timeout=DEFAULT_CHECK_TIMEOUT if args.timeout is None else args.timeout, resume=args.resume
    )
    report = run_with_progress(gen, "coverage --check", lines=True)
    if args.markdown:
        command = "fusion-core coverage --check" + (f" --types {','.join(only)}" if only else "")
        Path(args.markdown).write_text(markdown(report, command), encoding="utf-8")
    if args.json:
        print_json(report)
    else:
        say(format_check(report))
    return 0
