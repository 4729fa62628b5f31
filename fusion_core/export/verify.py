"""The output check of an export: load what was written and compare it with the source.

It runs in the consumers' child process (:mod:`fusion_core.export.consumers`), which loads
the export anyway: our loader's comparison there is the export's output check, so the
export is loaded once, outside the caller's process. Both models are loaded with our
loader (never transformers' own fusion), one at a time, in float32 where one model fits in
the memory available and else in the checkpoint's own dtype
(:func:`fusion_core.export.consumers.comparison_dtype`; the tolerance and the consumers'
``detail`` then say which dtype and why): the source as the plain original model,
the export fused (its ``config.json`` carries ``fusion_config``) or plain (original
layout). They run on the inputs a check uses (:func:`export_runs`: one run per modality
the model takes, image+text, video+text, audio+text, through the model's processor; else
the seeded synthetic inputs of :mod:`fusion_core.run.inputs`). Per run, the main output (logits, last hidden state...)
and each vision or audio tower's output must match: within the tolerance of that dtype in
:mod:`fusion_core.run.checks` for a fused export (the fused modules compute the same
numbers in another order), exactly for an original-layout export (the same weights in the
same modules).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def compare_outputs(
    runs: list[Run], exported: Any, fused: bool, *, dtype: str = "float32", why: str = ""
) -> dict[str, Any]:
    """Compare the loaded export's outputs with the source model's (the ``runs``) and summarise.

    Runs in the consumers' child (:mod:`fusion_core.export.consumers`), on the export as our
    loader loads it: within the tolerance of ``dtype`` (the dtype both were loaded at; ``why``
    it is not float32, said in ``tolerance``) for a fused export, exactly otherwise.

    Returns:
        A JSON-able summary: ``passed``, ``output``, ``inputs``, ``input_kind``,
        ``max_abs_diff``, ``max_rel_diff``, ``tolerance``, ``compared``, and ``summary`` (or
        ``differs``: the first difference). ``passed`` is ``None`` when no input fits.
    """
    from ..boundary.options import DTYPE_TOLERANCES

    if not runs:
        return {"passed": None, "summary": "outputs not compared: no input fits this model", "compared": ""}
    passed, worst, worst_rel, compared, bad = compare_runs(runs, exported, exact=not fused, dtype=dtype)
    atol, rtol = DTYPE_TOLERANCES[dtype]
    note = dtype_note(dtype, why)
    if not fused:
        tolerance = f"exact, {note}" if note else "exact"
    elif note:
        floor = max((f for r in runs for f in r.floors.values()), default=0.0)
        floors = f" or 2x the rounding floor (up to {floor:.2g})" if floor else ""
        tolerance = f"|diff| <= {atol:g} * min(1, max|ref|) + {rtol:g} * max|ref|{floors} ({note}, {dtype} tolerance)"
    else:
        tolerance = f"|diff| <= {atol:g} * min(1, max|ref|) + {rtol:g} * max|ref| (float32)"
    result: dict[str, Any] = {
        "output": next(iter(runs[0].outputs)),
        "inputs": runs[0].inputs.shapes(),
        "input_kind": ", ".join(dict.fromkeys(r.inputs.kind for r in runs)),
        "max_abs_diff": worst,
        "max_rel_diff": worst_rel,
        "tolerance": tolerance,
        "passed": passed,
        "compared": compared,
    }
    if passed:
        result["summary"] = f"outputs match the source model ({compared}; max abs diff {worst:.2g}, {tolerance})"
    else:
        result["differs"] = bad
    return result


def dtype_note(dtype: str, why: str) -> str:
    """ "compared in bfloat16 (float32 would need ...)"; "" for plain float32."""
    if dtype == "float32" and not why:
        return ""
    return f"compared in {dtype}" + (f" ({why})" if why else "")


_TOWERS = ("visual", "vision_tower", "vision_model", "vision_encoder", "image_encoder", "audio_tower", "audio_model")


def towers(model: Any) -> dict[str, str]:
    """The vision and audio towers of ``model``: module path -> "vision tower" / "audio tower" (outermost only)."""
    found: dict[str, str] = {}
    for name, _module in model.named_modules():
        last = name.rsplit(".", 1)[-1]
        if last in _TOWERS and not any(name.startswith(p + ".") for p in found):
            found[name] = "audio tower" if "audio" in last else "vision tower"
    return found


@dataclass
class Run:
    """One export-verification run: its inputs and the reference outputs (name -> tensor)."""

    inputs: Any
    outputs: dict[str, Any]
    #: per output, its rounding floor at a reduced precision (:func:`rounding_floors`; empty: not measured)
    floors: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        fed = getattr(self.inputs, "fed", None)
        return fed[0].run if fed else self.inputs.kind


def run_outputs(model: Any, inputs: Any) -> dict[str, Any]:
    """``model`` on ``inputs``: its main output and each tower's it reached, by name (in this order)."""
    import torch

    from ..run.checks import main_output

    entry = model.get_submodule(inputs.entry) if inputs.entry else model
    seen: dict[str, Any] = {}
    handles = []
    for path, label in towers(entry).items():

        def hook(_m: Any, _a: Any, out: Any, label: str = label) -> None:
            if label not in seen:
                try:
                    seen[label] = main_output(out)[1].detach().clone()
                except Exception:  # a tower output without a tensor: nothing to compare
                    pass

        handles.append(entry.get_submodule(path).register_forward_hook(hook))
    try:
        with torch.inference_mode():
            name, main = main_output(entry(**inputs.kwargs))
    finally:
        for h in handles:
            h.remove()
    return {name: main, **seen}


