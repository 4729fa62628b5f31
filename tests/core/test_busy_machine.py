"""No speed verdict on a busy machine (issue 29, item 3): under a CPU hog on every core, two
runs of the same check never give contradictory verdicts, and a check whose load averages
show the CPUs contended says "undetermined" with the reason "machine busy"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fusion_core import check
from fusion_core.run.checks import _busy
from fusion_core.run.results import MAX_FLOOR, floor_width

SETTINGS = {"repeats": 5, "time_budget": 0.3, "upstream": False, "seq_len": 16}


def _verdicts(result) -> dict[str, tuple[str, str]]:
    timed = [(m.path, m.timing) for m in result.modules] + [("end to end", result.end_to_end.timing)]
    return {name: (t.verdict, t.verdict_reason) for name, t in timed if t is not None}


def _rule_holds(result) -> None:
    """Every verdict clears the floor's full width on its side, and none comes from a floor wider than the bound."""
    for t in [m.timing for m in result.modules] + [result.end_to_end.timing]:
        if t is None:
            continue
        d = floor_width(t.noise_low, t.noise_high)
        if t.verdict in ("faster", "slower"):
            assert d <= MAX_FLOOR and not t.busy, t
        if t.verdict == "faster":
            assert t.speedup_low > 1 + d, t
        if t.verdict == "slower":
            assert t.speedup_high < 1 - d, t


def test_a_cpu_hog_gives_no_contradictory_verdicts(llama_dir: Path) -> None:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        runs = [check(llama_dir, {"qkv": True, "gate_up": True}, **SETTINGS) for _ in range(2)]
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()
    first, second = (_verdicts(r) for r in runs)
    print({"first": first, "second": second, "loads": [(r.workload.load_before, r.workload.load_after) for r in runs]})
    assert first.keys() == second.keys() and len(first) == 5  # 2 attentions, 2 MLPs, end to end
    for name in first:
        assert {first[name][0], second[name][0]} != {"faster", "slower"}, (name, first[name], second[name])
    for result, verdicts in zip(runs, (first, second)):
        _rule_holds(result)
        if _busy(result.workload):  # the load condition held: no row has a verdict, each says why
            assert all(v == "undetermined" and r.startswith("machine busy: load average") for v, r in verdicts.values())
            assert any(w.startswith("machine busy") for w in result.warnings)
            assert all(f.verdict == "undetermined" for f in result.family_verdicts)
            assert all("machine busy" in f.line for f in result.family_verdicts)
