"""The engine's operations, declared once: name, params dataclass, result type, long or quick.

The engine process (:mod:`.worker`) serves exactly these and the window
(``fusion_gui.engine.Engine.call``) calls them by these entries, so a renamed field is a
type error on both sides at once, not a keyword error in the other process::

    job = engine.call(OPEN, OpenParams(session, "demo:qwen2-vl"))  # Job[InspectionView]

Params cross as :func:`.wire.to_plain` data and are rebuilt with :func:`.wire.from_plain`
(their option objects validate themselves when rebuilt); results the same way
(:meth:`Op.decode`). *Long* operations run on a thread each, report progress and can be
cancelled; *quick* ones run in order on one thread.

Adding an operation: its params dataclass and an :class:`Op` here (in :data:`OPS`), its
handler in :class:`.worker.Host`; the window calls it by the entry.

Our isolated children (:mod:`fusion_core.run.child`: upstream parity, the export's and the
adapter's consumers, the coverage workers) are asked and answer by the same kind of entry
(:class:`~fusion_core.boundary.ops.Op`, lines on their standard streams), and so is the
zygote that forks them (:mod:`fusion_core.run.zygote`: its fork requests and what it says
back, datagrams on a socket); each is declared next to the code that serves it (a layer
imports only those below it, and this one is the top) and gathered here in :data:`CHILD_OPS`.

Importing this module imports neither torch nor transformers (the window imports it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..adapter import consumers as adapter_consumers
from ..adapter.result import AdapterPlan, AdapterResult
from ..boundary.ops import CHILD_MARK, Op, read_child_line
from ..boundary.options import AdapterOptions, CheckOptions, ExportOptions
from ..compare.result import Comparison
from ..coverage import worker as coverage_worker
from ..export import consumers as export_consumers
from ..export.result import Consumer, ExportResult
from ..plan.diff import PlanDiff
from ..plan.plan_data import PlanData
from ..plan.view import InspectionView, view_from_data
from ..run import child, upstream, zygote
from ..run.results import CheckResult

__all__ = ["CHILD_MARK", "CHILD_OPS", "OPS", "Op", "read_child_line"]
FusionConfigData = dict[str, Any]  # family -> True or its options (validated by the engine's plan)


# params ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class NoParams:
    """An operation without parameters."""


@dataclass(frozen=True)
class SessionParams:
    """The window's session (its opened model in the engine)."""

    session: str


@dataclass(frozen=True)
class OpenParams:
    session: str
    spec: str
    trust_remote_code: bool = False
    restore: bool = False  # the engine restarted: open the session's model again, quietly


@dataclass(frozen=True)
class PlanParams:
    """The plan of the session's model with ``fusion_config``: the one operation that makes a
    plan; every other takes the :class:`PlanData` it answered (the plan the window shows)."""

    session: str
    fusion_config: FusionConfigData


@dataclass(frozen=True)
class DiffParams:
    """The session's model against itself fused as ``plan`` says (checked against the model first)."""

    session: str
    plan: PlanData


@dataclass(frozen=True)
class CheckParams:
    session: str
    plan: PlanData
    options: CheckOptions = field(default_factory=CheckOptions)


@dataclass(frozen=True)
class ExportParams:
    session: str
    plan: PlanData
    out_dir: str
    options: ExportOptions = field(default_factory=ExportOptions)


@dataclass(frozen=True)
class ConsumersParams:
    session: str
    plan: PlanData
    layout: str


@dataclass(frozen=True)
class AdapterPlanParams:
    """A LoRA adapter folder, planned against the session's model fused as ``plan`` says."""

    session: str
    plan: PlanData
    adapter: str
    layout: str | None = None  # the layout to write; None: the other one than the adapter's


@dataclass(frozen=True)
class AdapterParams:
    """Convert a LoRA adapter folder into ``out_dir`` (see ``fusion_core.adapter``)."""

    session: str
    plan: PlanData
    adapter: str
    out_dir: str
    options: AdapterOptions = field(default_factory=AdapterOptions)


@dataclass(frozen=True)
class CompareParams:
    """The session's model (A) against ``other`` (B), any name ``open`` takes; values when asked."""

    session: str
    other: str
    values: bool = False
    atol: float | None = None
    rtol: float | None = None
    trust_remote_code: bool = False


