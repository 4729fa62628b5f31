"""The Checks tab's workload controls: device, threads, the sizes a check runs at, real inputs."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QGridLayout, QLabel, QSpinBox, QWidget

from .media_inputs import MediaInputs


class WorkloadControls(QWidget):
    """Device, threads and the sizes a check runs at; 0 means "the model's own"."""

    changed = Signal()  # any control changed (the summary follows)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.device = QComboBox()
        self.device.addItem("cpu")  # the others (cuda, mps) when the engine says it has them: set_devices
        self.threads = _spin(0, 256, 0, "CPU threads for torch (0: torch's default)", "default")
        self.image_size = _spin(0, 8192, 0, "image side in pixels (0: the processor's or config's size)", "model's")
        self.frames = _spin(0, 1024, 0, "video frames (0: the model's)", "model's")
        self.seq_len = _spin(0, 65536, 0, "text tokens (0: 128)", "default")
        self.batch = _spin(1, 256, 1, "rows per run", "")
        self.max_memory = _spin(
            0, 65536, 0,
            "memory the weights may take, in GiB (accelerate's max_memory): beyond it blocks stay on disk "
            "and are read for each call, slower (0: the memory available)",
            "available",
        )  # fmt: skip
        self.max_memory.setSuffix(" GiB")
        self.generate = _spin(
            0, 4096, 0, "greedy new tokens with the KV cache, original against fused, compared token by token (0: off)",
            "off",
        )  # fmt: skip
        self.modules_only = QCheckBox("Modules only")
        self.modules_only.setToolTip(
            "check only the fused modules, read alone from the checkpoint: bounded memory, no end-to-end run"
        )
        self.compile = QCheckBox("Compiled too")
        self.compile.setToolTip(
            "also time both models under torch.compile (inductor): does the fusion still pay once the compiler "
            "has fused what it can? Its first calls compile, which takes minutes"
        )
        self.media = MediaInputs()  # image, video and audio files (picker, drag and drop), a prompt
        self.prompt = self.media.prompt
        # label/control pairs, three to a row, in a grid that stays narrow (the window's
        # minimum width is the widest tab's)
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        pairs = (
            ("device:", self.device), ("threads:", self.threads), ("batch:", self.batch),
            ("image px:", self.image_size), ("frames:", self.frames), ("seq len:", self.seq_len),
            ("memory:", self.max_memory), ("generate:", self.generate),
        )  # fmt: skip
        for i, (label, widget) in enumerate(pairs):
            grid.addWidget(QLabel(label), i // 3, 2 * (i % 3))
            grid.addWidget(widget, i // 3, 2 * (i % 3) + 1)
        grid.setColumnStretch(6, 1)
        grid.addWidget(self.media, 3, 0, 1, 6)
        grid.addWidget(self.modules_only, 4, 0, 1, 3)
        grid.addWidget(self.compile, 4, 3, 1, 3)
        self.device.currentTextChanged.connect(lambda _t: self.changed.emit())
        for box in (
            self.threads, self.image_size, self.frames, self.seq_len, self.batch, self.max_memory, self.generate
        ):  # fmt: skip
            box.valueChanged.connect(lambda _v: self.changed.emit())
        self.modules_only.toggled.connect(lambda _c: self.changed.emit())
        self.compile.toggled.connect(lambda _c: self.changed.emit())
        self.media.changed.connect(self.changed.emit)

    def summary(self) -> str:
        """One line: what differs from the defaults ("cpu, model's sizes" when nothing does)."""
        o = self.options()
        parts = [o["device"]]
        if o["threads"]:
            parts.append(f"{o['threads']} threads")
        if o["batch"] != 1:
            parts.append(f"batch {o['batch']}")
        parts += [
            f"{label} {o[key]}"
            for key, label in (("image_size", "px"), ("frames", "frames"), ("seq_len", "tokens"))
            if o[key]
        ]
        if o["max_memory"]:
            parts.append(f"weights ≤ {self.max_memory.value()} GiB")
        if o["generate"]:
            parts.append(f"generate {o['generate']}")
        files = len(o["images"]) + bool(o["video"]) + bool(o["audio"])
        if files or o["prompt"]:
            parts.append(f"real inputs ({files} file{'s' if files != 1 else ''})" if files else "real prompt")
        if o["modules_only"]:
            parts.append("modules only")
        if o["compile"]:
            parts.append(f"compiled too ({o['compile']})")
        return ", ".join(parts) if len(parts) > 1 else f"{parts[0]}, model's sizes"

    def set_devices(self, devices: list[str]) -> None:
        """The devices the engine can use (keeps the current choice when it is still there)."""
        current = self.device.currentText()
        self.device.clear()
        self.device.addItems(devices or ["cpu"])
        if current in devices:
            self.device.setCurrentText(current)

    def options(self) -> dict[str, Any]:
        """The keyword arguments of ``iter_check`` these controls stand for."""
        return {
            "device": self.device.currentText(),
            "threads": self.threads.value() or None,
            "image_size": self.image_size.value() or None,
            "frames": self.frames.value() or None,
            "seq_len": self.seq_len.value() or None,
            "batch": self.batch.value(),
            "modules_only": self.modules_only.isChecked(),
            "max_memory": self.max_memory.value() * 2**30 or None,
            "generate": self.generate.value(),
            "compile": "inductor" if self.compile.isChecked() else "",
            **self.media.options(),
        }


def _spin(lo: int, hi: int, value: int, tip: str, special: str) -> QSpinBox:
    box = QSpinBox(minimum=lo, maximum=hi, value=value)
    box.setToolTip(tip)
    if special:
        box.setSpecialValueText(special)
    return box
