"""Who can load an export, found by loading it: stock transformers and our own loader.

:func:`try_consumers` runs one child process (``python -I -m fusion_core.run.child`` serving this module,
in an empty working directory: no code from the model folder or the caller's directory is
imported) that loads the source model plainly, runs it on seeded synthetic inputs, then
loads the written export twice and compares each one's main output with the source's:

- ``fusion_core.load(path)``, our loader (reads ``fusion_config`` from config.json);
- ``<ModelClass>.from_pretrained(path)`` with the installed transformers, which also reads
  ``fusion_config`` from config.json and applies the fusions it knows itself.

Our loader runs first: transformers' fusion registries are process-wide and leak into later
loads (DESIGN.md, upstream defect 3), which is also why this happens in a separate process.
Its comparison is also the export's output check (:func:`fusion_core.export.verify.compare_outputs`,
exact for an original-layout export): the export is loaded here only, never in the caller's process.
The inputs are those of a check (:func:`fusion_core.export.verify.export_runs`: image+text,
video+text, audio+text through the model's processor), and each run compares the main output
and each vision or audio tower's output (``compared``). Each consumer gets a status:
``"loads exactly"`` (outputs within the tolerance of the comparison's dtype), ``"refuses to
load"`` (an exception), ``"loads wrong"`` (missing or unexpected keys, or other outputs), or
``"loads, outputs not compared"`` (it loads, but no input could be made to run the source).

Memory: the child holds one model at a time (the source's outputs are kept and the source
freed before the export is loaded; each consumer's model is freed before the next loads).
The source and every consumer are loaded at one dtype (:func:`comparison_dtype`): float32
where one model's float32 weights (x :data:`~fusion_core.run.offload.HEADROOM`) fit in the memory available, else
the checkpoint's own dtype (a 16.6 GB bfloat16 checkpoint would need 33 GB per model in
float32); the tolerance and the ``detail`` then say which dtype and why. The child prints
what it loads next; when a signal ends it (SIGKILL: likely the kernel's out-of-memory
killer), :meth:`ConsumerProbe.run` says "out of memory: ..." with what it was loading.
"""

from __future__ import annotations

import contextlib
import gc
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..boundary.ops import Op
from ..errors import ExportError, FusionError, naming, one_line
from ..run.isolated import child_for, killed_by
from .result import Consumer, ConsumersAnswer

__all__ = [
    "LOADS_EXACTLY",
    "LOADS_NOT_COMPARED",
    "LOADS_WRONG",
    "REFUSES",
    "comparison_dtype",
    "predicted_consumers",
    "transformers_accepts",
    "try_consumers",
    "unknown_to_transformers",
]

LOADS_EXACTLY = "loads exactly"
LOADS_NOT_COMPARED = "loads, outputs not compared"
REFUSES = "refuses to load"
LOADS_WRONG = "loads wrong"


@dataclass(frozen=True)
class ConsumersSourceParams:
    """The consumers' child, first line: the source to load and run while the export is written."""

    source: str
    paths: list[str]
    trust_remote_code: bool = False
    dtype: str = "auto"
    dtype_why: str = ""
    max_memory: int | None = None


@dataclass(frozen=True)
class ConsumersTryParams:
    """The consumers' child, second line: the written folder to load with each consumer."""

    written: str
    shown_as: str
    exact: bool = False
    max_memory: int | None = None


@dataclass(frozen=True)
class LoadingParams:
    """The child says what it loads next (named if a signal ends it: out of memory)."""

    what: str


# the consumers' child's operations (in fusion_core.host.ops.CHILD_OPS)
CONSUMERS_SOURCE: Op[ConsumersSourceParams, None] = Op("child/consumers_source", ConsumersSourceParams, type(None))
CONSUMERS_TRY: Op[ConsumersTryParams, ConsumersAnswer] = Op("child/consumers_try", ConsumersTryParams, ConsumersAnswer)
LOADING: Op[LoadingParams, LoadingParams] = Op("child/loading", LoadingParams, LoadingParams)  # a notification


@dataclass
class CompareAt:
    """The dtype the consumers' child loads the source and each consumer at, and why."""

    dtype: str
    #: why it is not plain float32 ("" when float32 fits), e.g. "float32 would need 33.1 GiB, 21.9 GiB available"
    why: str
    #: bytes of one model's weights at ``dtype`` (0: unknown)
    nbytes: int


