"""``fusion-core``: the command-line face of the engine.

Human output is plain tables; ``--json`` output is stable (documented in docs/cli-json.md).
Errors: one line on stderr (control characters escaped: names come from untrusted
folders); exit 2 for usage errors, 1 for model/file errors, never a traceback unless
``--debug``. Subcommands live in :mod:`fusion_core.cli`.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence

from ..boundary.options import OptionError
from ..errors import FusionError, UsageError, bounded, one_line
from ..text import DEFAULT_WIDTH, printable
from . import adapter, diff, execute, export, inspect
from .args import flag_of
from .output import say, set_width

# the command groups, registered explicitly (a wrong name fails at import, never skipped)
COMMAND_GROUPS = (inspect, execute, export, diff, adapter)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        # main() writes "fusion-core: error: "; a subcommand's parser names its command after it
        command = self.prog.removeprefix("fusion-core").strip()
        raise UsageError(f"{command}: {message}" if command else message)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, with the subcommands of every group in ``COMMAND_GROUPS``."""
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
    for group in COMMAND_GROUPS:
        group.register(sub)
    for command in sub.choices.values():  # every command's text fits 120 columns unless --wide
        command.add_argument(
            "--wide", action="store_true", help="print every row and column whole (default: fit 120 columns)"
        )
    return parser


def _message(e: FusionError, command: str) -> str:
    """One line for ``e``, naming flags where the engine names options.

    An :class:`OptionError` starts with its flag (``check: --batch must be at least 1``);
    the options another error's message names (``FusionError.options``) become their flags.
    """
    if isinstance(e, OptionError):
        detail = " ".join(str(e.detail).split())
        return f"{command + ': ' if command else ''}{flag_of(e.option)} {detail}"
    text = one_line(e)
    for option in e.options:
        text = re.sub(rf"(?<![\w-]){re.escape(option)}(?![\w-])", flag_of(option), text)
    return text


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
    command = ""
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:  # --help / --version printed; argparse errors raise UsageError
            return int(e.code or 0)
        command = args.command
        set_width(None if args.wide else DEFAULT_WIDTH)
        for path in args.family_file:
            from ..families import load_family_file

            if not os.path.isfile(os.path.expanduser(path)):
                raise UsageError(f"--family-file {printable(path)}: no such file")
            load_family_file(path)
        handler: Callable[[argparse.Namespace], int] = args.func
        return int(handler(args) or 0)
    except FusionError as e:
        if debug:
            raise
        say(f"fusion-core: error: {printable(bounded(_message(e, command)))}", err=True)
        return e.exit_code
    except KeyboardInterrupt:
        say("fusion-core: interrupted", err=True)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:
        if debug:
            raise
        say(
            f"fusion-core: internal error: {type(e).__name__}: {printable(bounded(one_line(e)))} (run with --debug)",
            err=True,
        )
        return 1


def console() -> None:
    """The ``fusion-core`` program: :func:`main`, then an exit that skips the interpreter's
    teardown (with torch and transformers loaded it takes over a second, after the answer).

    Everything is written and closed by then: files in ``with`` blocks, children finished.
    """
    code = main()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    console()
