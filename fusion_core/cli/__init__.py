"""``fusion-core``: the command-line face of the engine (see :mod:`fusion_core.cli.main`)."""

from __future__ import annotations

from .main import build_parser, console, main

__all__ = ["build_parser", "console", "main"]
