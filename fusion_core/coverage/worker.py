"""The worker side of the coverage scan (see :mod:`fusion_core.coverage.scan`).

Each worker is one of our isolated children (:mod:`fusion_core.run.child` serving this
module: :func:`serve`), started or forked from the zygote like every other, and speaks the
``child/coverage_*`` operations declared here on its standard streams: a
start line, then one chunk of types per line; it says which type it starts before each one
and answers each chunk with its rows. It imports transformers once and then scans many model
types: default config, model class, meta init, discovery for each family. Weight initialization is
switched off for the worker's lifetime (on the meta device it computes nothing but
still costs about half of the init time), output is silenced, and a per-type alarm turns
a pathological type into a ``timeout`` result instead of a hung scan. Results are plain
dicts, so they cross process boundaries without pickling classes.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from ..boundary.ops import Op

_state: dict[str, Any] = {"heartbeat": None, "hook": None, "stack": None}


@dataclass(frozen=True)
class CoverageStartParams:
    """A worker's first line: how to prepare it (:func:`init_worker`)."""

    family_files: list[str] = field(default_factory=list)
    build: bool = False  # it builds real models (coverage's check), else meta models
    #: "module:function" run with each type first, and the file of its module (the scan's
    #: tests inject faults with it; never set otherwise)
    hook: str | None = None
    hook_file: str | None = None


@dataclass(frozen=True)
class CoverageChunkParams:
    """Each later line: scan (or check) these types one after the other."""

    model_types: list[str]
    family_names: list[str]
    timeout: float
    task: str = "scan"  # a name of TASKS: "scan" (the meta scan) or "check" (a tiny model each)


@dataclass(frozen=True)
class CoverageStarted:
    """The worker starts ``model_type`` (so a crash or a hang is that type's)."""

    model_type: str
    time: float


# a coverage worker's operations (in fusion_core.host.ops.CHILD_OPS): the start line answers the
# worker's pid once it is ready; each chunk answers one plain result per type
COVERAGE_START: Op[CoverageStartParams, int] = Op("child/coverage_start", CoverageStartParams, int)
COVERAGE_STARTED: Op[CoverageStarted, CoverageStarted] = Op("child/coverage_started", CoverageStarted, CoverageStarted)
COVERAGE_CHUNK: Op[CoverageChunkParams, list[dict[str, Any]]] = Op(
    "child/coverage_chunk", CoverageChunkParams, list[dict[str, Any]]
)


class TypeTimeout(Exception):
    """Raised inside a worker when one model type takes longer than its budget."""


