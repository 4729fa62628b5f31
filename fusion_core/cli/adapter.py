"""``fusion-core adapter``: convert a PEFT LoRA adapter between the original and the fused layout, verified."""

from __future__ import annotations

import argparse
from typing import Any

from ..text import printable
from .output import print_json, run_with_progress, say, table


def register(sub: Any) -> None:
    p = sub.add_parser(
        "adapter",
        help="convert a PEFT LoRA adapter between the original and the fused layout (exact, verified)",
        description=(
            "Convert the LoRA adapter in ADAPTER (adapter_config.json, adapter_model.safetensors) for the model "
            "BASE fused with the given families, or back. OUT is written into a temporary sibling folder and "
            "renamed into place once verified (PEFT on both layouts, in a separate process)."
        ),
    )
    p.add_argument("adapter", help="a PEFT adapter folder")
    p.add_argument("out", help="the folder to create")
    p.add_argument("--base", required=True, help="the base model (a folder with safetensors weights, demo:<name>...)")
    p.add_argument(
        "--fusion",
        action="append",
        default=[],
        metavar="NAME[:OPTION=VALUE,...]",
        help="family the fused layout has (repeatable); default: what the adapter's fusion_adapter.json records",
    )
    p.add_argument(
        "--layout",
        choices=("fused", "original"),
        default=None,
        help="the layout to write; default: the other one than the adapter's (fused for an adapter of the "
        "original model)",
    )
    p.add_argument("--no-verify-outputs", action="store_true", help="skip the PEFT comparison in a child process")
    p.add_argument("--json", action="store_true", help="machine-readable result")
    p.set_defaults(func=cmd_adapter)


def cmd_adapter(args: argparse.Namespace) -> int:
    from ..adapter.convert import adapter_plan_for, iter_convert_adapter
    from ..boundary.options import AdapterOptions
    from .inspect import fusion_config_of

    options = AdapterOptions(layout=args.layout, verify_outputs=not args.no_verify_outputs)
    plan = adapter_plan_for(args.base, args.adapter, fusion_config_of(args.fusion) or None, args.layout)
    result = run_with_progress(iter_convert_adapter(plan, args.adapter, args.out, options), "adapter", args.json)
    for note in [*result.verification.notes, *result.messages]:
        say(f"fusion-core: note: {printable(note)}", err=True)
    if args.json:
        print_json(result)
        return 0
    say(
        f"converted {printable(result.adapter)} ({result.source_layout} layout) -> {printable(str(result.out_dir))} "
        f"({result.layout} layout), {result.tensors} tensors in {result.seconds:.1f}s"
    )
    if result.steps:
        rows = [
            (
                s.family,
                s.op,
                ", ".join(s.source_modules),
                ", ".join(s.target_modules),
                "/".join(map(str, s.target_ranks)),
            )
            for s in result.steps
        ]
        say(table([tuple(printable(c) for c in r) for r in rows], ["family", "op", "from", "to", "rank"]))
    say(f"verified: {printable(result.verification.summary)}")
    if result.consumers:
        rows = [(c.name, c.status, c.how, c.detail) for c in result.consumers]
        say(table([tuple(printable(str(x)) for x in r) for r in rows], ["consumer", "status", "how", "detail"]))
    return 0
