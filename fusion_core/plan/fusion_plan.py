"""Plans: a validated ``fusion_config`` turned into patch mapping and key maps, both ways.

:func:`inspect_model` opens a model once (meta model, tree, per-family discovery, cached);
:meth:`Inspection.plan` then builds a :class:`FusionPlan` for any ``fusion_config`` in
milliseconds. A plan is data, validated before any I/O: the class-level patch mapping,
the key transforms (model keys), the same transforms on the checkpoint's own key names
(found the way transformers loads them, its renamings included: :mod:`fusion_core.plan.key_names`)
with shapes and dtypes from the safetensors headers, and the reverse direction (fused
layout -> original) used by export.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..boundary.convert import converter, to_plain
from ..errors import FamilyConflictError, ModelSourceError, UsageError
from .discovery import Discovery, discover
from .fusion_config import FusionConfig, configured_family, validate_fusion_config
from .key_names import Converted, Found, KeyMatcher

if TYPE_CHECKING:
    from torch import nn

    from ..families.base import FusionSpec
    from ..families.transforms import KeyTransform
    from ..model.sources import ModelSource
    from ..model.tree import ModuleTree


@dataclass(frozen=True)
class CheckpointTransform:
    """One key transform on the checkpoint's own key names."""

    transform: KeyTransform
    source_keys: tuple[str, ...]  # original layout, as named in (or for) the checkpoint
    target_keys: tuple[str, ...]  # fused layout
    source_shapes: tuple[tuple[int, ...], ...]
    target_shapes: tuple[tuple[int, ...], ...]
    dtype: str  # safetensors code ("F32") or torch name when no checkpoint
    present: str  # "original" | "fused" | "missing": which side the checkpoint holds
    note: str = ""  # why a transform is refused ("missing") although keys were found
    #: missing because transformers computes the source keys with a conversion at load (a
    #: legacy fused checkpoint: GTE, NomicBERT... store fused projections it splits)
    computed: bool = False

    @property
    def family(self) -> str:
        return self.transform.family

    def rows(self, direction: str = "load") -> list[dict[str, Any]]:
        """Preview rows: one per source key (load: original -> fused; save: reverse)."""
        t = self.transform
        if direction == "load":
            src, src_shapes, dst, dst_shapes, op = (
                self.source_keys,
                self.source_shapes,
                self.target_keys,
                self.target_shapes,
                t.op,
            )
        else:
            src, src_shapes, dst, dst_shapes, op = (
                self.target_keys,
                self.target_shapes,
                self.source_keys,
                self.source_shapes,
                t.inverse_op,
            )
        out = []
        # one row per key of the larger side: a concat shows each source going into the
        # one target, a split (its reverse) the one source coming out as each target
        for i in range(max(len(src), len(dst))):
            a, b = min(i, len(src) - 1), min(i, len(dst) - 1)
            out.append(
                {
                    "family": t.family,
                    "source_key": src[a],
                    "source_shape": list(src_shapes[a]),
                    "dtype": self.dtype,
                    "target_key": dst[b],
                    "target_shape": list(dst_shapes[b]),
                    "op": op,
                }
            )
        return out


@dataclass
class FamilyPlan:
    """One enabled family of a plan: its options (as given) and its discovery on the model.

    ``spec`` is the family configured with the options: loading fuses modules with it and
    checks make sample inputs with it, so the fused classes and the family's options are
    the ones the plan shows.
    """

    name: str
    options: dict[str, Any]
    discovery: Discovery
    spec: FusionSpec = field(repr=False, compare=False)

    @property
    def effective_options(self) -> dict[str, Any]:
        """Every option of the family with the value it runs with (defaults filled in)."""
        return dict(self.discovery.options)


