"""The fusion spec protocol: what a family must provide, and the verdicts it gives.

The protocol follows the reference mechanism (``target_modules_patterns``, ``is_fusable``,
``make_fused_class``, ``make_transforms``, an empty-result message) plus what an inspector
needs: :meth:`FusionSpec.judge` returns a :class:`Verdict` with a human reason, and
:meth:`FusionSpec.fuse_module` converts one loaded module in place.
"""

from __future__ import annotations

import copy
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from ..boundary.convert import plain
from ..boundary.options import Workload

__all__ = ["FusionSpec", "Option", "Verdict", "Workload", "fused_subclass", "validate_spec"]

if TYPE_CHECKING:
    from torch import nn
    from transformers import PretrainedConfig

    from .transforms import KeyTransform


@dataclass(frozen=True)
class Verdict:
    """Whether one module can be fused, and why not."""

    ok: bool
    reason: str = ""
    #: False for an instance of a fused class that has nothing of its own to convert (a
    #: host of non-overlapping convolutions whose instance has none): patched with its
    #: class, but neither a match nor a rejection
    applies: bool = True

    @classmethod
    def yes(cls, reason: str = "fusable") -> Verdict:
        return cls(True, reason)

    @classmethod
    def untouched(cls, reason: str) -> Verdict:
        """Fine to patch with its class, but this instance holds nothing to fuse."""
        return cls(True, reason, applies=False)

    @classmethod
    def no(cls, reason: str) -> Verdict:
        return cls(False, reason)