def comparison_dtype(folder: Path, requested: str = "auto", max_memory: int | None = None) -> CompareAt:
    """The dtype to verify an export of ``folder`` at: float32 where one model's weights in
    float32 (times :data:`~fusion_core.run.offload.HEADROOM`, as a check's) fit in the memory available now, else the
    checkpoint's own dtype (the floating dtype holding most of its bytes, from its headers).

    The child holds one model at a time (the source's outputs are kept, the source freed,
    then each consumer in turn), so one model has to fit. ``requested`` other than ``"auto"``
    is used as given (``"float32"``, ``"bfloat16"``, ``"float16"``).
    """
    from ..boundary.options import DTYPE_TOLERANCES
    from ..model.checkpoint import read_index
    from ..run.modules import _size, available_bytes, checkpoint_bytes
    from ..run.offload import HEADROOM

    if requested != "auto" and requested not in DTYPE_TOLERANCES:
        raise ExportError(f"cannot compare outputs in {requested!r:.40}; choose auto or {', '.join(DTYPE_TOLERANCES)}")
    try:
        ckpt = read_index(Path(folder))
    except (FusionError, OSError, ValueError):
        ckpt = None
    if requested != "auto":
        return CompareAt(requested, "asked", checkpoint_bytes(ckpt, requested) if ckpt else 0)
    if ckpt is None:
        return CompareAt("float32", "", 0)
    need = checkpoint_bytes(ckpt, "float32")
    have = available_bytes()
    if max_memory is not None:  # the budget the user set (the models are offloaded beyond it)
        have = max_memory if have is None else min(have, max_memory)
    if have is None or need * HEADROOM <= have:
        return CompareAt("float32", "", need)
    why = f"float32 would need {_size(need * HEADROOM)}, {_size(have)} available"
    by_dtype: dict[str, int] = {}
    for info in ckpt.tensors.values():
        if info.torch_dtype in DTYPE_TOLERANCES:  # the dtypes a comparison can run at
            by_dtype[info.torch_dtype] = by_dtype.get(info.torch_dtype, 0) + info.nbytes
    stored = max(by_dtype, key=lambda d: by_dtype[d]) if by_dtype else "float32"
    if stored == "float32":  # nothing smaller that is the checkpoint's own: try float32 all the same
        return CompareAt("float32", why + "; the checkpoint is float32", need)
    return CompareAt(stored, why, checkpoint_bytes(ckpt, stored))


