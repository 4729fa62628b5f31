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
    import torch

    shown = printable(text[:60])
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"unknown device '{shown}': use cpu, cuda, cuda:N or mps") from None
    kind = device.type
    if kind == "cpu":
        return text
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise argparse.ArgumentTypeError(f"device '{shown}': no CUDA GPU is available here; use --device cpu")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise argparse.ArgumentTypeError(
                f"device '{shown}': this machine has {count} CUDA device(s), 0 to {count - 1}"
            )
        return text
    if kind == "mps":
        if not torch.backends.mps.is_available():
            raise argparse.ArgumentTypeError(f"device '{shown}': MPS is not available here; use --device cpu")
        return text
    raise argparse.ArgumentTypeError(f"device '{shown}': not supported; use cpu, cuda, cuda:N or mps")
