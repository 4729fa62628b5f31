"""The engine process: reads requests on stdin, answers on stdout (JSON lines, :mod:`.protocol`).

It serves the operations of :mod:`.ops` and nothing else: a request names one by its
``method``; its ``params`` are rebuilt as that operation's params dataclass
(:func:`.wire.from_plain`) and its result is sent as plain data (:func:`.wire.to_plain`).
An unknown method answers ``METHOD_NOT_FOUND``, params of the wrong shape
``INVALID_PARAMS``. Progress goes out as ``$/progress``; ``$/cancelRequest`` stops a job at
its next step.

Long operations run on a thread each and can be cancelled; quick ones run in order on
one thread. Each window is a *session* holding its opened model (the meta model stays
here). Anything the engine or a library prints goes to stderr: stdout carries messages only.
When stdin closes (the window went away), running jobs are cancelled and the process ends.

The engine's children (a check's upstream reference, an export's consumers) fork from a
zygote that imported torch and transformers once (:mod:`fusion_core.run.zygote`;
``FUSION_CHILD_ZYGOTE=0`` starts each afresh), and between operations it keeps one spare
child (:func:`fusion_core.run.isolated.keep_spares`), so the first of them does not wait for
those imports either; ``FUSION_SPARE_CHILDREN=0`` keeps none (the tests do, to spare the CPU).
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Generator
from typing import IO, Any

from ..run.isolated import close_spares, keep_spares, refill_spares, use_zygote
from . import protocol, wire
from .ops import (
    ADAPTER,
    ADAPTER_PLAN,
    CHECK,
    CLOSE,
    COMPARE,
    CONSUMERS,
    DEVICES,
    DIFF,
    EXPORT,
    FAMILY_FILE,
    LISTS,
    OPEN,
    OPS,
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
    SessionParams,
    UnregisterParams,
)

_PROGRESS_INTERVAL_S = 0.05  # at most 20 progress messages a second per job
SHUTDOWN_GRACE_S = 3.0  # after the window is gone: how long running jobs get to stop (cancelled) in all
log = logging.getLogger("fusion_core.host")


class _Forward(logging.Handler):
    """Sends the engine's log records to the window."""

    def __init__(self, host: Host) -> None:
        super().__init__(logging.INFO)
        self.host = host

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.host.send(
                protocol.notification(protocol.LOG, name=record.name, level=record.levelno, message=self.format(record))
            )
        except Exception:
            self.handleError(record)


