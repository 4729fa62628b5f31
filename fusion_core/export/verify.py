"""The output check of an export: load what was written and compare it with the source.

Both models are loaded in float32 with our loader (never transformers' own fusion): the
source as the plain original model, the export fused (its ``config.json`` carries
``fusion_config``) or plain (original layout). They run on the same seeded synthetic
inputs (:mod:`fusion_core.run.inputs`); the main output (logits, last hidden state...) must
match: within the float32 tolerance of :mod:`fusion_core.run.checks` for a fused export (the
fused modules compute the same numbers in another order), exactly for an
original-layout export (the same weights in the same modules).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ExportError

if TYPE_CHECKING:
    import torch

    from ..model.sources import ModelSource
    from ..plan.fusion_plan import FusionPlan


def compare_outputs(source: ModelSource, out_folder: Path, plan: FusionPlan, layout: str) -> dict[str, Any]:
    """Load the export in ``out_folder`` back and compare its main output with the source model's.

    Args:
        source: the exported model.
        out_folder: the written (not yet moved into place) export.
        plan: the export's plan (which modules are fused; the source model is loaded from it,
            on its opened model, validated once).
        layout: ``"fused"`` or ``"original"``, as exported.

    Returns:
        A JSON-able summary: ``passed``, ``output``, ``max_abs_diff``, ``tolerance``, the
        inputs' shapes, ``summary``. ``passed`` is ``None`` when no synthetic input fits.

    Raises:
        ExportError: the export does not load, or its outputs differ from the source's.
    """
    import torch

    from ..errors import FusionError
    from ..run.checks import compare, main_output
    from ..run.loading import load, load_original, load_plain

    trust = source.trust_remote_code
    fused = layout == "fused" and not plan.is_empty
    reference = load_original(plan, dtype="float32").eval()
    try:
        if fused:
            exported = load(str(out_folder), None, dtype="float32", trust_remote_code=trust).model.eval()
        else:
            exported = load_plain(str(out_folder), dtype="float32", trust_remote_code=trust).eval()
    except FusionError as e:
        raise ExportError(f"verification failed: the export does not load back: {e}") from None
    paths = [m.path for fam in plan.families for m in fam.discovery.matches]
    try:
        with torch.inference_mode():
            found = pick_inputs(reference, paths)
            if found is None:
                return {"passed": None, "summary": "outputs not compared: no synthetic input fits this model"}
            inputs, name, want = found
            entry = exported.get_submodule(inputs.entry) if inputs.entry else exported
            _, got = main_output(entry(**inputs.kwargs))
    except FusionError as e:
        raise ExportError(f"verification failed: the exported model does not run: {e}") from None
    finally:
        del reference, exported
    comparison = compare(want, got, "float32")
    exact = bool(got.shape == want.shape and torch.equal(got, want))
    passed = comparison.passed if fused else exact
    tolerance = f"|diff| <= {comparison.atol:g} + {comparison.rtol:g} * max|ref| (float32)" if fused else "exact"
    result = {
        "output": name,
        "inputs": inputs.shapes(),
        "input_kind": inputs.kind,
        "max_abs_diff": comparison.max_abs_diff,
        "max_rel_diff": comparison.max_rel_diff,
        "tolerance": tolerance,
        "passed": passed,
    }
    if not passed:
        detail = comparison.note or f"max abs diff {comparison.max_abs_diff:.3g}"
        raise ExportError(
            f"verification failed: the export's {name} differs from the source model's ({detail}; "
            f"tolerance {tolerance}); nothing was written"
        )
    result["summary"] = f"{name} matches the source model (max abs diff {comparison.max_abs_diff:.2g}, {tolerance})"
    return result


def pick_inputs(model: Any, paths: list[str], seed: int = 0) -> tuple[Any, str, torch.Tensor] | None:
    """The first synthetic input ``model`` runs on, with its main output (``None``: none fits).

    A dual-tower model (CLIP, SigLIP: its forward takes both ``input_ids`` and
    ``pixel_values``) gets both, since each tower needs its own input.
    """
    from ..run.checks import main_output
    from ..run.inputs import candidate_inputs

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
