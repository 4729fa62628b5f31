"""Run a model on the first synthetic inputs it accepts, capturing the real inputs of chosen modules."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import CheckError, one_line
from ..progress import heartbeat
from .candidates import candidate_inputs
from .results import tensors_of

if TYPE_CHECKING:
    from torch import nn

    from ..families.base import Workload

__all__ = ["capture_and_run", "shapes_of"]


def _clone(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, tuple):
        return tuple(_clone(v) for v in value)
    if isinstance(value, list):
        return [_clone(v) for v in value]
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if _stateful(value):  # a cache as it was when the module was called, not as the run leaves it
        return copy.deepcopy(value)
    return value


def _stateful(value: Any) -> bool:
    """Whether ``value`` is state a module's call changes: a key/value cache (transformers' ``Cache``,
    which an attention layer extends on each call: CLVP's decoder makes one inside its forward)."""
    return callable(getattr(value, "update", None)) and callable(getattr(value, "get_seq_length", None))


def fresh(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` with a copy of each cache in them, so that every call of a module
    starts from the state captured (tensors shared: modules do not change their inputs); the
    same objects when they hold no cache."""
    if not any(_stateful(v) for v in (*args, *kwargs.values())):
        return args, kwargs
    return (
        tuple(copy.deepcopy(v) if _stateful(v) else v for v in args),
        {k: copy.deepcopy(v) if _stateful(v) else v for k, v in kwargs.items()},
    )


def shapes_of(args: tuple, kwargs: dict) -> list[list[int]]:
    return [list(t.shape) for t in tensors_of(list(args) + list(kwargs.values()))]


#: the torch seed set before each end-to-end forward, original and fused: a model that draws
#: noise in its forward (VITS's stochastic durations, ViT-MAE's random masking) draws the same
FORWARD_SEED = 0


def capture_and_run(
    model: nn.Module,
    paths: list[str],
    seed: int,
    device: str,
    workload: Workload | None = None,
    candidates: list[Any] | None = None,
) -> tuple[Any, dict[str, tuple[tuple, dict]], Any]:
    """Run ``model`` on the first candidate inputs it accepts, capturing each path's first inputs.

    ``inputs.calls`` counts how often each path ran in that forward (for its share of the time).
    ``candidates`` replaces the synthetic ones (e.g. a processor's real inputs).

    Returns:
        (the accepted :class:`~fusion_core.run.inputs.ModelInputs`, path -> (args, kwargs), output)

    Raises:
        CheckError: no candidate input runs, naming each attempt's error.
    """
    from .modal import Group

    try:
        if candidates is None:
            candidates = list(candidate_inputs(model, paths, seed=seed, workload=workload))
    except ValueError as e:
        raise CheckError(f"{type(model).__name__}: {e}") from e
    runs, captured, _notes = capture_runs(model, paths, device, [Group("synthetic", candidates)])
    inputs, output = runs[0]
    return inputs, captured, output


def capture_runs(
    model: nn.Module, paths: list[str], device: str, groups: list[Any]
) -> tuple[list[tuple[Any, Any]], dict[str, tuple[tuple, dict]], list[str]]:
    """Run ``model`` once per group (:class:`fusion_core.run.modal.Group`): its first candidate it accepts.

    Each path keeps the inputs of the first run that reaches it. A group marked "fallback"
    (synthetic text) runs when no other group ran, or when a fused module is reached by none of
    them (SeamlessM4T's text encoder, which its speech runs skip); then its failure is only noted.

    Returns:
        ([(inputs, output) per run], path -> (args, kwargs), notes)

    Raises:
        CheckError: a required group (the user's files) has no candidate the model accepts,
            naming each attempt's error; or no group ran at all.
    """
    import torch

    captured: dict[str, tuple[tuple, dict]] = {}
    calls: dict[str, int] = {}
    current: dict[str, tuple[tuple, dict]] = {}

    def hook_for(path: str) -> Callable[..., None]:
        def hook(_module: nn.Module, args: tuple, kwargs: dict) -> None:
            calls[path] = calls.get(path, 0) + 1
            if path not in current:
                current[path] = (_clone(args), _clone(kwargs))

        return hook

    handles = [model.get_submodule(p).register_forward_pre_hook(hook_for(p), with_kwargs=True) for p in paths]
    runs: list[tuple[Any, Any]] = []
    notes: list[str] = []
    errors: list[str] = []
    try:
        for group in groups:
            notes += [n for n in group.notes if n != "fallback"]
            optional = "fallback" in group.notes and bool(runs)
            if optional and all(p in captured for p in paths):
                continue
            tried = []
            for inputs in group.candidates:
                current.clear()
                calls.clear()
                inputs.kwargs = {k: _on(v, device) for k, v in inputs.kwargs.items()}
                entry = model.get_submodule(inputs.entry) if inputs.entry else model
                heartbeat(f"running the original on {group.label} ({inputs.kind} inputs)")
                try:
                    with torch.inference_mode():
                        torch.manual_seed(FORWARD_SEED)  # a model that samples noise: the same for the fused run
                        output = entry(**inputs.kwargs)
                except Exception as e:  # a candidate the model does not accept: try the next
                    tried.append(f"{inputs.kind} inputs: {one_line(e, first=True, named=True, limit=300)}")
                    continue
                inputs.calls = dict(calls)
                for path, value in current.items():
                    captured.setdefault(path, value)
                runs.append((inputs, output))
                if tried:
                    notes.append(f"{group.label}: {'; '.join(tried)}; ran the next candidate")
                break
            else:
                if group.required:
                    raise CheckError(
                        f"{type(model).__name__} does not run on the given {group.label} ({'; '.join(tried)})"
                    )
                if tried and optional:
                    notes.append(f"{group.label}, for the modules no run reached: did not run ({'; '.join(tried)})")
                elif tried:
                    errors += tried
                    notes.append(f"{group.label}: not run ({'; '.join(tried)})")
    finally:
        for h in handles:
            h.remove()
    if not runs:
        raise CheckError(f"{type(model).__name__}: no input it accepts ({'; '.join(errors) or 'none could be made'})")
    return runs, captured, notes


def _on(value: Any, device: Any) -> Any:
    """``value`` on ``device``: a tensor, or each tensor of a list of them (SAM 3's DETR encoder
    takes one feature map per level)."""
    if isinstance(value, (list, tuple)):
        return type(value)(_on(v, device) for v in value)
    return value.to(device) if hasattr(value, "to") else value
