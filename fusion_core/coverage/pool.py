"""The parent side of the coverage scan: worker children, timeouts, crashes, ordering.

The workers are our isolated children (:func:`fusion_core.run.isolated.child_for`: forked
from the zygote where the process uses one, else started ``python -I``), each serving
:mod:`fusion_core.coverage.worker` and speaking the ``child/coverage_*`` operations
(declared in :mod:`fusion_core.coverage.worker`) on its standard streams. Types are handed out in chunks of one
``transformers.models`` package (a modeling module is imported by one worker only),
costliest first (seconds measured by the previous scan, kept in the cache folder). Each
worker says which type it starts (a line written before it starts), so when a worker dies
the parent knows what it was building: a worker that exits by itself marks its type
``crash``; one silent for longer than 1.5 x the timeout (its alarm could not fire: native
code) is killed and its type marked ``timeout``. The worker is then replaced and the
unfinished types of its chunk are scanned again. Workers that cannot even start end the
scan with an error instead of a loop.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

from ..boundary.ops import read_child_line
from ..errors import FusionError, naming
from ..progress import Progress
from .worker import COVERAGE_CHUNK, COVERAGE_START, COVERAGE_STARTED, CoverageChunkParams, CoverageStartParams

_POLL = 0.25  # seconds between progress steps while waiting for workers
_MAX_BREAKS = 3  # worker deaths a type may be part of (unblamed) before it is reported as a crash
_HARD_GRACE = 10.0  # seconds past 1.5x the timeout before a silent worker is killed
# Fault injection for the scan's own tests only: "module:function" that each worker calls
# with every model type before scanning it (hang, block signals, die). Private on purpose:
# not part of coverage_scan's API; tests set it with monkeypatch, the pool hands it to its
# workers in their start request (with its module's file: they import nothing of ours else).
_fault_hook: str | None = None


def scan_in_pool(
    types: Sequence[str],
    family_names: Sequence[str],
    jobs: int,
    timeout: float,
    results: dict[str, dict[str, Any]],
    *,
    task: str = "scan",
    build: bool = False,
) -> Generator[Progress, None, None]:
    """Scan ``types`` in ``jobs`` worker children into ``results`` (model type -> result dict).

    Yields progress while waiting. Closing the generator (cancel) ends the workers.
    ``task`` names what each worker runs on a chunk of types
    (:data:`fusion_core.coverage.worker.TASKS`: ``"scan"``, the meta scan, or ``"check"``,
    coverage's check); ``build`` prepares workers that build real models
    (:func:`fusion_core.coverage.worker.init_worker`).

    Raises:
        FusionError: the worker processes cannot start at all.
    """
    start = CoverageStartParams(_family_files(family_names), build, _fault_hook, _hook_file(_fault_hook))
    # No result this long after a type started: the alarm could not fire (native code).
    hard_limit = timeout * 1.5 + _HARD_GRACE if timeout > 0 else float("inf")
    todo: deque[list[str]] = deque(_chunks(types, _load_costs()))
    breaks: dict[str, int] = {}
    events: queue.Queue[tuple[_Worker, str, Any]] = queue.Queue()
    workers: list[_Worker] = []
    started = False  # a worker has started (a later one that cannot is a break, not the end)
    try:
        while todo or any(w.chunk for w in workers):
            for w in workers:  # idle workers: the next chunk, or their end
                if w.chunk is None and not w.ending:
                    if todo:
                        w.give(CoverageChunkParams(todo.popleft(), list(family_names), timeout, task))
                    else:
                        w.finish()
            while todo and sum(1 for w in workers if not w.ending) < jobs:
                w = _Worker(start, events)
                workers.append(w)
                w.give(CoverageChunkParams(todo.popleft(), list(family_names), timeout, task))
            try:
                event = events.get(timeout=_POLL)
                while True:
                    worker, kind, value = event
                    if kind == "ready":
                        started = worker.ready = True
                    elif kind == "started":
                        worker.inflight = (value.model_type, value.time)
                    elif kind == "rows":
                        for item in value:
                            results[item["model_type"]] = item
                        worker.chunk, worker.inflight = None, None
                    elif kind == "end":
                        workers.remove(worker)
                        worker.close()
                        lost = _ended(worker, value, started, results, breaks)
                        if lost:
                            todo.appendleft(lost)
                    event = events.get_nowait()
            except queue.Empty:
                pass
            now = time.time()
            for w in workers:  # the watchdog
                t = w.inflight
                if t and w.killed is None and t[0] not in results and now - t[1] > hard_limit:
                    w.killed = (t[0], now - t[1])
                    w.kill()
            yield Progress(len(results), len(types), _last(workers))
    finally:
        for w in workers:
            w.kill()
        for w in workers:
            w.close()


def _ended(
    worker: _Worker, code: int | None, started: bool, results: dict[str, dict[str, Any]], breaks: dict[str, int]
) -> list[str]:
    """Judge a worker that ended: its type's ``timeout`` or ``crash``; return the types to scan again."""
    lost = [t for t in worker.chunk or [] if t not in results]
    if not lost:
        return []
    if not worker.ready and not started:
        tail = f": {worker.said()}" if worker.said() else ""
        raise naming(
            FusionError(
                f"coverage: the worker processes could not start (exit code {code}){tail}; "
                "run with jobs 0 to scan in this process and see the error"
            ),
            "jobs",
        )
    culprit = None
    if worker.killed is not None:
        culprit, seconds = worker.killed
        results[culprit] = _failed(culprit, "timeout", f"worker stuck for {seconds:.0f} s in native code; killed")
    elif worker.inflight is not None and worker.inflight[0] in lost:
        culprit = worker.inflight[0]
        results[culprit] = _failed(culprit, "crash", "the worker process died while building this model")
    else:  # nothing names the type (it died between two, or before it started): count, so a repeat offender cannot loop forever
        for t in lost:
            breaks[t] = breaks.get(t, 0) + 1
            if breaks[t] >= _MAX_BREAKS:
                results[t] = _failed(t, "crash", "worker processes died repeatedly while scanning it")
    return [t for t in lost if t not in results and t != culprit]


class _Worker:
    """One worker child: the chunk it scans, the type it is on, whether the watchdog killed it.

    Its readers put ``(worker, kind, value)`` on ``events``: ``ready`` (its pid), ``started``
    (a :class:`~fusion_core.coverage.worker.CoverageStarted`), ``rows`` (a chunk's results) and
    ``end`` (its exit code, once its output has ended).
    """

    def __init__(self, start: CoverageStartParams, events: queue.Queue[tuple[_Worker, str, Any]]) -> None:
        from ..run.isolated import child_for

        self.child = child_for("fusion_core.coverage.worker", prefix="fusion-coverage-")
        self.chunk: list[str] | None = None
        self.inflight: tuple[str, float] | None = None  # (model type, start time)
        self.killed: tuple[str, float] | None = None  # (model type, seconds) when the watchdog killed it
        self.ready = False
        self.ending = False  # its input is closed: it ends after its chunk
        self._err: deque[str] = deque(maxlen=5)
        self._events = events
        self.child.send(COVERAGE_START.request_line(start))
        self._readers = [
            threading.Thread(target=self._read, name="fusion-coverage-out", daemon=True),
            threading.Thread(target=self._read_err, name="fusion-coverage-err", daemon=True),
        ]
        for t in self._readers:
            t.start()

    def give(self, chunk: CoverageChunkParams) -> None:
        self.chunk = list(chunk.model_types)
        self.child.send(COVERAGE_CHUNK.request_line(chunk))

    def finish(self) -> None:
        """No more chunks: close its input (it ends by itself)."""
        self.ending = True
        try:
            self.child.proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass

    def kill(self) -> None:
        self.ending = True
        if self.child.proc.poll() is None:
            self.child.proc.kill()

    def close(self) -> None:
        """Wait for it and its readers (after it ended or was killed), and clean its folder."""
        proc = self.child.proc
        proc.wait()
        for t in self._readers:
            t.join()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:  # its unread input: it is gone
                pass
        self.child.close()

    def said(self) -> str:
        """The last line it wrote on stderr."""
        return self._err[-1].strip() if self._err else ""

    def _read(self) -> None:
        stream = self.child.proc.stdout
        assert stream is not None
        try:
            for line in stream:
                found = read_child_line(line, _ANSWERS)
                if found is not None:
                    self._events.put((self, _ANSWERS_KIND[found[0].name], found[1]))
        except (OSError, ValueError):  # a line cut short: it died mid-message
            pass
        self._events.put((self, "end", self.child.proc.wait()))

    def _read_err(self) -> None:
        stream = self.child.proc.stderr
        assert stream is not None
        try:
            for line in stream:
                if line.strip():
                    self._err.append(line)
        except (OSError, ValueError):
            pass


#: what a worker writes: its pid once ready, the type it starts, a chunk's rows
_ANSWERS = {op.name: op for op in (COVERAGE_START, COVERAGE_STARTED, COVERAGE_CHUNK)}
_ANSWERS_KIND = {COVERAGE_START.name: "ready", COVERAGE_STARTED.name: "started", COVERAGE_CHUNK.name: "rows"}


def _last(workers: list[_Worker]) -> str:
    busy = [w.inflight for w in workers if w.inflight]
    return max(busy, key=lambda v: v[1])[0] if busy else ""


def _hook_file(hook: str | None) -> str | None:
    """The file of the fault hook's module (workers import it from there), or None."""
    if not hook:
        return None
    try:
        spec = importlib.util.find_spec(hook.partition(":")[0])
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.has_location else None


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
