"""Timings that hold up (issue 19): warm-up kept out, an A/A noise floor, verdicts only from
evidence, shares with intervals. Relative assertions only: never an absolute time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from fusion_core.boundary.options import TimingOptions
from fusion_core.run.results import Timing, speed_verdict
from fusion_core.run.timing import measure, warm_up
from fusion_core.run.verdicts import amdahl, amdahl_interval

QUICK = TimingOptions(min_rounds=10, budget_s=0.5, target=0.05)


@pytest.fixture(autouse=True)
def _one_thread():
    """As `--threads 1`: on a shared machine a preempted thread of two stalls every GEMM."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(scope="module")
def linear() -> tuple[nn.Linear, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Linear(256, 256).eval(), torch.randn(64, 256)


class TwiceLinear(nn.Module):
    """A "fused" module deliberately slowed: it does its original's work twice."""

    def __init__(self, original: nn.Linear) -> None:
        super().__init__()
        self.original = original

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.original(x)
        return self.original(x)


def test_a_against_itself_reads_same(linear) -> None:
    module, x = linear
    with torch.inference_mode():
        t = measure(lambda: module(x), lambda: module(x), QUICK)
    assert t.repeats >= 10 and t.verdict == "same", t
    assert t.noise_low <= 1.0 <= t.noise_high  # the floor always holds 1.0
    assert t.warmup_rounds >= 2 and t.first_call_ms is not None and t.fused_first_call_ms is not None


def test_a_module_that_does_its_work_twice_reads_slower(linear) -> None:
    module, x = linear
    slowed = TwiceLinear(module)
    with torch.inference_mode():
        t = measure(lambda: module(x), lambda: slowed(x), QUICK)
    assert t.verdict == "slower", t
    assert t.speedup_high < t.noise_low <= 1.0 and t.speedup < 0.8
    assert "slower (noise [" in t.verdict_text() and "±" not in t.verdict_text()


def test_the_floor_can_be_taken_against_a_copy(linear) -> None:
    """``again``: the A/A floor's A' is another callable (a copy of the original, where the
    fused side has memory of its own); a copy that does twice the work widens the floor, and
    a difference within it is no verdict of "slower"."""
    module, x = linear
    slowed = TwiceLinear(module)
    calls = []

    def again() -> torch.Tensor:
        calls.append(1)
        return slowed(x)

    with torch.inference_mode():
        t = measure(lambda: module(x), lambda: slowed(x), QUICK, again=again)
    assert len(calls) >= t.repeats >= 10
    assert t.noise_low < 0.8 and t.verdict != "slower", t


def test_verdict_rules() -> None:
    """faster / slower only outside 1.0 and the floor, from 5 rounds on; undetermined below, with the reason."""
    assert Timing(1.0, 1.0, 5, 1.10, 1.05, 1.20, noise_low=0.97, noise_high=1.03).verdict == "faster"
    assert Timing(1.0, 1.0, 5, 1.10, 1.05, 1.20, noise_low=0.9, noise_high=1.08).verdict == "same"  # inside the floor
    assert Timing(1.0, 1.0, 5, 0.90, 0.85, 0.95, noise_low=0.97, noise_high=1.03).verdict == "slower"
    assert Timing(1.0, 1.0, 5, 0.90, 0.85, 0.95, noise_low=0.93, noise_high=1.1).verdict == "same"
    t = Timing(1.0, 1.0, 4, 2.0, 1.9, 2.1, noise_low=0.99, noise_high=1.01)
    assert t.verdict == "undetermined" and "4 paired round(s)" in t.verdict_reason and "5" in t.verdict_reason
    assert Timing(1.0, 1.0, 5, 1.0, 0.9, 1.1, noise_low=1.05, noise_high=0.95).noise_low == 1.0  # widened to 1.0
    assert Timing(1.0, 1.0, 9, 1.9, 1.84, 1.95, noise_low=0.98, noise_high=1.02).verdict_text() == (
        "1.90x [1.84, 1.95] faster (noise [0.98, 1.02])"
    )
    assert Timing(1.0, 1.0, 9, 1.9, 1.84, 1.95, noise_low=0.998, noise_high=1.003).floor_text() == (
        "noise [0.998, 1.003]"
    )


def test_floors_are_symmetric() -> None:
    """The floor's full width d = max(noise_high - 1, 1 - noise_low) is cleared on both sides:
    "faster" only when speedup_low > 1 + d, "slower" only when speedup_high < 1 - d (issue 29)."""
    # a one-sided floor below 1 no longer makes "faster" cheap, nor one above 1 "slower"
    assert Timing(1.0, 1.0, 9, 1.12, 1.10, 1.14, noise_low=0.85, noise_high=1.0).verdict == "same"
    assert Timing(1.0, 1.0, 9, 1.20, 1.16, 1.24, noise_low=0.85, noise_high=1.0).verdict == "faster"
    assert Timing(1.0, 1.0, 9, 0.88, 0.86, 0.90, noise_low=1.0, noise_high=1.15).verdict == "same"
    assert Timing(1.0, 1.0, 9, 0.80, 0.78, 0.84, noise_low=1.0, noise_high=1.15).verdict == "slower"
    # the same rule for a family's medians
    assert speed_verdict(1.10, 1.14, 0.85, 1.0, 9) == "same" and speed_verdict(0.86, 0.9, 1.0, 1.15, 9) == "same"


def test_a_floor_wider_than_the_bound_gives_no_verdict() -> None:
    """The issue's newcomer saw ``1.06x [1.05, 1.08] faster (noise ±40%)``: a floor of [0.60,
    1.00] is a busy machine, undetermined, and printed as measured."""
    t = Timing(1.0, 1.0, 9, 1.06, 1.05, 1.08, noise_low=0.60, noise_high=1.0)
    assert t.verdict == "undetermined" and t.verdict_reason.startswith("machine busy")
    assert t.verdict_text().startswith("1.06x [1.05, 1.08] undetermined (noise [0.60, 1.00]; machine busy")
    assert "±" not in t.verdict_text()
    busy = Timing(1.0, 1.0, 9, 2.0, 1.9, 2.1, noise_low=0.99, noise_high=1.01, busy="machine busy: load average 5")
    assert busy.verdict == "undetermined" and busy.verdict_reason == "machine busy: load average 5"


def test_few_rounds_are_undetermined(linear) -> None:
    module, x = linear
    with torch.inference_mode():
        t = measure(lambda: module(x), lambda: TwiceLinear(module)(x), TimingOptions(min_rounds=2, budget_s=0))
    assert t.repeats == 2 and t.verdict == "undetermined" and t.verdict_reason


def test_warm_up_keeps_first_call_costs_out() -> None:
    """A side whose first calls are slow (lazy init) is warmed until its time settles."""
    calls = {"n": 0}
    a = torch.randn(128, 128)
    work = {1: 512, 2: 16}  # matmuls of the first and second call; then 1 (margins far above the noise)

    def lazy() -> None:
        calls["n"] += 1
        for _ in range(work.get(calls["n"], 1)):
            a @ a

    # each of the first three calls is far faster than the ones before: not settled until a fourth
    rounds, firsts = warm_up([lazy, lambda: a @ a], budget_s=60)
    assert rounds >= 4 and firsts[0] > firsts[1]
    calls["n"] = 0
    settled = {"n": 2}  # the same Python work as ``lazy`` once it settled: one matmul a call

    def steady() -> None:
        settled["n"] += 1
        for _ in range(work.get(settled["n"], 1)):
            a @ a

    t = measure(lazy, steady, TimingOptions(min_rounds=10, budget_s=0.3))
    assert t.warmup_rounds >= 2 and t.first_call_ms > t.fused_first_call_ms
    assert t.verdict != "faster" and t.speedup < 2  # the slow first calls are not read as a speedup


def test_projection_interval_follows_the_intervals() -> None:
    boxes = [(0.2, 0.3, 1.5, 2.0), (0.1, 0.2, 0.8, 0.9)]
    low, high = amdahl_interval(boxes)
    center = amdahl([(0.25, 1.7), (0.15, 0.85)])
    assert low < center < high
    assert low == pytest.approx(amdahl([(0.2, 1.5), (0.2, 0.8)]))
    assert high == pytest.approx(amdahl([(0.3, 2.0), (0.1, 0.9)]))


def test_identical_layers_share_alike(llama_dir: Path) -> None:
    """demo:llama's two decoder layers are identical: their attention (and MLP) shares of the
    end-to-end time agree within their intervals, and attention is told apart from the MLP."""
    from fusion_core.api import load_plain
    from fusion_core.run.shares import measure_shares

    model = load_plain(llama_dir).model.eval()
    ids = torch.randint(0, model.config.vocab_size, (1, 128), generator=torch.Generator().manual_seed(0))
    paths = ["layers.0.self_attn", "layers.1.self_attn", "layers.0.mlp", "layers.1.mlp"]  # of its LlamaModel
    # as the check runs it (no KV cache: the first layer would also set the cache up), on one
    # thread (with two, a thread preempted by the other test workers stalls one layer's GEMMs)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            shares = measure_shares(
                lambda: model(input_ids=ids, use_cache=False),
                {p: model.get_submodule(p) for p in paths},
                TimingOptions(budget_s=0.5),
            )
    finally:
        torch.set_num_threads(threads)

    def overlap(a: str, b: str) -> bool:
        # within their intervals, widened by 20%: on this machine the first layer's attention
        # measures 3-6% above the second's with intervals of ±2% when idle, and 13-14% above in
        # the full suite on 2 busy cores (2026-12-02). That follows the position, not the
        # module: with the two layers swapped, the one called first is again the higher
        # (docs/timing.md, "Shares you can add up"). Warm-up alone gave 7x.
        (_, la, ha), (_, lb, hb) = shares[a], shares[b]
        return la / 1.2 <= hb and lb / 1.2 <= ha

    for path, (share, low, high) in shares.items():
        assert 0 < low <= share <= high < 1, (path, shares[path])
    assert overlap(paths[0], paths[1]), shares
    assert overlap(paths[2], paths[3]), shares
    assert sum(s for s, _, _ in shares.values()) <= 1.0


