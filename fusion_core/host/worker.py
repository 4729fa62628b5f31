"""The engine process: reads requests on stdin, answers on stdout (JSON lines, :mod:`.wire`).

Requests: ``{"id": N, "op": NAME, "args": {...}}``; ``{"op": "cancel", "target": N}``.
Answers carry the request's id: ``{"type": "progress", "done", "total", "message"}``, then
one of ``{"type": "result", "value"}``, ``{"type": "error", "error"}``,
``{"type": "cancelled"}``. Unsolicited: ``{"type": "ready", "pid"}`` at start and
``{"type": "log", "name", "level", "message"}`` for the engine's log records.

Long operations (``open``, ``check``, ``export``) run on a thread each and can be
cancelled; quick ones (``plan``, ``diff``, ``consumers``, ``lists``, ``close``) run in order
on one thread. Each window is a *session* holding its opened model (the meta model stays
here). Anything the engine or a library prints goes to stderr: stdout carries messages only.
When stdin closes (the window went away), running jobs are cancelled and the process ends.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Generator
from typing import IO, Any

from . import wire

LONG_OPS = ("open", "check", "export")
QUICK_OPS = ("plan", "diff", "consumers", "lists", "devices", "family_file", "unregister", "close")
_PROGRESS_INTERVAL_S = 0.05  # at most 20 progress messages a second per job
log = logging.getLogger("fusion_core.host")


class _Forward(logging.Handler):
    """Sends the engine's log records to the window."""

    def __init__(self, host: Host) -> None:
        super().__init__(logging.INFO)
        self.host = host

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.host.send(
                {"type": "log", "name": record.name, "level": record.levelno, "message": self.format(record)}
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
        self._tokens: dict[int, Any] = {}  # job id -> CancelToken
        self._threads: list[threading.Thread] = []
        self._quick: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._family_files: list[str] = []  # loaded by request: models opened since are not cached

    def send(self, message: dict[str, Any]) -> None:
        data = wire.encode(message)
        with self._out_lock:
            self._out.write(data)
            self._out.flush()

    # main loop -------------------------------------------------------------------------
    def serve(self, requests: IO[bytes]) -> None:
        quick = threading.Thread(target=self._quick_loop, name="engine-quick", daemon=True)
        quick.start()
        self._quick.put({"id": 0, "op": "_warm_up", "args": {}})
        self.send({"type": "ready", "pid": os.getpid()})
        for line in requests:
            if len(line) > wire.MAX_LINE_BYTES:
                log.error("ignoring a request of %d bytes", len(line))
                continue
            try:
                msg = wire.decode(line)
                op = msg["op"]
            except (ValueError, KeyError) as e:
                log.error("ignoring a malformed request: %s", e)
                continue
            if op == "cancel":
                token = self._tokens.get(msg.get("target"))
                if token is not None:
                    token.cancel()
            elif op in LONG_OPS:
                if op == "open" and msg.get("args", {}).get("restore"):
                    self._restoring[str(msg["args"].get("session"))] = threading.Event()
                thread = threading.Thread(target=self._run_long, args=(msg,), name=f"engine-{op}", daemon=True)
                self._threads.append(thread)
                thread.start()
            elif op in QUICK_OPS:
                self._quick.put(msg)
            else:
                self.send({"id": msg.get("id"), "type": "error", "error": wire.error_data(ValueError(f"no op {op!r}"))})
        # the window closed our stdin: stop what runs (exports clean up on cancel), then end
        for token in list(self._tokens.values()):
            token.cancel()
        for thread in self._threads:
            thread.join(timeout=30)
        self._quick.put(None)

    def _run_long(self, msg: dict[str, Any]) -> None:
        from ..errors import Cancelled
        from ..progress import CancelToken, drive

        job_id, op, args = msg.get("id"), msg["op"], dict(msg.get("args") or {})
        token = CancelToken()
        self._tokens[job_id] = token
        last = [0.0]

        def report(step: Any) -> None:
            now = time.monotonic()
            if (step.total and step.done >= step.total) or now - last[0] >= _PROGRESS_INTERVAL_S:
                last[0] = now
                self.send(
                    {"id": job_id, "type": "progress", "done": step.done, "total": step.total, "message": step.message}
                )

        try:
            value = drive(getattr(self, f"_op_{op}")(**args), report, token)
        except Cancelled:
            self.send({"id": job_id, "type": "cancelled"})
        except BaseException as e:
            log.debug("%s failed", op, exc_info=True)
            self.send({"id": job_id, "type": "error", "error": wire.error_data(e)})
        else:
            if token.cancelled:
                self.send({"id": job_id, "type": "cancelled"})
            else:
                self.send({"id": job_id, "type": "result", "value": value})
        finally:
            self._tokens.pop(job_id, None)
            if op == "open" and args.get("restore"):
                self._restoring.pop(str(args.get("session")), threading.Event()).set()

    def _quick_loop(self) -> None:
        while (msg := self._quick.get()) is not None:
            job_id, op, args = msg.get("id"), msg["op"], dict(msg.get("args") or {})
            try:
                value = getattr(self, f"_op_{op}")(**args)
            except BaseException as e:
                log.debug("%s failed", op, exc_info=True)
                if job_id:
                    self.send({"id": job_id, "type": "error", "error": wire.error_data(e)})
            else:
                if job_id:
                    self.send({"id": job_id, "type": "result", "value": value})

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

    def _plan(self, session: str, fusion_config: dict[str, Any]) -> Any:
        return self._inspection(session).plan(fusion_config)

    def _op__warm_up(self) -> None:
        """Import the engine while the window paints (the first open then starts at once)."""
        t0 = time.perf_counter()
        import fusion_core.plan.fusion_plan  # noqa: F401 - torch, transformers, the families

        log.debug("engine imported in %.2f s", time.perf_counter() - t0)

    def _op_open(
        self, session: str, spec: str, trust_remote_code: bool = False, cache: bool = True, restore: bool = False
    ) -> Generator[Any, None, dict[str, Any]]:
        from ..families import REGISTRY
        from ..model import cache as model_cache
        from ..model.sources import resolve
        from ..plan.fusion_plan import inspect_model
        from ..plan.view import inspection_data
        from ..progress import Progress

        t0 = time.perf_counter()
        yield Progress(0, 4, f"loading the engine for {spec}")
        import fusion_core.plan.fusion_plan  # noqa: F401 - the first open waits for the warm-up here

        t1 = time.perf_counter()
        yield Progress(1, 4, f"building {spec} on the meta device")
        source = resolve(spec, trust_remote_code=trust_remote_code)
        insp = inspect_model(source)
        yield Progress(2, 4, f"{source.model_class.__name__}: {len(insp.tree)} modules; discovery")
        for name in REGISTRY:
            insp.discovery(name)
        insp.model_tensors()  # cached for the plans
        if source.checkpoint is not None:
            insp.key_matcher()  # transformers compiles ~1000 regexes for its key renamings: once, here
        data = inspection_data(spec, insp)
        yield Progress(3, 4, "done")
        if cache and not restore and not self._family_files:
            model_cache.save(spec, data)  # the next start paints it at once
        self._sessions[session] = insp
        log.info(
            "opened %s: %s, %d modules, engine import %.2f s, open + discovery %.2f s",
            spec,
            source.describe(),
            len(insp.tree),
            t1 - t0,
            time.perf_counter() - t1,
        )
        return data

    def _op_check(
        self, session: str, fusion_config: dict[str, Any], **options: Any
    ) -> Generator[Any, None, dict[str, Any]]:
        from ..run.checks import iter_check

        plan = self._plan(session, fusion_config)
        log.info("checks: %s, %s, %s", plan.model, list(plan.fusion_config), options)
        result = yield from iter_check(plan, **options)
        return wire.to_plain(result)

    def _op_export(
        self, session: str, fusion_config: dict[str, Any], out_dir: str, **options: Any
    ) -> Generator[Any, None, dict[str, Any]]:
        from ..export.pipeline import iter_export

        plan = self._plan(session, fusion_config)
        log.info("export: %s -> %s, %s", plan.model, out_dir, options)
        result = yield from iter_export(plan, out_dir, **options)
        return wire.to_plain(result)

    def _op_plan(self, session: str, fusion_config: dict[str, Any]) -> dict[str, Any]:
        from ..plan.view import plan_view

        return wire.to_plain(plan_view(self._plan(session, fusion_config)))

    def _op_diff(self, session: str, fusion_config: dict[str, Any]) -> dict[str, Any]:
        from ..plan.diff import diff_plan

        return wire.to_plain(diff_plan(self._plan(session, fusion_config)))

    def _op_consumers(self, session: str, fusion_config: dict[str, Any], layout: str) -> list[dict[str, Any]]:
        from ..export.consumers import predicted_consumers

        return wire.to_plain(predicted_consumers(self._plan(session, fusion_config), layout))

    def _op_lists(self) -> dict[str, Any]:
        from ..model.demo import DEMOS
        from ..model.sources import cached_hub_models, known_model_types

        return {
            "demos": [[name, demo.description] for name, demo in DEMOS.items()],
            "arch": list(known_model_types()),
            "hub": list(cached_hub_models()),
        }

    def _op_devices(self) -> list[str]:
        from ..run.checks import available_devices

        return available_devices()

    def _op_family_file(self, path: str) -> list[str]:
        """Register the families of a Python file (code: the user chose to trust it); their names."""
        from ..errors import UsageError
        from ..families import load_family_file
        from ..families.plugins import plugin_errors

        specs = load_family_file(path)
        if not specs:
            errors = [e for e in plugin_errors() if path in str(e)]
            raise UsageError(f"{path}: no fusion family loaded" + (f" ({errors[-1]})" if errors else ""))
        self._family_files.append(path)
        return [s.name for s in specs]

    def _op_unregister(self, name: str) -> None:
        from ..families import unregister

        unregister(name)

    def _op_close(self, session: str) -> None:
        self._sessions.pop(session, None)


def main() -> int:
    """Run the engine on this process's stdin/stdout."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")  # the message channel
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # whatever prints goes to stderr
    sys.stdout = sys.stderr
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    host = Host(out)
    handler = _Forward(host)
    handler.setFormatter(logging.Formatter("%(message)s"))
    for name in ("fusion_core",):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    host.serve(sys.stdin.buffer)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