@dataclass
class FusionPlan:
    """Everything a fused load or export will do, computed without tensor data."""

    model: str
    model_class: str
    fusion_config: dict[str, Any]
    families: list[FamilyPlan]
    transforms: list[KeyTransform]
    checkpoint_transforms: list[CheckpointTransform]
    has_checkpoint: bool
    layout: str  # "original" | "fused" | "mixed" | "none" (no checkpoint or nothing to fuse)
    #: the opened model this plan was built on (meta model, tree, source): load, check and
    #: export run on it, so what the user previewed is what runs
    inspection: Inspection = field(repr=False, compare=False)
    seconds: float = 0.0
    messages: list[str] = field(default_factory=list)
    #: the strictest checkpoint validation passed so far ("" none, "mixed", "strict"):
    #: see :func:`fusion_core.plan.layout.require_checkpoint`
    checkpoint_validated: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.inspection, Inspection):
            raise TypeError(f"a FusionPlan needs the Inspection it was built on, got {type(self.inspection).__name__}")

    @property
    def source(self) -> ModelSource:
        """The model source the plan was built for."""
        return self.inspection.source

    def spec(self, family: str) -> FusionSpec:
        """The family ``family`` as this plan configured it (its options).

        Raises:
            KeyError: ``family`` is not in the plan.
        """
        for fam in self.families:
            if fam.name == family:
                return fam.spec
        raise KeyError(family)

    @property
    def patch_mapping(self) -> dict[type, type]:
        mapping: dict[type, type] = {}
        for fam in self.families:
            mapping.update(fam.discovery.patch_mapping)
        return mapping

    @property
    def matched_paths(self) -> dict[str, str]:
        """module path -> family name."""
        return {m.path: fam.name for fam in self.families for m in fam.discovery.matches}

    @property
    def is_empty(self) -> bool:
        return not self.transforms and not self.patch_mapping

    @property
    def legacy_fused(self) -> bool:
        """The checkpoint stores projections transformers converts at load (none in either layout).

        Such a model loads through transformers' own conversion, then is fused in place.
        """
        cts = self.checkpoint_transforms
        return bool(cts) and all(c.present == "original" or c.computed for c in cts) and any(c.computed for c in cts)

    def rows(self, direction: str = "load") -> list[dict[str, Any]]:
        """Preview rows for every transformed checkpoint key (see :meth:`CheckpointTransform.rows`).

        Args:
            direction: ``"load"`` (original -> fused) or ``"save"`` (fused -> original).
        """
        return [row for ct in self.checkpoint_transforms for row in ct.rows(direction)]


def _plan_as_data(plan: FusionPlan) -> dict[str, Any]:
    from .plan_data import plan_data

    return to_plain(plan_data(plan))


# a plan holds classes, the specs and the meta model: its plain form is its PlanData's
converter.register_unstructure_hook(FusionPlan, _plan_as_data)


class Inspection:
    """An opened model: source, meta model, module tree and per-family discovery."""

    def __init__(self, source: ModelSource, model: nn.Module, tree: ModuleTree, seconds: float) -> None:
        self.source = source
        self.model = model
        self.tree = tree
        self.seconds = seconds
        self._discoveries: dict[tuple[str, tuple[tuple[str, Any], ...]], Discovery] = {}
        self._matcher: KeyMatcher | None = None
        self._tensors: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.source.name

    def discovery(self, family: str, options: Mapping[str, Any] | None = None) -> Discovery:
        """What ``family`` (with ``options``) would replace in this model (computed once, cached).

        Raises:
            UnknownFamilyError: ``family`` is not registered.
            InvalidFusionConfigError: a bad option.
        """
        spec = configured_family(family, options)
        key = (family, tuple(sorted(spec.options.items())))
        found = self._discoveries.get(key)
        if found is None:
            found = discover(
                self.model,
                spec,
                config=self.source.config,
                fingerprint=self.source.fingerprint,
                model_name=self.source.model_class.__name__,
            )
            self._discoveries[key] = found
        return found

    def key_matcher(self) -> KeyMatcher:
        """The checkpoint's keys matched to the model's, transformers' renamings followed (cached).

        Raises:
            ModelSourceError: the source has no checkpoint.
        """
        if self._matcher is None:
            ckpt = self.source.checkpoint
            if ckpt is None:
                raise ModelSourceError(f"{self.source.name}: no checkpoint to match keys against")
            self._matcher = KeyMatcher(ckpt.tensors, self.model)
        return self._matcher

    def model_tensors(self) -> dict[str, Any]:
        """The meta model's parameters and buffers by state-dict name (cached: a plan of a model
        without checkpoint reads its shapes here; walking 2.7k modules cost 50 ms per plan)."""
        if self._tensors is None:
            tensors = dict(self.model.named_parameters())
            tensors.update(dict(self.model.named_buffers()))
            self._tensors = tensors
        return self._tensors

    def plan(self, fusion_config: FusionConfig | None) -> FusionPlan:
        """Build the plan for ``fusion_config`` (see :func:`validate_fusion_config`).

        Raises:
            UnknownFamilyError, InvalidFusionConfigError: bad ``fusion_config``.
            FamilyConflictError: two families transform the same key.
        """
        t0 = time.perf_counter()
        enabled = validate_fusion_config(fusion_config)
        fams = [
            FamilyPlan(name, opts, self.discovery(name, opts), configured_family(name, opts)) for name, opts in enabled
        ]
        transforms: list[KeyTransform] = []
        owner: dict[str, str] = {}
        claimed_modules: dict[str, str] = {}
        claimed_classes: dict[type, str] = {}
        for fam in fams:
            for m in fam.discovery.matches:
                other = claimed_modules.get(m.path) or claimed_classes.get(m.original_class)
                if other is not None and other != fam.name:
                    raise FamilyConflictError(
                        f"fusions {other!r} and {fam.name!r} both replace module {m.path} "
                        f"(class {m.original_class.__name__}); enable only one of them"
                    )
                claimed_modules[m.path] = fam.name
                claimed_classes[m.original_class] = fam.name
            for t in fam.discovery.transforms:
                for key in t.sources:
                    other = owner.get(key)
                    if other is not None and other != fam.name:
                        raise FamilyConflictError(
                            f"fusions {other!r} and {fam.name!r} both transform checkpoint key {key}; "
                            "enable only one of them"
                        )
                    owner[key] = fam.name
                transforms.append(t)
        cts, layout = _checkpoint_transforms(self, transforms)
        messages = [f.discovery.empty_message for f in fams if f.discovery.empty_message]
        messages += _notes(cts)
        if cts and self._matcher is not None and self._matcher.note:
            messages.append(self._matcher.note)
        return FusionPlan(
            model=self.source.name,
            model_class=self.source.model_class.__name__,
            fusion_config={name: (opts or True) for name, opts in enabled},
            families=fams,
            transforms=transforms,
            checkpoint_transforms=cts,
            has_checkpoint=self.source.checkpoint is not None,
            layout=layout,
            seconds=time.perf_counter() - t0,
            messages=messages,
            inspection=self,
        )


