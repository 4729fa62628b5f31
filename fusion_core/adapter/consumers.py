"""Who loads a converted adapter, found by loading it with PEFT: on our fused load and on stock transformers.

One child process (``python -I -m fusion_core.run.child`` serving this module, in an empty folder:
:func:`fusion_core.run.isolated.child_for`) imports torch, transformers and PEFT and picks
the base model's synthetic inputs while the parent writes. Then:

- the *reference*: the source adapter on its own layout (``PeftModel.from_pretrained`` on
  stock transformers for the original layout, on ``fusion_core.load`` for the fused one);
- the consumers of the written adapter: PEFT on ``fusion_core.load`` (fused layout) and
  PEFT on stock transformers (original layout), each with a status against the
  reference's main output: ``loads exactly``, ``refuses to load`` or ``loads wrong``;
- the merged weights (``merge_and_unload``) of the written adapter on its layout against
  the reference's, through the plan's own key transforms.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..boundary.ops import Op
from ..errors import AdapterError, naming, one_line
from ..export.consumers import LOADS_EXACTLY, LOADS_WRONG, REFUSES
from ..export.result import Consumer
from ..run.isolated import child_for, killed_by
from .result import ProbeAnswer

__all__ = ["ADAPTER_BASE", "ADAPTER_TRY", "AdapterBaseParams", "AdapterProbe", "AdapterTryParams", "ProbeAnswer"]


@dataclass(frozen=True)
class AdapterBaseParams:
    """The child's first line: the base model (fused as ``fusion_config`` says for its fused layout)."""

    base: str
    fusion_config: dict[str, Any]
    paths: list[str]
    trust_remote_code: bool = False


@dataclass(frozen=True)
class AdapterTryParams:
    """The child's second line: the source adapter and the written one."""

    source: str
    source_layout: str
    written: str
    shown_as: str


# the adapter consumers' child's operations (in fusion_core.host.ops.CHILD_OPS)
ADAPTER_BASE: Op[AdapterBaseParams, None] = Op("child/adapter_base", AdapterBaseParams, type(None))
ADAPTER_TRY: Op[AdapterTryParams, ProbeAnswer] = Op("child/adapter_try", AdapterTryParams, ProbeAnswer)


class AdapterProbe:
    """The child process, started before the adapter is written (one probe answers once)."""

    def __init__(self, base: Path, plan: Any, *, trust_remote_code: bool = False) -> None:
        self._child = child_for("fusion_core.adapter.consumers", prefix="fusion-core-adapter-")
        paths = [m.path for fam in plan.families for m in fam.discovery.matches]
        first = AdapterBaseParams(str(Path(base).resolve()), dict(plan.fusion_config), paths, trust_remote_code)
        self._child.send(ADAPTER_BASE.request_line(first))

    def run(
        self, source: Path, source_layout: str, written: Path, shown_as: Path, *, timeout: float = 1800
    ) -> ProbeAnswer:
        """Load both adapters with PEFT and compare.

        Raises:
            AdapterError: the child failed, or its answer is not understood.
        """
        request = AdapterTryParams(
            str(Path(source).resolve()), source_layout, str(Path(written).resolve()), str(shown_as)
        )
        self._child.send(ADAPTER_TRY.request_line(request))
        try:
            done = self._child.finish(timeout)
        except subprocess.TimeoutExpired:
            raise AdapterError(f"verifying the adapter took over {timeout:.0f}s; nothing was written") from None
        try:
            answer = ADAPTER_TRY.find_answer(done.stdout)
        except ValueError as e:  # PlainDataError, JSONDecodeError
            raise AdapterError(f"the adapter verification's answer is not understood ({e})") from None
        if answer is not None:
            return answer
        ended = killed_by(done.returncode)
        if ended:
            raise naming(
                AdapterError(
                    f"verifying the adapter with PEFT failed: its child was {ended}; nothing was written; "
                    "skip the output check (verify_outputs) or use a machine with more memory"
                ),
                "verify_outputs",
            )
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise AdapterError(f"verifying the adapter with PEFT failed ({one_line(last)}); nothing was written")

    def close(self) -> None:
        self._child.close()


def _prepare(first: AdapterBaseParams) -> dict[str, Any]:
    import torch

    from ..api import load_plain
    from ..export.verify import pick_inputs
    from ..plan.fusion_plan import as_plan

    trust = first.trust_remote_code
    plan = as_plan(first.base, first.fusion_config, trust_remote_code=trust)
    reference = load_plain(plan, dtype="float32").eval()
    with torch.inference_mode():
        found = pick_inputs(reference, list(first.paths))
    return {"base": first.base, "plan": plan, "cls": type(reference), "found": found, "trust": trust}


def _stock(ctx: dict[str, Any]) -> Any:
    import torch

    return ctx["cls"].from_pretrained(ctx["base"], dtype=torch.float32, trust_remote_code=ctx["trust"])


def _ours(ctx: dict[str, Any]) -> Any:
    from ..api import load

    return load(ctx["plan"], dtype="float32").model


def _with_adapter(model: Any, folder: str) -> Any:
    from peft import PeftModel

    return PeftModel.from_pretrained(model, folder, is_trainable=False).eval()


def _run(peft_model: Any, found: Any) -> Any:
    import torch

    from ..run.checks import main_output

    inputs = found[0]
    model = peft_model.get_base_model()
    with torch.inference_mode():
        entry = model.get_submodule(inputs.entry) if inputs.entry else model
        return main_output(entry(**inputs.kwargs))[1]


