"""Shared machinery for Linear-group families: sibling Linears with one input -> one Linear.

Attention modules project one input through ``q_proj``, ``k_proj`` and ``v_proj``; gated
MLPs through ``gate_proj`` and ``up_proj``. Concatenating the weights along the output
dimension gives one Linear, hence one GEMM instead of several (what vLLM does at load time).

The fused module keeps the original ``forward`` unchanged. Each member name stays
reachable as a :class:`LinearAlias`, a lightweight stand-in that is not a registered
child (so the state dict holds only the fused Linear). Inside one ``forward`` of the
owning module, the first alias called computes the fused Linear once and the others reuse
their chunk, provided they get the *same* tensor (identity, unchanged version counter,
same grad and autocast mode). When the callers do not share one input (cross attention:
``q_proj(decoder)``, ``k_proj(encoder)``), the module switches to per-member products on
row slices of the fused weight: exactly the original cost, never a wrong result. The
cache lives only for one ``forward`` of the owner and is dropped when it returns.

One case the cache cannot see: tensors created under ``torch.inference_mode`` have no
version counter, so an owner whose own ``forward`` modified its input *in place* between
two member calls would get a stale chunk there. No transformers model does that (they
project one input three times in a row); the inference checks would show it.

Under the compiler (``torch.compile``, ``torch.export``: ``torch.compiler.is_compiling()``)
the cache is keyed on identity and the grad and autocast modes only: version counters and
``is_inference()`` cannot be traced (each alias call broke the graph). The trace turns the
cache into data flow, so the graph holds one GEMM and one split per group and the scope's
bookkeeping is plain Python state the compiler guards on. A traced cross attention computes
the fused product once on the first input before it sees the second (a correct, wasted
product); the group then switches to per-member products, which a recompile picks up.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn
from torch.nn import functional as F

from .base import FusionSpec, Verdict, become_fused, fused_subclass
from .transforms import Concat, KeyTransform

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from .base import Workload

_CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.Sequential, nn.ParameterList, nn.ParameterDict)


def _version(t: torch.Tensor | None) -> int | None:
    """The tensor's version counter (None for ``None`` and inference tensors, which have none)."""
    if t is None or t.is_inference():
        return None
    return t._version