class ConsumerProbe:
    """The consumers' child process, started before the export is written.

    The child (``python -I``, empty working folder: :func:`fusion_core.run.isolated.child_for`)
    imports torch and transformers, loads the source model and picks its inputs while the
    parent writes; :meth:`run` then hands it the written folder. One probe answers once.

    Args:
        source_folder: the exported model's folder (the reference).
        paths: the fused module paths (their inputs shape the synthetic inputs).
        trust_remote_code: passed to both loaders.
        dtype: the dtype the source and each consumer are loaded and compared at
            (:func:`comparison_dtype`: ``"auto"`` is float32 where it fits in memory, else the
            checkpoint's own dtype).
    """

    def __init__(
        self,
        source_folder: Path,
        paths: list[str],
        *,
        trust_remote_code: bool = False,
        dtype: str = "auto",
        max_memory: int | None = None,
    ) -> None:
        self.comparison = comparison_dtype(source_folder, dtype, max_memory)
        self._source_name = Path(source_folder).name
        self._max_memory = max_memory
        self._child = child_for("fusion_core.export.consumers", prefix="fusion-core-consumers-")
        first = ConsumersSourceParams(
            source=str(Path(source_folder).resolve()),
            paths=list(paths),
            trust_remote_code=trust_remote_code,
            dtype=self.comparison.dtype,
            dtype_why=self.comparison.why,
            max_memory=max_memory,
        )
        self._child.send(CONSUMERS_SOURCE.request_line(first))

    def run(self, written: Path, shown_as: Path, *, exact: bool = False, timeout: float = 1800) -> ConsumersAnswer:
        """Load ``written`` with each consumer and compare with the source: our loader, then transformers.

        Args:
            written: the folder to load (the export, possibly not yet in place).
            shown_as: the path a user will load it from (used in ``how``).
            exact: our loader's outputs must equal the source's bitwise (an original-layout
                export), not only within the tolerance of the comparison's dtype.
            timeout: seconds before the probe is abandoned.

        Raises:
            ExportError: the child process failed or did not answer (killed by a signal: "out
                of memory: ..." for SIGKILL, with what it was loading), or its answer is not
                understood.
        """
        request = ConsumersTryParams(str(Path(written).resolve()), str(shown_as), exact, self._max_memory)
        self._child.send(CONSUMERS_TRY.request_line(request))
        try:
            done = self._child.finish(timeout)
        except subprocess.TimeoutExpired:
            raise ExportError(
                f"trying the consumers of {written} took over {timeout:.0f}s; nothing was written"
            ) from None
        try:
            answer = CONSUMERS_TRY.find_answer(done.stdout)
        except ValueError as e:  # PlainDataError, JSONDecodeError
            raise ExportError(f"the consumers' answer is not understood ({e}); nothing was written") from None
        if answer is not None:
            return answer
        ended = killed_by(done.returncode)
        if ended:
            raise self._killed(ended, done.stdout)
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ExportError(f"trying the consumers of the export failed ({one_line(last)}); nothing was written")

    def _killed(self, ended: str, stdout: str) -> ExportError:
        """The error for a child a signal ended, naming what it was loading (its last stage line)."""
        from ..run.modules import _size

        try:
            stage = LOADING.find_answer(stdout)
        except ValueError:
            stage = None
        what = stage.what if stage is not None else f"the source model {self._source_name} (or about to)"
        c = self.comparison
        size = f", about {_size(c.nbytes)}" if c.nbytes else ""
        oom = "out of memory: " if ended.startswith("killed by signal 9 ") else ""
        return naming(
            ExportError(
                f"{oom}the consumers' child (loading {what} at {c.dtype}{size}) was {ended}; nothing was written; "
                "skip the output check (verify_outputs) or use a machine with more memory"
            ),
            "verify_outputs",
        )

    def close(self) -> None:
        """Stop the child when no export will be handed to it (an error, a cancel)."""
        self._child.close()


def try_consumers(
    source_folder: Path,
    written: Path,
    shown_as: Path,
    paths: list[str],
    *,
    trust_remote_code: bool = False,
    timeout: float = 1800,
    max_memory: int | None = None,
) -> list[Consumer]:
    """Load ``written`` with each consumer in a child process and compare with the source
    (a :class:`ConsumerProbe` started and run at once; see there)."""
    probe = ConsumerProbe(source_folder, paths, trust_remote_code=trust_remote_code, max_memory=max_memory)
    try:
        return probe.run(written, shown_as, timeout=timeout).consumers
    finally:
        probe.close()


def transformers_accepts(recorded: dict[str, Any]) -> bool:
    """Whether the installed transformers accepts one of these family names (it would fuse on load).

    Asks transformers' own validation of ``fusion_config`` (no table of ours).
    """
    try:
        from transformers.fusion_mapping import _iter_enabled_fusions
    except ImportError:  # another transformers: assume it may
        return True
    for name, opts in recorded.items():
        try:
            if _iter_enabled_fusions({name: opts}):
                return True
        except ValueError:
            continue
    return False


def unknown_to_transformers(folder: Path) -> str:
    """Why stock transformers refuses ``folder``'s ``fusion_config`` where it names families the installed
    transformers does not fuse on load (``" (...)"``, after its "Unknown fusion type"), else ``""``."""
    try:
        recorded = json.loads((folder / "config.json").read_text()).get("fusion_config")
    except (OSError, ValueError, AttributeError):
        return ""
    unknown = [str(n) for n in recorded if not transformers_accepts({n: True})] if isinstance(recorded, dict) else []
    if not unknown:
        return ""
    import transformers

    try:
        from transformers.fusion_mapping import _FUSION_REGISTRY

        knows = f"only {', '.join(sorted(_FUSION_REGISTRY))}" if _FUSION_REGISTRY else "no family"
    except ImportError:
        knows = "no family"
    return (
        f" (transformers {transformers.__version__} fuses {knows} on load, and this fused-layout export's "
        f"config.json names {', '.join(unknown)} in fusion_config: fusion_core.load reads it; "
        "an export in the original layout is one stock transformers loads)"
    )