@dataclass(frozen=True)
class Option:
    """One option a family accepts in ``fusion_config`` (``{"family": {"name": value}}``).

    ``type`` is ``bool``, ``int``, ``float`` or ``str`` (an int is accepted for a float;
    a bool is never accepted for an int). ``choices`` restricts the values, when given.
    """

    type: type = field(metadata=plain(dump=lambda t: t.__name__))  # its name as plain data
    default: Any
    help: str = ""
    choices: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        # plain JSON scalars: they go into config.json and key the discovery cache (hashable)
        if self.type not in (bool, int, float, str):
            raise TypeError(f"Option type must be bool, int, float or str, got {self.type!r}")
        if not self._of_type(self.default):
            raise TypeError(f"Option default {self.default!r} is not a {self.type.__name__}")

    def _of_type(self, value: Any) -> bool:
        if self.type is float:
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if self.type is int:
            return isinstance(value, int) and not isinstance(value, bool)
        return isinstance(value, self.type)

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` is of the option's type (and one of its choices, when it has some)."""
        return self._of_type(value) and (not self.choices or value in self.choices)

    def describe(self) -> str:
        """``int, default 0: help`` (for tables and tooltips)."""
        kind = self.type.__name__ + (f" in {list(self.choices)}" if self.choices else "")
        return f"{kind}, default {self.default!r}" + (f": {self.help}" if self.help else "")


_configure_lock = threading.Lock()


class FusionSpec:
    """Base recipe for a fusion family. Subclasses set ``name`` and ``description``."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: regexes searched in the module path; an empty tuple makes every module a candidate
    target_modules_patterns: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        self._fused_classes: dict[type, type] = {}
        #: the options this spec runs with (defaults filled in); see :meth:`with_options`
        self.options: dict[str, Any] = {k: o.default for k, o in self.options_schema().items()}
        self._configured: dict[tuple[tuple[str, Any], ...], FusionSpec] = {}

    @cached_property
    def _pattern(self) -> re.Pattern[str] | None:
        if not self.target_modules_patterns:
            return None
        return re.compile("|".join(f"(?:{p})" for p in self.target_modules_patterns))

    def is_candidate(self, path: str, module: nn.Module) -> bool:
        """Pre-filter by module path (``target_modules_patterns``); ``judge`` decides."""
        return self._pattern is None or self._pattern.search(path) is not None

    def near_miss(self, path: str, module: nn.Module) -> str | None:
        """Why a module that is *not* a candidate still looks like this family's target.

        Called for the modules :meth:`is_candidate` leaves out; a family returns a reason
        when the module has the right shape under other names (T5's ``q``/``k``/``v``,
        BERT's ``query``/``key``/``value``), so the user learns why it is not fused.
        Discovery shows it as ``not a candidate: <reason>`` in ``Discovery.near_misses``.
        """
        return None

    def judge(self, module: nn.Module) -> Verdict:
        """Decide whether ``module`` can be fused; the reason is shown to the user."""
        raise NotImplementedError

    def is_fusable(self, module: nn.Module) -> bool:
        return self.judge(module).ok

    def fused_class(self, original_cls: type) -> type:
        """The (cached) fused replacement of ``original_cls``: one class per original class."""
        fused = self._fused_classes.get(original_cls)
        if fused is None:
            fused = self.make_fused_class(original_cls)
            self._fused_classes[original_cls] = fused
        return fused

    def make_fused_class(self, original_cls: type) -> type:
        """Build the runtime replacement class; its instances behave like the original's."""
        raise NotImplementedError

    def make_transforms(self, config: PretrainedConfig, modules: Mapping[str, nn.Module]) -> list[KeyTransform]:
        """The key transforms for the matched ``modules`` (path -> module of the meta model).

        Shapes come from the modules themselves, never from config field names (which
        differ between families and nest differently).
        """
        raise NotImplementedError

    def fuse_module(self, module: nn.Module) -> None:
        """Convert one loaded module (of a matched class) into its fused form, in place."""
        raise NotImplementedError

    def share_storage(self, original: nn.Module, fused: nn.Module) -> None:
        """Make ``original``'s tensors views of ``fused``'s where the fusion copied them.

        A check holds a module in both forms (:mod:`fusion_core.run.switch`): ``fused`` is
        a converted shallow copy of ``original``. A family whose fused weights are views of
        the originals (a reshape) has nothing to do, which is the default; one that
        concatenates points the original members at rows of the fused tensor, so one copy
        of the weights serves both forms. Values are unchanged (the rows are the copies).
        """

    def empty_message(self, model_name: str) -> str:
        return f"no module of {model_name} can be fused by {self.name!r}"

    def sample_inputs(
        self, module: nn.Module, config: PretrainedConfig | None, workload: Workload
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Inputs made for one matched module (``(args, kwargs)``), to run it on its own.

        Used when an end-to-end run cannot reach the module (text-only inputs of a VL
        model, a dual-tower model, a model too large to load): the check then runs the
        original and the fused module on these inputs. Tensors are on ``workload.device``
        in ``workload.dtype`` and seeded by ``workload.seed``.

        Raises:
            NotImplementedError: the family supplies no sample inputs.
            ValueError: no inputs can be made for this module (the message says why).
        """
        raise NotImplementedError(f"family {self.name!r} supplies no sample inputs")

    def options_schema(self) -> Mapping[str, Option]:
        """Options the family accepts in ``fusion_config`` (none by default).

        ``fusion_config={"family": {"option": value}}`` is validated against this schema
        (an unknown option or a wrong type is a usage error naming the family and the
        option); the family then runs as :meth:`with_options`, reading ``self.options``.
        """
        return {}

    def validate_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` checked against :meth:`options_schema`, defaults filled in.

        Raises:
            ValueError: an unknown option or a value of the wrong type (the message names
                the family, the option and what is expected).
        """
        schema = self.options_schema()
        out = {k: o.default for k, o in schema.items()}
        for key, value in options.items():
            option = schema.get(key)
            if option is None:
                known = ", ".join(sorted(schema)) or "none"
                raise ValueError(f"fusion {self.name!r} has no option {key!r} (its options: {known})")
            if not option.accepts(value):
                raise ValueError(f"fusion {self.name!r} option {key!r}: expected {option.describe()}, got {value!r}")
            out[key] = value
        return out

    def with_options(self, options: Mapping[str, Any] | None = None) -> FusionSpec:
        """This family configured with ``options`` (validated; the defaults give ``self``).

        A configured spec is a copy with its own ``options`` and its own fused classes,
        made once per distinct set of options, so a plan and the load that runs it get
        the same fused classes. Discovery results are cached per configured spec.

        Raises:
            ValueError: see :meth:`validate_options`.
        """
        full = self.validate_options(options or {})
        if full == self.options:
            return self
        key = tuple(sorted(full.items()))
        with _configure_lock:  # one copy per options, also when two threads plan at once
            spec = self._configured.get(key)
            if spec is None:
                spec = copy.copy(self)
                spec.options = full
                spec._fused_classes = {}
                spec._configured = {}
                spec.__dict__.pop("_pattern", None)
                self._configured[key] = spec
        return spec

    def sample_configs(self) -> list[PretrainedConfig]:
        """Tiny configs of models this family fuses, for the conformance kit.

        The kit (:func:`fusion_core.conformance.check_family`) builds each with seeded
        random weights, saves it, and runs the family's properties on it besides the
        demos. Keep them tiny (a few layers of width 32-64): the kit loads each several times.
        """
        return []


def fused_subclass(original_cls: type, mixin: type, family: str, namespace: Mapping[str, Any] | None = None) -> type:
    """``Fused<Original>``: ``mixin`` in front of ``original_cls``, living in the original's module.

    The helper every family's ``make_fused_class`` uses, so fused classes are named and
    tagged alike (``_fusion_family``, ``_fusion_original``).
    """
    body = {"__module__": original_cls.__module__, **(namespace or {})}
    fused = type(f"Fused{original_cls.__name__}", (mixin, original_cls), body)
    fused.__qualname__ = f"Fused{original_cls.__qualname__}"
    fused._fusion_family = family  # type: ignore[attr-defined]
    fused._fusion_original = original_cls  # type: ignore[attr-defined]
    return fused


def become_fused(module: nn.Module, fused: type) -> None:
    """``module`` turned into an instance of ``fused`` in place, with transformers' output capture kept.

    transformers finds what a model records (``_can_record_outputs``: hidden states, attentions)
    by the class of the model in a registry that ``PreTrainedModel.__init__`` fills; a class
    swapped in place never ran it, so a fused model root (Pixtral's ``patch_conv`` is hosted by
    ``PixtralVisionModel``) would record nothing and return ``hidden_states=None``. The fused
    class is registered as its ``__init__`` would register it: the same recorders.
    """
    from transformers import PreTrainedModel

    module.__class__ = fused
    if not isinstance(module, PreTrainedModel):
        return
    try:
        from transformers.utils.output_capturing import _CAN_RECORD_REGISTRY
    except ImportError:  # a transformers without the registry reads the recorders from the class
        return
    _CAN_RECORD_REGISTRY[module] = module._can_record_outputs


_REQUIRED = ("judge", "make_fused_class", "make_transforms", "fuse_module")


def validate_spec(spec: object, origin: str = "") -> FusionSpec:
    """Check that ``spec`` implements the protocol, with a helpful error otherwise.

    Raises:
        TypeError: naming the missing pieces.
    """
    where = f" (from {origin})" if origin else ""
    if not isinstance(spec, FusionSpec):
        raise TypeError(f"{spec!r}{where} is not a FusionSpec instance")
    if not spec.name or not re.fullmatch(r"[a-z][a-z0-9_]*", spec.name):
        raise TypeError(f"{type(spec).__name__}{where}: name {spec.name!r} must be lower_snake_case")
    if any("check" in vars(k) for k in type(spec).__mro__):
        raise TypeError(
            f"{type(spec).__name__}{where} defines check(module): that method is now judge(module) "
            "(docs/extending.md); rename it"
        )
    missing = [m for m in _REQUIRED if getattr(type(spec), m) is getattr(FusionSpec, m)]
    if missing:
        raise TypeError(f"{type(spec).__name__}{where} does not implement {', '.join(missing)}")
    return spec