def export_runs(model: Any, paths: list[str], folder: Path | None) -> list[Run]:
    """The runs an export is verified on: those of a check (every modality, through the
    model's processor), each with ``model``'s outputs; else the first synthetic input that runs."""
    from types import SimpleNamespace

    from ..boundary.options import CheckOptions, Workload
    from ..errors import FusionError
    from ..run.modal import end_to_end_groups

    runs: list[Run] = []
    try:
        source = SimpleNamespace(folder=folder, config=model.config)
        groups = end_to_end_groups(model, paths, source, CheckOptions(workload=Workload(), upstream=False))
    except (FusionError, ValueError):
        groups = []
    for group in groups:
        if "fallback" in group.notes and runs:
            continue
        for inputs in group.candidates:
            try:
                runs.append(Run(inputs, run_outputs(model, inputs)))
                break
            except (RuntimeError, ValueError, TypeError, IndexError, AttributeError, FusionError):
                continue
    if not runs:
        found = pick_inputs(model, paths)
        if found is not None:
            runs.append(Run(found[0], {found[1]: found[2]}))
    return runs


def rounding_floors(model: Any, runs: list[Run], paths: list[str], dtype: str) -> None:
    """Each run's rounding floor, in place: how far the source's outputs move when the modules
    at ``paths`` (the ones the export fuses) are computed in float32. At a reduced precision a
    difference of one unit in the last place grows through the layers beyond the dtype's
    tolerance; a fused export passes within :data:`~fusion_core.run.results.FLOOR_FACTOR`
    times this floor (as a check does), a wrong one moves the outputs by their own order."""
    import torch

    from ..run.checks import compare
    from ..run.loading import torch_dtype
    from ..run.switch import in_float32

    with torch.inference_mode(), in_float32(model, paths, torch_dtype(dtype)):
        for run in runs:
            got = run_outputs(model, run.inputs)
            for name, want in run.outputs.items():
                if name in got:
                    c = compare(want, got[name], dtype)
                    if c.max_abs_diff == c.max_abs_diff:  # not NaN
                        run.floors[name] = c.max_abs_diff


