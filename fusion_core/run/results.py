"""Check results: comparisons, timings, per-module and end-to-end records, the tolerance,
the load report and the workload a check ran at. Plain data with ``to_dict()`` for JSON
(the CLI's ``--json``, the GUI); the tolerances by dtype are
:data:`fusion_core.boundary.options.DTYPE_TOLERANCES`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..boundary.options import DTYPE_TOLERANCES, Workload
from ..errors import CheckError

#: (atol, rtol) by dtype: an alias of the one table, :data:`fusion_core.boundary.options.DTYPE_TOLERANCES`
TOLERANCES = DTYPE_TOLERANCES
TOLERANCE_RULE = "max|fused-original| <= atol + rtol * max|original|"
_MAIN_OUTPUTS = ("logits", "last_hidden_state", "logits_per_video", "logits_per_image", "pooler_output")


@dataclass(frozen=True)
class Tolerance:
    """What a comparison must stay within: pass when max |fused - original| <= atol + rtol * max |original|."""

    atol: float
    rtol: float
    rule: str = TOLERANCE_RULE

    @classmethod
    def of(cls, dtype: str) -> Tolerance:
        """The tolerance of ``dtype`` (one of :data:`~fusion_core.boundary.options.DTYPES`)."""
        atol, rtol = DTYPE_TOLERANCES[dtype]
        return cls(atol, rtol)

    def to_dict(self) -> dict[str, Any]:
        return {"atol": self.atol, "rtol": self.rtol, "rule": self.rule}


@dataclass(frozen=True)
class CheckedWorkload:
    """The sizes a check ran at (its :class:`~fusion_core.boundary.options.Workload` without
    dtype and device, which the result holds itself) and torch's CPU threads during it."""

    batch: int = 1
    seq_len: int | None = None
    image_size: int | None = None
    frames: int | None = None
    seed: int = 0
    threads: int | None = None

    @classmethod
    def of(cls, workload: Workload, threads: int | None = None) -> CheckedWorkload:
        w = workload
        return cls(w.batch, w.seq_len, w.image_size, w.frames, w.seed, threads)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FusedModule:
    """One module a load fused: its path, its family and the class it has now."""

    module: str
    family: str
    class_name: str

    def to_dict(self) -> dict[str, Any]:
        return {"module": self.module, "family": self.family, "class": self.class_name}


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
    seconds: float = 0.0
    peak_rss_mb: float | None = None
    messages: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "model_class": self.model_class,
            "fusion_config": self.fusion_config,
            "checkpoint_layout": self.checkpoint_layout,
            "fused_modules": [m.to_dict() for m in self.fused_modules],
            "dtype": self.dtype,
            "device": self.device,
            "missing_keys": list(self.missing_keys),
            "unexpected_keys": list(self.unexpected_keys),
            "transforms": self.transforms,
            "seconds": round(self.seconds, 4),
            "peak_rss_mb": None if self.peak_rss_mb is None else round(self.peak_rss_mb, 1),
            "messages": list(self.messages),
        }


@dataclass
class Comparison:
    """Fused vs original outputs, against the tolerance of the dtype."""

    max_abs_diff: float
    max_rel_diff: float  # max |diff| / max |original|
    atol: float
    rtol: float
    shape: list[int]
    max_original: float = 0.0  # max |original|, the scale the relative tolerance applies to
    note: str = ""

    @property
    def limit(self) -> float:
        """The largest difference that passes: ``atol + rtol * max_original``."""
        return self.atol + self.rtol * self.max_original

    @property
    def passed(self) -> bool:
        # NaN compares False: a NaN difference fails
        return self.max_abs_diff <= self.limit

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_abs_diff": self.max_abs_diff,
            "max_rel_diff": self.max_rel_diff,
            "atol": self.atol,
            "rtol": self.rtol,
            "shape": self.shape,
            "max_original": self.max_original,
            "limit": self.limit,
            "passed": self.passed,
            "note": self.note,
        }