def inspect_model(source: ModelSource | str | os.PathLike[str], *, trust_remote_code: bool = False) -> Inspection:
    """Open ``source`` (a spec or a resolved source): meta model and module tree.

    Raises:
        ModelSourceError: the source cannot be resolved or its model cannot be built.
    """
    from ..model.sources import resolve
    from ..model.tree import build_meta_model, module_tree

    t0 = time.perf_counter()
    if isinstance(source, (str, os.PathLike)):
        source = resolve(os.fspath(source), trust_remote_code=trust_remote_code)
    model = build_meta_model(source)
    tree = module_tree(model)
    return Inspection(source, model, tree, time.perf_counter() - t0)


def _checkpoint_transforms(insp: Inspection, transforms: list[KeyTransform]) -> tuple[list[CheckpointTransform], str]:
    """Each transform on the checkpoint's own key names, with shapes from its headers.

    The side the checkpoint holds is found with :class:`KeyMatcher` (transformers' own
    renamings, then a suffix match); the other side is named by the rule in
    :mod:`fusion_core.plan.key_names`. A transform whose source keys transformers computes with
    a conversion, or whose names would not load back, is "missing" with a note.
    """
    ckpt = insp.source.checkpoint
    if ckpt is None:
        params = insp.model_tensors()
        out = []
        for t in transforms:
            src_shapes = tuple(tuple(params[k].shape) if k in params else () for k in t.sources)
            dtype = str(params[t.sources[0]].dtype).removeprefix("torch.") if t.sources[0] in params else "?"
            out.append(
                CheckpointTransform(
                    t,
                    t.sources,
                    t.targets,
                    src_shapes,
                    tuple(tuple(s) for s in t.forward_shapes(src_shapes)),
                    dtype,
                    "missing",
                )
            )
        return out, "none"
    matcher = insp.key_matcher()
    out = []
    sides = set()
    for t in transforms:
        src = [matcher.lookup(k) for k in t.sources]
        dst = [matcher.lookup(k) for k in t.targets]
        note = ""
        computed = False
        src_keys, dst_keys = t.sources, t.targets
        if all(isinstance(f, Found) for f in src):
            present = "original"
            src_keys = tuple(f.key for f in src)  # type: ignore[union-attr]
            dst_keys, note = matcher.fused_names(t.targets, t.sources[0], src[0])  # type: ignore[arg-type]
        elif all(isinstance(f, Found) for f in dst):
            present = "fused"
            dst_keys = tuple(f.key for f in dst)  # type: ignore[union-attr]
            src_keys, note = matcher.original_names(t.sources, t.targets[0], dst[0])  # type: ignore[arg-type]
        else:
            present = "missing"
            converted = next((f for f in src + dst if isinstance(f, Converted)), None)
            note = converted.reason() if converted is not None else ""
            computed = converted is not None
        if note:
            present = "missing"  # refused: a fused key that does not load back, or computed keys
        if present == "original":
            infos = [ckpt.tensors[k] for k in src_keys]
            src_shapes = tuple(i.shape for i in infos)
            dst_shapes = tuple(tuple(s) for s in _safe_shapes(t.forward_shapes, src_shapes))
            dtype = infos[0].dtype
        elif present == "fused":
            infos = [ckpt.tensors[k] for k in dst_keys]
            dst_shapes = tuple(i.shape for i in infos)
            src_shapes = tuple(tuple(s) for s in _safe_shapes(t.inverse_shapes, dst_shapes))
            dtype = infos[0].dtype
        else:
            src_shapes = tuple(() for _ in t.sources)
            dst_shapes = tuple(() for _ in t.targets)
            dtype = "?"
        sides.add(present)
        out.append(CheckpointTransform(t, src_keys, dst_keys, src_shapes, dst_shapes, dtype, present, note, computed))
    if not out:
        layout = "none"
    elif len(sides) == 1:
        layout = sides.pop()
    else:
        layout = "mixed"
    return out, layout


