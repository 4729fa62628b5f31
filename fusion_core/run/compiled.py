"""``check --compile``: the original and the fused model under ``torch.compile``, side by side.

People who deploy compile their models, and the compiler fuses on its own: a fusion that
pays eagerly may pay nothing once compiled. This runs the end-to-end entry of the check's
one model (:mod:`fusion_core.run.switch` puts either form in place) through one compiled
callable. Dynamo guards on the module objects, so switching forms compiles the fused
form once and then picks the right graph per call; the backend is wrapped to count the
graphs each form compiled to (one more than its graph breaks), and a fused form that
compiled no graph of its own is refused, not timed (it would be the original timed twice).
"""

from __future__ import annotations

import time
from typing import Any

from ..boundary.options import OptionError, TimingOptions, Workload
from ..progress import Cancelled
from .results import Comparison, CompiledRun, compare, main_output
from .timing import measure


def require_backend(backend: str) -> None:
    """Refuse a backend torch does not know, before any model is loaded (:class:`OptionError`)."""
    import torch

    known = torch._dynamo.list_backends(exclude_tags=())
    if backend not in known:
        raise OptionError("compile", f"{backend[:40]!r} is not a torch.compile backend (known: {', '.join(known)})")


def compiled_run(
    inputs: Any,
    original: Any,
    switch: Any,
    workload: Workload,
    timing: TimingOptions,
    backend: str,
    eager: Comparison | None,
) -> CompiledRun:
    """Compile the check's entry once, run both forms through it, compare and time them.

    ``inputs`` is the end-to-end run that was timed eagerly; ``eager`` its comparison, whose
    rounding floor (reduced precision) the compiled comparison inherits.
    """
    import torch

    entry = original.get_submodule(inputs.entry) if inputs.entry else original
    graphs: dict[bool, int] = {False: 0, True: 0}
    form = [False]
    inner = torch._dynamo.lookup_backend(backend)

    def counting(gm: Any, example_inputs: Any) -> Any:  # a graph of the form now in place
        graphs[form[0]] += 1
        return inner(gm, example_inputs)

    torch._dynamo.reset()
    compiled = torch.compile(entry, backend=counting, dynamic=False)

    def run(fused: bool) -> Any:
        form[0] = fused
        switch.use(fused)
        return compiled(**inputs.kwargs)

    result = CompiledRun(backend)
    try:
        with torch.inference_mode():
            t0 = time.perf_counter()
            out_o = run(False)
            result.compile_s_original = time.perf_counter() - t0
            t0 = time.perf_counter()
            out_f = run(True)
            result.compile_s_fused = time.perf_counter() - t0
            result.graphs_original, result.graphs_fused = graphs[False], graphs[True]
            if not graphs[True]:
                result.skipped = (
                    "not run: the compiler reused the original's graphs for the fused form "
                    "(its guards did not see the fused modules)"
                )
                return result
            comparison = compare(main_output(out_o)[1], main_output(out_f)[1], workload.dtype)
            if eager is not None:
                comparison.floor = eager.floor
            result.comparison = comparison
            del out_o, out_f
            result.timing = measure(
                lambda: run(False), lambda: run(True), timing, device=workload.device, seed=workload.seed
            )
    except Cancelled:
        raise
    except Exception as e:  # a model the compiler cannot trace: a finding about the compiler, said as such
        text = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        result.skipped = f"not run: torch.compile failed: {type(e).__name__}: {text}"
        result.comparison = result.timing = None
    finally:
        switch.use(False)
        torch._dynamo.reset()  # the graphs hold the model's tensors
    return result