def init_worker(
    family_files: Sequence[str] = (),
    heartbeat: IO[str] | None = None,
    hook: str | None = None,
    build: bool = False,
    hook_file: str | None = None,
) -> None:
    """Prepare a worker process: quiet output, transformers imported, init switched off.

    Args:
        family_files: Python files defining plugin families loaded in the parent process.
        heartbeat: the stream to the parent: a ``child/coverage_started`` line at the start of
            each type, so the parent knows what a hung or dead worker was doing.
        hook: ``"module:function"`` called with each model type before it is scanned
            (fault injection for the scan's tests: ``pool._fault_hook``, never set otherwise).
        build: the worker builds real models (``coverage --check``): weight initialization
            stays on, and torch uses one thread (the workers share the CPUs).
        hook_file: the file of the hook's module (an isolated child imports nothing from the
            parent's ``sys.path``); None: imported by its name.
    """
    # Model code may print; the parent's stdout can be JSON output.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the worker
    warnings.simplefilter("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if hook:  # first: a hook that cannot be imported stops the worker before the heavy imports
        _state["hook"] = _import_hook(hook, hook_file)
    import torch
    import transformers  # noqa: F401
    from transformers.initialization import no_init_weights
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    stack = contextlib.ExitStack()
    if build:
        torch.set_num_threads(1)
    else:
        stack.enter_context(no_init_weights())
    _state["stack"] = stack
    _state["heartbeat"] = heartbeat
    if family_files:
        from ..families import load_family_file  # type: ignore[attr-defined]

        for path in family_files:
            load_family_file(path)


def _import_hook(hook: str, hook_file: str | None) -> Callable[[str], None]:
    mod_name, _, func = hook.partition(":")
    if hook_file is None:
        module = importlib.import_module(mod_name)
    else:
        spec = importlib.util.spec_from_file_location(mod_name, hook_file)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {mod_name} from {hook_file}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    return getattr(module, func)  # type: ignore[no-any-return]


def heartbeat(model_type: str) -> None:
    """Tell the parent which type this worker starts (written and flushed before it starts:
    a crash or a hang is then that type's)."""
    stream = _state["heartbeat"]
    if stream is not None:
        stream.write(COVERAGE_STARTED.answer_line(CoverageStarted(model_type, time.time())) + "\n")
        stream.flush()


#: what a worker runs on a chunk, by the name the parent asks for (``task`` of the chunk request)
TASKS = {"scan": "fusion_core.coverage.worker:scan_types", "check": "fusion_core.coverage.checked:check_types"}


def serve() -> int:
    """The worker, in a child of :mod:`fusion_core.run.child`: a ``child/coverage_start`` line,
    its pid once ready, then a ``child/coverage_chunk`` answered per line until stdin ends."""
    line = sys.stdin.readline()
    if not line:  # the parent gave up
        return 0
    # the protocol keeps the real stdout and stderr; the worker's fds 1 and 2 go to /dev/null
    out = os.fdopen(os.dup(1), "w")
    err = os.fdopen(os.dup(2), "w")
    try:
        start = COVERAGE_START.read_request(line)
        init_worker(start.family_files, out, start.hook, start.build, start.hook_file)
    except Exception as e:  # the parent reports that its workers cannot start, with this line
        err.write(f"the coverage worker cannot start: {type(e).__name__}: {e}\n")
        err.flush()
        return 3
    out.write(COVERAGE_START.answer_line(os.getpid()) + "\n")
    out.flush()
    tasks: dict[str, Any] = {}
    for line in sys.stdin:
        chunk = COVERAGE_CHUNK.read_request(line)
        if chunk.task not in tasks:
            mod_name, _, func = TASKS[chunk.task].partition(":")
            tasks[chunk.task] = getattr(importlib.import_module(mod_name), func)
        rows = tasks[chunk.task](chunk.model_types, chunk.family_names, chunk.timeout)
        out.write(COVERAGE_CHUNK.answer_line(rows) + "\n")
        out.flush()
    return 0


def scan_types(model_types: Sequence[str], family_names: Sequence[str], timeout: float) -> list[dict[str, Any]]:
    """Scan ``model_types`` one after the other (the task a worker runs)."""
    out = []
    for model_type in model_types:
        heartbeat(model_type)
        out.append(scan_type(model_type, family_names, timeout))
    return out


def _on_alarm(signum: int, frame: Any) -> None:
    raise TypeTimeout()


@contextlib.contextmanager
def alarm(timeout: float) -> Any:
    """Raise :class:`TypeTimeout` in this (main) thread after ``timeout`` seconds (0: never)."""
    use = timeout > 0 and hasattr(signal, "setitimer")
    if use:
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        yield
    finally:
        if use:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def scan_type(model_type: str, family_names: Sequence[str], timeout: float) -> dict[str, Any]:
    """Default config -> model class -> meta init -> discovery, as a plain dict.

    Never raises for a model's own failure: the result says at which stage it failed
    (``config``, ``class``, ``init``, ``discovery`` or ``timeout``) and why.
    """
    t0 = time.perf_counter()
    result: dict[str, Any] = {"model_type": model_type, "status": "ok", "model_class": "", "class_source": ""}
    stage = "config"
    try:
        with alarm(timeout):
            if _state["hook"] is not None:
                _state["hook"](model_type)
            from transformers import CONFIG_MAPPING

            from ..model.classes import resolve_model_class

            config = CONFIG_MAPPING[model_type]()
            stage = "class"
            cls, source = resolve_model_class(config)
            result["model_class"], result["class_source"] = cls.__name__, source
            stage = "init"
            import torch

            with torch.device("meta"):
                model = cls(config)
            stage = "discovery"
            named = list(model.named_modules())
            result["modules"] = len(named)
            result["families"] = {name: _discover(model, named, config, name) for name in family_names}
            result["convolutions"] = _convolutions(named, result["families"])
    except TypeTimeout:
        result.update(_failure("timeout", "TimeoutError", f"took longer than {timeout:g} s ({stage} stage)"))
    except BaseException as e:  # a model's own failure of any kind is a result, not a crash
        if isinstance(e, KeyboardInterrupt):
            raise
        result.update(_failure(stage, type(e).__name__, str(e)))
    result["seconds"] = round(time.perf_counter() - t0, 4)
    return result


def _failure(stage: str, error_type: str, message: str) -> dict[str, Any]:
    first = next((line.strip() for line in message.splitlines() if line.strip()), "")
    return {"status": "failed", "stage": stage, "error_type": error_type, "error": first[:300]}


#: the convolution families and the Conv class each decides on
_CONV_FAMILIES = {"patch_embeddings": "Conv3d", "patch_embeddings_2d": "Conv2d"}


def _convolutions(named: list[tuple[str, Any]], families: dict[str, Any]) -> dict[str, Any]:
    """Every non-overlapping convolution of the kinds the scanned families decide on, and
    those that no family matched or rejected with a reason (through their host module).

    Folded into the same pass as discovery (same modules, no second build).
    """
    from ..families._conv_patch import overlap_problem

    kinds = {_CONV_FAMILIES[f] for f in families if f in _CONV_FAMILIES}
    if not kinds:
        return {}
    decided: set[str] = set()
    for name, found in families.items():
        if name in _CONV_FAMILIES:
            for entry in (*found["matches"], *found["rejected"]):
                decided.update(entry["modules"])
    total, unexplained = 0, []
    for path, module in named:
        if type(module).__name__ not in kinds or type(module).__module__ != "torch.nn.modules.conv":
            continue
        if overlap_problem(module) is not None:
            continue
        total += 1
        parts = path.split(".")
        hosts = {".".join(parts[:i]) for i in range(len(parts))}  # every ancestor, the root ("") too
        if not hosts & decided:
            unexplained.append(path)
    return {"non_overlapping": total, "unexplained": unexplained[:20]}


def _discover(model: Any, named: list[tuple[str, Any]], config: Any, family: str) -> dict[str, Any]:
    from ..families import get_family
    from ..plan.discovery import discover

    found = discover(model, get_family(family), config=config, named_modules=named, with_transforms=False)
    # grouped per class (and reason): a 80-layer model gives one entry, not 80
    matches: dict[str, dict[str, Any]] = {}
    for m in found.matches:
        key = f"{m.original_class.__module__}.{m.original_class.__qualname__}"
        entry = matches.setdefault(
            key, {"class": m.original_class.__name__, "fused_class": m.fused_class.__name__, "modules": []}
        )
        entry["modules"].append(m.path)
    rejected: dict[tuple[str, str], dict[str, Any]] = {}
    for r in found.rejected:
        entry = rejected.setdefault(
            (r.class_name, r.reason), {"class": r.class_name, "reason": r.reason, "modules": []}
        )
        entry["modules"].append(r.path)
    return {"matches": list(matches.values()), "rejected": list(rejected.values())}
