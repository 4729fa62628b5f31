"""The machine every benchmark names (issue 30): CPU model, ISA flags, torch and its threads.

A ratio measured on one CPU class says little about another (the patch embedding is 2.5x on
an AVX2 EPYC and 6.2x on an AVX-512/AMX Xeon), so every benchmark prints this line first and
puts the same fields in its JSON.
"""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from fusion_core.run.machine import this_machine


def machine_line() -> str:
    """``machine: Intel(R) Xeon(R) ... (AVX2, AVX-512, AMX-BF16; ...), torch 2.13.0, 2 of 2 CPU thread(s)``."""
    return "machine: " + this_machine().line()


def machine() -> dict[str, Any]:
    """The same, as plain data for a benchmark's JSON."""
    return this_machine().plain()
