"""One copy of the weights for the original and the fused model (issue 35).

A check used to hold the original and the fused model side by side: twice the checkpoint
in memory, which a 7B model on a 24 GB machine does not have. Here the model is loaded
once, and each matched module gets a *fused twin*:

- the twin is a shallow copy of the module tree (its own ``_modules``, ``_parameters``,
  ``_buffers`` and hook tables; the same tensors), converted in place by its family
  (:meth:`~fusion_core.families.base.FusionSpec.fuse_module`), so the original is untouched;
- a patch family's Linear is already a view of the convolution's weight;
- a concatenating family allocates the fused tensor once, and
  :meth:`~fusion_core.families.base.FusionSpec.share_storage` then makes the original
  members views of its rows, so the members' own tensors are freed (or, mapped from the
  checkpoint, left to the page cache).

:meth:`Switch.use` puts one form or the other in the parents' ``_modules``: the end-to-end
run and the A/B/A timing rounds alternate by switching, never by holding two models.

A module whose weights accelerate offloaded (to disk, or to another device) has no twin:
its tensors are read in by accelerate's hooks for each call, so it is checked alone
(:func:`offloaded_paths`).
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

    from ..plan.fusion_plan import FusionPlan

__all__ = ["Precise", "Switch", "fused_twin", "in_float32", "offloaded_paths"]


def _shallow_tree(module: nn.Module) -> nn.Module:
    """A copy of ``module`` and its submodules that shares every tensor, with tables of its own."""
    new = copy.copy(module)  # a new object and __dict__; the values are the same objects
    new._modules = {name: (None if child is None else _shallow_tree(child)) for name, child in module._modules.items()}
    new._parameters = dict(module._parameters)
    new._buffers = dict(module._buffers)
    for name, value in list(new.__dict__.items()):
        if name.endswith("_hooks") or name.endswith("hooks_with_kwargs") or name.endswith("hooks_always_called"):
            new.__dict__[name] = OrderedDict(value) if isinstance(value, OrderedDict) else copy.copy(value)
    # accelerate's hooks (a device_map) replace ``forward`` on the instance with a partial bound
    # to *this* module: a copy would run the original's forward. The twin's weights are in
    # memory (offloaded modules get none), so it runs its own class's forward, unhooked.
    if "_hf_hook" in new.__dict__:
        for name in ("forward", "_hf_hook", "_old_forward"):
            new.__dict__.pop(name, None)
    elif "forward" in new.__dict__:
        raise ValueError(f"{type(module).__name__} has a forward of its own instance; cannot make a fused twin of it")
    return new


def fused_twin(spec: Any, module: nn.Module) -> nn.Module:
    """The fused form of ``module`` by family ``spec``, sharing its weights (``module`` stays original)."""
    twin = _shallow_tree(module)
    spec.fuse_module(twin)
    spec.share_storage(module, twin)
    return twin


def offloaded_paths(model: nn.Module, paths: list[str]) -> list[str]:
    """The paths whose weights accelerate keeps off the CPU's memory (on disk, or ``meta`` between calls)."""
    out = []
    for path in paths:
        module = model.get_submodule(path)
        tensors = [*module.parameters(), *module.buffers()]
        if any(t.device.type == "meta" for t in tensors) or any(
            getattr(getattr(m, "_hf_hook", None), "offload", False) for m in module.modules()
        ):
            out.append(path)
    return out


