"""What machine a timing was taken on: the CPU's model, the vector units it has, torch and its threads.

Fusion speedups differ by CPU class far more than by model: the Conv3d patch embedding
measured 2.5x on an AVX2 EPYC and 6.2x on an AVX-512/AMX Xeon, and a fused ``qkv`` that
was neutral on the first lost 10% at decode on the second. A ratio is only meaningful next
to the machine it came from, so every benchmark row and every check carries this.

The CPU's flags come from ``/proc/cpuinfo`` (Linux) or ``sysctl`` (macOS); torch's own
view is :func:`torch.backends.cpu.get_cpu_capability` (the kernels it dispatches to).
"""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import dataclass
from functools import cache

#: the flags that decide which CPU kernels run (x86: AVX2 / AVX-512 / AMX; Arm: NEON, SVE), in display order
ISA_FLAGS = (
    ("avx2", "AVX2"),
    ("avx512f", "AVX-512"),
    ("avx512_bf16", "AVX512-BF16"),
    ("avx512_fp16", "AVX512-FP16"),
    ("amx_tile", "AMX"),
    ("amx_bf16", "AMX-BF16"),
    ("asimd", "NEON"),
    ("sve", "SVE"),
    ("bf16", "BF16"),
)


@dataclass(frozen=True)
class Machine:
    """One machine, as a timing needs it said: ``Intel(R) Xeon(R) Processor (AVX2, AVX-512, AMX-BF16 ...)``."""

    cpu: str  # the model name
    isa: tuple[str, ...]  # the ISA_FLAGS it has, display names
    capability: str  # torch's CPU capability ("AVX512", "AVX2", "DEFAULT", ...)
    torch: str
    threads: int  # torch's threads
    cpus: int  # logical CPUs

    @property
    def cpu_class(self) -> str:
        """``"AVX-512/AMX"``, ``"AVX-512"``, ``"AVX2"``, ``"Arm"`` or ``"other"``: the rows of the README's tables."""
        if "AMX" in self.isa:
            return "AVX-512/AMX"
        if "AVX-512" in self.isa:
            return "AVX-512"
        if "AVX2" in self.isa:
            return "AVX2"
        if "NEON" in self.isa or platform.machine().lower() in ("arm64", "aarch64"):
            return "Arm"
        return "other"

    def brief(self) -> str:
        """The CPU and its class, as a check's workload line names it."""
        return f"{self.cpu} ({self.cpu_class}; torch dispatches {self.capability})"

    def line(self) -> str:
        """One line for a benchmark's header or a check's workload."""
        isa = ", ".join(self.isa) or "no vector flags read"
        return (
            f"{self.cpu} ({isa}; torch dispatches {self.capability}), torch {self.torch}, "
            f"{self.threads} of {self.cpus} CPU thread(s)"
        )

    def plain(self) -> dict[str, object]:
        return {
            "cpu": self.cpu, "cpu_class": self.cpu_class, "isa": list(self.isa), "capability": self.capability,
            "torch": self.torch, "threads": self.threads, "cpus": self.cpus,
        }  # fmt: skip


def this_machine() -> Machine:
    """This machine now (torch's threads as set at the call)."""
    import torch

    cpu, flags = _cpu()
    isa = tuple(name for flag, name in ISA_FLAGS if flag in flags)
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):
        capability = "unknown"
    return Machine(cpu, isa, capability, torch.__version__, torch.get_num_threads(), os.cpu_count() or 1)


@cache
def _cpu() -> tuple[str, frozenset[str]]:
    """The CPU's model name and its flags (lower case), as the operating system reports them."""
    name, flags = "", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key in ("model name", "hardware", "cpu model") and not name:
                    name = value.strip()
                elif key in ("flags", "features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    if not name and platform.system() == "Darwin":
        name = _sysctl("machdep.cpu.brand_string")
        flags = {f.lower().replace(".", "_") for f in _sysctl("machdep.cpu.features").split()}
        if platform.machine() == "arm64":
            flags |= {"asimd", "bf16"} if _sysctl("hw.optional.arm.FEAT_BF16") == "1" else {"asimd"}
    return (name or platform.processor() or platform.machine() or "unknown CPU")[:120], frozenset(flags)


def _sysctl(key: str) -> str:
    try:
        return subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