def compare_runs(
    runs: list[Run], model: Any, exact: bool, dtype: str = "float32"
) -> tuple[bool, float, float, str, str]:
    """``model``'s outputs against each run's reference, within ``dtype``'s tolerance (or
    exactly): (passed, max abs diff, max rel diff, what was compared ("image+text: logits,
    vision tower; ..."), the first difference or "")."""
    import torch

    from ..run.checks import compare

    passed, worst, worst_rel, compared, first_bad = True, 0.0, 0.0, [], ""
    for run in runs:
        got = run_outputs(model, run.inputs)
        names = []
        for name, want in run.outputs.items():
            if name not in got:
                passed = False
                first_bad = first_bad or f"{run.label} {name}: not produced"
                continue
            c = compare(want, got[name], dtype)
            c.floor = run.floors.get(name, 0.0)
            ok = bool(got[name].shape == want.shape and torch.equal(got[name], want)) if exact else c.passed
            worst, worst_rel = max(worst, c.max_abs_diff), max(worst_rel, c.max_rel_diff or 0.0)
            if not ok:
                passed = False
                first_bad = first_bad or f"{run.label} {name}: {c.note or f'max abs diff {c.max_abs_diff:.3g}'}"
            names.append(name)
        compared.append(f"{run.label}: {', '.join(names)}")
    return passed, worst, worst_rel, "; ".join(compared), first_bad


def pick_inputs(model: Any, paths: list[str], seed: int = 0) -> tuple[Any, str, torch.Tensor] | None:
    """The first synthetic input ``model`` runs on, with its main output (``None``: none fits).

    A dual-tower model (CLIP, SigLIP: its forward takes both ``input_ids`` and
    ``pixel_values``) gets both, since each tower needs its own input.
    """
    from ..run.candidates import candidate_inputs
    from ..run.checks import main_output

    candidates = candidate_inputs(model, paths, seed=seed)
    dual = _dual_tower_inputs(model, seed)
    if dual is not None:
        candidates = _chain([dual], candidates)
    return _first_accepted(model, candidates, main_output)


def _chain(first: list[Any], rest: Any) -> Any:
    yield from first
    yield from rest


def _dual_tower_inputs(model: Any, seed: int) -> Any:
    """Text and pixel inputs together, for a model whose forward needs both (or ``None``)."""
    import inspect

    import torch

    from ..run.inputs import ModelInputs, special_token_ids

    params = inspect.signature(model.forward).parameters
    vision = getattr(model.config, "vision_config", None)
    text = getattr(model.config, "text_config", None)
    if not {"input_ids", "pixel_values"} <= set(params) or vision is None or text is None:
        return None
    size = getattr(vision, "image_size", None)
    channels = getattr(vision, "num_channels", 3)
    vocab = getattr(text, "vocab_size", None)
    if not isinstance(size, int) or not isinstance(vocab, int) or size <= 0 or size > 1024 or vocab <= 0:
        return None
    gen = torch.Generator().manual_seed(seed)
    avoid = special_token_ids(text)
    ids = [i for i in torch.randint(0, vocab, (64,), generator=gen).tolist() if i not in avoid][:16] or [0]
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    kwargs: dict[str, Any] = {
        "input_ids": torch.tensor([ids]),
        "pixel_values": torch.randn(1, channels, size, size, generator=gen).to(dtype),
    }
    if "attention_mask" in params:
        kwargs["attention_mask"] = torch.ones_like(kwargs["input_ids"])
    if "return_dict" in params:
        kwargs["return_dict"] = True
    return ModelInputs("", kwargs, "text+image", [f"{len(ids)} text tokens and one {size}x{size} image"])


def _first_accepted(model: Any, candidates: Any, main_output: Any) -> tuple[Any, str, torch.Tensor] | None:
    """The first candidate input that ``model`` runs on, with its main output."""
    from ..errors import CheckError

    try:
        for inputs in candidates:
            entry = model.get_submodule(inputs.entry) if inputs.entry else model
            try:
                name, out = main_output(entry(**inputs.kwargs))
            except (RuntimeError, ValueError, TypeError, IndexError, AttributeError, CheckError):
                continue  # this kind of input does not fit: try the next one
            return inputs, name, out
    except ValueError:  # no kind of input fits this model's forward
        return None
    return None