@dataclass(frozen=True)
class FamilyFileParams:
    path: str  # a Python file of families (code: the user chose to trust it)


@dataclass(frozen=True)
class SavePlanParams:
    """Write ``plan`` of the session's model to ``path`` (``plan --json``'s file, its weights hashed)."""

    session: str
    plan: PlanData
    path: str


@dataclass(frozen=True)
class ReadPlanParams:
    """Read a plan file and check its model is the one it was made from (``check --plan``'s checks)."""

    path: str
    trust_remote_code: bool = False


@dataclass(frozen=True)
class UnregisterParams:
    name: str  # a family


# results that are not engine types ---------------------------------------------------------
@dataclass(frozen=True)
class ModelLists:
    """What the Open dialog offers: demos (name, description), architectures, cached hub ids."""

    demos: list[tuple[str, str]] = field(default_factory=list)
    arch: list[str] = field(default_factory=list)
    hub: list[str] = field(default_factory=list)


# the table -------------------------------------------------------------------------------
# (the "open" answer is also what the model cache stores: its discoveries must match its families)
OPEN: Op[OpenParams, InspectionView] = Op("open", OpenParams, InspectionView, long=True, reader=view_from_data)
CHECK: Op[CheckParams, CheckResult] = Op("check", CheckParams, CheckResult, long=True)
EXPORT: Op[ExportParams, ExportResult] = Op("export", ExportParams, ExportResult, long=True)
PLAN: Op[PlanParams, PlanData] = Op("plan", PlanParams, PlanData)
DIFF: Op[DiffParams, PlanDiff] = Op("diff", DiffParams, PlanDiff)
CONSUMERS: Op[ConsumersParams, list[Consumer]] = Op("consumers", ConsumersParams, list[Consumer])
ADAPTER_PLAN: Op[AdapterPlanParams, AdapterPlan] = Op("adapter_plan", AdapterPlanParams, AdapterPlan)
ADAPTER: Op[AdapterParams, AdapterResult] = Op("adapter", AdapterParams, AdapterResult, long=True)
LISTS: Op[NoParams, ModelLists] = Op("lists", NoParams, ModelLists)
DEVICES: Op[NoParams, list[str]] = Op("devices", NoParams, list[str])
FAMILY_FILE: Op[FamilyFileParams, list[str]] = Op("family_file", FamilyFileParams, list[str])
UNREGISTER: Op[UnregisterParams, None] = Op("unregister", UnregisterParams, type(None))
CLOSE: Op[SessionParams, None] = Op("close", SessionParams, type(None))
COMPARE: Op[CompareParams, Comparison] = Op("compare", CompareParams, Comparison, long=True)
SAVE_PLAN: Op[SavePlanParams, str] = Op("save_plan", SavePlanParams, str, long=True)
READ_PLAN: Op[ReadPlanParams, PlanData] = Op("read_plan", ReadPlanParams, PlanData, long=True)

#: every operation, by name
OPS: dict[str, Op[Any, Any]] = {
    op.name: op
    for op in (OPEN, CHECK, EXPORT, PLAN, DIFF, CONSUMERS, LISTS, DEVICES, FAMILY_FILE, UNREGISTER, CLOSE, COMPARE)
}
OPS.update({op.name: op for op in (ADAPTER_PLAN, ADAPTER)})  # LoRA adapters (fusion_core.adapter)
OPS.update({op.name: op for op in (SAVE_PLAN, READ_PLAN)})  # plan files (fusion_core.plan.plan_file)


# our isolated children's operations, each declared where it is served ---------------------
#: every child operation, by name: requests, answers, and what children (and the zygote) say on the way
CHILD_OPS: dict[str, Op[Any, Any]] = {
    op.name: op
    for op in (
        child.SERVE,
        upstream.UPSTREAM,
        export_consumers.CONSUMERS_SOURCE,
        export_consumers.CONSUMERS_TRY,
        export_consumers.LOADING,
        adapter_consumers.ADAPTER_BASE,
        adapter_consumers.ADAPTER_TRY,
        coverage_worker.COVERAGE_START,
        coverage_worker.COVERAGE_STARTED,
        coverage_worker.COVERAGE_CHUNK,
        zygote.ZYGOTE_FORK,
        zygote.ZYGOTE_REFUSED,
        zygote.ZYGOTE_EXITED,
    )
}