@dataclass
class Timing:
    """Paired, interleaved timings of the original and the fused side.

    ``speedup`` is the median of the per-pair ratios original/fused; ``speedup_low`` and
    ``speedup_high`` bound it with a 95% interval (a t-interval on the log ratios of the
    pairs, see :func:`fusion_core.run.timing.measure`). ``verdict`` is ``"same"`` whenever
    the interval holds 1.0.
    """

    original_ms: float
    fused_ms: float
    repeats: int
    speedup: float = float("nan")
    speedup_low: float = float("nan")
    speedup_high: float = float("nan")
    original_peak_mb: float | None = None  # peak memory of one run (CUDA: allocator peak; CPU: None)
    fused_peak_mb: float | None = None
    noisy: bool = False  # the interval stayed wide when the time budget ran out
    seconds: float = 0.0  # time spent measuring

    def __post_init__(self) -> None:
        if self.speedup != self.speedup:  # NaN: built from two medians only
            self.speedup = self.original_ms / self.fused_ms if self.fused_ms > 0 else float("inf")
        if self.speedup_low != self.speedup_low:
            self.speedup_low = self.speedup
        if self.speedup_high != self.speedup_high:
            self.speedup_high = self.speedup

    @property
    def verdict(self) -> str:
        """``"faster"``, ``"slower"`` or ``"same"`` (the 95% interval holds 1.0)."""
        if self.speedup_low > 1.0:
            return "faster"
        if self.speedup_high < 1.0:
            return "slower"
        return "same"

    def interval_text(self) -> str:
        """``1.52x [1.40, 1.66]``: the ratio with its interval, as the CLI and GUI print it."""
        return f"{self.speedup:.2f}x [{self.speedup_low:.2f}, {self.speedup_high:.2f}]"

    def to_dict(self) -> dict[str, Any]:
        return {
            "original_ms": round(self.original_ms, 4),
            "fused_ms": round(self.fused_ms, 4),
            "speedup": round(self.speedup, 3),
            "speedup_low": round(self.speedup_low, 3),
            "speedup_high": round(self.speedup_high, 3),
            "verdict": self.verdict,
            "repeats": self.repeats,
            "noisy": self.noisy,
            "original_peak_mb": self.original_peak_mb,
            "fused_peak_mb": self.fused_peak_mb,
        }


@dataclass
class ModuleCheck:
    """One fused module vs its original, on the inputs captured in the original run."""

    path: str
    family: str
    original_class: str
    fused_class: str
    input_shapes: list[list[int]] = field(default_factory=list)
    comparison: Comparison | None = None
    timing: Timing | None = None
    error: str = ""
    verified_by: str = ""  # "end-to-end inputs" | "module sample inputs" | "" (not verified)
    share_of_end_to_end: float | None = None  # its share of the original model's end-to-end time

    @property
    def passed(self) -> bool:
        return not self.error and self.comparison is not None and self.comparison.passed

    def to_dict(self) -> dict[str, Any]:
        return {
            "module": self.path,
            "family": self.family,
            "original_class": self.original_class,
            "fused_class": self.fused_class,
            "input_shapes": self.input_shapes,
            "comparison": self.comparison.to_dict() if self.comparison else None,
            "timing": self.timing.to_dict() if self.timing else None,
            "passed": self.passed,
            "error": self.error,
            "verified_by": self.verified_by,
            "share_of_end_to_end": None if self.share_of_end_to_end is None else round(self.share_of_end_to_end, 4),
        }


