"""Check results: comparisons, timings, per-module and end-to-end records, and the
tolerances by dtype. Plain data with ``to_dict()`` for JSON (the CLI's ``--json``, the GUI)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import CheckError

# (atol, rtol): pass when max |fused - original| <= atol + rtol * max |original|.
# float32: a reshape-only fusion differs only by summation order. bfloat16/float16: the
# Conv and the GEMM may round differently (bf16 keeps 8 significant bits, one step is
# 2**-8 = 0.4% relative; fp16 11 bits, 0.05%), and differences grow through the layers
# after the fused module: rtol is about 5 (bf16) and 8 (fp16) such steps of the output scale.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-5, 1e-5),
    "bfloat16": (1e-2, 2e-2),
    "float16": (1e-3, 4e-3),
}
_MAIN_OUTPUTS = ("logits", "last_hidden_state", "logits_per_video", "logits_per_image", "pooler_output")


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
    def passed(self) -> bool:
        # NaN compares False: a NaN difference fails
        return self.max_abs_diff <= self.atol + self.rtol * self.max_original

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_abs_diff": self.max_abs_diff,
            "max_rel_diff": self.max_rel_diff,
            "atol": self.atol,
            "rtol": self.rtol,
            "shape": self.shape,
            "max_original": self.max_original,
            "passed": self.passed,
            "note": self.note,
        }


@dataclass
class Timing:
    original_ms: float
    fused_ms: float
    repeats: int

    @property
    def speedup(self) -> float:
        return self.original_ms / self.fused_ms if self.fused_ms > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        return {
            "original_ms": round(self.original_ms, 4),
            "fused_ms": round(self.fused_ms, 4),
            "speedup": round(self.speedup, 3),
            "repeats": self.repeats,
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
        }


@dataclass
class EndToEndCheck:
    """The whole model (or its entry submodule) fused vs original on the synthetic inputs."""

    entry: str
    output: str
    input_kind: str
    input_shapes: dict[str, list[int]]
    comparison: Comparison
    timing: Timing
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.comparison.passed

    def to_dict(self) -> dict[str, Any]:
        return {
            "entry": self.entry or "(model)",
            "output": self.output,
            "input_kind": self.input_kind,
            "input_shapes": self.input_shapes,
            "comparison": self.comparison.to_dict(),
            "timing": self.timing.to_dict(),
            "passed": self.passed,
            "notes": self.notes,
        }


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

    @property
    def matches_ours(self) -> bool:
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
    tolerance: dict[str, Any]
    modules: list[ModuleCheck] = field(default_factory=list)
    end_to_end: EndToEndCheck | None = None
    upstream: UpstreamReport | None = None
    load: dict[str, Any] | None = None
    nothing_to_fuse: bool = False
    messages: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        if self.nothing_to_fuse:
            return True
        e2e = self.end_to_end is None or self.end_to_end.passed
        return bool(self.modules) and all(m.passed for m in self.modules) and e2e

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "model_class": self.model_class,
            "fusion_config": self.fusion_config,
            "dtype": self.dtype,
            "device": self.device,
            "repeats": self.repeats,
            "seed": self.seed,
            "tolerance": self.tolerance,
            "passed": self.passed,
            "nothing_to_fuse": self.nothing_to_fuse,
            "modules": [m.to_dict() for m in self.modules],
            "end_to_end": self.end_to_end.to_dict() if self.end_to_end else None,
            "upstream": self.upstream.to_dict() if self.upstream else None,
            "load": self.load,
            "messages": self.messages,
            "seconds": round(self.seconds, 3),
        }


def compare(original: Any, fused: Any, dtype: str) -> Comparison:
    """Max abs / relative difference of two tensors (or nests of them), judged for ``dtype``."""
    import torch

    a_list, b_list = tensors_of(original), tensors_of(fused)
    atol, rtol = TOLERANCES.get(dtype, TOLERANCES["float32"])
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