def _notes(cts: list[CheckpointTransform]) -> list[str]:
    """One message per family with refused transforms: the first reason and how many."""
    by_family: dict[str, list[str]] = {}
    legacy = bool(cts) and all(c.present == "original" or c.computed for c in cts)
    if legacy and any(c.computed for c in cts):
        first = next(c for c in cts if c.computed)
        how = first.note.split(";")[0]
        return [
            f"{first.family!r}: legacy fused checkpoint ({how}): loaded through transformers' own conversion, "
            "then fused in place"
        ]
    for ct in cts:
        if ct.note:
            by_family.setdefault(ct.family, []).append(ct.note)
    out = []
    for family, notes in by_family.items():
        more = f" ({len(notes)} key groups like this one)" if len(notes) > 1 else ""
        out.append(f"{family!r} refused: {notes[0]}{more}")
    return out


def _safe_shapes(fn, shapes):
    try:
        return fn(shapes)
    except ValueError:
        # shapes that do not match the model: shown as unknown; loading reports the error
        return [() for _ in shapes]


def as_plan(
    target: FusionPlan | Inspection | ModelSource | str | os.PathLike[str],
    fusion_config: FusionConfig | None = None,
    *,
    trust_remote_code: bool = False,
    own_fusion_config: bool = True,
) -> FusionPlan:
    """The plan to run: ``target`` itself when it is a plan, else one built on it (once).

    Inside the engine, load, check and export take a :class:`FusionPlan` (what the user
    previewed); the convenient forms (:func:`fusion_core.load`, :func:`fusion_core.check`,
    :func:`fusion_core.export`, :func:`fusion_core.load_plain`) and the CLI take a source
    plus ``fusion_config`` and build the plan here.

    Args:
        target: a plan, an opened model, a resolved source or a model spec.
        fusion_config: the families; with a plan, must be omitted or equal to the plan's.
        trust_remote_code: see :func:`fusion_core.model.sources.resolve` (specs only).
        own_fusion_config: when ``fusion_config`` is None, use the config's own
            ``fusion_config`` (a fused-layout export records one).

    Raises:
        UsageError: a plan and a different ``fusion_config``.
        UnknownFamilyError, InvalidFusionConfigError, FamilyConflictError: a bad ``fusion_config``.
        ModelSourceError: the source cannot be opened.
    """
    if isinstance(target, FusionPlan):
        if fusion_config is not None:
            wanted = {name: (opts or True) for name, opts in validate_fusion_config(fusion_config)}
            if wanted != target.fusion_config:
                raise UsageError(
                    f"both a plan ({target.fusion_config}) and a different fusion_config ({wanted}) were given"
                )
        return target
    if isinstance(target, Inspection):
        insp = target
    else:
        from ..model.sources import ModelSource

        if not isinstance(target, ModelSource):
            target = os.fspath(target)
        insp = inspect_model(target, trust_remote_code=trust_remote_code)
    if fusion_config is None and own_fusion_config:
        fusion_config = getattr(insp.source.config, "fusion_config", None)
    return insp.plan(fusion_config)


REBUILT = (
    "the plan was rebuilt on the original classes: it was made while transformers' own fusion had "
    "patched them in this process"
)


def unpolluted(plan: FusionPlan) -> tuple[FusionPlan, str]:
    """The plan to run when transformers' own fusion has patched classes, and what was done.

    A plan made while those patches were active was discovered on the patched
    (upstream-fused) classes and would find nothing to fuse: this step builds a new plan
    with the same ``fusion_config`` on a fresh opening of the same source (cached
    discoveries dropped, the patches suspended) and returns it with :data:`REBUILT`, which
    the caller shows in its result. Without patches: ``(plan, "")``, the plan itself.
    """
    from ..model.upstream_state import upstream_fusion_suspended, upstream_patches
    from .discovery import clear_cache

    if not upstream_patches():
        return plan, ""
    clear_cache()
    with upstream_fusion_suspended():
        rebuilt = inspect_model(plan.source).plan(plan.fusion_config)
    return rebuilt, REBUILT
