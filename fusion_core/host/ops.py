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
(:data:`CHILD_OPS`): a request is one line :meth:`Op.request_line` writes and
:meth:`Op.read_request` reads back as the params dataclass; an answer (or a child's
notification) is a marked line :meth:`Op.answer_line` writes, found among whatever else the
child printed by :meth:`Op.find_answer`.

Importing this module imports neither torch nor transformers (the window imports it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..adapter.result import AdapterPlan, AdapterResult, ProbeAnswer
from ..boundary.options import AdapterOptions, CheckOptions, ExportOptions, Workload
from ..compare.result import Comparison
from ..export.result import Consumer, ConsumersAnswer, ExportResult
from ..plan.diff import PlanDiff
from ..plan.plan_data import PlanData
from ..plan.view import InspectionView, view_from_data
from ..run.results import CheckResult, UpstreamReport
from . import protocol, wire

P = TypeVar("P")
R = TypeVar("R")
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
    cache: bool = True  # save the answer in the model cache (the next start paints it at once)
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
@dataclass(frozen=True, eq=False)
class Op(Generic[P, R]):
    """One operation of the engine process."""

    name: str
    params: type[P]
    result: Any  # the result's type (a dataclass, a typing form of them, or None)
    long: bool = False  # on its own thread, with progress and cancel

    def decode(self, data: Any) -> R:
        """The typed result from its plain data (in the window).

        Raises:
            TypeError, ValueError, KeyError: ``data`` does not have the result's shape.
        """
        special = _FROM_PLAIN.get(self.result)
        return special(data) if special is not None else wire.from_plain(self.result, data)

    # a child's side of the operation (see the module docstring) --------------------------
    def request_line(self, params: P) -> str:
        """``params`` as the one request line a child reads (no newline)."""
        return json.dumps(protocol.request(self.name, wire.to_plain(params)))

    def read_request(self, line: str) -> P:
        """The params of a request line of this operation (in the child).

        Raises:
            ValueError: not a request of this operation, or params of another shape.
        """
        data = wire.decode(line)
        if data.get("method") != self.name:
            raise ValueError(f"expected a {self.name!r} request, got {str(data.get('method'))!r:.80}")
        return wire.from_plain(self.params, data.get("params"))

    def answer_line(self, value: R) -> str:
        """``value`` as the marked line a child prints (its answer, or a notification's params)."""
        return CHILD_MARK + json.dumps({"method": self.name, "result": wire.to_plain(value)})

    def find_answer(self, output: str) -> R | None:
        """The last answer of this operation among a child's printed lines (None: there is none).

        Raises:
            ValueError: the answer does not have the result's shape.
        """
        for line in reversed(output.splitlines()):
            found = read_child_line(line, {self.name: self})
            if found is not None:
                return found[1]  # type: ignore[no-any-return]
        return None

    def __repr__(self) -> str:
        return f"Op({self.name!r})"


# results whose plain form is checked beyond its shape when read (the "open" answer is also
# what the model cache stores: its discoveries must match its families)
_FROM_PLAIN: dict[Any, Callable[[Any], Any]] = {InspectionView: view_from_data}

OPEN: Op[OpenParams, InspectionView] = Op("open", OpenParams, InspectionView, long=True)
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


# our isolated children's operations (fusion_core.run.child) ------------------------------
#: what starts a child's answer line (a child's other output, model code printing, is not one)
CHILD_MARK = "FUSION_CHILD "


@dataclass(frozen=True)
class ServeParams:
    """A child's first line: the module it serves (one of ``fusion_core.run.child.SERVES``)."""

    module: str


@dataclass(frozen=True)
class UpstreamParams:
    """Upstream parity (:mod:`fusion_core.run.upstream`): load ``folder`` through transformers'
    own ``fusion_config`` and compare with a plain load on the check's inputs."""

    folder: str
    model_class: str
    fusion_config: FusionConfigData
    dtype: str
    seed: int
    paths: list[str]
    trust_remote_code: bool = False
    workload: Workload | None = None


@dataclass(frozen=True)
class ConsumersSourceParams:
    """The export's consumers (:mod:`fusion_core.export.consumers`), first line: the source to
    load and run while the export is written."""

    source: str
    paths: list[str]
    trust_remote_code: bool = False
    dtype: str = "auto"
    dtype_why: str = ""
    max_memory: int | None = None


@dataclass(frozen=True)
class ConsumersTryParams:
    """The export's consumers, second line: the written folder to load with each consumer."""

    written: str
    shown_as: str
    exact: bool = False
    max_memory: int | None = None


@dataclass(frozen=True)
class LoadingParams:
    """A child says what it loads next (named if a signal ends it: out of memory)."""

    what: str


@dataclass(frozen=True)
class AdapterBaseParams:
    """The adapter's consumers (:mod:`fusion_core.adapter.consumers`), first line: the base model."""

    base: str
    fusion_config: FusionConfigData
    paths: list[str]
    trust_remote_code: bool = False


@dataclass(frozen=True)
class AdapterTryParams:
    """The adapter's consumers, second line: the source adapter and the written one."""

    source: str
    source_layout: str
    written: str
    shown_as: str


@dataclass(frozen=True)
class CoverageStartParams:
    """A coverage worker (:mod:`fusion_core.coverage.worker`), first line: how to prepare it."""

    family_files: list[str] = field(default_factory=list)
    build: bool = False  # it builds real models (coverage's check), else meta models
    #: "module:function" run with each type first, and the file of its module (the scan's
    #: tests inject faults with it; never set otherwise)
    hook: str | None = None
    hook_file: str | None = None


@dataclass(frozen=True)
class CoverageChunkParams:
    """A coverage worker, each later line: scan (or check) these types one after the other."""

    model_types: list[str]
    family_names: list[str]
    timeout: float
    task: str = "scan"  # "scan" (the meta scan) or "check" (a tiny model each, coverage's check)


@dataclass(frozen=True)
class CoverageStarted:
    """A coverage worker starts ``model_type`` (so a crash or a hang is that type's)."""

    model_type: str
    time: float


CoverageRows = list[dict[str, Any]]  # one plain result per type (TypeResult's, or the check's)

SERVE: Op[ServeParams, None] = Op("child/serve", ServeParams, type(None))
UPSTREAM: Op[UpstreamParams, UpstreamReport] = Op("child/upstream", UpstreamParams, UpstreamReport)
CONSUMERS_SOURCE: Op[ConsumersSourceParams, None] = Op("child/consumers_source", ConsumersSourceParams, type(None))
CONSUMERS_TRY: Op[ConsumersTryParams, ConsumersAnswer] = Op("child/consumers_try", ConsumersTryParams, ConsumersAnswer)
LOADING: Op[LoadingParams, LoadingParams] = Op("child/loading", LoadingParams, LoadingParams)
ADAPTER_BASE: Op[AdapterBaseParams, None] = Op("child/adapter_base", AdapterBaseParams, type(None))
ADAPTER_TRY: Op[AdapterTryParams, ProbeAnswer] = Op("child/adapter_try", AdapterTryParams, ProbeAnswer)
COVERAGE_START: Op[CoverageStartParams, int] = Op("child/coverage_start", CoverageStartParams, int)  # its pid
COVERAGE_STARTED: Op[CoverageStarted, CoverageStarted] = Op("child/coverage_started", CoverageStarted, CoverageStarted)
COVERAGE_CHUNK: Op[CoverageChunkParams, CoverageRows] = Op("child/coverage_chunk", CoverageChunkParams, CoverageRows)

#: every child operation, by name (a child's requests and answers; notifications answer their params)
CHILD_OPS: dict[str, Op[Any, Any]] = {
    op.name: op
    for op in (
        SERVE,
        UPSTREAM,
        CONSUMERS_SOURCE,
        CONSUMERS_TRY,
        LOADING,
        ADAPTER_BASE,
        ADAPTER_TRY,
        COVERAGE_START,
        COVERAGE_STARTED,
        COVERAGE_CHUNK,
    )
}


def read_child_line(line: str, table: dict[str, Op[Any, Any]] | None = None) -> tuple[Op[Any, Any], Any] | None:
    """The operation of ``table`` (default: :data:`CHILD_OPS`) and its result that one line a
    child printed carries; None for any other line (model code printing, another operation).

    Raises:
        ValueError: a marked line that is not JSON, or a result without its declared shape.
    """
    if not line.startswith(CHILD_MARK):
        return None
    data = wire.decode(line[len(CHILD_MARK) :])
    op = (CHILD_OPS if table is None else table).get(str(data.get("method")))
    if op is None:
        return None
    return op, op.decode(data.get("result"))