def _cast(value: Any, src: Any, dst: Any) -> Any:
    """``value`` (tensors in tuples, lists, dicts, ModelOutputs) with floating tensors of ``src`` dtype as ``dst``."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(dst) if value.dtype == src else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_cast(v, src, dst) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_cast(v, src, dst) for v in value)
    if isinstance(value, dict):
        out = copy.copy(value)  # a ModelOutput keeps its class
        for k, v in value.items():
            out[k] = _cast(v, src, dst)
        return out
    return value


class Precise:
    """A module computed in a wider dtype, its outputs rounded back to the model's dtype.

    The original and its fused form each round differently; running the original more
    precisely measures how far rounding alone moves the model's output (the *rounding floor*
    an end-to-end comparison beyond its tolerance is judged against). The wider dtype is
    float32 for a bfloat16 or float16 model, float64 for a float32 one (:func:`wider`).
    Parameters are cast for each call, never kept: memory grows by one module's wide copy, briefly.
    """

    def __init__(self, module: nn.Module, dtype: Any) -> None:
        self.inner = module
        self.dtype = dtype

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from torch.func import functional_call

        d, w = self.dtype, wider(self.dtype)
        tensors = {n: t.to(w) if t.dtype == d else t for n, t in self.inner.state_dict(keep_vars=True).items()}
        args, kwargs = _cast(args, d, w), _cast(kwargs, d, w)
        return _cast(functional_call(self.inner, tensors, args, kwargs), w, d)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def wider(dtype: Any) -> Any:
    """The dtype a rounding floor computes in: float64 for float32, float32 otherwise."""
    import torch

    return torch.float64 if dtype == torch.float32 else torch.float32


def _slot(model: nn.Module, path: str) -> tuple[nn.Module, str]:
    """Where the module at ``path`` sits: its parent and its name there (what a switch rewrites)."""
    head, _, name = path.rpartition(".")
    return (model.get_submodule(head) if head else model), name


@contextmanager
def in_float32(model: nn.Module, paths: list[str], dtype: Any) -> Iterator[None]:
    """The modules at ``paths`` computed in a wider dtype (:class:`Precise`) for a block.

    A :class:`Precise` is not a module: the parents' ``_modules`` hold it for the block only,
    and calling it is all a parent does with a matched child during a forward.
    """
    slots = [(parent, name, parent._modules[name]) for parent, name in (_slot(model, path) for path in paths)]
    for parent, name, module in slots:
        parent._modules[name] = Precise(module, dtype)  # type: ignore[assignment]
    try:
        yield
    finally:
        for parent, name, module in slots:
            parent._modules[name] = module


class Switch:
    """The matched modules of one loaded model, each in its original form and as a fused twin.

    Args:
        model: the loaded original model.
        plan: its plan (each path's family, as the plan configured it).
        paths: the matched paths to give twins (in memory: see :func:`offloaded_paths`).
    """

    def __init__(self, model: nn.Module, plan: FusionPlan, paths: list[str]) -> None:
        self.model = model
        self.original: dict[str, nn.Module] = {}
        self.fused: dict[str, nn.Module] = {}
        self._slots: dict[str, tuple[nn.Module, str]] = {}
        self.untwinned: dict[str, str] = {}  # path -> why it has no twin (it is checked alone)
        #: the model itself matched (a vision tower that hosts its own patch convolution):
        #: its two states, (class, __dict__) original then fused, swapped on the one object
        self._root: tuple[tuple[type, dict[str, Any]], tuple[type, dict[str, Any]]] | None = None
        for path in paths:
            if not path:
                self._twin_root(plan)
                continue
            parent, name = _slot(model, path)
            module = parent._modules[name]
            assert module is not None
            try:
                twin = fused_twin(plan.spec(plan.matched_paths[path]), module)
            except ValueError as e:
                self.untwinned[path] = str(e)
                continue
            self.original[path] = module
            self.fused[path] = twin
            self._slots[path] = (parent, name)
        self.is_fused = False

    def _twin_root(self, plan: FusionPlan) -> None:
        """The model object itself is a matched module: everything that holds the model (the
        end-to-end run, its hooks) must see the form in use, so the one object changes state.
        ``original[""]`` is a second object on the original state, for the module's own runs."""
        model = self.model
        try:
            twin = fused_twin(plan.spec(plan.matched_paths[""]), model)
        except ValueError as e:
            self.untwinned[""] = str(e)
            return
        original = object.__new__(type(model))
        object.__setattr__(original, "__dict__", model.__dict__)
        self._root = ((type(model), model.__dict__), (type(twin), twin.__dict__))
        self.original[""] = original
        self.fused[""] = twin

    def use(self, fused: bool) -> None:
        """Put the fused twins (``True``) or the originals in place."""
        forms = self.fused if fused else self.original
        for path, (parent, name) in self._slots.items():
            parent._modules[name] = forms[path]
        if self._root is not None:
            cls, state = self._root[1 if fused else 0]
            object.__setattr__(self.model, "__class__", cls)
            object.__setattr__(self.model, "__dict__", state)
        self.is_fused = fused

    @contextmanager
    def precise(self, dtype: Any) -> Iterator[None]:
        """The originals computed in float32 (:class:`Precise`) for a block, then the originals."""
        self.use(False)
        with in_float32(self.model, list(self._slots), dtype):
            yield

    @contextmanager
    def using(self, fused: bool) -> Iterator[None]:
        """:meth:`use` for a block, then back to what was in place."""
        before = self.is_fused
        self.use(fused)
        try:
            yield
        finally:
            self.use(before)

    def close(self) -> None:
        """Back to the original form, the twins dropped."""
        self.use(False)
        self.fused.clear()
