"""Every timing names its machine (issue 30, item 3): the CPU's model, its vector units, torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fusion_core.run.machine import Machine, this_machine

ROOT = Path(__file__).resolve().parents[2]


def _cpuinfo() -> tuple[str, set[str]]:
    text = Path("/proc/cpuinfo").read_text()
    name = next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name"))
    flags = next(line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags"))
    return name, set(flags)


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists() or sys.platform != "linux", reason="reads /proc/cpuinfo")
def test_this_machine_reads_the_cpu_as_the_kernel_reports_it() -> None:
    if "model name" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("no model name in /proc/cpuinfo (not x86)")
    m = this_machine()
    name, flags = _cpuinfo()
    assert m.cpu == name[:120]
    assert ("AVX2" in m.isa) == ("avx2" in flags)
    assert ("AVX-512" in m.isa) == ("avx512f" in flags)
    assert ("AMX-BF16" in m.isa) == ("amx_bf16" in flags)
    assert m.torch == torch.__version__ and m.threads == torch.get_num_threads()
    assert m.capability == torch.backends.cpu.get_cpu_capability()
    line = m.line()
    assert line.startswith(name[:40]) and f"torch {torch.__version__}" in line


@pytest.mark.parametrize(
    ("isa", "expected"),
    [(("AVX2", "AVX-512", "AMX", "AMX-BF16"), "AVX-512/AMX"), (("AVX2", "AVX-512"), "AVX-512"), (("AVX2",), "AVX2")],
)
def test_cpu_classes(isa: tuple[str, ...], expected: str) -> None:
    m = Machine("a CPU", isa, "AVX2", "2.13.0", 2, 2)
    assert m.cpu_class == expected and m.plain()["cpu_class"] == expected


def test_a_benchmark_names_its_machine_in_every_row() -> None:
    """bench_families' JSON rows carry the machine (one fast case: a patch embedding, 0 s budget)."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_families.py"), "--family", "patch_embeddings_2d",
         "--budget", "0.01", "--json"],
        capture_output=True, text=True, timeout=600, cwd=ROOT, check=True,
    )  # fmt: skip
    rows = json.loads(out.stdout)
    assert rows and all(r["machine"] == this_machine().plain() for r in rows)
    assert out.stderr.startswith("machine: " + this_machine().cpu)