def predicted_consumers(plan: Any, layout: str, dest: str = "OUT") -> list[Consumer]:
    """A dry run before writing: the consumers as far as the plan tells, without loading.

    The transformers status is known only where transformers refuses the family names (or
    for the original layout, which carries no ``fusion_config``); otherwise it is
    ``"tried after writing"``: the export loads it, and guards or refuses what it loads wrong.
    """
    import transformers

    import fusion_core

    where = json.dumps(dest)
    cls = plan.model_class
    recorded = {f.name: f.options or True for f in plan.families if f.discovery.matches}
    ours = Consumer(
        f"fusion_core {fusion_core.__version__}",
        LOADS_EXACTLY,
        f"fusion_core.load({where})",
        "predicted; verified by loading after writing",
    )
    stock = Consumer(f"transformers {transformers.__version__}", "", f"transformers.{cls}.from_pretrained({where})")
    if layout == "original" or not recorded:
        stock.status, stock.detail = LOADS_EXACTLY, "predicted: no fusion_config, a plain model"
    elif not transformers_accepts(recorded):
        stock.status, stock.detail = REFUSES, f"predicted: it does not know the families {', '.join(recorded)}"
    else:
        stock.status = "tried after writing"
        stock.detail = "it knows the family name; loaded after writing, guarded or refused if wrong"
    return [ours, stock]


def _loading(what: str) -> None:
    """Say what the child loads next (the parent names it if the child is killed, e.g. out of memory)."""
    sys.stdout.write("\n" + LOADING.answer_line(LoadingParams(what)) + "\n")
    sys.stdout.flush()


def _prepare(first: ConsumersSourceParams) -> tuple[Any, Any, bool, CompareAt]:
    """(the source model's class, its picked inputs and outputs or None, trust, the dtype):
    before the export exists. The source is freed before this returns: its outputs are kept."""
    import torch

    from ..api import load_plain
    from .verify import export_runs, rounding_floors

    trust = first.trust_remote_code
    source = Path(first.source)
    dtype = first.dtype or "auto"
    comparison = comparison_dtype(source, dtype) if dtype == "auto" else CompareAt(dtype, first.dtype_why, 0)
    _loading(f"the source model {source.name}")
    max_memory = first.max_memory
    paths = list(first.paths)
    with contextlib.ExitStack() as stack:
        if max_memory is None:
            reference = load_plain(source, dtype=comparison.dtype, trust_remote_code=trust).eval()
        else:  # beyond the budget, blocks stay on disk (accelerate's device_map)
            reference = _offloaded_source(source, comparison.dtype, int(max_memory), trust, stack)
        cls = type(reference)
        with torch.inference_mode():
            runs = export_runs(reference, paths, source)
        if comparison.dtype != "float32" and runs:
            from ..run.switch import offloaded_paths

            on_disk = set(offloaded_paths(reference, paths))
            rounding_floors(reference, runs, [p for p in paths if p not in on_disk], comparison.dtype)
        del reference  # one model at a time: the consumers are loaded after this
    gc.collect()
    return cls, runs, trust, comparison


def _offloaded_source(source: Path, dtype: str, max_memory: int, trust: bool, stack: Any) -> Any:
    """The source model placed by the memory plan for ``max_memory`` (what it reads from held on ``stack``)."""
    from ..plan.fusion_plan import as_plan
    from ..run.loading import load_original
    from ..run.offload import memory_plan

    plan = as_plan(str(source), trust_remote_code=trust)
    memory = memory_plan(plan, dtype, "cpu", max_memory)
    return load_original(plan, dtype=dtype, device_map=memory.device_map, keep=stack).eval()


