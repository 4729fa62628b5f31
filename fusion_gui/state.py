"""AppState: the one object the panels share (the open model, chosen fusions, plan, results).

Panels never import each other: they read this state and react to its signals; user
actions call its methods. Everything the engine computes (opening, plans, the diff,
checks, export) is a job of the engine process (:class:`JobManager`); the state holds
only its plain-data answers: an :class:`~fusion_core.plan.view.InspectionView`, the plan on
show as :class:`~fusion_core.plan.plan_data.PlanData` (what ``plan --json`` writes; the checks,
the export, the diff and the adapter run exactly it), a ``CheckResult``, an ``ExportResult``.
"""

from __future__ import annotations

import logging
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from fusion_core.boundary.options import AdapterOptions, CheckOptions, ExportOptions
from fusion_core.host.ops import (
    ADAPTER,
    ADAPTER_PLAN,
    CHECK,
    COMPARE,
    CONSUMERS,
    DEVICES,
    DIFF,
    EXPORT,
    FAMILY_FILE,
    LISTS,
    OPEN,
    PLAN,
    READ_PLAN,
    SAVE_PLAN,
    UNREGISTER,
    AdapterParams,
    AdapterPlanParams,
    CheckParams,
    CompareParams,
    ConsumersParams,
    DiffParams,
    ExportParams,
    FamilyFileParams,
    ModelLists,
    NoParams,
    Op,
    OpenParams,
    PlanParams,
    ReadPlanParams,
    SavePlanParams,
    UnregisterParams,
)

from .jobs import Job, JobManager
from .settings import Settings

if TYPE_CHECKING:
    from fusion_core.adapter.result import AdapterPlan, AdapterResult
    from fusion_core.export.result import Consumer, ExportResult
    from fusion_core.plan.diff import PlanDiff
    from fusion_core.plan.discovery import Discovery
    from fusion_core.plan.plan_data import PlanData
    from fusion_core.plan.view import InspectionView
    from fusion_core.run.results import CheckResult

    from .engine import Engine

R = TypeVar("R")

log = logging.getLogger("fusion_gui.state")


def error_text(error: BaseException) -> tuple[str, str]:
    """(message, details) for a dialog: the core's own message; a traceback only for bugs."""
    from fusion_core.errors import FusionError
    from fusion_core.host.wire import EngineFailure

    if isinstance(error, FusionError):
        return str(error).strip() or type(error).__name__, ""
    if isinstance(error, EngineFailure):  # a bug in the engine process: its own traceback
        return f"Unexpected error: {error.kind}: {error}", error.details
    details = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return f"Unexpected error: {type(error).__name__}: {error}", details


def _ancestors(path: str):
    while path:
        path = path.rsplit(".", 1)[0] if "." in path else ""
        yield path


@dataclass(frozen=True)
class Highlights:
    """What the enabled fusions mark in the model on show (:meth:`AppState.highlights`)."""

    matched: dict[str, str] = field(default_factory=dict)  # path -> the family that replaces it
    rejected: dict[str, tuple[str, str]] = field(default_factory=dict)  # path -> (family, reason), not fused
    fused_names: dict[str, str] = field(default_factory=dict)  # matched path -> its fused class's name
    near: dict[str, tuple[str, str]] = field(default_factory=dict)  # path -> (family, why not a candidate)


