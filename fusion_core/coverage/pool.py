"""The parent side of the coverage scan: worker pools, timeouts, crashes, ordering.

Types are handed out in chunks of one ``transformers.models`` package (a modeling module is
imported by one worker only), costliest first (seconds measured by the previous scan, kept
in the cache folder). Each worker reports the type it starts through a synchronous queue,
so when a worker dies the parent knows what it was building: a worker that exits by
itself marks its type ``crash``; one silent for longer than 1.5 x the timeout (its alarm
could not fire: native code) is killed and its type marked ``timeout``. The pool is then
replaced and the unfinished types are scanned again. Workers that cannot even start end
the scan with an error instead of a loop.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import deque
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

from ..errors import FusionError, naming
from ..progress import Progress

_POLL = 0.25  # seconds between progress steps while waiting for workers
_MAX_BREAKS = 3  # pool deaths a type may be part of before it is reported as a crash
_HARD_GRACE = 10.0  # seconds past 1.5x the timeout before a silent worker is killed
# Fault injection for the scan's own tests only: "module:function" that each worker calls
# with every model type before scanning it (hang, block signals, die). Private on purpose:
# not part of coverage_scan's API; tests set it with monkeypatch.
_fault_hook: str | None = None


def scan_in_pool(
    types: Sequence[str],
    family_names: Sequence[str],
    jobs: int,
    timeout: float,
    results: dict[str, dict[str, Any]],
    *,
    task: Any = None,
    build: bool = False,
) -> Generator[Progress, None, None]:
    """Scan ``types`` in ``jobs`` worker processes into ``results`` (model type -> result dict).

    Yields progress while waiting. Closing the generator (cancel) terminates the workers.
    ``task`` is what each worker runs on a chunk of types (default: the meta scan,
    :func:`fusion_core.coverage.worker.scan_types`); ``build`` prepares workers that build
    real models (:func:`fusion_core.coverage.worker.init_worker`).

    Raises:
        FusionError: the worker processes cannot start at all.
    """
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    from .worker import init_worker, scan_types

    ctx = multiprocessing.get_context("spawn")
    # A SimpleQueue writes synchronously: the heartbeat is out before a worker can die.
    heartbeat = ctx.SimpleQueue()
    files = _family_files(family_names)
    # No result this long after a type started: the alarm could not fire (native code).
    hard_limit = timeout * 1.5 + _HARD_GRACE if timeout > 0 else float("inf")
    todo: deque[list[str]] = deque(_chunks(types, _load_costs()))
    isolate: deque[list[str]] = deque()  # suspects of an unexplained crash, one per pool
    breaks: dict[str, int] = {}
    try:
        while todo or isolate:
            solo = bool(isolate)
            batch = [isolate.popleft()] if solo else list(todo)
            if not solo:
                todo.clear()
            pool = ProcessPoolExecutor(
                max_workers=1 if solo else min(jobs, len(batch)),
                mp_context=ctx,
                initializer=init_worker,
                initargs=(files, heartbeat, _fault_hook, build),
            )
            futures = {pool.submit(task or scan_types, chunk, family_names, timeout): chunk for chunk in batch}
            run = _Run()
            try:
                while futures and not run.broken:
                    run.processes.update(getattr(pool, "_processes", None) or {})
                    done, _ = wait(futures, timeout=_POLL, return_when=FIRST_COMPLETED)
                    _drain(heartbeat, run.inflight)
                    for future in done:
                        chunk = futures.pop(future)
                        try:
                            for item in future.result():
                                results[item["model_type"]] = item
                        except BrokenProcessPool:
                            run.broken = True
                        except Exception as e:  # a result that could not come back
                            for t in chunk:
                                results.setdefault(t, _failed(t, "crash", f"{type(e).__name__}: {e}"))
                    run.watchdog(results, hard_limit)
                    yield Progress(len(results), len(types), _last(run.inflight))
            finally:
                _stop(pool, terminate=bool(futures))
            if run.broken or futures:
                _drain(heartbeat, run.inflight)
                if not run.inflight:
                    codes = sorted({p.exitcode for p in run.processes.values()}, key=str)
                    raise naming(
                        FusionError(
                            f"coverage: the worker processes could not start (exit code {codes}); "
                            "run with jobs 0 to scan in this process and see the error"
                        ),
                        "jobs",
                    )
                suspects = run.blame(results, solo)
                isolate.extend([t] for t in sorted(suspects))
                lost = [t for chunk in batch for t in chunk if t not in results and t not in suspects]
                if not run.blamed:
                    # nothing names the type: count, so a repeat offender cannot loop forever
                    for t in lost:
                        breaks[t] = breaks.get(t, 0) + 1
                        if breaks[t] >= _MAX_BREAKS:
                            results[t] = _failed(t, "crash", "worker processes died repeatedly while scanning it")
                    lost = [t for t in lost if t not in results]
                if lost:
                    todo.extendleft([lost] if solo else _chunks(lost)[::-1])
    finally:
        heartbeat.close()


class _Run:
    """One pool's workers: what each is doing, which the watchdog killed, who broke the pool."""

    def __init__(self) -> None:
        self.processes: dict[int, Any] = {}  # pid -> multiprocessing Process
        self.inflight: dict[int, tuple[str, float]] = {}  # pid -> (model type, start time)
        self.killed: dict[int, tuple[str, float]] = {}  # pid -> (model type, seconds)
        self.broken = False
        self.blamed = False

    def watchdog(self, results: dict[str, dict[str, Any]], hard_limit: float) -> None:
        now = time.time()
        for pid, (t, started) in self.inflight.items():
            if t not in results and pid not in self.killed and now - started > hard_limit:
                self.killed[pid] = (t, now - started)
                _kill(pid)

    def blame(self, results: dict[str, dict[str, Any]], solo: bool) -> set[str]:
        """Record timeouts and crashes of a dead pool; return the suspects still to isolate."""
        for t, seconds in self.killed.values():
            results[t] = _failed(t, "timeout", f"worker stuck for {seconds:.0f} s in native code; killed")
        # a worker that died by itself has an exit code of its own; the executor ends the
        # others with SIGTERM, and the ones we killed are known
        sigterm = -getattr(signal, "SIGTERM", 15)
        dead = [
            pid
            for pid, process in self.processes.items()
            if process.exitcode not in (None, 0, sigterm) and pid not in self.killed
        ]
        culprits = {self.inflight[pid][0] for pid in dead if pid in self.inflight}
        culprits -= set(results)
        if not culprits and not self.killed:
            pending = {t for t, _s in self.inflight.values() if t not in results}
            if solo or len(pending) == 1:
                culprits = pending
            else:
                self.blamed = bool(pending)
                return pending  # ambiguous: scan each alone to find the one that kills its worker
        for t in culprits:
            results[t] = _failed(t, "crash", "the worker process died while building this model")
        self.blamed = bool(culprits or self.killed)
        return set()


