"""The long operations the GUI runs, as progress generators over the core's public API.

Each function returns a generator *factory* for :meth:`fusion_gui.jobs.JobManager.start`;
the generator runs on a worker thread, so the core (torch, transformers) is imported
there, never on the GUI thread. No tensor math here: these only call the core.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fusion_core import FusionPlan, Inspection

log = logging.getLogger("fusion_gui.operations")
_first_open = threading.Lock()
_engine_settled = False


@contextmanager
def _quiet_gc_first_time() -> Iterator[None]:
    """The first open imports torch and transformers (~1M objects): no cyclic GC meanwhile, then freeze.

    A full collection runs in whichever thread triggers it, holding the GIL: over the
    engine's objects it took 100-200 ms, and the GUI thread waited that long (measured
    with benchmarks/bench_gui.py). Frozen objects are never scanned again; they are
    modules, classes and functions that live as long as the process anyway.
    """
    global _engine_settled
    with _first_open:
        if _engine_settled:
            yield
            return
        gc.disable()
        try:
            yield
        finally:
            gc.enable()
            gc.freeze()
            _engine_settled = True


def open_model(spec: str, *, trust_remote_code: bool = False, cache: bool = True):
    """Resolve ``spec``, build the meta model and tree, and run every family's discovery.

    The generator returns the :class:`fusion_core.Inspection`; discovery results are
    cached in it, so toggling families on the GUI thread costs milliseconds. With
    ``cache``, the tree and discovery are also stored as plain data
    (:mod:`fusion_core.model.cache`) for the next start to paint before torch is imported.
    """

    def gen() -> Generator[Any, None, Inspection]:
        from fusion_core.progress import Progress

        t0 = time.perf_counter()
        yield Progress(0, 4, f"loading the engine for {spec}")
        with _quiet_gc_first_time():
            import fusion_core

            t1 = time.perf_counter()
            source = fusion_core.resolve(spec, trust_remote_code=trust_remote_code)
            insp = fusion_core.inspect_model(source)
            for name in fusion_core.REGISTRY:
                insp.discovery(name)
            insp.model_tensors()  # cached for the plans the GUI thread builds
            if source.checkpoint is not None:
                # built lazily by the first plan otherwise, on the GUI thread: transformers compiles
                # ~1000 regexes for its key renamings (110 ms stall on demo:qwen2-vl, bench_gui.py)
                insp.key_matcher()
        yield Progress(3, 4, f"{source.model_class.__name__}: {len(insp.tree)} modules")
        if cache:
            from fusion_core.model import cache as model_cache

            model_cache.save(spec, insp, list(fusion_core.REGISTRY))  # the next start paints it at once
        t2 = time.perf_counter()
        log.info(
            "opened %s: %s, %d modules, engine import %.2f s, open + discovery %.2f s",
            spec,
            source.describe(),
            len(insp.tree),
            t1 - t0,
            t2 - t1,
        )
        yield Progress(4, 4, "done")
        return insp

    return gen


def run_checks(plan: FusionPlan, *, dtype: str, repeats: int, upstream: bool, **workload: Any):
    """Fused load + checks of ``plan``, the plan the window shows (``fusion_core.run.checks.iter_check``);
    returns its CheckResult. ``workload``: iter_check's other options (device, image_size, batch...)."""

    def gen():
        from fusion_core.run.checks import iter_check

        log.info(
            "checks: %s, %s, dtype %s, %d repeats, %s", plan.model, list(plan.fusion_config), dtype, repeats, workload
        )
        result = yield from iter_check(plan, dtype=dtype, repeats=repeats, upstream=upstream, **workload)
        return result

    return gen


def run_export(
    plan: FusionPlan,
    out_dir: Path,
    *,
    layout: str,
    max_shard_size: int | str,
    overwrite: bool,
    on_wrong_load: str = "guard",
):
    """Export a converted checkpoint (``fusion_core.export.pipeline.iter_export``); returns its ExportResult.

    The result names its consumers (``result.consumers``), found by loading the export.
    """

    def gen():
        from fusion_core.export.pipeline import iter_export

        log.info("export: %s -> %s (layout %s, shards <= %s)", plan.model, out_dir, layout, max_shard_size)
        result = yield from iter_export(
            plan,
            out_dir,
            layout=layout,
            max_shard_size=max_shard_size,
            overwrite=overwrite,
            on_wrong_load=on_wrong_load,
        )
        return result

    return gen


def open_dialog_lists() -> dict[str, Any]:
    """The lists the Open dialog offers: demos, model types, cached hub models."""
    import fusion_core
    from fusion_core.model.demo import DEMOS

    return {
        "demos": [(name, demo.description) for name, demo in DEMOS.items()],
        "arch": fusion_core.known_model_types(),
        "hub": fusion_core.cached_hub_models(),
    }