def test_repeats_two_gives_undetermined(capsys: pytest.CaptureFixture[str]) -> None:
    """`--repeats 2` with no time to tighten: every timing is undetermined with its reason, the
    workload is recorded (threads, torch, device, dtype, loads) and every timing carries its floor."""
    from fusion_core.cli import main

    argv = ["check", "demo:llama", "--fusion", "qkv", "--no-upstream", "--repeats", "2", "--time-budget", "0"]
    assert main([*argv, "--threads", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    timings = [m["timing"] for m in data["modules"]] + [data["end_to_end"]["timing"]]
    for t in timings:
        assert t["repeats"] == 2 and t["verdict"] == "undetermined" and "at least 5" in t["verdict_reason"]
        assert t["noise_low"] <= 1.0 <= t["noise_high"] and t["warmup_rounds"] >= 2
    assert [v["verdict"] for v in data["family_verdicts"]] == ["undetermined"]
    w = data["workload"]
    assert (
        w["threads"] == 1
        and w["torch_version"] == torch.__version__
        and (w["device"], w["dtype"])
        == (
            "cpu",
            "float32",
        )
    )
    assert w["load_before"] is not None and w["load_after"] is not None
    assert any(x.startswith("no speed verdict for model.layers.0.self_attn") for x in data["warnings"])
    for m in data["modules"]:
        assert m["share_low"] <= m["share_of_end_to_end"] <= m["share_high"]
    e = data["end_to_end"]
    assert e["projected_low"] <= e["projected_speedup"] <= e["projected_high"]


def test_ratio_over_noise_is_never_a_ratio() -> None:
    """A denominator that is a difference of two noisy process times: "too noisy" when its
    interval holds 0 (bench_load's "beyond imports", bench_export's "beyond import")."""
    from fusion_core.run.timing import from_samples, within_noise

    assert within_noise([0.4, -0.3, 0.1, -0.2, 0.05])  # 2.0 s - 1.9 s give or take 0.4 s
    assert not within_noise([5.0, 5.1, 4.9, 5.05, 4.95])
    t = from_samples([2.0, 2.1, 1.9, 2.05, 2.0], [1.0, 1.05, 0.95, 1.0, 1.02], [2.0, 2.05, 1.95, 2.1, 1.98])
    assert t.verdict == "faster" and t.noise_low <= 1.0 <= t.noise_high and t.speedup == pytest.approx(2.0, rel=0.05)


def test_a_projection_holds_its_point_when_busy_shares_add_up_past_one() -> None:
    """Shares timed one module at a time on a busy machine can add up past 100%: the projected
    interval still holds the projected point (it did not: 0.854 against [1.027, ...] in CI)."""
    from fusion_core.run.results import CheckResult, EndToEndCheck, ModuleCheck, Tolerance
    from fusion_core.run.verdicts import project

    def module(path: str, share: float, low: float, high: float, k: float) -> ModuleCheck:
        m = ModuleCheck(path, "qkv", "A", "B")
        m.share_of_end_to_end, m.share_low, m.share_high = share, low, high
        m.timing = Timing(1.0, 1.0, 2, speedup=k, speedup_low=min(1.0, k), speedup_high=max(1.0, k))
        return m

    result = CheckResult("m", "C", {"qkv": True}, "float32", "cpu", 2, 0, Tolerance.of("float32"))
    result.modules = [module("a", 0.6, 0.5, 0.7, 1.05), module("b", 0.57, 0.47, 0.66, 1.1)]
    result.end_to_end = EndToEndCheck("", "logits", "text", {}, None, None)
    project(result)
    e = result.end_to_end
    assert e.projected_low <= e.projected_speedup <= e.projected_high
