"""Check results: comparisons, timings, per-module and end-to-end records, the tolerance,
the load report and the workload a check ran at. Plain data:
:func:`fusion_core.boundary.convert.to_plain` gives their JSON (the CLI's ``--json``, the wire
to the window); ``PLAIN_KEYS`` is each documented shape. The tolerances by dtype are
:data:`fusion_core.boundary.options.DTYPE_TOLERANCES`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..boundary.convert import plain
from ..boundary.options import DTYPE_TOLERANCES, Workload
from ..errors import CheckError

MODEL_ENTRY = "(model)"  # the plain form of EndToEndCheck.entry "" (the model itself)
TOLERANCE_RULE = "max|fused-original| <= atol * min(1, max|original|) + rtol * max|original|"
_MAIN_OUTPUTS = ("logits", "last_hidden_state", "logits_per_video", "logits_per_image", "pooler_output")


def _round(digits: int) -> Callable[[float | None], float | None]:
    """A dump hook: the documented JSON rounds measured numbers (None stays None)."""
    return lambda x: None if x is None else round(x, digits)


def _round_finite(digits: int) -> Callable[[float | None], float | None]:
    """As :func:`_round`, and a number that was not measured (NaN) becomes None."""
    return lambda x: None if x is None or x != x else round(x, digits)


@dataclass(frozen=True)
class Tolerance:
    """What a comparison must stay within: pass when max |fused - original| <= atol * min(1, max
    |original|) + rtol * max |original| (:attr:`Comparison.limit`: relative to the output's own
    scale below 1, so tiny outputs are never compared vacuously)."""

    atol: float
    rtol: float
    rule: str = TOLERANCE_RULE

    @classmethod
    def of(cls, dtype: str) -> Tolerance:
        """The tolerance of ``dtype`` (one of :data:`~fusion_core.boundary.options.DTYPES`)."""
        atol, rtol = DTYPE_TOLERANCES[dtype]
        return cls(atol, rtol)


@dataclass(frozen=True)
class CheckedWorkload:
    """The sizes a check ran at (its :class:`~fusion_core.boundary.options.Workload`), torch's
    CPU threads during it, and the options that bound it: the time budget of each timing, the
    memory the weights could take, the new tokens generated (what a report prints)."""

    batch: int = 1
    seq_len: int | None = None
    image_size: int | None = None
    frames: int | None = None
    seed: int = 0
    threads: int | None = None
    torch_version: str = ""
    device: str = ""
    dtype: str = ""
    load_before: float | None = field(default=None, metadata=plain(dump=_round(2)))  # 1-minute load average
    load_after: float | None = field(default=None, metadata=plain(dump=_round(2)))  # before / after the timings
    time_budget: float | None = None  # seconds each timing could spend tightening its interval
    max_memory: int | None = None  # bytes the weights could take (None: the memory available)
    generate: int = 0  # greedy new tokens asked for (0: no generation)
    #: the CPU and its vector units (:func:`fusion_core.run.machine.this_machine`): speedups differ by CPU class
    cpu: str = ""

    @classmethod
    def of(cls, workload: Workload, threads: int | None = None, **machine: Any) -> CheckedWorkload:
        """The sizes of ``workload``, the threads, and what the machine was (``torch_version``, loads)."""
        w = workload
        return cls(w.batch, w.seq_len, w.image_size, w.frames, w.seed, threads, device=w.device, dtype=w.dtype,
                   **machine)  # fmt: skip


@dataclass(frozen=True)
class FusedModule:
    """One module a load fused: its path, its family and the class it has now."""

    module: str
    family: str
    class_name: str = field(metadata=plain("class"))


@dataclass
class LoadReport:
    """What a fused load did (``fusion-core load --json``; a check's ``load``).

    ``missing_keys`` and ``unexpected_keys`` are what ``from_pretrained`` reported for this
    load (a load with either fails, so a report has them empty, as the load saw them).
    """

    model: str
    model_class: str
    fusion_config: dict[str, Any]
    checkpoint_layout: str
    fused_modules: list[FusedModule]
    dtype: str
    device: str
    missing_keys: list[str] = field(default_factory=list)
    unexpected_keys: list[str] = field(default_factory=list)
    transforms: list[dict[str, Any]] = field(default_factory=list)  # preview rows of the transformed keys
    seconds: float = field(default=0.0, metadata=plain(dump=_round(4)))
    peak_rss_mb: float | None = field(default=None, metadata=plain(dump=_round(1)))
    messages: list[str] = field(default_factory=list)


#: a reduced-precision end-to-end difference passes within this many rounding floors
FLOOR_FACTOR = 2.0


@dataclass
class Comparison:
    """Fused vs original outputs, against the tolerance of the dtype."""

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = (
        "max_abs_diff", "max_rel_diff", "atol", "rtol", "shape", "max_original", "limit", "passed", "note", "floor",
    )  # fmt: skip

    max_abs_diff: float
    max_rel_diff: float  # max |diff| / max |original|
    atol: float
    rtol: float
    shape: list[int]
    max_original: float = 0.0  # max |original|, the scale the relative tolerance applies to
    note: str = ""
    #: the rounding floor of a reduced-precision end-to-end run: how far the original's output
    #: moves when the fused modules' originals are computed in float32 (0: not measured)
    floor: float = 0.0

    @property
    def limit(self) -> float:
        """The largest difference that passes: ``atol * min(1, max_original) + rtol *
        max_original``, or :data:`FLOOR_FACTOR` times the rounding floor where that is larger.

        The absolute part shrinks with outputs smaller than 1: a module whose outputs are
        1e-8 (a projection initialised with std 1e-10) would pass anything within a fixed
        ``atol`` of 1e-5, a wrong column order included. Below 1 the rule is relative to the
        output's own scale, ``(atol + rtol) * max_original``.
        """
        scale = self.max_original
        return max(self.atol * min(1.0, scale) + self.rtol * scale, FLOOR_FACTOR * self.floor)

    @property
    def passed(self) -> bool:
        # NaN compares False: a NaN difference fails
        return self.max_abs_diff <= self.limit


@dataclass
class Timing:
    """Paired, interleaved timings of the original and the fused side, after a warm-up.

    ``speedup`` is the median of the per-round ratios original/fused; ``speedup_low`` and
    ``speedup_high`` bound it with a 95% bootstrap interval; ``noise_low`` and
    ``noise_high`` are the same interval for the original timed against itself in the
    same rounds (the A/A noise floor; it always holds 1.0), see
    :func:`fusion_core.run.timing.measure`. ``verdict`` (:func:`speed_verdict`): with the
    floor's width ``d = max(noise_high - 1, 1 - noise_low)``, "faster" only when
    ``speedup_low > 1 + d``, "slower" only when ``speedup_high < 1 - d``, else "same";
    "undetermined" below :data:`MIN_VERDICT_ROUNDS` rounds, or on a busy machine (``busy``,
    set by the check from the load averages, or ``d`` above :data:`MAX_FLOOR`);
    ``verdict_reason`` says why.
    """

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = (
        "original_ms", "fused_ms", "speedup", "speedup_low", "speedup_high", "verdict", "repeats", "noisy",
        "original_peak_mb", "fused_peak_mb", "noise_low", "noise_high", "verdict_reason", "warmup_rounds",
        "first_call_ms", "fused_first_call_ms", "busy",
    )  # fmt: skip

    original_ms: float = field(metadata=plain(dump=_round(4)))
    fused_ms: float = field(metadata=plain(dump=_round(4)))
    repeats: int
    speedup: float = field(default=float("nan"), metadata=plain(dump=_round(3)))
    speedup_low: float = field(default=float("nan"), metadata=plain(dump=_round(3)))
    speedup_high: float = field(default=float("nan"), metadata=plain(dump=_round(3)))
    original_peak_mb: float | None = None  # peak memory of one run (CUDA: allocator peak; CPU: None)
    fused_peak_mb: float | None = None
    noisy: bool = False  # the interval stayed wide when the time budget ran out
    seconds: float = 0.0  # time spent measuring
    noise_low: float = field(default=1.0, metadata=plain(dump=_round(3)))  # A/A interval, holds 1.0
    noise_high: float = field(default=1.0, metadata=plain(dump=_round(3)))
    warmup_rounds: int = 0  # warm-up calls per side before the first timed round
    first_call_ms: float | None = field(default=None, metadata=plain(dump=_round_finite(4)))  # original's first
    fused_first_call_ms: float | None = field(default=None, metadata=plain(dump=_round_finite(4)))
    busy: str = ""  # "machine busy: load average ..." when other work contended the CPUs (no verdict)

    def __post_init__(self) -> None:
        if self.speedup != self.speedup:  # NaN: built from two medians only
            self.speedup = self.original_ms / self.fused_ms if self.fused_ms > 0 else float("inf")
        if self.speedup_low != self.speedup_low:
            self.speedup_low = self.speedup
        if self.speedup_high != self.speedup_high:
            self.speedup_high = self.speedup
        self.noise_low, self.noise_high = min(1.0, self.noise_low), max(1.0, self.noise_high)

    @property
    def verdict(self) -> str:
        """``"faster"``, ``"slower"``, ``"same"`` (within the noise floor, on either side) or
        ``"undetermined"`` (too few rounds, or a busy machine: :attr:`verdict_reason`)."""
        return speed_verdict(
            self.speedup_low, self.speedup_high, self.noise_low, self.noise_high, self.repeats, self.busy
        )

    @property
    def verdict_reason(self) -> str:
        """Why the verdict is "undetermined" ("" otherwise)."""
        return undetermined_reason(self.noise_low, self.noise_high, self.repeats, self.busy)

    @property
    def noise(self) -> float:
        """The floor's larger distance from 1.0 (``d``; 0.02 for a floor of [0.98, 1.01])."""
        return floor_width(self.noise_low, self.noise_high)

    def interval_text(self) -> str:
        """``1.52x [1.40, 1.66]``: the ratio with its interval, as the CLI and GUI print it."""
        return f"{self.speedup:.2f}x [{self.speedup_low:.2f}, {self.speedup_high:.2f}]"

    def verdict_text(self) -> str:
        """``1.90x [1.84, 1.95] faster (noise [0.98, 1.02])``: ratio, interval, verdict and floor."""
        return f"{self.interval_text()} {self.verdict} ({self.floor_text()})"

    def floor_text(self) -> str:
        """``noise [0.98, 1.02]``, or the reason of an undetermined verdict next to it."""
        floor = noise_text(self.noise_low, self.noise_high)
        return f"{floor}; {self.verdict_reason}" if self.verdict_reason else floor


MIN_VERDICT_ROUNDS = 5  # paired rounds a "faster" / "slower" / "same" needs


MAX_FLOOR = 0.25  # a noise floor straying further from 1.0 than this: the machine was busy, no verdict


def floor_width(noise_low: float, noise_high: float) -> float:
    """``d``: the A/A floor's largest distance from 1.0, on either side."""
    return max(noise_high - 1.0, 1.0 - noise_low, 0.0)


def undetermined_reason(noise_low: float, noise_high: float, rounds: int, busy: str = "") -> str:
    """Why a timing gives no verdict ("" when it gives one): too few rounds, a busy machine
    (``busy``, from the load averages), or a floor wider than :data:`MAX_FLOOR`."""
    if rounds < MIN_VERDICT_ROUNDS:
        return f"{rounds} paired round(s); a verdict needs at least {MIN_VERDICT_ROUNDS}"
    if busy:
        return busy
    if floor_width(noise_low, noise_high) > MAX_FLOOR:
        return (
            f"machine busy: the noise floor {floor_interval(noise_low, noise_high)} strays more than "
            f"{MAX_FLOOR:.0%} from 1"
        )
    return ""


def speed_verdict(low: float, high: float, noise_low: float, noise_high: float, rounds: int, busy: str = "") -> str:
    """The rule of every speed verdict (a module, end to end, a family, a benchmark row).

    With ``d = max(noise_high - 1, 1 - noise_low)``: "faster" only when ``low > 1 + d``,
    "slower" only when ``high < 1 - d`` (the floor's full width cleared on either side),
    else "same"; "undetermined" when :func:`undetermined_reason` gives a reason.
    """
    if undetermined_reason(noise_low, noise_high, rounds, busy):
        return "undetermined"
    d = floor_width(noise_low, noise_high)
    if low > 1.0 + d:
        return "faster"
    if high < 1.0 - d:
        return "slower"
    return "same"


def floor_interval(noise_low: float, noise_high: float) -> str:
    """``[0.98, 1.02]``: the A/A floor as measured (three decimals when it is within 1% of 1)."""
    digits = 3 if floor_width(noise_low, noise_high) < 0.01 else 2
    return f"[{noise_low:.{digits}f}, {noise_high:.{digits}f}]"


def noise_text(noise_low: float, noise_high: float) -> str:
    """``noise [0.98, 1.02]``: the floor as it is printed next to a ratio (never "±")."""
    return f"noise {floor_interval(noise_low, noise_high)}"


@dataclass
class ModuleCheck:
    """One fused module vs its original, on the inputs captured in the original run."""

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = (
        "path", "family", "original_class", "fused_class", "input_shapes", "comparison", "timing", "passed", "error",
        "verified_by", "share_of_end_to_end", "share_low", "share_high",
    )  # fmt: skip

    path: str = field(metadata=plain("module"))
    family: str
    original_class: str
    fused_class: str
    input_shapes: list[list[int]] = field(default_factory=list)
    comparison: Comparison | None = None
    timing: Timing | None = None
    error: str = ""
    verified_by: str = ""  # "end-to-end inputs" | "module sample inputs" | "" (not verified)
    share_of_end_to_end: float | None = field(
        default=None, metadata=plain(dump=_round(4))
    )  # its share of the original model's end-to-end time (median over the forwards after a warm-up)
    share_low: float | None = field(default=None, metadata=plain(dump=_round(4)))  # its 95% interval
    share_high: float | None = field(default=None, metadata=plain(dump=_round(4)))

    @property
    def passed(self) -> bool:
        return not self.error and self.comparison is not None and self.comparison.passed


@dataclass
class FedInput:
    """What one end-to-end run fed of one modality: ``run`` "image+text", ``modality`` "image",
    ``count`` items (images, clips, waveforms, token rows), ``size`` of one ("32x32 px",
    "4 frames of 56x56 px", "1.00 s at 16000 Hz", "19 tokens"), ``source`` ("synthetic", a
    file name, "prompt" or "")."""

    run: str
    modality: str
    count: int
    size: str
    source: str = ""


@dataclass
class EndToEndCheck:
    """The whole model (or its entry submodule) fused vs original on the synthetic inputs.

    ``skipped`` holds the reason when it did not run ("not run: <reason>"); the module rows
    are then verified on their own sample inputs and the check does not fail for it.
    """

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = (
        "entry", "output", "input_kind", "input_shapes", "comparison", "timing", "passed", "ran", "skipped",
        "projected_speedup", "notes", "projected_low", "projected_high", "inputs",
    )  # fmt: skip

    #: "" is the model itself, "(model)" in its plain form
    entry: str = field(metadata=plain(dump=lambda e: e or MODEL_ENTRY, load=lambda e: "" if e == MODEL_ENTRY else e))
    output: str
    input_kind: str
    input_shapes: dict[str, list[int]]
    comparison: Comparison | None
    timing: Timing | None
    notes: list[str] = field(default_factory=list)
    skipped: str = ""
    projected_speedup: float | None = field(
        default=None, metadata=plain(dump=_round(3))
    )  # from module speedups and shares (Amdahl)
    projected_low: float | None = field(default=None, metadata=plain(dump=_round(3)))  # from the intervals
    projected_high: float | None = field(default=None, metadata=plain(dump=_round(3)))
    #: what the end-to-end runs fed, per run and modality (several runs: image+text, video+text...)
    inputs: list[FedInput] = field(default_factory=list)

    @property
    def ran(self) -> bool:
        return not self.skipped and self.comparison is not None

    @property
    def passed(self) -> bool:
        return not self.ran or self.comparison.passed  # type: ignore[union-attr]


@dataclass
class FamilyVerdict:
    """One line per family: exact or not, module speedup with its interval, share, projection.

    For example ``patch_embeddings: exact; module 3.6x [3.4, 3.8]; 2% of end-to-end time ->
    about 1.02x end to end``.
    """

    name: str
    exact: bool
    speedup: float | None = None  # median over the family's modules
    low: float | None = None
    high: float | None = None
    share: float | None = None  # summed share of the original end-to-end time
    projected_end_to_end: float | None = None
    line: str = ""
    noise_low: float | None = None  # medians of the modules' A/A floors
    noise_high: float | None = None
    verdict: str = ""  # the rule of Timing.verdict on the medians; "" when not timed
    projected_low: float | None = None  # the projection's interval, from the shares' and speedups'
    projected_high: float | None = None


@dataclass
class UpstreamFamily:
    """Upstream parity of one family: "agrees", "differs", "not fused upstream" or "not available upstream"."""

    name: str
    status: str
    detail: str = ""


@dataclass
class UpstreamReport:
    """What transformers' own fusion did with this checkpoint, per family (also the upstream
    child's answer: the child judges each family it was asked; the parent adds the others)."""

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = (
        "available", "transformers_version", "error", "max_abs_diff", "ours_max_abs_diff", "within_tolerance",
        "leak", "leak_detail", "seconds", "summary", "families", "matches_ours",
    )  # fmt: skip

    available: bool
    transformers_version: str = ""
    error: str = ""
    max_abs_diff: float | None = None  # upstream fused vs the original, main output
    ours_max_abs_diff: float | None = None
    within_tolerance: bool | None = None
    leak: bool | None = None  # a later plain load in the same process was still fused
    leak_detail: str = ""
    seconds: float = 0.0
    summary: str = ""
    families: list[UpstreamFamily] = field(default_factory=list)

    @property
    def matches_ours(self) -> bool:
        """Some family agrees and none differs; families transformers lacks do not count."""
        statuses = [f.status for f in self.families]
        return not self.error and "agrees" in statuses and "differs" not in statuses


@dataclass
class Generation:
    """Greedy decoding with the KV cache, original against fused (``check --generate N``).

    ``verdict``: ``"identical"`` (every new token equal); ``"near tie"`` (they diverge where the
    original's two candidates were within :data:`NEAR_TIE` nats, each side's token in the
    other's top 5: a rounding-sized change can flip such a choice); ``"diverges"`` (a real
    difference: the check fails); ``"skipped"`` (``note`` says why).
    """

    new_tokens: int
    identical: bool
    verdict: str
    #: {"step": i, "row": r, "original": token, "fused": token} at the first divergence, else None
    first_divergence: dict[str, int] | None = None
    #: each side's top 5 at the first divergence: [[token, logprob], ...] (the original's scores)
    original_top: list[list[float]] = field(default_factory=list)
    fused_top: list[list[float]] = field(default_factory=list)
    #: the original's logprob of its token minus its logprob of the fused side's token there
    margin: float | None = field(default=None, metadata=plain(dump=_round_finite(4)))
    cache: str = "dynamic"
    note: str = ""

    @property
    def passed(self) -> bool:
        return self.verdict != "diverges"

    @property
    def line(self) -> str:
        """One plain line: identical, a near tie or a divergence (with each side's top tokens)."""
        head = f"generation ({self.cache} cache): "
        if self.verdict == "skipped":
            return head + f"not run: {self.note}"
        if self.identical:
            return head + f"{self.new_tokens} new tokens identical, original and fused"
        d = self.first_divergence or {}
        if not d:
            return head + f"DIVERGES: {self.note}"
        what = "near tie" if self.verdict == "near tie" else "DIVERGES"
        return head + (
            f"{what} at new token {d['step'] + 1} (row {d['row']}): original {d['original']}, fused {d['fused']}, "
            f"margin {self.margin:.3g} nats; original top 5 {self.original_top}, fused top 5 {self.fused_top}"
        )


@dataclass
class CompiledRun:
    """The original and the fused model under ``torch.compile``, timed side by side (``check --compile``).

    Users who deploy compiled models ask whether a fusion still pays once the compiler has
    fused what it can. ``graphs_original`` and ``graphs_fused`` are how many graphs the
    compiler made of each form (one more than its graph breaks): a fusion should add none.
    ``skipped`` holds "not run: reason" when it did not run (an unknown backend, a model the
    compiler cannot trace, no end-to-end run).
    """

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = (
        "backend", "comparison", "timing", "graphs_original", "graphs_fused", "compile_s_original",
        "compile_s_fused", "passed", "skipped",
    )  # fmt: skip

    backend: str
    comparison: Comparison | None = None  # compiled fused against compiled original
    timing: Timing | None = None
    graphs_original: int | None = None
    graphs_fused: int | None = None
    compile_s_original: float | None = field(default=None, metadata=plain(dump=_round_finite(3)))  # first call
    compile_s_fused: float | None = field(default=None, metadata=plain(dump=_round_finite(3)))
    skipped: str = ""

    @property
    def passed(self) -> bool:
        return self.comparison is None or self.comparison.passed

    @property
    def line(self) -> str:
        """One plain line: the compiled speedup with its interval and floor, the graphs, the compile times."""
        head = f"compiled ({self.backend}): "
        if self.skipped or self.comparison is None or self.timing is None:
            return head + (self.skipped or "not run")
        c = self.comparison
        diff = "equal" if c.passed else "DIFFER"
        graphs = f"graphs original {self.graphs_original}, fused {self.graphs_fused}"
        if (self.graphs_fused or 0) > (self.graphs_original or 0):
            graphs += " (the fusion adds graph breaks)"
        return head + (
            f"{self.timing.verdict_text()}; outputs {diff} (max abs {c.max_abs_diff:.2g}, limit {c.limit:.2g}); "
            f"{graphs}; first calls {self.compile_s_original:.1f} s and {self.compile_s_fused:.1f} s"
        )


#: a divergence where the original's two candidates are closer than this (nats) is a near tie
NEAR_TIE = 0.1


@dataclass
class CheckResult:
    """Everything a check measured; ``passed`` covers our checks only (not upstream)."""

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = (
        "model", "model_class", "fusion_config", "dtype", "device", "repeats", "seed", "tolerance", "passed",
        "nothing_to_fuse", "modules", "end_to_end", "upstream", "load", "messages", "seconds", "workload",
        "modules_only", "family_verdicts", "warnings", "generation", "compiled",
    )  # fmt: skip

    model: str
    model_class: str
    fusion_config: dict[str, Any]
    dtype: str
    device: str
    repeats: int
    seed: int
    tolerance: Tolerance
    modules: list[ModuleCheck] = field(default_factory=list)
    end_to_end: EndToEndCheck | None = None
    upstream: UpstreamReport | None = None
    load: LoadReport | None = None
    nothing_to_fuse: bool = False
    messages: list[str] = field(default_factory=list)
    seconds: float = field(default=0.0, metadata=plain(dump=_round(3)))
    workload: CheckedWorkload = field(default_factory=CheckedWorkload)  # the sizes it ran at
    family_verdicts: list[FamilyVerdict] = field(default_factory=list)
    modules_only: bool = False
    warnings: list[str] = field(default_factory=list)  # e.g. timings too noisy to tell
    generation: Generation | None = None  # check --generate N
    compiled: CompiledRun | None = None  # check --compile

    @property
    def passed(self) -> bool:
        """Every fused module verified within tolerance, end to end (when it ran) too, and
        generation (when asked) not diverging.

        A check that checked nothing (no module matches the families) is not a pass.
        """
        if self.nothing_to_fuse:
            return False
        e2e = self.end_to_end is None or self.end_to_end.passed
        gen = self.generation is None or self.generation.passed
        compiled = self.compiled is None or self.compiled.passed
        return bool(self.modules) and all(m.passed for m in self.modules) and e2e and gen and compiled

    @property
    def faster(self) -> str:
        """The end-to-end speed verdict ("faster", "slower", "same"), or "" when not timed."""
        e = self.end_to_end
        return e.timing.verdict if e is not None and e.timing is not None and e.ran else ""


def compare(original: Any, fused: Any, dtype: str) -> Comparison:
    """Max abs / relative difference of two tensors (or nests of them), judged for ``dtype``."""
    import torch

    a_list, b_list = tensors_of(original), tensors_of(fused)
    atol, rtol = DTYPE_TOLERANCES.get(dtype, DTYPE_TOLERANCES["float32"])
    if len(a_list) != len(b_list) or any(a.shape != b.shape for a, b in zip(a_list, b_list)):
        shapes = ([list(t.shape) for t in a_list], [list(t.shape) for t in b_list])
        return Comparison(float("nan"), float("nan"), atol, rtol, [], note=f"outputs differ in structure: {shapes}")
    max_abs, max_ref, note = 0.0, 0.0, ""
    for a, b in zip(a_list, b_list):
        a64, b64 = a.detach().double().cpu(), b.detach().double().cpu()
        nan_a, nan_b = torch.isnan(a64), torch.isnan(b64)
        if not torch.equal(nan_a, nan_b):
            return Comparison(float("nan"), float("nan"), atol, rtol, list(a.shape), note="NaN in one output only")
        if nan_a.any():
            note = "NaN at the same positions in both outputs (ignored)"
        ok = ~nan_a
        if ok.any():
            max_abs = max(max_abs, (a64[ok] - b64[ok]).abs().max().item())
            max_ref = max(max_ref, a64[ok].abs().max().item())
    rel = max_abs / max_ref if max_ref > 0 else (0.0 if max_abs == 0 else float("inf"))
    return Comparison(max_abs, rel, atol, rtol, list(a_list[0].shape) if a_list else [], max_ref, note)


def tensors_of(value: Any) -> list[Any]:
    """Every tensor in ``value`` (a tensor, tuple/list, dict or ModelOutput), in order."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_of(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_of(v)]
    return []


def main_output(output: Any) -> tuple[str, Any]:
    """The main output tensor of a model call (logits, last hidden state, ...) and its name."""
    import torch

    if isinstance(output, torch.Tensor):
        return "output", output
    if isinstance(output, dict):
        for name in _MAIN_OUTPUTS:
            if isinstance(output.get(name), torch.Tensor):
                return name, output[name]
        for name, value in output.items():
            if isinstance(value, torch.Tensor):
                return str(name), value
    found = tensors_of(output)
    if not found:
        raise CheckError("the model returned no tensor to compare")
    return "output[0]", found[0]
