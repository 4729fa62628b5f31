"""What the window shows of an opened model (:class:`InspectionView`; a plan it shows as
:class:`~fusion_core.plan.plan_data.PlanData`).

The engine runs in its own process (:mod:`fusion_core.host`); the window receives this
view of what it opened, never the live objects (which hold classes, functions
and the meta model). They hold the engine's own plain types (:class:`~.discovery.Discovery`,
:class:`~fusion_core.model.tree.ModuleTree`) and cross as their plain form
(:mod:`fusion_core.boundary.convert`), which is also what the model cache keeps
(:mod:`fusion_core.model.cache`). Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..boundary.convert import PlainDataError, from_plain, to_plain
from ..model import cache
from ..model.tree import ModuleTree
from .discovery import Discovery

__all__ = [
    "FamilyInfo",
    "InspectionView",
    "cached_view",
    "inspection_data",
    "inspection_view",
    "view_from_data",
]


@dataclass(frozen=True)
class FamilyInfo:
    """A registered family as the window describes it (its spec is not imported)."""

    name: str
    description: str = ""
    options: dict[str, str] = field(default_factory=dict)  # option -> what it accepts


@dataclass
class InspectionView:
    """An opened model as plain data: what the window shows, from the cache or from the engine.

    The window never holds the live :class:`fusion_core.Inspection` (the meta model lives in
    the engine process, :mod:`fusion_core.host`); it holds this.
    """

    spec: str
    name: str
    model_class: str
    tree: ModuleTree
    families: list[str]  # the registered families, in registry order
    discoveries: dict[str, Discovery]
    describe: str = ""  # the source, one line (ModelSource.describe)
    checkpoint_files: int = -1  # weight files; -1: no checkpoint (config only)
    checkpoint_tensors: int = 0
    folder: str = ""  # the model's folder (a local or cached source), else ""
    notes: list[str] = field(default_factory=list)  # what resolving the source noted (ModelSource.notes)
    family_info: dict[str, FamilyInfo] = field(default_factory=dict)

    @property
    def has_checkpoint(self) -> bool:
        return self.checkpoint_files >= 0

    def discovery(self, family: str) -> Discovery:
        found = self.discoveries.get(family)  # an empty Discovery is falsy: not `or`
        return found if found is not None else Discovery(family)

    def info(self, family: str) -> FamilyInfo:
        return self.family_info.get(family) or FamilyInfo(family)


def inspection_view(spec: str, insp: Any) -> InspectionView:
    """The view of an opened model (``insp``: a :class:`fusion_core.Inspection`), with every
    registered family's discovery (built in the engine)."""
    from ..families import REGISTRY

    info = {
        name: FamilyInfo(name, spec_.description, {k: o.describe() for k, o in spec_.options_schema().items()})
        for name, spec_ in REGISTRY.items()
    }
    ckpt = insp.source.checkpoint
    return InspectionView(
        spec=spec,
        name=insp.name,
        model_class=insp.source.model_class.__name__,
        tree=insp.tree,
        families=list(info),
        discoveries={name: insp.discovery(name) for name in info},
        describe=insp.source.describe(),
        checkpoint_files=len(ckpt.files) if ckpt is not None else -1,
        checkpoint_tensors=len(ckpt.tensors) if ckpt is not None else 0,
        folder=str(insp.source.folder) if insp.source.folder is not None else "",
        notes=[str(n) for n in insp.source.notes],
        family_info=info,
    )


def inspection_data(spec: str, insp: Any) -> dict[str, Any]:
    """The plain form of :func:`inspection_view`: what the engine answers to "open" and what the
    model cache stores (:func:`view_from_data` reads it back)."""
    return to_plain(inspection_view(spec, insp))


def view_from_data(data: Any) -> InspectionView:
    """Validate and rebuild the plain data of :func:`inspection_data`.

    Raises:
        PlainDataError: anything that is not exactly that structure (a ValueError).
    """
    view = from_plain(InspectionView, data)
    if set(view.discoveries) != set(view.families) or any(n != d.family for n, d in view.discoveries.items()):
        raise PlainDataError("discovery does not match the families")
    if set(view.family_info) != set(view.families):
        raise PlainDataError("family info does not match the families")
    if view.checkpoint_files < -1 or view.checkpoint_tensors < 0:
        raise PlainDataError(f"bad checkpoint counts {view.checkpoint_files}, {view.checkpoint_tensors}")
    return view


def cached_view(spec: str) -> InspectionView | None:
    """The model cache's entry of ``spec``, when there is a valid one for its current key
    (an old or malformed entry is removed and ignored; torch is not imported)."""
    return cache.load(spec, view_from_data)