class Host:
    """The engine's state: sessions (opened models), running jobs, the output channel."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._out_lock = threading.Lock()
        self._sessions: dict[str, Any] = {}  # session -> Inspection
        self._restoring: dict[str, threading.Event] = {}  # session -> set when its restore open ended
        #: set when the warm-up's imports ended: transformers' lazy modules are not safe to import
        #: from two threads at once (a half-initialised one raises ImportError in the other)
        self._warmed = threading.Event()
        self._tokens: dict[int, Any] = {}  # job id -> CancelToken
        self._threads: list[threading.Thread] = []
        self._quick: queue.Queue[tuple[Op[Any, Any], Any, int | None] | None] = queue.Queue()
        #: the names of families registered from a family file: while any is registered,
        #: models opened are not cached (their view depends on code the next start may not load)
        self._file_families: set[str] = set()
        #: the handler of every operation of the table (a test checks they are the same set)
        self.handlers: dict[Op[Any, Any], Callable[[Any], Any]] = {
            OPEN: self._open,
            CHECK: self._check,
            EXPORT: self._export,
            PLAN: self._preview,
            DIFF: self._diff,
            CONSUMERS: self._consumers,
            ADAPTER_PLAN: self._adapter_plan,
            ADAPTER: self._adapter,
            LISTS: self._lists,
            DEVICES: self._devices,
            FAMILY_FILE: self._family_file,
            UNREGISTER: self._unregister,
            CLOSE: self._close,
            COMPARE: self._compare,
            SAVE_PLAN: self._save_plan,
            READ_PLAN: self._read_plan,
        }
        self._others: dict[tuple[str, str], Any] = {}  # (session, spec) -> the model it is compared with

    def send(self, message: dict[str, Any]) -> None:
        data = wire.encode(message)
        with self._out_lock:
            self._out.write(data)
            self._out.flush()

    def _answer(self, job_id: int | None, message: dict[str, Any]) -> None:
        if job_id is not None:  # a notification gets no answer
            self.send(message)

    # main loop -------------------------------------------------------------------------
    def serve(self, requests: IO[bytes]) -> None:
        quick = threading.Thread(target=self._quick_loop, name="engine-quick", daemon=True)
        quick.start()
        self.send(protocol.notification(protocol.READY, pid=os.getpid()))
        for line in requests:
            if len(line) > wire.MAX_LINE_BYTES:
                log.error("ignoring a request of %d bytes", len(line))
                continue
            try:
                msg = wire.decode(line)
                method = msg["method"]
            except (ValueError, KeyError) as e:
                log.error("ignoring a malformed request: %s", e)
                continue
            self.dispatch(method, msg.get("params"), msg.get("id"))
        # the window closed our stdin (it ended, or died): stop what runs, then end
        self.wind_down(quick)

    def wind_down(self, quick: threading.Thread | None = None, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Cancel every job and wait for them at most ``grace_s`` in all (exports remove their
        temporary folder on cancel, between two tensors); :func:`main` then ends the process
        whatever still runs (an import, a forward pass), so it never outlives its window by
        more than a few seconds."""
        deadline = time.monotonic() + grace_s
        for token in list(self._tokens.values()):
            token.cancel()
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._quick.put(None)  # the quick requests sent before it are answered first
        if quick is not None:
            quick.join(timeout=max(0.0, deadline - time.monotonic()))
        close_spares()

    def watch_parent(self, interval_s: float = 0.5) -> None:
        """End the process soon after its window dies, even if our stdin stayed open (a
        descendant holding it): the parent changes when the window is gone."""
        parent = os.getppid()

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(interval_s)
            log.debug("the window (process %d) is gone: ending", parent)
            self.wind_down()
            _exit_now(0)

        threading.Thread(target=watch, name="engine-parent", daemon=True).start()

    def dispatch(self, method: str, params: Any, job_id: int | None) -> None:
        """Start the request ``method(params)``; its answer goes out when it ends."""
        if method == protocol.CANCEL:
            token = self._tokens.get((params or {}).get("id"))
            if token is not None:
                token.cancel()
            return
        op = OPS.get(method)
        if op is None:
            self._answer(
                job_id, protocol.error(job_id, ValueError(f"no operation {method!r:.80}"), protocol.METHOD_NOT_FOUND)
            )
            return
        try:
            args = wire.from_plain(op.params, params if params is not None else {})
        except Exception as e:  # the wrong shape, or an option object refusing a value (OptionError)
            from ..errors import FusionError

            code = protocol.REQUEST_FAILED if isinstance(e, FusionError) else protocol.INVALID_PARAMS
            self._answer(job_id, protocol.error(job_id, e, code))
            return
        if not op.long:
            self._quick.put((op, args, job_id))
            return
        if op is OPEN and args.restore:
            self._restoring[args.session] = threading.Event()
        thread = threading.Thread(target=self._run_long, args=(op, args, job_id), name=f"engine-{op.name}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _run_long(self, op: Op[Any, Any], args: Any, job_id: int | None) -> None:
        from ..errors import Cancelled
        from ..progress import CancelToken, drive

        token = CancelToken()
        if job_id is not None:
            self._tokens[job_id] = token
        last = [0.0]

        def report(step: Any) -> None:
            now = time.monotonic()
            if job_id is not None and (
                (step.total and step.done >= step.total) or now - last[0] >= _PROGRESS_INTERVAL_S
            ):
                last[0] = now
                self.send(protocol.progress(job_id, step.done, step.total, step.message))

        try:
            value = drive(self.handlers[op](args), report, token)
        except Cancelled:
            self._answer(job_id, protocol.cancelled(job_id))
        except BaseException as e:
            log.debug("%s failed", op.name, exc_info=True)
            self._answer(job_id, protocol.error(job_id, e))
        else:
            if token.cancelled:
                self._answer(job_id, protocol.cancelled(job_id))
            else:
                self._answer(job_id, protocol.result(job_id, wire.to_plain(value)))
        finally:
            self._tokens.pop(job_id, None)
            if op is OPEN and args.restore:
                self._restoring.pop(args.session, threading.Event()).set()
            # a quiet moment: the next check's upstream child or export's consumers find a
            # spare whose imports are done (none are kept when FUSION_SPARE_CHILDREN=0)
            refill_spares()

    def _quick_loop(self) -> None:
        self._warm_up()
        while (item := self._quick.get()) is not None:
            op, args, job_id = item
            try:
                value = wire.to_plain(self.handlers[op](args))
            except BaseException as e:
                log.debug("%s failed", op.name, exc_info=True)
                self._answer(job_id, protocol.error(job_id, e))
            else:
                self._answer(job_id, protocol.result(job_id, value))

    # operations ------------------------------------------------------------------------
    def _inspection(self, session: str) -> Any:
        from ..errors import UsageError

        waiting = self._restoring.get(session)
        if waiting is not None:  # the engine restarted: the model is being opened again
            waiting.wait()
        insp = self._sessions.get(session)
        if insp is None:
            raise UsageError("no model is open in the engine")
        return insp

    def _plan(self, session: str, data: Any) -> Any:
        """The live plan of ``data`` (a PlanData the window previewed), resolved on the session's
        model; refused when the model or the plan is not what it says."""
        from ..plan.plan_file import resolve_plan

        insp = self._inspection(session)
        return resolve_plan(data, insp, f"the plan of {insp.name}")

    def _warm_up(self) -> None:
        """Import the engine while the window paints (the first open then starts at once)."""
        t0 = time.perf_counter()
        try:
            import importlib

            importlib.import_module("fusion_core.plan.fusion_plan")  # torch, transformers, the families
            # what every modeling module imports first (loading, conversion mappings, kernels,
            # DTensor): 2-3 s of an unseen model's first open, done while the window paints;
            # the open then imports only its own modeling module
            importlib.import_module("transformers.modeling_utils")
        except BaseException:
            log.debug("warming up failed", exc_info=True)  # the first open reports it
        finally:
            self._warmed.set()
        log.debug("engine imported in %.2f s", time.perf_counter() - t0)

    def _open(self, p: OpenParams) -> Generator[Any, None, dict[str, Any]]:
        from ..families import REGISTRY
        from ..model import cache as model_cache
        from ..model.sources import resolve
        from ..plan.fusion_plan import inspect_model
        from ..plan.view import inspection_data
        from ..progress import Progress

        t0 = time.perf_counter()
        yield Progress(0, 4, f"loading the engine for {p.spec}")
        self._warmed.wait()  # the first open waits for the warm-up's imports here

        t1 = time.perf_counter()
        yield Progress(1, 4, f"building {p.spec} on the meta device")
        source = resolve(p.spec, trust_remote_code=p.trust_remote_code)
        insp = inspect_model(source)
        yield Progress(2, 4, f"{source.model_class.__name__}: {len(insp.tree)} modules; discovery")
        for name in REGISTRY:
            insp.discovery(name)
        insp.model_tensors()  # cached for the plans
        if source.checkpoint is not None:
            insp.key_matcher()  # transformers compiles ~1000 regexes for its key renamings: once, here
        # the InspectionView's plain form: the answer, and what the model cache stores
        data = inspection_data(p.spec, insp)
        yield Progress(3, 4, "done")
        if not p.restore and not self._file_families:
            model_cache.save(p.spec, data, p.trust_remote_code)  # the next start paints it at once
        self._sessions[p.session] = insp
        log.info(
            "opened %s: %s, %d modules, engine import %.2f s, open + discovery %.2f s",
            p.spec,
            source.describe(),
            len(insp.tree),
            t1 - t0,
            time.perf_counter() - t1,
        )
        return data

    def _check(self, p: CheckParams) -> Generator[Any, None, Any]:
        plan = self._plan(p.session, p.plan)
        log.info("checks: %s, %s, %s", plan.model, list(plan.fusion_config), p.options)
        from ..run.checks import iter_check

        return (yield from iter_check(plan, p.options))

    def _export(self, p: ExportParams) -> Generator[Any, None, Any]:
        plan = self._plan(p.session, p.plan)
        log.info("export: %s -> %s, %s", plan.model, p.out_dir, p.options)
        from ..export.pipeline import iter_export

        return (yield from iter_export(plan, p.out_dir, p.options))

    def _preview(self, p: PlanParams) -> Any:
        """The one operation that makes a plan: the window shows it and sends it back to run."""
        from ..plan.plan_file import preview_plan

        return preview_plan(self._inspection(p.session), p.fusion_config)

    def _diff(self, p: DiffParams) -> Any:
        from ..plan.diff import diff_plan

        return diff_plan(self._plan(p.session, p.plan))

    def _adapter_plan(self, p: AdapterPlanParams) -> Any:
        from ..adapter.convert import plan_adapter

        return plan_adapter(self._plan(p.session, p.plan), p.adapter, p.layout).plan

    def _adapter(self, p: AdapterParams) -> Generator[Any, None, Any]:
        plan = self._plan(p.session, p.plan)
        log.info("adapter: %s -> %s, %s", p.adapter, p.out_dir, p.options)
        from ..adapter.convert import iter_convert_adapter

        return (yield from iter_convert_adapter(plan, p.adapter, p.out_dir, p.options))

    def _consumers(self, p: ConsumersParams) -> list[dict[str, Any]]:
        from ..export.consumers import predicted_consumers

        return predicted_consumers(self._plan(p.session, p.plan), p.layout)

    def _lists(self, _p: NoParams) -> ModelLists:
        from ..model.demo import DEMOS
        from ..model.sources import cached_hub_models, known_model_types

        return ModelLists(
            demos=[(name, demo.description) for name, demo in DEMOS.items()],
            arch=list(known_model_types()),
            hub=list(cached_hub_models()),
        )

    def _devices(self, _p: NoParams) -> list[str]:
        from ..run.checks import available_devices

        return available_devices()

    def _family_file(self, p: FamilyFileParams) -> list[str]:
        """Register the families of a Python file (code: the user chose to trust it); their names."""
        from ..errors import UsageError
        from ..families import load_family_file
        from ..families.plugins import plugin_errors

        specs = load_family_file(p.path)
        if not specs:
            errors = [e for e in plugin_errors() if p.path in str(e)]
            raise UsageError(f"{p.path}: no fusion family loaded" + (f" ({errors[-1]})" if errors else ""))
        self._file_families.update(s.name for s in specs)
        return [s.name for s in specs]

    def _unregister(self, p: UnregisterParams) -> None:
        from ..families import unregister

        unregister(p.name)
        self._file_families.discard(p.name)

    def _close(self, p: SessionParams) -> None:
        self._sessions.pop(p.session, None)
        for key in [k for k in self._others if k[0] == p.session]:
            del self._others[key]

    def _save_plan(self, p: SavePlanParams) -> Generator[Any, None, str]:
        """``plan --json``'s file for the session's plan: what it fuses and what it was made from."""
        import json

        from ..plan.plan_file import plan_document
        from ..progress import Progress
        from ..report.tree_image import write_text

        plan = self._plan(p.session, p.plan)
        yield Progress(0, 0, "hashing the weights (the plan's identity)")
        document = plan_document(plan)
        write_text(p.path, json.dumps(document, indent=2) + "\n")
        return p.path

    def _read_plan(self, p: ReadPlanParams) -> Generator[Any, None, Any]:
        """A plan file's data, once its model passed the checks of ``check --plan``."""
        from ..plan.plan_file import plan_from_file, read_plan
        from ..progress import Progress

        yield Progress(0, 0, "checking the plan's model (hashing its weights)")
        plan_from_file(p.path, trust_remote_code=p.trust_remote_code)
        return read_plan(p.path)

    def _compare(self, p: CompareParams) -> Generator[Any, None, Any]:
        """The session's model against ``p.other``, opened once per session (values on request)."""
        from ..compare import iter_compare
        from ..plan.fusion_plan import inspect_model
        from ..progress import Progress

        insp = self._inspection(p.session)
        other = self._others.get((p.session, p.other))
        if other is None:
            yield Progress(0, 0, f"opening {p.other}")
            other = inspect_model(p.other, trust_remote_code=p.trust_remote_code)
            self._others = {k: v for k, v in self._others.items() if k[0] != p.session}  # one B per window
            self._others[(p.session, p.other)] = other
        log.info("compare: %s with %s%s", insp.name, p.other, " (values)" if p.values else "")
        return (yield from iter_compare(insp, other, values=p.values, atol=p.atol, rtol=p.rtol))


def main() -> int:
    """Run the engine on this process's stdin/stdout."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")  # the message channel
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # whatever prints goes to stderr
    sys.stdout = sys.stderr
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        spares = int(os.environ.get("FUSION_SPARE_CHILDREN", "1"))
    except ValueError:
        spares = 1
    # children fork from a zygote that imported torch and transformers once (0: each starts afresh)
    use_zygote(os.environ.get("FUSION_CHILD_ZYGOTE", "1") != "0")
    keep_spares(spares)
    host = Host(out)
    handler = _Forward(host)
    handler.setFormatter(logging.Formatter("%(message)s"))
    for name in ("fusion_core",):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    host.watch_parent()
    host.serve(sys.stdin.buffer)
    _exit_now(0)  # not a normal interpreter exit: it would wait for an import or a forward pass
    return 0


def _exit_now(code: int) -> None:
    for stream in (sys.stderr, sys.__stderr__):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())