def _autocast(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except RuntimeError:  # device types without autocast (meta)
        return False


class LinearGroup:
    """The shared state of one fused module: member sizes, the per-forward cache, the mode."""

    def __init__(
        self, owner: nn.Module, members: tuple[str, ...], fused_name: str, sizes: list[int], views: bool = False
    ) -> None:
        self.owner = owner  # strong reference: deepcopy and pickling keep owner and aliases together
        self.members = members
        self.fused_name = fused_name
        self.sizes = list(sizes)
        self.offsets = [0]
        for s in sizes:
            self.offsets.append(self.offsets[-1] + s)
        self.depth = 0  # > 0 while the owner's forward runs
        self.split = False  # True once the owner was seen calling members with different inputs
        #: the chunks are views of the one product (its columns), not contiguous copies: for
        #: owners that only compute element-wise with them (a gated MLP), see LinearGroupFusion.views
        self.views = views
        self._drop()

    # -- scope -------------------------------------------------------------------------
    def enter(self) -> None:
        self.depth += 1

    def exit(self) -> None:
        self.depth -= 1
        if self.depth == 0:
            if self.pending:  # chunks computed but never asked for: the caller does not share inputs
                self.split = True
            self._drop()

    def _drop(self) -> None:
        self.input: torch.Tensor | None = None
        self.key: tuple[Any, ...] | None = None
        self.pending: dict[int, torch.Tensor] = {}

    # -- calls -------------------------------------------------------------------------
    @property
    def fused(self) -> nn.Linear:
        return self.owner._modules[self.fused_name]  # type: ignore[return-value]

    def _key(self, x: torch.Tensor, fused: nn.Linear) -> tuple[Any, ...]:
        if torch.compiler.is_compiling():
            # traced (torch.compile, torch.export): version counters and is_inference() are not
            # traceable, and the trace sees every op between two member calls as graph nodes;
            # identity (checked in call) and the modes are what the graph is specialized on
            return (None, None, None, torch.is_grad_enabled(), _autocast(x.device.type))
        return (
            _version(x),
            _version(fused.weight),
            _version(fused.bias),
            torch.is_grad_enabled(),
            _autocast(x.device.type),
        )

    def call(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """What member ``index``'s original Linear would return for ``x``."""
        fused = self.fused
        if self.split or self.depth == 0 or not isinstance(x, torch.Tensor):
            return self.single(index, x)
        key = self._key(x, fused)
        if self.pending:
            if self.input is x and self.key == key and index in self.pending:
                out = self.pending.pop(index)
                if not self.pending:
                    self._drop()
                return out
            # a new input while chunks wait: this owner does not feed its members one input
            self._drop()
            self.split = True
            return self.single(index, x)
        # the one GEMM, then its columns split into contiguous chunks like the original outputs
        # (callers may .view() them any way they like) in one op: a split and a .contiguous()
        # per chunk were 4 dispatches and made a 64-wide attention 16% slower than three GEMMs.
        # Where the family allows views (a gated MLP), no copy at all: the copy of a 512-token
        # bf16 product cost 10% of the MLP, as much as the one GEMM saved
        out = fused(x)
        chunks = out.split(self.sizes, dim=-1) if self.views else torch.split_with_sizes_copy(out, self.sizes, dim=-1)
        self.input, self.key = x, key
        self.pending = {j: c for j, c in enumerate(chunks) if j != index}
        return chunks[index]

    def single(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """Member ``index`` alone: a product with a row slice (a view) of the fused weight.

        When the fused Linear was wrapped (a PEFT LoRA layer on ``qkv_proj``), the wrapper's
        output is what counts: its rows of the whole product, never the bare weight's.
        """
        fused = self.fused
        if type(fused) is not nn.Linear:
            return fused(x)[..., self.offsets[index] : self.offsets[index + 1]].contiguous()
        return F.linear(x, self.weight(index, fused), self.bias(index, fused))

    def weight(self, index: int, fused: nn.Linear | None = None) -> torch.Tensor:
        fused = fused if fused is not None else self.fused
        return _flagged(fused.weight, fused.weight[self.offsets[index] : self.offsets[index + 1]])

    def bias(self, index: int, fused: nn.Linear | None = None) -> torch.Tensor | None:
        fused = fused if fused is not None else self.fused
        if fused.bias is None:
            return None
        return _flagged(fused.bias, fused.bias[self.offsets[index] : self.offsets[index + 1]])


def _flagged(param: torch.Tensor, view: torch.Tensor) -> torch.Tensor:
    # transformers' init functions skip tensors flagged as loaded; a fresh view must carry the
    # flag of its parameter, or `_init_weights` (e.g. CLIP's `init.normal_(module.q_proj.weight)`)
    # would overwrite loaded weights through the alias.
    if getattr(param, "_is_hf_initialized", False):
        view._is_hf_initialized = True  # type: ignore[attr-defined]
    return view


class LinearAlias(nn.Module):
    """Stands where a fused member Linear was: ``attn.q_proj(x)``, ``.weight``, ``.bias`` still work.

    Not a registered child of the owner (the state dict holds only the fused Linear);
    ``weight`` and ``bias`` are views of the fused Linear's rows.
    """

    def __init__(self, group: LinearGroup, index: int) -> None:
        super().__init__()
        object.__setattr__(self, "_group", group)  # plain attribute: never a submodule
        self._index = index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._group.call(self._index, x)

    @property
    def weight(self) -> torch.Tensor:
        return self._group.weight(self._index)

    @property
    def bias(self) -> torch.Tensor | None:
        return self._group.bias(self._index)

    @property
    def in_features(self) -> int:
        return self._group.fused.in_features

    @property
    def out_features(self) -> int:
        return self._group.sizes[self._index]

    def extra_repr(self) -> str:
        g = self._group
        a, b = g.offsets[self._index], g.offsets[self._index + 1]
        return f"alias of {g.fused_name} rows {a}:{b}, in_features={self.in_features}, out_features={b - a}"


def concat_linears(linears: list[nn.Linear]) -> nn.Linear:
    """One Linear whose weight (and bias) are ``linears``' concatenated along the output dim."""
    first = linears[0]
    with torch.no_grad():
        weight = torch.cat([lin.weight for lin in linears], dim=0)
        bias = torch.cat([lin.bias for lin in linears], dim=0) if first.bias is not None else None
    fused = nn.Linear.__new__(nn.Linear)
    nn.Module.__init__(fused)
    fused.in_features = first.in_features
    fused.out_features = int(weight.shape[0])
    fused.weight = nn.Parameter(weight, requires_grad=first.weight.requires_grad)
    fused.register_parameter(
        "bias", None if bias is None else nn.Parameter(bias, requires_grad=first.bias.requires_grad)
    )
    fused.train(first.training)
    return fused


class FusedLinearGroupMixin(nn.Module):
    """Mixed in front of the original class: its member Linears become one fused Linear."""

    _fusion_members: ClassVar[tuple[str, ...]] = ()
    _fusion_target: ClassVar[str] = ""
    _fusion_views: ClassVar[bool] = False

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        type(self)._convert(self)

    @classmethod
    def _convert(cls, module: nn.Module) -> None:
        names, target = cls._fusion_members, cls._fusion_target
        linears = [module._modules[n] for n in names]
        fused = concat_linears(linears)  # type: ignore[arg-type]
        # keep the child order: the fused Linear sits where the first member was
        first = next(n for n in module._modules if n in names)
        children = [(target if n == first else n, fused if n == first else m) for n, m in module._modules.items()]
        module._modules.clear()
        module._modules.update((n, m) for n, m in children if n not in names)
        sizes = [lin.out_features for lin in linears]  # type: ignore[misc]
        group = LinearGroup(module, names, target, sizes, cls._fusion_views)
        object.__setattr__(module, "_fusion_group", group)
        for i, n in enumerate(names):
            object.__setattr__(module, n, LinearAlias(group, i))


def _scoped_forward(original_forward: Any) -> Any:
    """The owner's forward, run inside its group's cache scope (same signature as the original)."""

    @functools.wraps(original_forward)
    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        group = self.__dict__.get("_fusion_group")
        if group is None:
            return original_forward(self, *args, **kwargs)
        group.enter()
        try:
            return original_forward(self, *args, **kwargs)
        finally:
            group.exit()

    return forward


class LinearGroupFusion(FusionSpec):
    """Sibling ``nn.Linear`` children with one input size -> one Linear named ``fused_name``.

    Subclasses set ``name``, ``description``, ``members`` (in concatenation order) and
    ``fused_name``. A module is a candidate when it has at least one member child, so a
    partial group is reported with its reason instead of silently ignored.
    """

    members: ClassVar[tuple[str, ...]] = ()
    fused_name: ClassVar[str] = ""
    #: the same group under other names: (child or parameter names, why it is not fused);
    #: the first entry whose names are all present gives :meth:`near_miss`'s reason
    near_miss_names: ClassVar[tuple[tuple[tuple[str, ...], str], ...]] = ()
    #: members' outputs are views of the fused product's columns (no copy) instead of contiguous
    #: tensors: only where the owners use them element-wise (a gated MLP's ``act(gate) * up``);
    #: an attention reshapes its projections, so ``qkv`` keeps contiguous copies
    views: ClassVar[bool] = False

    def is_candidate(self, path: str, module: nn.Module) -> bool:
        children = module._modules
        return any(children.get(n) is not None for n in self.members) and super().is_candidate(path, module)

    def near_miss(self, path: str, module: nn.Module) -> str | None:
        if isinstance(module, _CONTAINERS):
            return None
        own = module._modules, module._parameters
        for names, why in self.near_miss_names:
            if all(any(d.get(n) is not None for d in own) for n in names):
                return why
        return None

    def judge(self, module: nn.Module) -> Verdict:
        children = module._modules
        if isinstance(module, _CONTAINERS):
            return Verdict.no(f"{type(module).__name__} is a container, not a module with its own forward")
        found = {n: children.get(n) for n in self.members}
        missing = [n for n, m in found.items() if m is None]
        if missing:
            has = [n for n in self.members if n not in missing]
            return Verdict.no(f"has {', '.join(has) or 'none of the group'} but no {', '.join(missing)}")
        wrong = [f"{n} is {type(m).__name__}" for n, m in found.items() if type(m) is not nn.Linear]
        if wrong:
            return Verdict.no(f"{'; '.join(wrong)}, not torch.nn.Linear (quantized or custom layers are not fused)")
        linears: list[nn.Linear] = list(found.values())  # type: ignore[arg-type]
        if len({id(m) for m in linears}) < len(linears) or len({id(m.weight) for m in linears}) < len(linears):
            return Verdict.no(f"{', '.join(self.members)} share a module or weight")
        for n, m in found.items():
            extra = sorted(set(m._parameters) - {"weight", "bias"}) + sorted(m._buffers)
            if extra:
                return Verdict.no(f"{n} has extra tensors ({', '.join(extra)}), e.g. weight norm")
            if m._forward_hooks or m._forward_pre_hooks:
                return Verdict.no(f"{n} has forward hooks (offloading, quantization?); fusing would drop them")
            if tuple(m.weight.shape) != (m.out_features, m.in_features):
                return Verdict.no(f"{n} weight shape {tuple(m.weight.shape)} != ({m.out_features}, {m.in_features})")
        sizes = [m.in_features for m in linears]
        if len(set(sizes)) > 1:
            detail = ", ".join(f"{n} {s}" for n, s in zip(self.members, sizes))
            return Verdict.no(f"different input sizes ({detail}): they cannot share one product")
        biased = [n for n, m in found.items() if m.bias is not None]
        if biased and len(biased) < len(linears):
            unbiased = [n for n in self.members if n not in biased]
            return Verdict.no(f"bias on {', '.join(biased)} only (none on {', '.join(unbiased)})")
        if len({(m.weight.dtype, m.weight.device) for m in linears}) > 1:
            detail = ", ".join(f"{n} {m.weight.dtype}/{m.weight.device}" for n, m in found.items())
            return Verdict.no(f"different dtypes or devices ({detail})")
        if self.fused_name in children or self.fused_name in module._parameters or self.fused_name in module._buffers:
            return Verdict.no(f"already has a {self.fused_name}")
        outs = "+".join(str(m.out_features) for m in linears)
        return Verdict.yes(
            f"{', '.join(self.members)}: Linear {sizes[0]} -> {outs}{' with bias' if biased else ''}, one product"
        )

    def make_fused_class(self, original_cls: type) -> type:
        mixin = type(
            f"_Fused{self.fused_name.title().replace('_', '')}Mixin",
            (FusedLinearGroupMixin,),
            {"_fusion_members": tuple(self.members), "_fusion_target": self.fused_name, "_fusion_views": self.views},
        )
        return fused_subclass(original_cls, mixin, self.name, {"forward": _scoped_forward(original_cls.forward)})

    def make_transforms(self, config: PretrainedConfig, modules: Mapping[str, nn.Module]) -> list[KeyTransform]:
        transforms: list[KeyTransform] = []
        for path, module in modules.items():
            prefix = f"{path}." if path else ""
            linears = [module._modules[n] for n in self.members]
            for param in ("weight", "bias"):
                tensors = [getattr(lin, param) for lin in linears]
                if any(t is None for t in tensors):
                    continue
                transforms.append(
                    Concat(
                        family=self.name,
                        sources=tuple(f"{prefix}{n}.{param}" for n in self.members),
                        targets=(f"{prefix}{self.fused_name}.{param}",),
                        dim=0,
                        source_shapes=tuple(tuple(t.shape) for t in tensors),
                    )
                )
        return transforms

    def fuse_module(self, module: nn.Module) -> None:
        """Fuse one loaded module in place (its member weights are concatenated: one copy).

        Raises:
            ValueError: ``module`` is not fusable by this family (the reason says why).
        """
        if getattr(type(module), "_fusion_family", None) == self.name:
            return  # already fused
        verdict = self.judge(module)
        if not verdict.ok:
            raise ValueError(f"{type(module).__name__} cannot be fused by {self.name!r}: {verdict.reason}")
        fused = self.fused_class(type(module))
        become_fused(module, fused)
        fused._convert(module)

    def share_storage(self, original: nn.Module, fused: nn.Module) -> None:
        """The original members' weights (and biases) become views of the fused Linear's rows."""
        group = fused.__dict__.get("_fusion_group")
        if group is None:
            return
        target = fused._modules[group.fused_name]
        for i, name in enumerate(group.members):
            member = original._modules.get(name)
            if member is None:
                continue
            rows = slice(group.offsets[i], group.offsets[i + 1])
            for attr in ("weight", "bias"):
                mine, theirs = member._parameters.get(attr), target._parameters.get(attr)
                if mine is None or theirs is None or mine.shape != theirs[rows].shape:
                    continue
                view = theirs.detach()[rows]
                if mine.dtype == view.dtype and mine.device == view.device:
                    member._parameters[attr] = nn.Parameter(view, requires_grad=mine.requires_grad)

    def sample_inputs(
        self, module: nn.Module, config: PretrainedConfig | None, workload: Workload
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Hidden states of the members' input size, plus what the module's forward needs
        (attention: position embeddings ``(cos, sin)``, masks, ``cu_seqlens``...), read from
        its signature. Batched ``(batch, seq, hidden)`` first, packed ``(seq, hidden)`` too.

        Raises:
            ValueError: the module accepts none of them (each attempt's error is named).
        """
        from ._sample_inputs import first_accepted

        return first_accepted(module, _group_samples(module, config, workload), f"a {self.name} module")


def _group_samples(
    module: nn.Module, config: PretrainedConfig | None, workload: Workload
) -> list[tuple[str, tuple[tuple[Any, ...], dict[str, Any]]]]:
    from . import _sample_inputs as s

    group = module.__dict__.get("_fusion_group")
    first = group.fused if group is not None else next(m for m in module.children() if isinstance(m, nn.Linear))
    hidden = int(first.in_features)
    gen = s.generator(workload)
    batch, seq = max(1, int(workload.batch)), s.seq_len(workload)
    params = s.parameters(module)
    names = list(params)
    head_dim = getattr(module, "head_dim", None) or s.config_value(config, "head_dim")
    if not head_dim:
        heads = getattr(module, "num_heads", None) or s.config_value(config, "num_attention_heads")
        q = module._modules.get("q_proj") or getattr(module, "q_proj", None)
        head_dim = int(q.out_features) // int(heads) if heads and q is not None else None
    packed_first = "cu_seqlens" in params
    # the widths of the other sequence (a cross-attention's keys) and of queries called second
    key_width = s.projection_width(module, _KEY_NAMES) or hidden
    query_width = s.projection_width(module, _QUERY_NAMES) or hidden
    cands = []
    for packed in (packed_first, not packed_first):
        lead = (seq,) if packed else (batch, seq)
        x = s.randn(workload, gen, *lead, hidden)
        kwargs: dict[str, Any] = {}
        for name in names[1:]:
            p = params[name]
            if name == "position_embeddings" and head_dim:
                angles = s.randn(workload, gen, *lead, int(head_dim))
                kwargs[name] = (angles.cos(), angles.sin())
            elif name in ("freqs_ci", "freqs_cis") and head_dim:  # complex rotations (Llama 4's vision tower)
                angles = s.randn(workload, gen, seq, 1, int(head_dim) // 2).float()
                kwargs[name] = torch.polar(torch.ones_like(angles), angles)
            elif name == "hidden_states" and p.default is inspect.Parameter.empty:
                # the queries of an attention called as (key_value_states, hidden_states): Aria's projector
                kwargs[name] = s.randn(workload, gen, *lead[:-1], max(1, seq // 2), query_width)
            elif name == "cu_seqlens":
                kwargs[name] = torch.tensor([0, seq], dtype=torch.int32, device=workload.device)
            elif name == "max_seqlen":
                kwargs[name] = seq
            elif name == "position_ids":
                kwargs[name] = torch.arange(seq, device=workload.device).expand(*lead[:-1], seq)
            elif name in _KEY_VALUE and p.default is inspect.Parameter.empty:
                kwargs[name] = x  # attention called as (query, key, value): SAM's, self-attention here
            elif name in _CONTEXT and p.default is inspect.Parameter.empty:
                kwargs[name] = s.randn(workload, gen, *lead, key_width)  # a perceiver's
            elif p.default is inspect.Parameter.empty:
                kwargs[name] = None  # masks, caches: None means "none" in transformers' modules
        label = f"hidden states {tuple(x.shape)}" + (f" with {', '.join(kwargs)}" if kwargs else "")
        cands.append((label, ((x,), kwargs)))
        if isinstance(kwargs.get("position_embeddings"), tuple):  # or added to the states (DETRs)
            added = {**kwargs, "position_embeddings": s.randn(workload, gen, *lead, hidden)}
            cands.append((f"{label} (added to the states)", ((x,), added)))
        optional = [n for n in names[1:] if n in _CONTEXT and n not in kwargs]
        if optional:  # cross-attention: the other sequence is optional in the signature, needed in the body
            other = s.randn(workload, gen, *lead[:-1], max(1, seq // 2), key_width)
            cands.append((f"{label} and {optional[0]} {tuple(other.shape)}", ((x,), {**kwargs, optional[0]: other})))
    return cands


_KEY_VALUE = ("key", "value", "keys", "values")
#: the other sequence of a cross-attention or perceiver
_CONTEXT = ("encoder_hidden_states", "context", "key_value_states", "cross_attention_states")
#: the key and the query projections' names, whose input sizes are the widths a sample gives
_KEY_NAMES = ("k_proj", "key", "k", "to_k", "kv_proj", "kv")
_QUERY_NAMES = ("q_proj", "query", "q", "to_q")


__all__ = ["FusedLinearGroupMixin", "LinearAlias", "LinearGroup", "LinearGroupFusion", "concat_linears"]