class AppState(QObject):
    """Shared application state with signals; lives on the GUI thread."""

    model_changed = Signal(object)  # InspectionView (the engine has the model open)
    preview_ready = Signal(object)  # InspectionView: a model seen before, from the cache, before the engine loads
    preview_cleared = Signal()  # the cached preview on show was withdrawn (its model failed to open)
    _preview_read = Signal(str, object)  # spec, InspectionView | None: read off the window's thread
    fusions_changed = Signal()  # order or enabled set changed (highlights follow)
    plan_changed = Signal(object)  # PlanData, or None with `plan_error` set
    module_selected = Signal(str)  # the tree's current module (path)
    reveal_requested = Signal(str)  # someone wants this module shown in the tree
    tab_requested = Signal(str)  # someone wants this tab shown (main_window.TAB_NAMES)
    check_requested = Signal(str)  # "check this module": show its results, or run the checks
    opening = Signal(str)  # spec being opened
    open_failed = Signal(str, str)  # spec, message
    trust_requested = Signal(str, list)  # spec, the custom code files its config names (never run)
    error_raised = Signal(str, str, str)  # title, message, details
    checks_finished = Signal(object)  # CheckResult
    checks_cleared = Signal()
    export_finished = Signal(object)  # ExportResult
    recent_changed = Signal(list)
    job_started = Signal(str)  # job name
    job_progressed = Signal(str, int, int, str)  # name, done, total, message
    job_ended = Signal(str, str, str)  # name, outcome ("ok" | "failed" | "cancelled"), message
    busy_changed = Signal(bool)  # a user job started (True) or finished (False)
    adapter_changed = Signal(object)  # AdapterPlan of the opened LoRA adapter, or None (`adapter_error`)
    adapter_finished = Signal(object)  # AdapterResult
    comparison_changed = Signal(object)  # Comparison of the open model (A) with another (B), or None

    def __init__(
        self, settings: Settings | None = None, parent: QObject | None = None, engine: Engine | None = None
    ) -> None:
        super().__init__(parent)
        self.settings = settings or Settings()
        if engine is None:
            from .engine import shared_engine

            engine = shared_engine()
        self.jobs = JobManager(engine, self)
        self.session = uuid.uuid4().hex[:12]  # this window's model in the engine process
        self.jobs.job_started.connect(lambda _job: self.busy_changed.emit(True))
        self.jobs.job_finished.connect(lambda _job: self.busy_changed.emit(False))
        self.inspection: InspectionView | None = None  # the model open in the engine
        self.preview: InspectionView | None = None  # from the cache, shown until the engine has it open
        self._preview_spec = ""  # the spec whose cache entry is being read (cleared by an open's end)
        self._preview_connected = False
        self.spec: str = ""
        self.family_order: list[str] = []
        self.enabled: set[str] = set()
        self.plan: PlanData | None = None
        self.plan_error: str = ""
        self.plan_pending = False  # a plan was asked of the engine and has not arrived
        self._plan_job: Job[PlanData] | None = None
        self.check_result: Any = None
        self.selected_path: str = ""
        self.comparison: Any = None  # the last Comparison of the open model with `compare_spec`
        self.compare_spec: str = ""
        saved = self.settings.fusions()
        self._saved_fusions = saved
        self.adapter_path: str = ""  # a PEFT LoRA adapter folder opened next to the model
        self.adapter_plan: AdapterPlan | None = None
        self.adapter_error: str = ""
        self._adapter_report = False  # the next adapter plan's failure is reported (the user opened it)

    # model -----------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self.jobs.busy

    def open_model(self, spec: str, *, trust_remote_code: bool = False) -> Job[InspectionView] | None:
        """Open ``spec`` in the background; the current model stays until it succeeds.

        A config with custom code (``auto_map``) emits ``trust_requested`` instead of an
        error; opening it again with ``trust_remote_code`` builds the class transformers
        ships for its model_type (the folder's code is still never run).
        """
        spec = spec.strip()
        if not spec:
            return None
        if self._refused_while_busy():
            return None
        job = self._start(
            "open",
            OPEN,
            OpenParams(self.session, spec, trust_remote_code=trust_remote_code),
            f"Opening {spec}",
            f"Opened {spec}",
        )
        job.succeeded.connect(lambda insp: self._on_opened(spec, insp))
        job.failed.connect(lambda e: self._on_open_error(spec, e))
        self.opening.emit(spec)
        return job

    def _refused_while_busy(self) -> bool:
        """True (and the user told to wait or cancel) when a job runs: one job at a time."""
        if self.jobs.busy:
            self.error_raised.emit("Busy", f"Wait for the {self.jobs.current.name} job to finish, or cancel it.", "")
        return self.jobs.busy

    def show_cached(self, spec: str) -> bool:
        """Show ``spec`` from the model cache (plain data; torch is not imported), if it has a valid entry.

        Only while no model is open (start-up): the live inspection, opened next with
        :meth:`open_model`, replaces it. The entry is read on a worker thread (a folder may
        plant a pipe or a huge file where it is expected: the window's thread never waits on
        it); ``preview_ready`` is emitted when it is valid and no model has opened or failed
        since. Returns whether ``spec`` can have an entry (the read was started).
        """
        import threading

        from fusion_core.model import cache

        spec = spec.strip()
        if self.inspection is not None or not cache.cacheable(spec):
            return False
        self._preview_spec = spec
        if not self._preview_connected:
            self._preview_read.connect(self._on_preview_read)
            self._preview_connected = True

        def read() -> None:
            from fusion_core.plan.view import cached_view

            try:
                cached = cached_view(spec)
            except Exception:  # the cache is an optimisation: never an error
                log.debug("cannot read the model cache for %s", spec, exc_info=True)
                cached = None
            try:
                self._preview_read.emit(spec, cached)  # queued to the window's thread
            except RuntimeError:  # the state was deleted meanwhile (its window closed)
                pass

        threading.Thread(target=read, name="model-cache", daemon=True).start()
        return True

    @Slot(str, object)
    def _on_preview_read(self, spec: str, cached: InspectionView | None) -> None:
        if cached is None or spec != self._preview_spec or self.inspection is not None:
            return  # a miss, or too late: nothing cached is shown
        self.preview = cached
        self._init_fusions(cached.families)
        self.preview_ready.emit(cached)

    def _init_fusions(self, known: list[str]) -> None:
        """The family order and enabled set for a model with the registered families ``known``."""
        if self._saved_fusions is None and not self.family_order:
            order, enabled = known, set(known)  # a first run shows every family's matches
        elif self._saved_fusions is not None and not self.family_order:
            order, enabled = self._saved_fusions
        else:
            order, enabled = self.family_order, self.enabled
        order = [n for n in order if n in known] + [n for n in known if n not in order]
        self.family_order, self.enabled = order, {n for n in enabled if n in known}

    def _on_opened(self, spec: str, insp: InspectionView) -> None:
        self.inspection = insp
        self.preview, self._preview_spec = None, ""
        self.spec = spec
        had_results, self.check_result = self.check_result is not None, None
        self.selected_path = ""
        self._init_fusions(list(insp.families))
        self.recent_changed.emit(self.settings.add_recent_model(spec))
        self.plan, self.plan_error, self.plan_pending = None, "", True  # asked for just below
        had_adapter = bool(self.adapter_path)
        self.adapter_path, self.adapter_plan, self.adapter_error = "", None, ""  # an adapter is of one base
        self.model_changed.emit(insp)
        if had_adapter:
            self.adapter_changed.emit(None)
        if had_results:
            self.checks_cleared.emit()
        if self.comparison is not None or self.compare_spec:  # it compared the model before this one
            self.clear_comparison()
        # highlights and the plan request in the next turn of the event loop: the new tree paints first
        QTimer.singleShot(1, self, lambda insp=insp: self._replan() if self.inspection is insp else None)

    def _on_open_error(self, spec: str, error: BaseException) -> None:
        from fusion_core.errors import RemoteCodeError

        message, details = error_text(error)
        self._preview_spec = ""  # an entry still being read is not shown
        if self.preview is not None and self.inspection is None:  # the cached picture is not this folder's
            self.preview = None
            self.preview_cleared.emit()
        if isinstance(error, RemoteCodeError):  # the window asks; opening never runs the code
            log.warning("%s asks for custom code: %s", spec, ", ".join(error.files))
            self.open_failed.emit(spec, message)
            self.trust_requested.emit(spec, list(error.files))
            return
        log.error("cannot open %s: %s", spec, message)
        self.open_failed.emit(spec, message)
        self.error_raised.emit(f"Cannot open {spec}", message, details)

    # fusions ---------------------------------------------------------------------------
    @property
    def fusion_config(self) -> dict[str, Any]:
        """The enabled families in the user's order (what the core applies)."""
        return {name: True for name in self.family_order if name in self.enabled}

    @property
    def shown(self) -> InspectionView | None:
        """The model on show: the open one, or the cached preview before it is open."""
        return self.inspection if self.inspection is not None else self.preview

    def discovery(self, family: str) -> Discovery | None:
        shown = self.shown
        return shown.discovery(family) if shown is not None else None

    def set_family_enabled(self, name: str, on: bool) -> None:
        if (name in self.enabled) == on:
            return
        if on:
            self.enabled.add(name)
        else:
            self.enabled.discard(name)
        self._fusions_edited()

    def set_family_order(self, order: list[str]) -> None:
        order = [n for n in order if n in self.family_order] + [n for n in self.family_order if n not in order]
        if order == self.family_order:
            return
        self.family_order = order
        self._fusions_edited()

    def _fusions_edited(self) -> None:
        self.settings.set_fusions(self.family_order, self.enabled)
        self._saved_fusions = (list(self.family_order), set(self.enabled))
        self.check_result = None
        self.checks_cleared.emit()
        self._replan()

    def highlights(self) -> Highlights:
        """What the enabled families mark in the model on show (the one place this is computed).

        Built from discovery, not the plan, so a conflict between families still shows
        both families' modules. A path goes to the first enabled family (in the user's
        order) that matches it.
        """
        matched: dict[str, str] = {}
        rejected: dict[str, tuple[str, str]] = {}
        fused_names: dict[str, str] = {}
        near: dict[str, tuple[str, str]] = {}
        source = self.shown
        if source is None:
            return Highlights()
        enabled = [name for name in self.family_order if name in self.enabled]
        for name in enabled:
            d = source.discovery(name)
            for m in d.matches:
                matched.setdefault(m.path, name)
                fused_names.setdefault(m.path, m.fused_class_name)
            for r in d.rejected:
                rejected.setdefault(r.path, (name, r.reason))
        # a module one family rejects but another fuses (itself or an ancestor) will be fused
        for path in list(rejected):
            if path in matched or any(a in matched for a in _ancestors(path)):
                del rejected[path]
        for name in enabled:
            for r in source.discovery(name).near_misses:
                if r.path not in matched:
                    near.setdefault(r.path, (name, r.reason))
        return Highlights(matched, rejected, fused_names, near)

    def check_blocker(self) -> str:
        """Why Run checks cannot work now ('' when it can)."""
        if self.inspection is None:
            return "open a model first"
        if self.plan is None or self.plan_pending:
            return self._plan_blocker()
        if not self.inspection.has_checkpoint:
            return "the model has no weights (config only): checks need a checkpoint"
        if self.jobs.busy:
            return "wait for the running job"
        return ""

    def export_blocker(self) -> str:
        """Why Export cannot work now ('' when it can)."""
        if self.inspection is None:
            return "open a model first"
        if self.plan is None or self.plan_pending:
            return self._plan_blocker()
        if not self.inspection.has_checkpoint:
            return "the model has no weights (config only): there is no checkpoint to convert"
        if self.jobs.busy:
            return "wait for the running job"
        return ""

    def _plan_blocker(self) -> str:
        if self.plan_pending:
            return "the plan is being computed"
        return f"the enabled fusions conflict: {self.plan_error}" if self.plan_error else "no plan"

    def _replan(self) -> None:
        """Highlights follow at once (from discovery); the plan is asked of the engine (``plan_changed``)."""
        self.fusions_changed.emit()
        if self._plan_job is not None:
            self._plan_job.succeeded.disconnect()
            self._plan_job.failed.disconnect()
            self._plan_job = None
        if self.inspection is None:
            self.plan, self.plan_error, self.plan_pending = None, "", False
            self.plan_changed.emit(None)
            return
        self.plan_pending = True
        job = self.jobs.call(PLAN, PlanParams(self.session, self.fusion_config), background=True)
        self._plan_job = job
        job.succeeded.connect(lambda plan: self._on_planned(plan, ""))
        job.failed.connect(lambda e: self._on_planned(None, error_text(e)[0]))

    # LoRA adapters ---------------------------------------------------------------------
    def open_adapter(self, path: str | Path) -> Job[AdapterPlan] | None:
        """Open a PEFT adapter folder next to the model: its conversion is planned (``adapter_changed``)."""
        if self.inspection is None:
            return None
        self.adapter_path = str(Path(path).expanduser().resolve())
        self._adapter_report = True  # said once, when planned (now, or when the plan on show arrives)
        return None if self.plan_pending else self._plan_adapter()

    def _plan_adapter(self) -> Job[AdapterPlan] | None:
        """Plan the adapter's conversion for the plan on show (it follows the fusions)."""
        report, self._adapter_report = self._adapter_report, False
        if self.plan is None:
            self._on_adapter_planned(None, self.plan_error or "no plan")
            return None
        params = AdapterPlanParams(self.session, self.plan, self.adapter_path)
        job = self.jobs.call(ADAPTER_PLAN, params, background=True)
        job.succeeded.connect(lambda a: self._on_adapter_planned(a, ""))
        job.failed.connect(lambda e: self._on_adapter_planned(None, error_text(e)[0], e if report else None))
        return job

    def _on_adapter_planned(self, plan: Any, error: str, report: BaseException | None = None) -> None:
        self.adapter_plan, self.adapter_error = plan, error
        if report is not None:
            self._report("Open adapter", report)
        elif error:
            log.warning("adapter: %s", error)
        self.adapter_changed.emit(plan)

    def adapter_badges(self) -> dict[str, str]:
        """Module path -> what the tree shows: each adapted module's rank and alpha; on a module
        holding a fused group, the fused rank, and which members have no adapter."""
        a = self.adapter_plan
        if a is None:
            return {}
        out = {m.module: f"LoRA r={m.rank} α={m.alpha:g}" for m in a.modules}
        for s in a.steps:
            if not s.owner:
                continue
            fused = s.target_modules[0] if s.op in ("stack_a_blockdiag_b", "conv_to_linear") else s.source_modules[0]
            line = f"{fused.rsplit('.', 1)[-1]}: fused LoRA rank {s.target_ranks[0] if len(s.target_ranks) == 1 else s.source_ranks[0]}"
            missing = [m.rsplit(".", 1)[-1] for m, r in zip(s.members, s.source_ranks) if r == 0]
            if s.op == "stack_a_blockdiag_b" and missing:
                line += f" (partial: {', '.join(missing)} not adapted, zero block)"
            out[s.owner] = line
        return out

    def convert_adapter(self, out_dir: Path, options: AdapterOptions | None = None) -> Job[AdapterResult] | None:
        """Convert the opened adapter for the plan on show into ``out_dir`` (the adapter dialog builds ``options``)."""
        if self.adapter_path == "" or self.plan is None or self.plan_pending or self.jobs.busy:
            return None
        options = options if options is not None else AdapterOptions()
        job = self._start(
            "adapter",
            ADAPTER,
            AdapterParams(self.session, self.plan, self.adapter_path, str(out_dir), options),
            f"Converting the adapter {self.adapter_path} to {out_dir}",
            f"Converted the adapter to {out_dir}",
        )
        job.succeeded.connect(self.adapter_finished.emit)
        return job

    def _on_planned(self, plan: PlanData | None, error: str) -> None:
        self._plan_job = None
        self.plan, self.plan_error, self.plan_pending = plan, error, False
        if error:
            log.warning("plan: %s", error)
        self.plan_changed.emit(plan)
        self.fusions_changed.emit()  # the actions' reasons follow the plan
        if self.adapter_path:  # the adapter's conversion follows the plan
            self._plan_adapter()

    def diff(self, plan: PlanData | None = None) -> Job[PlanDiff]:
        """The original model against the one ``plan`` fuses (the plan on show by default; a
        background job)."""
        return self.jobs.call(DIFF, DiffParams(self.session, plan or self._shown_plan()), background=True)

    def consumers(self, layout: str, plan: PlanData | None = None) -> Job[list[Consumer]]:
        """Who is expected to load an export in ``layout`` (a dry run on the plan; a background job)."""
        params = ConsumersParams(self.session, plan or self._shown_plan(), layout)
        return self.jobs.call(CONSUMERS, params, background=True)

    def _shown_plan(self) -> PlanData:
        if self.plan is None:
            raise RuntimeError("no plan is on show")
        return self.plan

    def devices(self) -> Job[list[str]]:
        """The devices the engine can run checks on (a background job)."""
        return self.jobs.call(DEVICES, NoParams(), background=True)

    def model_lists(self) -> Job[ModelLists]:
        """What the Open dialog offers: demos, architectures, cached hub models (a background job)."""
        return self.jobs.call(LISTS, NoParams(), name="open lists", background=True)

    # selection -------------------------------------------------------------------------
    def select_module(self, path: str) -> None:
        """The tree reports its current module."""
        if path != self.selected_path:
            self.selected_path = path
            self.module_selected.emit(path)

    def check_module(self, path: str) -> None:
        """Ask for ``path``'s check results (the window runs the checks when there are none)."""
        self.select_module(path)
        self.check_requested.emit(path)

    def reveal(self, path: str) -> None:
        """Ask the tree to show and select ``path``."""
        self.reveal_requested.emit(path)

    # checks and export -----------------------------------------------------------------
    def run_checks(self, options: CheckOptions | None = None) -> Job[CheckResult] | None:
        """Fused load + checks of the plan on show (the open model with the enabled fusions).

        Args:
            options: dtype, workload, timing and the rest (the Checks panel builds them from
                its controls); the defaults when ``None``.
        """
        if self.plan is None or self.plan_pending or self.jobs.busy:
            return None
        options = options if options is not None else CheckOptions()
        dtype = options.workload.dtype
        log.info("checks: %s, %s, %s", self.spec, list(self.plan.fusion_config), options)
        job = self._start(
            "checks",
            CHECK,
            CheckParams(self.session, self.plan, options),
            f"Checking {self.spec} ({dtype})",
            f"Checked {self.spec} ({dtype})",
        )
        ran = (self.session, self.spec, dict(self.plan.fusion_config))
        job.succeeded.connect(lambda result: self._on_checks_done(result, ran))
        job.failed.connect(lambda e: self._report("Checks failed", e))
        return job

    def _on_checks_done(self, result: Any, ran: tuple[str, str | None, dict[str, Any]]) -> None:
        """Show ``result`` only while the plan it ran is the one on show: the fusions can be
        edited, or another model opened, while a check runs."""
        if ran != (self.session, self.spec, self.fusion_config):
            log.warning(
                "the check of %s (%s) ended after the plan on show changed: its result is not shown",
                ran[1], ", ".join(ran[2]) or "no fusion",
            )  # fmt: skip
            return
        self.check_result = result
        self.checks_finished.emit(result)

    # plan files ------------------------------------------------------------------------
    def save_plan(self, path: Path) -> Job[str] | None:
        """Write the plan on show to ``path``, as ``fusion-core plan --json`` does (its model's
        identity included: the weights are hashed), for ``check --plan`` or Open plan… later."""
        if self.plan is None or self.plan_pending or self.jobs.busy:
            return None
        job = self._start(
            "save plan", SAVE_PLAN, SavePlanParams(self.session, self.plan, str(path)),
            f"Saving the plan of {self.spec}", f"Saved the plan of {self.spec} to {path.name}",
        )  # fmt: skip
        job.failed.connect(lambda e: self._report("Cannot save the plan", e))
        return job

    def open_plan(self, path: Path) -> Job[PlanData] | None:
        """Read a plan file, check its model is the one it was made from, then open that model
        (unless it is open) with exactly the plan's families, in its order."""
        if self._refused_while_busy():
            return None
        job = self._start(
            "open plan", READ_PLAN, ReadPlanParams(str(path)), f"Checking the plan {path.name}",
            f"Checked the plan {path.name}",
        )  # fmt: skip
        job.succeeded.connect(self._on_plan_read)
        job.failed.connect(lambda e: self._report(f"Cannot open the plan {path.name}", e))
        return job

    def _on_plan_read(self, info: PlanData) -> None:
        spec = info.identity.spec if info.identity is not None else ""
        options = [name for name, value in info.fusion_config.items() if value is not True]
        if options:
            self.error_raised.emit(
                "Plan with family options",
                f"The plan sets options of {', '.join(options)}; the app runs families with their defaults. "
                "Run it with `fusion-core check --plan` instead.",
                "",
            )
            return

        def apply(*_args: object) -> None:
            names = list(info.fusion_config)
            self.family_order = names + [n for n in self.family_order if n not in names]
            self.enabled = set(names)
            self._fusions_edited()  # the Fusions tab, the tree and the plan follow

        if self.spec == spec and self.inspection is not None:
            apply()
            return
        job = self.open_model(spec)
        if job is not None:
            job.succeeded.connect(apply)

    def export(self, out_dir: Path, options: ExportOptions | None = None) -> Job[ExportResult] | None:
        """Write a converted checkpoint of the plan on show to ``out_dir`` (the export dialog builds ``options``)."""
        if self.plan is None or self.plan_pending or self.jobs.busy:
            return None
        options = options if options is not None else ExportOptions()
        log.info("export: %s -> %s (%s)", self.spec, out_dir, options)
        job = self._start(
            "export",
            EXPORT,
            ExportParams(self.session, self.plan, str(out_dir), options),
            f"Exporting {self.spec} to {out_dir}",
            f"Exported to {out_dir}",
        )
        job.succeeded.connect(self.export_finished.emit)
        return job

    # comparing with another model -----------------------------------------------------
    def compare_with(
        self, spec: str, *, values: bool = False, atol: float | None = None, rtol: float | None = None
    ) -> Job[Any] | None:
        """Compare the open model (A) with ``spec`` (B) in the engine: structure and keys, and
        tensor values with ``values`` (streamed there, with progress; Cancel stops it)."""
        spec = spec.strip()
        if not spec or self.inspection is None or self.jobs.busy:
            return None
        what = "values of " if values else ""
        job = self._start(
            "compare",
            COMPARE,
            CompareParams(self.session, spec, values=values, atol=atol, rtol=rtol),
            f"Comparing {what}{self.spec} with {spec}",
            f"Compared {what}{self.spec} with {spec}",
        )
        self.compare_spec = spec
        job.succeeded.connect(lambda result: self._on_compared(spec, result))
        job.failed.connect(lambda e: self._report(f"Cannot compare with {spec}", e))
        return job

    def _on_compared(self, spec: str, result: Any) -> None:
        if spec == self.compare_spec:
            self.comparison = result
            self.comparison_changed.emit(result)

    def clear_comparison(self) -> None:
        self.comparison, self.compare_spec = None, ""
        self.comparison_changed.emit(None)

    def load_family_file(self, path: str | Path) -> Job[list[str]]:
        """Register the families of a Python file in the engine (for models opened after this)."""
        path = str(Path(path).expanduser().resolve())
        job = self.jobs.call(FAMILY_FILE, FamilyFileParams(path), name="family file", background=True)
        job.succeeded.connect(lambda names: log.info("%s: registered %s", path, ", ".join(names)))
        return job

    def unregister_family(self, name: str) -> Job[None]:
        """Remove a family from the engine's registry (one a family file registered)."""
        return self.jobs.call(UNREGISTER, UnregisterParams(name), background=True)

    def cancel_job(self) -> None:
        self.jobs.cancel_current()

    # plumbing --------------------------------------------------------------------------
    def _start(self, name: str, op: Op[Any, R], params: Any, description: str, done: str) -> Job[R]:
        job = self.jobs.call(op, params, name=name)
        t0 = time.perf_counter()
        job.progressed.connect(lambda d, t, m: self.job_progressed.emit(name, d, t, m))
        job.succeeded.connect(lambda _r: self.job_ended.emit(name, "ok", f"{done} in {time.perf_counter() - t0:.1f} s"))
        job.failed.connect(lambda e: self.job_ended.emit(name, "failed", f"{description}: failed"))
        job.aborted.connect(lambda: self._on_cancelled(name, description))
        self.job_started.emit(name)
        self.job_progressed.emit(name, 0, 0, description)
        return job

    def _on_cancelled(self, name: str, description: str) -> None:
        log.info("%s: cancelled", description)
        self.job_ended.emit(name, "cancelled", f"{description}: cancelled")

    def _report(self, title: str, error: BaseException) -> None:
        message, details = error_text(error)
        log.error("%s: %s", title, message)
        self.error_raised.emit(title, message, details)

    @Slot()
    def shutdown(self) -> None:
        """Cancel the running job, wait for the engine's answers, and drop this window's model there."""
        self.jobs.cancel_current()
        self.jobs.wait_for_done(1_500)  # at quit the engine is ended anyway: the window must not linger
        self.jobs.engine.forget(self.session)
