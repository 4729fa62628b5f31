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
``"loads exactly"`` (outputs within the float32 tolerance of the source's), ``"refuses to
load"`` (an exception), ``"loads wrong"`` (missing or unexpected keys, or other outputs), or
``"loads, outputs not compared"`` (it loads, but no input could be made to run the source).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..boundary.convert import from_plain, to_plain
from ..errors import ExportError, one_line
from ..run.isolated import child_for
from .result import Consumer

__all__ = [
    "LOADS_EXACTLY",
    "LOADS_NOT_COMPARED",
    "LOADS_WRONG",
    "REFUSES",
    "predicted_consumers",
    "transformers_accepts",
    "try_consumers",
]

LOADS_EXACTLY = "loads exactly"
LOADS_NOT_COMPARED = "loads, outputs not compared"
REFUSES = "refuses to load"
LOADS_WRONG = "loads wrong"
_MARK = "FUSION_CORE_CONSUMERS "


@dataclass
class ConsumersAnswer:
    """The consumers' child's answer: each consumer, and our loader's comparison in full."""

    consumers: list[Consumer]
    #: :func:`fusion_core.export.verify.compare_outputs` on the export as our loader loads it
    #: (None: it did not load, or did not run)
    outputs: dict[str, Any] | None = None


class ConsumerProbe:
    """The consumers' child process, started before the export is written.

    The child (``python -I``, empty working folder: :func:`fusion_core.run.isolated.child_for`)
    imports torch and transformers, loads the source model and picks its inputs while the
    parent writes; :meth:`run` then hands it the written folder. One probe answers once.

    Args:
        source_folder: the exported model's folder (the reference).
        paths: the fused module paths (their inputs shape the synthetic inputs).
        trust_remote_code: passed to both loaders.
    """

    def __init__(self, source_folder: Path, paths: list[str], *, trust_remote_code: bool = False) -> None:
        self._child = child_for("fusion_core.export.consumers", prefix="fusion-core-consumers-")
        first = {"source": str(Path(source_folder).resolve()), "paths": paths, "trust_remote_code": trust_remote_code}
        self._child.send(json.dumps(first))

    def run(self, written: Path, shown_as: Path, *, exact: bool = False, timeout: float = 1800) -> ConsumersAnswer:
        """Load ``written`` with each consumer and compare with the source: our loader, then transformers.

        Args:
            written: the folder to load (the export, possibly not yet in place).
            shown_as: the path a user will load it from (used in ``how``).
            exact: our loader's outputs must equal the source's bitwise (an original-layout
                export), not only within the float32 tolerance.
            timeout: seconds before the probe is abandoned.

        Raises:
            ExportError: the child process failed or did not answer, or its answer is not
                understood.
        """
        request = {"written": str(Path(written).resolve()), "shown_as": str(shown_as), "exact": exact}
        self._child.send(json.dumps(request))
        try:
            done = self._child.finish(timeout)
        except subprocess.TimeoutExpired:
            raise ExportError(
                f"trying the consumers of {written} took over {timeout:.0f}s; nothing was written"
            ) from None
        for line in reversed(done.stdout.splitlines()):
            if line.startswith(_MARK):
                try:
                    return from_plain(ConsumersAnswer, json.loads(line[len(_MARK) :]))
                except ValueError as e:  # PlainDataError, JSONDecodeError
                    raise ExportError(f"the consumers' answer is not understood ({e}); nothing was written") from None
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ExportError(f"trying the consumers of the export failed ({one_line(last)}); nothing was written")

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
) -> list[Consumer]:
    """Load ``written`` with each consumer in a child process and compare with the source
    (a :class:`ConsumerProbe` started and run at once; see there)."""
    probe = ConsumerProbe(source_folder, paths, trust_remote_code=trust_remote_code)
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


def _prepare(first: dict[str, Any]) -> tuple[Any, Any, bool]:
    """(the source model's class, its picked inputs and outputs or None, trust): before the export exists."""
    import torch

    from ..run.loading import load_plain
    from .verify import export_runs

    trust = bool(first["trust_remote_code"])
    reference = load_plain(first["source"], dtype="float32", trust_remote_code=trust).eval()
    with torch.inference_mode():
        runs = export_runs(reference, list(first["paths"]), Path(first["source"]))
    return type(reference), runs, trust


def _probe(prepared: tuple[Any, Any, bool], spec: dict[str, Any]) -> ConsumersAnswer:
    import torch
    import transformers

    import fusion_core

    from ..run.loading import load
    from .verify import compare_outputs

    cls, runs, trust = prepared
    where = json.dumps(spec["shown_as"])
    exact = bool(spec.get("exact"))
    consumers: list[Consumer] = []
    answer = ConsumersAnswer(consumers)

    def judge(name: str, how: str, loader: Any, *, outputs: bool = False) -> None:
        entry = Consumer(name, REFUSES, how)
        consumers.append(entry)
        try:
            model, problems = loader()
        except Exception as e:  # any failure to load is the consumer refusing
            entry.detail = one_line(e, named=True, first=True)
            return
        if problems:
            entry.status, entry.detail = LOADS_WRONG, "; ".join(problems)
        elif not runs:
            entry.status = LOADS_NOT_COMPARED
            entry.detail = "no missing or unexpected keys; no input could be made that the source model runs"
            if outputs:
                answer.outputs = compare_outputs(runs, model, fused=True)
        else:
            try:  # our loader's comparison is also the export's output check: exact where asked
                compared = compare_outputs(runs, model.eval(), fused=not (outputs and exact))
            except Exception as e:  # loads but cannot run: loaded wrong
                entry.status = LOADS_WRONG
                entry.detail = f"loads, but does not run: {one_line(e, named=True, first=True)}"
                return
            worst = compared["max_abs_diff"]
            entry.max_abs_diff, entry.compared = worst, compared["compared"]
            if compared["passed"]:
                entry.status, entry.detail = LOADS_EXACTLY, f"outputs match (max abs diff {worst:.2g})"
            else:
                entry.status = LOADS_WRONG
                entry.detail = f"outputs differ from the source model's ({compared['differs']})"
            if outputs:
                answer.outputs = compared

    def ours() -> tuple[Any, list[str]]:
        return load(spec["written"], dtype="float32", trust_remote_code=trust).model, []

    def stock() -> tuple[Any, list[str]]:
        model, info = cls.from_pretrained(
            spec["written"], dtype=torch.float32, output_loading_info=True, trust_remote_code=trust
        )
        problems = []
        for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
            items = sorted(str(k) for k in info.get(kind) or [])
            if items:
                more = f" (and {len(items) - 5} more)" if len(items) > 5 else ""
                problems.append(f"{kind.replace('_', ' ')}: {', '.join(items[:5])}{more}")
        return model, problems

    judge(f"fusion_core {fusion_core.__version__}", f"fusion_core.load({where})", ours, outputs=True)
    judge(f"transformers {transformers.__version__}", f"transformers.{cls.__name__}.from_pretrained({where})", stock)
    return answer


def serve() -> int:
    """The probe, in a child of :mod:`fusion_core.run.child`: the source line, then the written one."""
    first = sys.stdin.readline()
    if not first:  # the parent gave up before asking anything
        return 0
    prepared = _prepare(json.loads(first))  # the source, while the export is written
    line = sys.stdin.readline()
    if not line:  # the parent gave up (an error, a cancel)
        return 0
    result = _probe(prepared, json.loads(line))
    sys.stdout.write("\n" + _MARK + json.dumps(to_plain(result)) + "\n")
    return 0