@dataclass
class EndToEndCheck:
    """The whole model (or its entry submodule) fused vs original on the synthetic inputs.

    ``skipped`` holds the reason when it did not run ("not run: <reason>"); the module rows
    are then verified on their own sample inputs and the check does not fail for it.
    """

    entry: str
    output: str
    input_kind: str
    input_shapes: dict[str, list[int]]
    comparison: Comparison | None
    timing: Timing | None
    notes: list[str] = field(default_factory=list)
    skipped: str = ""
    projected_speedup: float | None = None  # from module speedups and shares (Amdahl)

    @property
    def ran(self) -> bool:
        return not self.skipped and self.comparison is not None

    @property
    def passed(self) -> bool:
        return not self.ran or self.comparison.passed  # type: ignore[union-attr]

    def to_dict(self) -> dict[str, Any]:
        return {
            "entry": self.entry or "(model)",
            "output": self.output,
            "input_kind": self.input_kind,
            "input_shapes": self.input_shapes,
            "comparison": self.comparison.to_dict() if self.comparison else None,
            "timing": self.timing.to_dict() if self.timing else None,
            "passed": self.passed,
            "ran": self.ran,
            "skipped": self.skipped,
            "projected_speedup": None if self.projected_speedup is None else round(self.projected_speedup, 3),
            "notes": self.notes,
        }


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class UpstreamFamily:
    """Upstream parity of one family: "agrees", "differs", "not fused upstream" or "not available upstream"."""

    name: str
    status: str
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class UpstreamReport:
    """What transformers' own fusion did with this checkpoint."""

    available: bool
    ran: bool = False
    transformers_version: str = ""
    error: str = ""
    missing_keys: list[str] = field(default_factory=list)
    unexpected_keys: list[str] = field(default_factory=list)
    mismatched_keys: list[str] = field(default_factory=list)
    module_classes: dict[str, str] = field(default_factory=dict)  # our fused paths -> upstream class
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
        """Upstream fused what we fused, with the same outputs; families it lacks do not count."""
        if self.families:
            statuses = [f.status for f in self.families]
            return bool(self.ran and not self.error and "agrees" in statuses and "differs" not in statuses)
        return bool(
            self.ran
            and not self.error
            and not self.missing_keys
            and not self.unexpected_keys
            and self.within_tolerance
            and self.module_classes
            and all(c.startswith("Fused") for c in self.module_classes.values())
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["matches_ours"] = self.matches_ours
        return data


@dataclass
class CheckResult:
    """Everything a check measured; ``passed`` covers our checks only (not upstream)."""

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
    seconds: float = 0.0
    workload: CheckedWorkload = field(default_factory=CheckedWorkload)  # the sizes it ran at
    family_verdicts: list[FamilyVerdict] = field(default_factory=list)
    modules_only: bool = False
    warnings: list[str] = field(default_factory=list)  # e.g. timings too noisy to tell

    @property
    def passed(self) -> bool:
        """Every fused module verified within tolerance, and end to end (when it ran) too."""
        if self.nothing_to_fuse:
            return True
        e2e = self.end_to_end is None or self.end_to_end.passed
        return bool(self.modules) and all(m.passed for m in self.modules) and e2e

    @property
    def exact(self) -> bool:
        """Alias of :attr:`passed`: the fusion reproduces the original within tolerance."""
        return self.passed

    @property
    def faster(self) -> str:
        """The end-to-end speed verdict ("faster", "slower", "same"), or "" when not timed."""
        e = self.end_to_end
        return e.timing.verdict if e is not None and e.timing is not None and e.ran else ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "model_class": self.model_class,
            "fusion_config": self.fusion_config,
            "dtype": self.dtype,
            "device": self.device,
            "repeats": self.repeats,
            "seed": self.seed,
            "tolerance": self.tolerance.to_dict(),
            "passed": self.passed,
            "nothing_to_fuse": self.nothing_to_fuse,
            "modules": [m.to_dict() for m in self.modules],
            "end_to_end": self.end_to_end.to_dict() if self.end_to_end else None,
            "upstream": self.upstream.to_dict() if self.upstream else None,
            "load": self.load.to_dict() if self.load else None,
            "messages": self.messages,
            "seconds": round(self.seconds, 3),
            "workload": self.workload.to_dict(),
            "modules_only": self.modules_only,
            "family_verdicts": [f.to_dict() for f in self.family_verdicts],
            "warnings": self.warnings,
        }


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
