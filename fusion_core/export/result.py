"""What an export wrote and how it was verified: plain data (no torch), shown by the CLI and the window."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from ..boundary.convert import plain

__all__ = ["Consumer", "ExportResult", "ExportVerification", "OutputFile", "SkippedFile"]


class OutputFile(NamedTuple):
    """A file in the output folder (``{name, bytes}`` as plain data)."""

    name: str
    bytes: int


class SkippedFile(NamedTuple):
    """A file of the source folder that was not copied, and why."""

    name: str
    reason: str


@dataclass
class Consumer:
    """Who loads the export, found by loading it (or predicted, before writing).

    Also the answer of the consumers' child process (:mod:`fusion_core.export.consumers`).
    """

    name: str  # "fusion_core 0.x" | "transformers 5.x"
    status: str  # LOADS_EXACTLY | REFUSES | LOADS_WRONG | LOADS_NOT_COMPARED | "tried after writing" (predicted)
    how: str  # the call that loads it
    detail: str = ""
    max_abs_diff: float | None = None  # its outputs against the source model's (the largest difference)
    #: which outputs on which inputs, e.g. "image+text: logits, vision tower" ("" when nothing ran)
    compared: str = ""


@dataclass
class ConsumersAnswer:
    """The consumers' child's answer: each consumer, and our loader's comparison in full."""

    consumers: list[Consumer]
    #: :func:`fusion_core.export.verify.compare_outputs` on the export as our loader loads it
    #: (None: it did not load, or did not run)
    outputs: dict[str, Any] | None = None


@dataclass
class ExportVerification:
    """What was checked after writing, before the output was moved into place."""

    tensors_checked: int = 0
    files_checked: int = 0
    transforms_inverted: int = 0  # transformed groups converted back and compared bitwise
    outputs_checked: bool = False
    outputs: dict[str, Any] | None = None  # the output comparison, when run
    notes: list[str] = field(default_factory=list)

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = (
        "tensors_checked", "files_checked", "transforms_inverted", "outputs_checked", "outputs", "notes", "summary",
    )  # fmt: skip

    @property
    def summary(self) -> str:
        """One line: what was checked."""
        parts = [f"{self.tensors_checked} tensors in {self.files_checked} file(s) match the plan"]
        changed = any(n.startswith("layout changes: ") for n in self.notes)  # export.legacy.LEGACY_NOTE
        if self.transforms_inverted and not changed:
            parts.append(f"{self.transforms_inverted} transform(s) invert bitwise")
        if self.outputs_checked and self.outputs:
            parts.append(self.outputs.get("summary", "outputs match"))
        else:
            parts.append("outputs not checked")
        return "; ".join(parts)


@dataclass
class ExportResult:
    """What an export wrote and how it was verified."""

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = (
        "source", "out_dir", "layout", "source_layout", "fusion_config", "files", "total_bytes", "tensors",
        "transformed", "copied_files", "skipped_files", "verification", "replaced_existing", "seconds",
        "written_fusion_config", "guarded", "consumers", "messages",
    )  # fmt: skip

    source: str
    out_dir: Path
    layout: str
    source_layout: str
    fusion_config: dict[str, Any]
    files: list[OutputFile]  # in the output folder
    tensors: int
    transformed: list[str]  # output keys produced by a transform
    copied_files: list[str]
    skipped_files: list[SkippedFile]
    verification: ExportVerification
    replaced_existing: bool
    seconds: float = field(metadata=plain(dump=lambda s: round(s, 3)))
    #: who loads the export, found by loading it
    consumers: list[Consumer] = field(default_factory=list)
    #: the fusion_config written into config.json (None: none, original layout)
    written_fusion_config: dict[str, Any] | None = None
    #: family names were prefixed so that stock transformers refuses the export
    guarded: bool = False
    #: what the export did to the plan it was given (e.g. the checkpoint's own families added first)
    messages: list[str] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)