def _probe(prepared: tuple[Any, Any, bool, CompareAt], spec: ConsumersTryParams) -> ConsumersAnswer:
    import torch
    import transformers

    import fusion_core

    from ..api import load
    from .verify import compare_outputs, dtype_note

    cls, runs, trust, comparison = prepared
    dtype = comparison.dtype
    max_memory = spec.max_memory
    note = dtype_note(dtype, comparison.why)
    where = json.dumps(spec.shown_as)
    exact = spec.exact
    consumers: list[Consumer] = []
    answer = ConsumersAnswer(consumers)

    def judge(name: str, how: str, loader: Any, *, outputs: bool = False) -> None:
        entry = Consumer(name, REFUSES, how)
        consumers.append(entry)
        try:
            model, problems = loader()
        except Exception as e:  # any failure to load is the consumer refusing
            entry.detail = one_line(e, named=True, first=True)
            if loader is stock:
                entry.detail += unknown_to_transformers(Path(spec.written))
            return
        try:
            rate(entry, model, problems, outputs)
        finally:  # one model at a time: freed before the next consumer loads
            del model
            gc.collect()

    def rate(entry: Consumer, model: Any, problems: list[str], outputs: bool) -> None:
        if problems:
            entry.status, entry.detail = LOADS_WRONG, "; ".join(problems)
        elif not runs:
            entry.status = LOADS_NOT_COMPARED
            entry.detail = "no missing or unexpected keys; no input could be made that the source model runs"
            if outputs:
                answer.outputs = compare_outputs(runs, model, fused=True, dtype=dtype, why=comparison.why)
        else:
            try:  # our loader's comparison is also the export's output check: exact where asked
                compared = compare_outputs(
                    runs, model.eval(), fused=not (outputs and exact), dtype=dtype, why=comparison.why
                )
            except Exception as e:  # loads but cannot run: loaded wrong
                entry.status = LOADS_WRONG
                entry.detail = f"loads, but does not run: {one_line(e, named=True, first=True)}"
                return
            worst = compared["max_abs_diff"]
            entry.max_abs_diff, entry.compared = worst, compared["compared"]
            if compared["passed"]:
                entry.status, entry.detail = LOADS_EXACTLY, f"outputs match (max abs diff {worst:.2g})"
                if note:
                    entry.detail = f"outputs match (max abs diff {worst:.2g}; {compared['tolerance']})"
            else:
                entry.status = LOADS_WRONG
                entry.detail = f"outputs differ from the source model's ({compared['differs']})"
                if note:
                    entry.detail = f"outputs differ from the source model's ({compared['differs']}; {note})"
            if outputs:
                answer.outputs = compared

    def ours() -> tuple[Any, list[str]]:
        _loading("the export with fusion_core")
        return load(spec.written, dtype=dtype, trust_remote_code=trust, max_memory=max_memory).model, []

    def stock() -> tuple[Any, list[str]]:
        _loading("the export with transformers")
        kwargs: dict[str, Any] = {"dtype": getattr(torch, dtype), "output_loading_info": True}
        if max_memory is not None:  # accelerate's own placement for the budget, as a user would ask it
            kwargs.update(device_map="auto", max_memory={"cpu": int(max_memory)}, offload_folder=stock_folder)
        model, info = cls.from_pretrained(spec.written, trust_remote_code=trust, **kwargs)
        problems = []
        for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
            items = sorted(str(k) for k in info.get(kind) or [])
            if items:
                more = f" (and {len(items) - 5} more)" if len(items) > 5 else ""
                problems.append(f"{kind.replace('_', ' ')}: {', '.join(items[:5])}{more}")
        return model, problems

    import tempfile

    with tempfile.TemporaryDirectory(prefix="fusion-offload-") as stock_folder:
        judge(f"fusion_core {fusion_core.__version__}", f"fusion_core.load({where})", ours, outputs=True)
        judge(
            f"transformers {transformers.__version__}", f"transformers.{cls.__name__}.from_pretrained({where})", stock
        )
    return answer


def serve() -> int:
    """The probe, in a child of :mod:`fusion_core.run.child`: the source line, then the written one."""
    first = sys.stdin.readline()
    if not first:  # the parent gave up before asking anything
        return 0
    prepared = _prepare(CONSUMERS_SOURCE.read_request(first))  # the source, while the export is written
    line = sys.stdin.readline()
    if not line:  # the parent gave up (an error, a cancel)
        return 0
    result = _probe(prepared, CONSUMERS_TRY.read_request(line))
    sys.stdout.write("\n" + CONSUMERS_TRY.answer_line(result) + "\n")
    return 0
