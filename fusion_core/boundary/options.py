"""The settings of the engine's operations, as frozen dataclasses validated where they are built.

:class:`Workload` is the sizes a check runs at; :class:`TimingOptions` how timings are
taken; :class:`CheckOptions` and :class:`ExportOptions` everything ``check`` and
``export`` take besides the plan. The CLI builds them from its flags, the window from its
controls, the engine process from what crosses the wire; each raises
:class:`OptionError` (a :class:`~fusion_core.errors.UsageError`) naming the *option*, and
only the CLI translates option names into flag names.

Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ..errors import UsageError

#: the dtypes a check or load runs in, with their tolerance (atol, rtol): the one table.
#: A check passes when max |fused - original| <= atol * min(1, max |original|) + rtol * max |original|. float32: a
#: reshape-only fusion differs only by summation order. bfloat16/float16: the Conv and the
#: GEMM may round differently (bf16 keeps 8 significant bits, one step is 2**-8 = 0.4%
#: relative; fp16 11 bits, 0.05%), and differences grow through the layers after the fused
#: module: rtol is about 5 (bf16) and 8 (fp16) such steps of the output scale.
DTYPE_TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-5, 1e-5),
    "bfloat16": (1e-2, 2e-2),
    "float16": (1e-3, 4e-3),
}
DTYPES: tuple[str, ...] = tuple(DTYPE_TOLERANCES)
LAYOUTS = ("fused", "original")
ON_WRONG_LOAD = ("guard", "refuse")
DEFAULT_MAX_SHARD_SIZE = "50GB"  # transformers 5.24's save_pretrained(max_shard_size=...) default
MAX_SHARD_SIZE = 2**63 - 1  # a file offset
_SIZE_UNITS = {
    "TB": 10**12,
    "GB": 10**9,
    "MB": 10**6,
    "KB": 10**3,
    "TIB": 2**40,
    "GIB": 2**30,
    "MIB": 2**20,
    "KIB": 2**10,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B)?\s*$", re.IGNORECASE)


class OptionError(UsageError):
    """An option value that is not valid; ``option`` is its name (``"batch"``, ``"layout"``)."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option} {message}")
        self.option = option
        self.detail = message


