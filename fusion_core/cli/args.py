"""Validated argument types for the subcommands: a bad value is a usage error (exit 2, one line).

argparse turns the ``ArgumentTypeError`` raised here into ``fusion-core: error: ...``.
"""

from __future__ import annotations

import argparse

from ..text import printable

#: torch seeds are 64-bit; numpy's are 32-bit but we only seed torch
MAX_SEED = 2**63 - 1


def seed_arg(text: str) -> int:
    """``--seed``: an integer from 0 to 2**63 - 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seed '{printable(text[:40])}': give a whole number") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"seed {printable(text[:40])} is out of range (0 to {MAX_SEED})")
    return value


def device_arg(text: str) -> str:
    """``--device``: a torch device that exists on this machine (``cpu``, ``cuda``, ``cuda:1``, ``mps``)."""
    from ..boundary.options import OptionError
    from ..run.checks import check_device

    try:
        return check_device(printable(text[:60]))
    except OptionError as e:
        raise argparse.ArgumentTypeError(e.detail) from None


#: option names (``fusion_core.boundary.options``) whose flag is not ``--`` + the name with dashes
_FLAGS = {
    "min_rounds": "--repeats",
    "budget_s": "--time-budget",
    "upstream": "--no-upstream",
    "verify_outputs": "--no-verify-outputs",
    "allow_copy_as_is": "--copy-as-is",
    "fusions": "--fusion",
}


def flag_of(option: str) -> str:
    """The command-line flag of an option: ``batch`` -> ``--batch``, ``min_rounds`` -> ``--repeats``."""
    return _FLAGS.get(option, "--" + option.replace("_", "-"))
