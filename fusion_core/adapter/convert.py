"""Convert a PEFT LoRA adapter between the original and the fused layout: streamed, atomic, verified.

Like a checkpoint export (:mod:`fusion_core.export.pipeline`): the output is laid out from
headers first; untouched tensors are copied as raw byte ranges, each converted module is
computed from the few source tensors it needs, one group at a time; everything goes into
a temporary sibling of the destination, is verified there (every key, shape and dtype as
planned, each step converted back and compared bitwise, then PEFT itself on both layouts
in a separate process: :mod:`fusion_core.adapter.consumers`) and only then renamed into
place. The source adapter and the base model are only read.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..boundary.options import AdapterOptions
from ..errors import AdapterError, ExportError, naming
from ..export import files as fs
from ..export.writer import OutTensor, WritePlan, iter_write, layout_shard, write_text
from ..model.checkpoint import open_shard, read_header
from ..progress import CancelToken, Progress, ProgressCallback, drive
from .result import AdapterResult, AdapterVerification
from .rules import SHARE, SPLIT, STACK, Conversion, Step, output_config, plan_conversion
from .source import CONFIG, RECORD, WEIGHTS, AdapterSource, open_adapter

if TYPE_CHECKING:
    import torch

    from ..plan.fusion_plan import FusionConfig, FusionPlan

__all__ = ["convert_adapter", "iter_convert_adapter", "plan_adapter"]


def plan_adapter(plan: FusionPlan, adapter: str | os.PathLike[str], layout: str | None = None) -> Conversion:
    """The conversion of ``adapter`` for ``plan``, from headers and configs alone (what the preview shows).

    Raises:
        AdapterError: what cannot be converted exactly.
    """
    return plan_conversion(plan, open_adapter(adapter), layout)


def adapter_plan_for(
    base: Any, adapter: str | os.PathLike[str], fusion_config: FusionConfig | None, layout: str | None = None
) -> FusionPlan:
    """The fusion plan to convert ``adapter`` with: ``fusion_config``, else what the adapter's record says."""
    from ..plan.fusion_plan import as_plan

    if fusion_config is None:
        record = open_adapter(adapter).record
        recorded = record.get("fusion_config") if isinstance(record, dict) else None
        if isinstance(recorded, dict) and recorded:
            fusion_config = recorded
    if fusion_config is None:
        raise naming(
            AdapterError(
                f"{adapter}: name the families to convert this adapter for (fusions); it records none "
                f"({RECORD} is written by a conversion to the fused layout)"
            ),
            "fusions",
        )
    return as_plan(base, fusion_config)


def _bits(t: torch.Tensor) -> torch.Tensor:
    import torch

    return t.contiguous().reshape(-1).view(torch.uint8)


def _scaled(t: torch.Tensor, ratio: float, divide: bool = False) -> torch.Tensor:
    """``t`` times (or over) ``ratio``, computed in float64 and rounded once."""
    if ratio == 1.0:
        return t
    wide = t.double()
    return (wide / ratio if divide else wide * ratio).to(t.dtype)


