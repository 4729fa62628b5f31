"""``fusion-core diff MODEL --fusion NAME ... [--json]``: original against fused, without tensor data;
``fusion-core diff A B [--values] [--atol X] [--rtol Y] [--report OUT] [--json]``: any two models."""

from __future__ import annotations

import argparse
from typing import Any

from .output import fold_layers, human_count, print_json, say, table, wide


def register(sub: Any) -> None:
    """Add the ``diff`` subcommand to ``sub`` (argparse subparsers)."""
    p = sub.add_parser(
        "diff",
        help="compare the original model with the fused one: classes, state-dict keys, parameter counts",
    )
    p.add_argument("model", help="folder, config.json, arch:<type>, demo:<name> or org/name")
    p.add_argument(
        "other",
        nargs="?",
        default=None,
        help="a second model: compare MODEL (A) with it (B); exit 0 equal, 1 different",
    )
    p.add_argument("--fusion", action="append", default=[], metavar="NAME", help="family to enable (repeatable)")
    p.add_argument("--values", action="store_true", help="two models: also compare every tensor's values (streamed)")
    p.add_argument(
        "--atol", type=float, default=None, help="two models: values within this absolute tolerance are equal"
    )
    p.add_argument(
        "--rtol", type=float, default=None, help="two models: values within this relative tolerance are equal"
    )
    p.add_argument(
        "--hash", action="store_true", help="two models, with --values: also hash each tensor's bytes (BLAKE2b)"
    )
    p.add_argument("--report", metavar="OUT.html|OUT.md", default=None, help="also write a report (HTML or Markdown)")
    p.add_argument("--json", action="store_true", help="machine-readable output (docs/cli-json.md)")
    p.set_defaults(func=cmd_diff)


def _shape(shape: Any) -> str:
    return "x".join(map(str, shape)) if shape is not None else ""


def cmd_diff(args: argparse.Namespace) -> int:
    """``diff MODEL --fusion NAME ... [--json]``: module classes, key changes and parameter counts.

    Exit status 1 (after the output) when a module's parameter count changes or a key
    changes without a transform of the plan: a fused load would not be the same model.
    """
    from ..errors import UsageError
    from ..plan.diff import diff_plan
    from ..plan.fusion_plan import inspect_model

    if args.other is not None:
        from .compare import cmd_compare

        return cmd_compare(args)
    for flag, value in (("--values", args.values), ("--atol", args.atol), ("--rtol", args.rtol), ("--hash", args.hash)):
        if value not in (None, False):
            raise UsageError(f"diff: {flag} compares two models: give a second model (diff A B {flag})")
    if args.report:
        raise UsageError("diff: --report writes the report of two models compared: give a second model (diff A B)")
    if not args.fusion:
        raise UsageError("diff: give at least one --fusion NAME (see `fusion-core families`)")
    insp = inspect_model(args.model, trust_remote_code=args.trust_remote_code)
    for note in insp.source.notes:
        say(f"fusion-core: note: {note}", err=True)
    from .inspect import fusion_config_of  # "a,b" gets the hint to repeat --fusion

    diff = diff_plan(insp.plan({name: True for name in fusion_config_of(args.fusion)}))
    if args.json:
        print_json(diff)
    else:
        _print_human(diff)
    problems = []
    if not diff.params_equal:
        problems.append("parameter counts differ between the original and the fused model")
    if diff.unexplained:
        problems.append(f"{len(diff.unexplained)} key(s) change without a transform")
    if problems:
        say(f"fusion-core: error: {'; '.join(problems)}", err=True)
        return 1
    return 0


def _folded(rows: list[tuple], column: int = 0) -> list:
    """``rows`` with the rows of repeated layers folded into one ("model.layers.{0-27}.self_attn ×28"),
    unless ``--wide`` (every row)."""
    return rows if wide() else fold_layers(rows, column=column)


def _print_human(diff: Any) -> None:
    c = diff.counts()
    say(
        f"{diff.model}: {diff.model_class}, fusions {', '.join(diff.fusion_config) or 'none'}\n"
        f"state dict: {diff.original_keys} keys -> {diff.fused_keys} keys ({diff.unchanged_keys} unchanged; "
        f"{c['removed']} removed, {c['added']} added, {c['renamed']} renamed, {c['reshaped']} reshaped)\n"
        f"parameters: {human_count(diff.original_params)} -> {human_count(diff.fused_params)} "
        f"({'equal' if diff.params_equal else 'DIFFERENT'})"
    )
    for message in diff.messages:
        say(f"note: {message}")
    if not diff.modules:
        say("\nnothing is fused: the models are the same")
        return
    say("\nmodule classes")
    say(
        table(
            [(r["class"], r["fused_class"], r["family"], r["instances"]) for r in diff.classes()],
            ["original", "fused", "family", "instances"],
        )
    )
    say("\nmodules")
    say(
        table(
            _folded(
                [
                    (
                        m.path,
                        m.family,
                        f"{m.original_class} -> {m.fused_class}",
                        f"{m.original_params:,}",
                        f"{m.fused_params:,}",
                        "yes" if m.params_equal else "NO",
                    )
                    for m in diff.modules
                ]
            ),
            ["module", "family", "class", "params", "fused params", "equal"],
        )
    )
    say("\nstate-dict keys")
    say(
        table(
            _folded(
                [
                    (k.kind, k.key, _shape(k.shape), k.op or "(no transform)", k.new_key, _shape(k.new_shape))
                    for k in diff.keys
                ],
                column=1,
            ),
            ["change", "original key", "shape", "op", "fused key", "shape"],
        )
    )