def _probe(ctx: dict[str, Any], spec: AdapterTryParams) -> ProbeAnswer:
    import peft

    import fusion_core

    from ..run.checks import compare

    found = ctx["found"]
    if found is None:
        raise AdapterError("no synthetic input fits this model: the adapter's outputs cannot be compared")
    loaders = {"original": _stock, "fused": _ours}
    src_layout = spec.source_layout
    out_layout = "fused" if src_layout == "original" else "original"
    reference = _with_adapter(loaders[src_layout](ctx), spec.source)
    want = _run(reference, found)
    where = json.dumps(spec.shown_as)
    pv = f"peft {peft.__version__}"
    names = {
        "fused": (f"{pv} on fusion_core {fusion_core.__version__} (fused layout)", "fusion_core.load(BASE, fusions)"),
        "original": (f"{pv} on transformers (original layout)", f"{ctx['cls'].__name__}.from_pretrained(BASE)"),
    }
    consumers: list[Consumer] = []
    loaded: dict[str, Any] = {}
    for layout in (out_layout, src_layout):
        name, base_how = names[layout]
        entry = Consumer(name, REFUSES, f"PeftModel.from_pretrained({base_how}, {where})")
        consumers.append(entry)
        import warnings

        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                model = _with_adapter(loaders[layout](ctx), spec.written)
            got = _run(model, found)
        except Exception as e:  # any failure to load or run is the consumer refusing
            entry.detail = one_line(e, named=True, first=True)
            continue
        peft_said = [" ".join(str(w.message).split())[:300] for w in said if "peft" in (w.filename or "")]
        c = compare(want, got, "float32")
        entry.max_abs_diff = c.max_abs_diff
        if c.passed:
            entry.status, entry.detail = (
                LOADS_EXACTLY,
                f"outputs match the source adapter's (max abs diff {c.max_abs_diff:.2g})",
            )
            loaded[layout] = model
        else:
            entry.status = LOADS_WRONG
            entry.detail = (
                f"outputs differ from the source adapter's ({c.note or f'max abs diff {c.max_abs_diff:.3g}'})"
            )
            if peft_said:  # e.g. the fused adapter on the unfused model: PEFT loads the modules it finds, and warns
                entry.detail += f"; PEFT warned: {peft_said[0]}"
    ref_name = names[src_layout][0].replace(" (", " with the source adapter (")
    outputs = {
        "reference": ref_name,
        "inputs": found[0].shapes(),
        "input_kind": found[0].kind,
        "output": found[1],
    }
    effect = float((want.double() - found[2].double()).abs().max()) if want.shape == found[2].shape else None
    outputs["adapter_effect"] = effect  # the source adapter against the bare base model: it must change outputs
    main = consumers[0]
    outputs["passed"] = main.status == LOADS_EXACTLY
    outputs["max_abs_diff"] = main.max_abs_diff
    outputs["summary"] = (
        f"PEFT outputs on the {out_layout} layout match the source adapter's (max abs diff {main.max_abs_diff:.2g})"
        if outputs["passed"]
        else f"PEFT on the {out_layout} layout: {main.status}"
    )
    merged = {"passed": False, "summary": "merged weights not compared (the written adapter did not load)"}
    if out_layout in loaded:
        merged = _merged(ctx["plan"], reference, loaded[out_layout], src_layout)
    return ProbeAnswer(consumers, outputs, merged)


def _merged(plan: Any, reference: Any, written: Any, src_layout: str) -> dict[str, Any]:
    """``merge_and_unload`` of both; the original layout's weights put into the fused one by the plan."""
    import torch

    from ..run.checks import compare

    sds = {}
    for layout, model in ((src_layout, reference), ("fused" if src_layout == "original" else "original", written)):
        try:
            merged = model.merge_and_unload()
        except Exception as e:  # PEFT's own limits (lora_bias on a layer without a bias)
            if layout != src_layout:
                raise
            why = f"PEFT cannot merge the source adapter ({one_line(e, named=True, first=True)})"
            return {"passed": False, "skipped": why, "tensors": 0, "max_abs_diff": None, "summary": why}
        sds[layout] = {k: v.detach() for k, v in merged.state_dict().items()}
    orig, fused = sds["original"], sds["fused"]
    worst, compared, bad = 0.0, 0, []
    mapped: set[str] = set()
    pairs: list[tuple[str, Any, Any]] = []
    for t in plan.transforms:
        if all(k in orig for k in t.sources) and all(k in fused for k in t.targets):
            for key, tensor in zip(t.targets, t.forward([orig[k] for k in t.sources])):
                pairs.append((key, tensor, fused[key]))
            mapped.update(t.sources)
    pairs += [(k, v, fused[k]) for k, v in orig.items() if k not in mapped and k in fused]
    for key, want, got in pairs:
        if want.shape != got.shape or not want.is_floating_point():
            if want.shape != got.shape or not torch.equal(want, got):
                bad.append(key)
            continue
        c = compare(want, got, "float32")
        worst = max(worst, c.max_abs_diff)
        compared += 1
        if not c.passed:
            bad.append(key)
    passed = not bad and compared > 0
    summary = (
        f"merged weights of both layouts agree ({compared} tensors, max abs diff {worst:.2g})"
        if passed
        else f"merged weights differ at {', '.join(bad[:3]) or 'no tensor compared'}"
    )
    return {"passed": passed, "tensors": compared, "max_abs_diff": worst, "summary": summary}


def serve() -> int:
    """The probe, in a child of :mod:`fusion_core.run.child`: the base line, then the written one."""
    import peft  # noqa: F401 - warm: the import overlaps the parent's writing

    first = sys.stdin.readline()
    if not first:  # the parent gave up before asking anything
        return 0
    ctx = _prepare(ADAPTER_BASE.read_request(first))
    line = sys.stdin.readline()
    if not line:
        return 0
    answer = _probe(ctx, ADAPTER_TRY.read_request(line))
    sys.stdout.write("\n" + ADAPTER_TRY.answer_line(answer) + "\n")
    return 0
