"""``fusion-core``: the command-line face of the engine.

Human output is plain tables; ``--json`` output is stable (documented in the README).
Errors: one line on stderr; exit 2 for usage errors, 1 for model/file errors, never a
traceback unless ``--debug``. Subcommands live in :mod:`fusion_core.commands`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .errors import FusionError, UsageError, one_line
from .progress import CancelToken, Progress, ProgressGenerator, drive

T = TypeVar("T")
COMMAND_MODULES = ("fusion_core.commands.inspect", "fusion_core.commands.execute", "fusion_core.commands.export")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, with the subcommands of every module in ``COMMAND_MODULES``."""
    parser = _Parser(
        prog="fusion-core", description="Inspect, check and export fusion mappings of transformers models."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logging")
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow model folders whose config asks for custom code (never on by default)",
    )
    parser.add_argument(
        "--family-file",
        action="append",
        default=[],
        metavar="PATH.py",
        help="load a fusion family from a Python file (repeatable)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        module.register(sub)
    return parser


def print_json(data: Any) -> None:
    """Write ``data`` as indented JSON on stdout (the ``--json`` output)."""
    json.dump(data, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """Format ``rows`` as a plain left-aligned text table."""
    cells = [[str(h) for h in headers]] + [[("" if c is None else str(c)) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def human_count(n: int) -> str:
    """``1234567`` -> ``"1.23M"`` (parameter counts in tables)."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)


def run_with_progress(gen: ProgressGenerator[T], desc: str = "", quiet: bool = False) -> T:
    """Drive a progress generator with a tqdm bar on a terminal, silently otherwise."""
    if quiet or not sys.stderr.isatty():
        return drive(gen)
    from tqdm import tqdm

    bar = tqdm(total=0, desc=desc, unit="step", leave=False, file=sys.stderr)

    def update(p: Progress) -> None:
        if p.total and bar.total != p.total:
            bar.total = p.total
        bar.n = p.done
        if p.message:
            bar.set_postfix_str(p.message[-40:], refresh=False)
        bar.refresh()

    token = CancelToken()
    try:
        return drive(gen, update, token)
    finally:
        bar.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fusion-core`` with ``argv`` and return the exit status.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).

    Returns:
        0 on success, 2 for a usage error, 1 for a model/file error (one line on stderr),
        130 when interrupted.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not debug:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:  # --help / --version printed; argparse errors raise UsageError
            return int(e.code or 0)
        for path in args.family_file:
            from .families import load_family_file

            load_family_file(path)
        handler: Callable[[argparse.Namespace], int] = args.func
        return int(handler(args) or 0)
    except FusionError as e:
        if debug:
            raise
        print(f"fusion-core: error: {one_line(e)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("fusion-core: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:
        if debug:
            raise
        print(
            f"fusion-core: internal error: {type(e).__name__}: {one_line(e)} (run with --debug)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
