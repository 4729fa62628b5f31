"""What an adapter conversion plans, wrote and verified: plain data (no torch), for the CLI and the window."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..boundary.convert import plain
from ..export.result import Consumer

__all__ = ["AdaptedModule", "AdapterPlan", "AdapterResult", "AdapterStep", "AdapterVerification"]


@dataclass(frozen=True)
class AdaptedModule:
    """One module of the source adapter: its rank and alpha as PEFT resolves them, its scale."""

    module: str  # the module's path in the model (state-dict naming, no ``base_model.model.``)
    rank: int
    alpha: float
    scale: float  # alpha / rank (alpha / sqrt(rank) with rslora): what PEFT multiplies B A by
    kind: str = "lora"  # "lora" | "embedding" | "other" (modules_to_save, biases: copied)


@dataclass(frozen=True)
class AdapterStep:
    """One conversion of the adapter's tensors: source keys -> target keys, the op, the new ranks.

    ``op`` is one of ``stack_a_blockdiag_b`` (original -> fused: A stacked, B block-diagonal,
    a missing part a zero block), ``split_blocks`` (its inverse: each part's own rows of A and
    block of B), ``share_a_split_b`` (a fused adapter trained as such: every part gets all of A
    and its rows of B), ``conv_to_linear`` / ``linear_to_conv`` (a patch projection's Conv
    LoRA as a Linear LoRA over flattened patches and back: each tensor reshaped,
    ``source_keys[i]`` -> ``target_keys[i]``) and ``copy`` (an untouched module, bytes as they are).
    """

    family: str
    op: str
    source_modules: tuple[str, ...]
    target_modules: tuple[str, ...]
    source_keys: tuple[str, ...]
    source_shapes: tuple[tuple[int, ...], ...]
    target_keys: tuple[str, ...]
    target_shapes: tuple[tuple[int, ...], ...]
    source_ranks: tuple[int, ...]  # 0: a member without an adapter (a zero block)
    target_ranks: tuple[int, ...]
    target_alphas: tuple[float, ...]
    note: str = ""  # e.g. "k_proj has no adapter: zero block"; scale ratios folded into B
    owner: str = ""  # the module holding the group (model path), e.g. ``model.layers.0.self_attn``
    members: tuple[str, ...] = ()  # every member of the group, in order (``source_ranks`` for stacking)


@dataclass
class AdapterPlan:
    """A conversion computed from headers and configs alone (``fusion-core plan --adapter``)."""

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = (
        "adapter", "source_layout", "layout", "fusion_config", "use_rslora", "modules", "steps", "copied_keys",
        "messages",
    )  # fmt: skip

    adapter: str
    source_layout: str  # "original" | "fused"
    layout: str  # the layout written
    fusion_config: dict[str, Any]
    use_rslora: bool
    modules: list[AdaptedModule]
    steps: list[AdapterStep]  # the transformed modules only
    copied_keys: int  # tensors copied bitwise
    messages: list[str] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        """Preview rows: one per source key of each step (source key and shape -> target key and shape)."""
        out = []
        for s in self.steps:
            for i in range(max(len(s.source_keys), len(s.target_keys))):
                a, b = min(i, len(s.source_keys) - 1), min(i, len(s.target_keys) - 1)
                out.append(
                    {
                        "family": s.family,
                        "source_key": s.source_keys[a],
                        "source_shape": list(s.source_shapes[a]),
                        "target_key": s.target_keys[b],
                        "target_shape": list(s.target_shapes[b]),
                        "op": s.op,
                        "rank": s.target_ranks[min(b // 2, len(s.target_ranks) - 1)],
                    }
                )
        return out


@dataclass
class AdapterVerification:
    """What was checked after writing, before the output was moved into place."""

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = (
        "tensors_checked", "round_trip", "outputs_checked", "outputs", "merged", "notes", "summary",
    )  # fmt: skip

    tensors_checked: int = 0
    #: "bitwise" | "exact to rounding" (scales differ by a ratio that is not a power of two) | "not applicable"
    round_trip: str = "not applicable"
    outputs_checked: bool = False
    outputs: dict[str, Any] | None = None  # the PEFT output comparison (separate process)
    merged: dict[str, Any] | None = None  # merge_and_unload of both layouts compared
    notes: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        parts = [f"{self.tensors_checked} tensors as planned", f"round trip {self.round_trip}"]
        if self.outputs_checked and self.outputs:
            parts.append(str(self.outputs.get("summary", "outputs match")))
            if self.merged:
                parts.append(str(self.merged.get("summary", "")))
        else:
            parts.append("outputs not checked")
        return "; ".join(p for p in parts if p)


@dataclass
class AdapterResult:
    """What ``convert_adapter`` wrote and how it was verified."""

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = (
        "adapter", "out_dir", "base", "source_layout", "layout", "fusion_config", "tensors", "transformed",
        "steps", "files", "verification", "consumers", "seconds", "messages",
    )  # fmt: skip

    adapter: str
    out_dir: Path
    base: str
    source_layout: str
    layout: str
    fusion_config: dict[str, Any]
    tensors: int
    transformed: list[str]  # output keys produced by a step (the others are copied bitwise)
    steps: list[AdapterStep]
    files: list[str]
    verification: AdapterVerification
    seconds: float = field(metadata=plain(dump=lambda s: round(s, 3)))
    consumers: list[Consumer] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)


@dataclass
class ProbeAnswer:
    """The adapter consumers' child's answer (:mod:`fusion_core.adapter.consumers`)."""

    consumers: list[Consumer]
    outputs: dict[str, Any]
    merged: dict[str, Any]