def _at_least(option: str, value: int | float | None, low: int | float, kind: type = int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise OptionError(option, f"must be {'a number' if kind is float else 'an integer'}, got {value!r:.40}")
    if not value >= low:  # NaN too
        raise OptionError(option, f"must be at least {low}, got {value}")


def parse_size(value: int | str, option: str = "max_shard_size") -> int:
    """A size as accelerate and ``save_pretrained`` read it (``"5GB"`` is 5e9 bytes, ``"6GiB"``
    6 x 2**30), in bytes.

    Raises:
        OptionError: not a positive size (named as ``option``).
    """
    bad = "is not a size: give e.g. 5GB, 6GiB, 200MB or a number of bytes"
    if isinstance(value, bool):
        raise OptionError(option, f"{value!r} {bad}")
    if isinstance(value, int):
        size = value
    else:
        m = _SIZE_RE.match(str(value))
        if m is None:
            raise OptionError(option, f"{str(value)[:40]!r} {bad}")
        digits, unit = m.group(1), m.group(2)
        if len(digits) > 30:  # float() of 400 digits is infinity
            raise OptionError(option, f"{value[:40]!r}...: too large")
        number = Decimal(digits)
        size = int(number * _SIZE_UNITS[unit.upper()]) if unit else int(number)
    if size < 1:
        raise OptionError(option, f"{str(value)[:40]!r} must be positive")
    if size > MAX_SHARD_SIZE:
        raise OptionError(option, f"{str(value)[:40]!r} is larger than {MAX_SHARD_SIZE} bytes")
    return size


@dataclass(frozen=True)
class Workload:
    """The sizes a check runs at; ``None`` means the model's own (its config or processor size).

    Families make module sample inputs at this size (``FusionSpec.sample_inputs``); the
    checks make end-to-end inputs from it. ``device`` is checked against the machine by
    the engine when the check starts (the window may run where the engine does not).
    """

    batch: int = 1
    seq_len: int | None = None  # text tokens
    image_size: int | None = None  # pixels (square)
    frames: int | None = None  # video frames
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("batch", "seq_len", "image_size", "frames"):
            _at_least(name, getattr(self, name), 1)
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise OptionError("seed", f"must be an integer, got {self.seed!r:.40}")
        name = str(self.dtype).removeprefix("torch.")
        if name not in DTYPE_TOLERANCES:
            raise OptionError("dtype", f"{self.dtype!r:.40} is not supported; choose one of {', '.join(DTYPES)}")
        object.__setattr__(self, "dtype", name)
        if not isinstance(self.device, str) or not self.device.strip():
            raise OptionError("device", f"must name a device (cpu, cuda, cuda:N, mps), got {self.device!r:.40}")

    @property
    def tolerance(self) -> tuple[float, float]:
        """(atol, rtol) of this workload's dtype."""
        return DTYPE_TOLERANCES[self.dtype]


@dataclass(frozen=True)
class TimingOptions:
    """How a timing is taken: paired, alternating rounds until the interval is tight or the budget is spent."""

    min_rounds: int = 5  # rounds always run
    max_rounds: int = 200  # rounds never exceeded
    budget_s: float = 2.0  # seconds of rounds once min_rounds ran
    target: float = 0.03  # stop once the 95% interval is within this fraction of the median

    def __post_init__(self) -> None:
        _at_least("min_rounds", self.min_rounds, 1)
        _at_least("max_rounds", self.max_rounds, 1)
        if self.max_rounds < self.min_rounds:
            raise OptionError("max_rounds", f"must be at least min_rounds ({self.min_rounds}), got {self.max_rounds}")
        _at_least("budget_s", self.budget_s, 0, float)
        _at_least("target", self.target, 0, float)


@dataclass(frozen=True)
class CheckOptions:
    """Everything a check takes besides the plan."""

    workload: Workload = field(default_factory=Workload)
    timing: TimingOptions = field(default_factory=TimingOptions)
    upstream: bool = True  # also load through transformers' own fusion, in an isolated process
    threads: int | None = None  # torch's CPU threads during the check (None: torch's default)
    prompt: str | None = None  # text, through the model's own tokenizer
    modules_only: bool = False  # only the matched modules, materialized from the checkpoint by key
    images: tuple[str, ...] = ()  # image files, through the model's own processor
    video: str | None = None  # a video file (frames decoded with PyAV)
    audio: str | None = None  # an audio file (read with soundfile)
    #: the memory the model's weights may take (accelerate's ``max_memory`` for the CPU), in
    #: bytes or a size ("6GiB"); beyond it weights stay on disk. None: the memory available
    max_memory: int | str | None = None
    generate: int = 0  # greedy new tokens, original against fused (0: no generation)
    cache: str = "dynamic"  # the KV cache of the generation: "dynamic" or "static"
    #: a torch.compile backend ("inductor"): also time both models compiled ("": not compiled)
    compile: str = ""

    def __post_init__(self) -> None:
        _at_least("threads", self.threads, 1)
        _at_least("generate", self.generate, 0)
        if not isinstance(self.compile, str) or len(self.compile) > 64:
            raise OptionError("compile", "must name a torch.compile backend, e.g. inductor")
        if self.cache not in ("dynamic", "static"):
            raise OptionError("cache", f"must be dynamic or static, got {str(self.cache)[:40]!r}")
        if self.max_memory is not None:
            object.__setattr__(self, "max_memory", parse_size(self.max_memory, "max_memory"))
        # paths are expanded here, once: every stage downstream gets the file's real path
        if isinstance(self.images, (str, os.PathLike)):
            raise OptionError("images", "must be a list of files, not one path")
        images = [os.path.expanduser(str(p)) for p in self.images or ()]
        if any(not p for p in images):
            raise OptionError("image", "must name a file")
        object.__setattr__(self, "images", tuple(images))
        for name in ("video", "audio"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, os.path.expanduser(str(value)))
                if not getattr(self, name):
                    raise OptionError(name, "must name a file")
        for name, path in [("image", p) for p in images] + [("video", self.video), ("audio", self.audio)]:
            if path is not None and not os.path.isfile(path):  # before the model opens
                raise OptionError(name, f"{path[:200]!r}: no such file")

    @classmethod
    def build(cls, **settings: Any) -> CheckOptions:
        """Options from flat settings: ``dtype``, ``device``, ``seed``, ``batch``, ``seq_len``,
        ``image_size``, ``frames`` (the workload), ``repeats``, ``time_budget`` (the timing)
        and this class's own fields; ``image``, one file, is ``images=[image]``. Unknown names
        raise :class:`OptionError`."""
        if "image" in settings:
            image = settings.pop("image")
            if image is not None:
                settings["images"] = (image, *settings.get("images", ()))
        wl = {
            k: settings.pop(k)
            for k in ("dtype", "device", "seed", "batch", "seq_len", "image_size", "frames")
            if k in settings
        }
        tm = {}
        if "repeats" in settings:
            tm["min_rounds"] = settings.pop("repeats")
        if "time_budget" in settings:
            tm["budget_s"] = settings.pop("time_budget")
        own = {f for f in cls.__dataclass_fields__ if f not in ("workload", "timing")}
        unknown = sorted(set(settings) - own)
        if unknown:
            raise OptionError(unknown[0], "is not an option of check")
        return cls(workload=Workload(**wl), timing=TimingOptions(**tm), **settings)


@dataclass(frozen=True)
class ExportOptions:
    """Everything an export takes besides the plan and the destination."""

    layout: str = "fused"  # "fused" (fused keys, fusion_config written) or "original"
    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE  # as save_pretrained's
    overwrite: bool = False  # replace a non-empty destination, once the new one is complete
    verify_outputs: bool = True  # load the export back, compare outputs, try its consumers
    allow_copy_as_is: bool = False  # export a model with nothing to fuse unchanged
    sync: bool = True  # fsync the written files before the final rename
    on_wrong_load: str = "guard"  # "guard" (fusion_core:<name> family names) or "refuse"
    #: the memory the verification's models may take (accelerate's max_memory): beyond it their
    #: blocks stay on disk; None: the memory available
    max_memory: int | str | None = None

    def __post_init__(self) -> None:
        if self.max_memory is not None:
            object.__setattr__(self, "max_memory", parse_size(self.max_memory, "max_memory"))
        if self.layout not in LAYOUTS:
            raise OptionError("layout", f"must be one of {', '.join(LAYOUTS)}, got {str(self.layout)[:40]!r}")
        if self.on_wrong_load not in ON_WRONG_LOAD:
            raise OptionError(
                "on_wrong_load", f"must be one of {', '.join(ON_WRONG_LOAD)}, got {str(self.on_wrong_load)[:40]!r}"
            )
        parse_size(self.max_shard_size)

    @property
    def shard_bytes(self) -> int:
        return parse_size(self.max_shard_size)


@dataclass(frozen=True)
class AdapterOptions:
    """How a LoRA adapter is converted (``fusion_core.adapter``), besides the plan and the folders."""

    #: the layout to write: "fused", "original", or None (the other one than the adapter's)
    layout: str | None = None
    #: load both layouts with PEFT in a child process and compare outputs and merged weights
    verify_outputs: bool = True
    #: fsync the written files before the final rename
    sync: bool = True

    def __post_init__(self) -> None:
        if self.layout is not None and self.layout not in LAYOUTS:
            raise OptionError("layout", f"must be one of {', '.join(LAYOUTS)}, got {str(self.layout)[:40]!r}")
        for name in ("verify_outputs", "sync"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(name, "must be true or false")