def run_step(step: Step, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The step's target tensors (in ``step.plain.target_keys`` order) from its source tensors."""
    import torch

    if step.patch is not None:  # each tensor reshaped (Conv LoRA <-> Linear LoRA over patches)
        return [t.reshape(shape).contiguous() for t, shape in zip(inputs, step.plain.target_shapes)]
    g, op = step.group, step.plain.op
    assert g is not None
    n = 3 if step.dora else 2  # tensors per module: A, B (and DoRA's magnitude)
    if op == STACK:
        a_parts = inputs[0::n]
        b_parts = inputs[1::n]
        total = sum(step.ranks)
        a = torch.cat(a_parts, dim=0)
        b = torch.zeros(sum(g.sizes), total, dtype=b_parts[0].dtype)
        row = col = i = 0
        for size, r, ratio in zip(g.sizes, step.ranks, step.ratios):
            if r:
                b[row : row + size, col : col + r] = _scaled(b_parts[i], ratio)
                i += 1
                col += r
            row += size
        return [a, b, torch.cat(inputs[2::n])] if step.dora else [a, b]
    a, b = inputs[:2]
    m = inputs[2] if step.dora else None
    out: list[torch.Tensor] = []
    row = col = 0
    for name, size, r, ratio in zip(step.member_names, g.sizes, step.ranks, step.ratios):
        rows = b[row : row + size]
        mag = [m[row : row + size].clone()] if m is not None else []
        if op == SHARE:
            out += [a.clone(), rows.clone(), *mag]
        elif r:
            block = rows[:, col : col + r]
            rest = torch.cat([rows[:, :col], rows[:, col + r :]], dim=1)
            if rest.numel() and bool(_bits(rest).any()):
                raise AdapterError(
                    f"{step.fused_name}: lora_B is not block-diagonal as {RECORD} records (trained after the "
                    f"conversion?): rows of {name} reach other parts' ranks. Remove {RECORD} to convert it as an "
                    "adapter trained on the fused model (share_a_split_b)"
                )
            out += [a[col : col + r].clone(), _scaled(block, ratio, divide=True).contiguous(), *mag]
            col += r
        elif bool(_bits(rows).any()):
            raise AdapterError(f"{step.fused_name}: {name} has rank 0 in {RECORD} but nonzero rows of lora_B")
        row += size
    return out


def invert_step(step: Step, written: list[torch.Tensor]) -> list[torch.Tensor]:
    """The step's source tensors back from what it wrote (exact inverse)."""
    import torch

    if step.patch is not None:
        return [t.reshape(shape).contiguous() for t, shape in zip(written, step.plain.source_shapes)]
    g, op = step.group, step.plain.op
    assert g is not None
    n = 3 if step.dora else 2
    if op == SHARE:
        return [written[0], torch.cat(written[1::n], dim=0)] + ([torch.cat(written[2::n])] if step.dora else [])
    if op == SPLIT:
        back = dataclasses.replace(step, plain=dataclasses.replace(step.plain, op=STACK))
        return run_step(back, written)
    # STACK: split the blocks again
    a, b = written[:2]
    out = []
    row = col = 0
    for size, r, ratio in zip(g.sizes, step.ranks, step.ratios):
        if r:
            out += [a[col : col + r].clone(), _scaled(b[row : row + size, col : col + r], ratio, True).contiguous()]
            if step.dora:
                out.append(written[2][row : row + size].clone())
            col += r
        row += size
    return out


class _Producer:
    """Computes each step's tensors when the writer first asks for one of them (one step held at a time)."""

    def __init__(self, reader: Any, steps: list[Step]) -> None:
        self.reader = reader  # the source adapter's safe_open handle (validated once)
        self.step_of = {k: s for s in steps for k in s.plain.target_keys}
        self.pending: dict[int, dict[str, torch.Tensor]] = {}

    def read(self, key: str) -> torch.Tensor:
        return self.reader.get_tensor(key)

    def __call__(self, t: OutTensor) -> torch.Tensor:
        step = self.step_of[t.key]
        results = self.pending.get(id(step))
        if results is None:
            outs = run_step(step, [self.read(k) for k in step.plain.source_keys])
            results = self.pending[id(step)] = dict(zip(step.plain.target_keys, outs))
        tensor = results.pop(t.key)
        if not results:
            del self.pending[id(step)]
        return tensor


def _out_tensors(adapter: AdapterSource, conv: Conversion) -> list[OutTensor]:
    inputs = {k: s for s in conv.steps for k in s.plain.source_keys}
    order = sorted(adapter.tensors.values(), key=lambda i: (i.start, i.key))
    out, placed = [], set()
    for info in order:
        step = inputs.get(info.key)
        if step is None:
            out.append(OutTensor(info.key, info.dtype, info.shape, raw=info))
        elif id(step) not in placed:
            placed.add(id(step))
            for key, shape in zip(step.plain.target_keys, step.plain.target_shapes):
                out.append(OutTensor(key, info.dtype, tuple(shape)))
    return out


def iter_convert_adapter(
    plan: FusionPlan, adapter: str | os.PathLike[str], out_dir: str | os.PathLike[str], options: AdapterOptions
) -> Generator[Progress, None, AdapterResult]:
    """Convert ``adapter`` (a PEFT LoRA adapter of ``plan``'s model) into ``out_dir``, streamed and verified.

    Args:
        plan: the fusion plan (its families' matches and member names drive the conversion).
        adapter: a PEFT adapter folder (``adapter_config.json``, ``adapter_model.safetensors``).
        out_dir: the folder to create (it must not exist or be empty).
        options: an :class:`~fusion_core.boundary.options.AdapterOptions` (``layout``:
            the layout to write, None: the other one; ``verify_outputs``: PEFT on both
            layouts in a child process).

    Yields:
        Progress (bytes written, then the verification steps).

    Returns:
        An :class:`AdapterResult`.

    Raises:
        AdapterError: what cannot be exact (one line), or a failed verification; nothing is
            left at ``out_dir``.
        ExportError: a refused destination, a full disk.
    """
    t0 = time.perf_counter()
    yield Progress(0, 0, "planning the adapter conversion")
    src = open_adapter(adapter)
    conv = plan_conversion(plan, src, options.layout)
    aplan = conv.plan
    outputs = _out_tensors(src, conv)
    shard = layout_shard(WEIGHTS, outputs)
    total = sum(t.nbytes for t in outputs)
    wplan = WritePlan([shard], total, sum(t.numel for t in outputs))
    config_text = json.dumps(output_config(src.config, conv), indent=2, sort_keys=True) + "\n"
    others, _skipped = fs.plan_other_files(src.folder, {WEIGHTS, CONFIG, RECORD})
    dest = fs.check_destination(src.folder, out_dir, overwrite=False)
    tmp = fs.make_temp_sibling(dest.path)
    finished = False
    probe = None
    base = plan.source.folder
    try:
        if options.verify_outputs:
            if base is None:
                raise AdapterError(f"{plan.source.name}: the base model has no weights to verify the adapter on")
            from .consumers import AdapterProbe

            probe = AdapterProbe(base, plan, trust_remote_code=plan.source.trust_remote_code)
        try:
            with open_shard(src.folder, WEIGHTS) as reader:
                producer = _Producer(reader, conv.steps)
                yield from iter_write(wplan, tmp, src.folder, producer, sync=options.sync, total=total)
            write_text(tmp / CONFIG, config_text, sync=options.sync)
            if conv.record is not None:
                write_text(tmp / RECORD, json.dumps(conv.record, indent=2) + "\n", sync=options.sync)
            fs.copy_other_files(others, tmp)
        except OSError as e:
            raise fs.describe_os_error(e, dest.path, total) from None
        yield Progress(total, total, "verifying the written adapter")
        verification = _verify_written(tmp, wplan, src, conv)
        verification.notes.extend(dest.notes)
        consumers = []
        if probe is not None:
            yield Progress(total, total, "PEFT on both layouts, in a child process")
            answer = probe.run(src.folder, aplan.source_layout, tmp, dest.path)
            consumers = answer.consumers
            verification.outputs, verification.merged = answer.outputs, answer.merged
            verification.outputs_checked = True
            main = next((c for c in consumers if c.name.endswith(f"({aplan.layout} layout)")), None)
            if main is None or main.status != "loads exactly":
                detail = f"{main.status} ({main.detail})" if main else "no answer"
                raise AdapterError(f"verification failed: PEFT on the {aplan.layout} layout {detail}; nothing written")
            other = next((c for c in consumers if c is not main), None)
            if other is not None and other.status == "loads wrong":
                verification.notes.append(
                    f"{other.name} loads the written adapter partly (PEFT adapts the modules it finds and skips the "
                    f"others, with a warning at most): use it on the {aplan.layout} layout only"
                )
            if not (answer.outputs or {}).get("adapter_effect"):
                verification.notes.append(
                    "the source adapter does not change the outputs (B is zero?): compared anyway"
                )
            skipped = (answer.merged or {}).get("skipped")
            if skipped:
                verification.notes.append(f"merged weights not compared: {skipped}")
            elif not (answer.merged or {}).get("passed", False):
                raise AdapterError(
                    f"verification failed: merged weights differ ({(answer.merged or {}).get('summary')}); "
                    "nothing was written"
                )
        files = sorted(p.name for p in tmp.iterdir())
        yield Progress(total, total, "moving into place")
        fs.move_into_place(tmp, dest)
        finished = True
    finally:
        if probe is not None:
            probe.close()
        if not finished:
            fs.remove_tree(tmp)
    return AdapterResult(
        adapter=str(src.folder),
        out_dir=dest.path,
        base=plan.source.name,
        source_layout=aplan.source_layout,
        layout=aplan.layout,
        fusion_config=dict(plan.fusion_config),
        tensors=len(outputs),
        transformed=[k for s in conv.steps for k in s.plain.target_keys],
        steps=list(aplan.steps),
        files=files,
        verification=verification,
        seconds=time.perf_counter() - t0,
        consumers=consumers,
        messages=list(aplan.messages),
    )


def _verify_written(folder: Path, wplan: WritePlan, src: AdapterSource, conv: Conversion) -> AdapterVerification:
    """Every key, shape and dtype as planned; each step converted back and compared bitwise."""
    import torch

    try:
        header = read_header(folder / WEIGHTS, WEIGHTS)
    except Exception as e:  # any unreadable output is a failed verification
        raise ExportError(f"verification failed, the written adapter is unreadable: {e}") from None
    expected = {t.key: t for t in wplan.shards[0].tensors}
    problems = sorted(set(expected) ^ set(header.tensors))
    for key, t in expected.items():
        got = header.tensors.get(key)
        if got is not None and (got.dtype, tuple(got.shape)) != (t.dtype, tuple(t.shape)):
            problems.append(f"{key}: {got.dtype} {list(got.shape)}, planned {t.dtype} {list(t.shape)}")
    if problems:
        raise ExportError(f"verification failed: written tensors differ from the plan: {'; '.join(problems[:5])}")
    round_trip = "bitwise" if conv.steps else "not applicable"
    with open_shard(folder, WEIGHTS) as out, open_shard(src.folder, WEIGHTS) as inp:
        for key in conv.copied:
            if not torch.equal(_bits(out.get_tensor(key)), _bits(inp.get_tensor(key))):
                raise ExportError(f"verification failed: {key} was not copied bitwise")
        for step in conv.steps:
            back = invert_step(step, [out.get_tensor(k) for k in step.plain.target_keys])
            for key, t in zip(step.plain.source_keys, back):
                want = inp.get_tensor(key)
                if t.shape == want.shape and torch.equal(_bits(t), _bits(want)):
                    continue
                inexact = any(not _power_of_two(r) for r in step.ratios)
                if inexact and t.shape == want.shape and torch.allclose(t.double(), want.double(), rtol=1e-6, atol=0):
                    round_trip = "exact to rounding (parts' scales differ by a ratio that is not a power of two)"
                    continue
                raise ExportError(f"verification failed: {key} does not convert back bitwise from the written adapter")
    return AdapterVerification(tensors_checked=len(header.tensors), round_trip=round_trip)


def _power_of_two(x: float) -> bool:
    return x > 0 and math.frexp(x)[0] == 0.5


def convert_adapter(
    adapter: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    base: Any,
    fusions: FusionConfig | list[str] | None = None,
    layout: str | None = None,
    verify_outputs: bool = True,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
) -> AdapterResult:
    """Convert a PEFT LoRA adapter between the original and the fused layout of ``base``.

    Args:
        adapter: the adapter folder (``adapter_config.json``, ``adapter_model.safetensors``).
        out: the folder to create.
        base: the base model: a spec (folder, ``demo:<name>``...), an opened model or a plan.
        fusions: the families (``["qkv", "gate_up"]`` or a ``fusion_config`` mapping); None: what
            the adapter's ``fusion_adapter.json`` records (an adapter this function converted).
        layout: ``"fused"``, ``"original"``, or None: the other layout than the adapter's.
        verify_outputs: load both layouts with PEFT in a child process and compare.
        progress, cancel: a progress callback and a cancel token.

    Raises:
        AdapterError: what cannot be converted exactly, or a failed verification.
        ExportError: a refused destination. Nothing is left at ``out``.
    """
    from ..plan.fusion_plan import FusionPlan

    if isinstance(fusions, (list, tuple)):
        fusions = dict.fromkeys(fusions, True)
    options = AdapterOptions(layout=layout, verify_outputs=verify_outputs)
    if isinstance(base, FusionPlan) and fusions is None:
        plan = base
    else:
        plan = adapter_plan_for(base, adapter, fusions, layout)
    return drive(iter_convert_adapter(plan, adapter, out, options), progress, cancel)