def _drain(heartbeat: Any, inflight: dict[int, tuple[str, float]]) -> None:
    try:
        while not heartbeat.empty():
            pid, model_type, started = heartbeat.get()
            inflight[pid] = (model_type, started)
    except (OSError, EOFError, ValueError):  # a writer died mid-message
        return


def _last(inflight: dict[int, tuple[str, float]]) -> str:
    return max(inflight.values(), key=lambda v: v[1])[0] if inflight else ""


def _kill(pid: int) -> None:
    try:
        os.kill(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
    except (ProcessLookupError, PermissionError):
        pass


def _stop(pool: Any, *, terminate: bool) -> None:
    """Shut the pool down; with ``terminate``, end its workers first (cancel, error, dead pool).

    SIGTERM, like the executor itself uses on a broken pool, so that a worker that died
    by itself stays recognizable by its exit code.
    """
    if terminate:
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            if process.is_alive():
                process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


def _chunks(types: Sequence[str], costs: dict[str, float] | None = None) -> list[list[str]]:
    """Group types by their ``transformers.models`` package, costliest groups first.

    ``costs`` are seconds per type measured by an earlier scan (unknown types count as the
    mean); without them, bigger groups go first. Costly work first keeps a long type from
    being the last one, with the other workers idle.
    """
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    groups: dict[str, list[str]] = {}
    for t in types:
        groups.setdefault(model_type_to_module_name(t), []).append(t)
    costs = costs or {}
    default = sum(costs.values()) / len(costs) if costs else 1.0
    return sorted(groups.values(), key=lambda g: sum(costs.get(t, default) for t in g), reverse=True)


def _costs_file() -> Path:
    import transformers

    from ..model.demo import cache_root

    return cache_root() / f"coverage-costs-tf{transformers.__version__}.json"


def _load_costs() -> dict[str, float]:
    try:
        data = json.loads(_costs_file().read_text(encoding="utf-8"))
        return {str(k): float(v) for k, v in data.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def save_costs(results: dict[str, dict[str, Any]]) -> None:
    """Remember each type's scan time for the next scan's ordering (best effort)."""
    costs = _load_costs()
    costs.update({t: float(r.get("seconds", 0.0)) for t, r in results.items() if r.get("seconds")})
    write_json(_costs_file(), costs)


def write_json(path: Path, data: Any) -> None:
    """``data`` as JSON at ``path``, replaced whole (a reader never sees half a file); best effort."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


def _family_files(family_names: Sequence[str]) -> list[str]:
    """Files that plugin families were loaded from (workers load them again)."""
    from ..families import get_family

    files = []
    for name in family_names:
        # load_family_file records "file <path>"
        origin = str(getattr(get_family(name), "origin", "") or "").removeprefix("file ")
        if origin.endswith(".py") and os.path.isfile(origin):
            files.append(origin)
    return list(dict.fromkeys(files))


def _failed(model_type: str, stage: str, message: str) -> dict[str, Any]:
    return {"model_type": model_type, "status": "failed", "stage": stage, "error_type": "WorkerError", "error": message}
