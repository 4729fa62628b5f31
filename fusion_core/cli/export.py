"""``fusion-core export``: write a fused-layout (or original-layout) checkpoint, verified."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..text import printable
from .execute import PLAN_HELP, planned
from .output import print_json, run_with_progress, say, table, wide


def register(sub: Any) -> None:
    from ..boundary.options import DEFAULT_MAX_SHARD_SIZE

    p = sub.add_parser(
        "export",
        help="export a checkpoint in fused or original layout (streamed, atomic, verified)",
        description=(
            "Convert MODEL's safetensors checkpoint into OUT, tensor by tensor. OUT is written into a "
            "temporary sibling folder and renamed into place once verified; the source is never modified."
        ),
    )
    p.add_argument(
        "model", nargs="?", help="a model folder (or demo:<name>, or a cached hub id) with safetensors weights; "
        "with --plan, OUT alone (or MODEL OUT: where the planned model is now)",
    )  # fmt: skip
    p.add_argument("out", nargs="?", help="the folder to create")
    p.add_argument("--plan", metavar="PLAN.json", help=PLAN_HELP)
    p.add_argument(
        "--fusion",
        action="append",
        default=[],
        metavar="NAME[:OPTION=VALUE,...]",
        help="family to apply, with its options if any (repeatable, in order); default: the checkpoint's "
        "own fusion_config. A fused checkpoint keeps its families (they come first) and gains these",
    )
    p.add_argument(
        "--layout",
        choices=("fused", "original"),
        default="fused",
        help="fused: keys of the fused modules, fusion_config in config.json (default); original: the model's "
        "own layout, without fusion_config",
    )
    p.add_argument(
        "--max-shard-size",
        default=DEFAULT_MAX_SHARD_SIZE,
        metavar="SIZE",
        help=f"largest shard, e.g. 5GB or 200MB (default {DEFAULT_MAX_SHARD_SIZE}, as save_pretrained)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it is not empty (once the new one is done)")
    p.add_argument(
        "--max-memory", metavar="SIZE",
        help="memory each model of the verification may take, e.g. 6GiB (accelerate's max_memory); beyond it "
        "their blocks stay on disk (default: the memory available)",
    )  # fmt: skip
    p.add_argument(
        "--no-verify-outputs",
        action="store_true",
        help="skip loading the export back to compare outputs (for checkpoints too large to load here); "
        "keys, shapes and dtypes are still checked",
    )
    p.add_argument(
        "--on-wrong-load",
        choices=("guard", "refuse"),
        default="guard",
        help="if stock transformers would load the fused export wrong: guard (default) writes the family names "
        "as fusion_core:<name>, which transformers refuses loudly and fusion_core.load reads; refuse: no export",
    )
    p.add_argument("--copy-as-is", action="store_true", help="export a model with nothing to fuse unchanged")
    p.add_argument("--json", action="store_true", help="machine-readable result")
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from ..boundary.options import ExportOptions
    from ..errors import UsageError
    from ..export.pipeline import iter_export
    from ..plan.fusion_plan import as_plan
    from .inspect import fusion_config_of

    options = ExportOptions(  # validated before the model opens: an OptionError names the flag
        layout=args.layout,
        max_shard_size=args.max_shard_size,
        overwrite=args.overwrite,
        verify_outputs=not args.no_verify_outputs,
        allow_copy_as_is=args.copy_as_is,
        on_wrong_load=args.on_wrong_load,
        max_memory=args.max_memory,
    )
    if args.model is None:
        raise UsageError("export: give MODEL and OUT, or --plan PLAN.json OUT (OUT: the folder to create)")
    if args.plan:
        if args.out is None:  # export --plan PLAN.json OUT
            args.model, args.out = None, args.model
        plan = planned(args, "export")
    elif args.out is None:
        raise UsageError("export: give MODEL and OUT (or --plan PLAN.json OUT)")
    else:
        plan = as_plan(args.model, fusion_config_of(args.fusion) or None, trust_remote_code=args.trust_remote_code)
    own = getattr(plan.source.config, "fusion_config", None)
    if not args.plan and not args.fusion and not own and not args.copy_as_is:
        raise UsageError(
            "export: give at least one --fusion NAME (see `fusion-core families`), or --copy-as-is "
            "(the checkpoint's config.json has no fusion_config to reuse)"
        )
    gen = iter_export(plan, args.out, options)
    result = run_with_progress(gen, desc="export", quiet=args.json)
    for note in result.verification.notes:  # e.g. leftovers of a killed export, removed
        say(f"fusion-core: note: {printable(note)}", err=True)
    for message in result.messages:  # e.g. the checkpoint's own families, added to the plan
        say(f"fusion-core: note: {printable(message)}", err=True)
    if args.json:
        print_json(result)
        return 0
    say(
        f"exported {result.source} ({result.source_layout} layout) -> {result.out_dir} ({result.layout} layout), "
        f"{result.tensors} tensors, {result.total_bytes / 1e6:.1f} MB in {result.seconds:.1f}s"
        + (" (replaced the old folder)" if result.replaced_existing else "")
    )
    say(table([(name, f"{size:,}") for name, size in result.files], ["file", "bytes"]))
    if result.transformed:
        say(f"transformed: {', '.join(result.transformed)}")
    for name, reason in result.skipped_files:
        say(f"not copied: {name}: {reason}")
    say(f"verified: {result.verification.summary}")
    if result.written_fusion_config is not None:
        say(f"config.json fusion_config: {json.dumps(result.written_fusion_config)}")
    if result.consumers:
        rows = [(c.name, c.status, c.compared, c.how, c.detail) for c in result.consumers]
        if wide():
            say(table(rows, ["consumer", "status", "compared", "how", "detail"]))
        else:  # one paragraph each: the how and the detail are sentences (issue 33: 120 columns)
            for name, status, compared, how, detail in rows:
                say(f"consumer {name}: {status}" + (f" ({compared})" if compared else ""))
                for text in (how, detail):
                    if text:
                        say(f"  {text}")
    return 0
