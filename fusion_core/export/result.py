"""What an export wrote and how it was verified: plain data (no torch), shown by the CLI and the window."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ExportResult", "ExportVerification"]


@dataclass
class ExportVerification:
    """What was checked after writing, before the output was moved into place."""

    tensors_checked: int = 0
    files_checked: int = 0
    transforms_inverted: int = 0  # transformed groups converted back and compared bitwise
    outputs_checked: bool = False
    outputs: dict[str, Any] | None = None  # the output comparison, when run
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = [f"{self.tensors_checked} tensors in {self.files_checked} file(s) match the plan"]
        if self.transforms_inverted:
            parts.append(f"{self.transforms_inverted} transform(s) invert bitwise")
        if self.outputs_checked and self.outputs:
            parts.append(self.outputs.get("summary", "outputs match"))
        else:
            parts.append("outputs not checked")
        return "; ".join(parts)


@dataclass
class ExportResult:
    """What an export wrote and how it was verified."""

    source: str
    out_dir: Path
    layout: str
    source_layout: str
    fusion_config: dict[str, Any]
    files: list[tuple[str, int]]  # (name, bytes), in the output folder
    tensors: int
    transformed: list[str]  # output keys produced by a transform
    copied_files: list[str]
    skipped_files: list[tuple[str, str]]
    verification: ExportVerification
    replaced_existing: bool
    seconds: float
    #: who loads the export, found by loading it: [{name, status, how, detail, max_abs_diff}]
    consumers: list[dict[str, Any]] = field(default_factory=list)
    #: the fusion_config written into config.json (None: none, original layout)
    written_fusion_config: dict[str, Any] | None = None
    #: family names were prefixed so that stock transformers refuses the export
    guarded: bool = False
    #: what the export did to the plan it was given (e.g. the checkpoint's own families added first)
    messages: list[str] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "out_dir": str(self.out_dir),
            "layout": self.layout,
            "source_layout": self.source_layout,
            "fusion_config": self.fusion_config,
            "files": [{"name": n, "bytes": b} for n, b in self.files],
            "total_bytes": self.total_bytes,
            "tensors": self.tensors,
            "transformed": self.transformed,
            "copied_files": self.copied_files,
            "skipped_files": [{"name": n, "reason": r} for n, r in self.skipped_files],
            "verification": {**asdict(self.verification), "summary": self.verification.summary()},
            "replaced_existing": self.replaced_existing,
            "seconds": round(self.seconds, 3),
            "written_fusion_config": self.written_fusion_config,
            "guarded": self.guarded,
            "consumers": self.consumers,
            "messages": self.messages,
        }
