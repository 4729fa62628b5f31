"""The conversion of an adapter, planned from the fusion plan and the adapter's header alone.

The plan's key transforms say which modules a family fuses: a ``Concat`` of member
Linears' ``.weight`` along dim 0 (``qkv``, ``gate_up`` and any Linear-group family) gives
the members, their output sizes and the fused module's path. The adapter's LoRA on those
modules converts exactly:

* **original -> fused** (``stack_a_blockdiag_b``): ``A = [A_q; A_k; A_v]`` and
  ``B = blockdiag(B_q, B_k, B_v)``; the fused rank is the sum of the parts' ranks and a
  member without an adapter gets a zero block. PEFT applies one scale per module, so the
  fused module takes the first part's scale, and another part whose scale differs has
  the ratio folded into its rows of B (exact; bitwise back when the ratio is a power of two).
* **fused -> original**, from an adapter this conversion wrote (``fusion_adapter.json``
  records each part's rank and alpha): ``split_blocks`` gives each part its rows of A and
  its block of B back, bitwise. An adapter trained on the fused model
  (``share_a_split_b``): every part gets all of A and its rows of B, at the fused rank.

The plan's ``Reshape`` of a Conv weight into a Linear's (``conv3d_to_linear``,
``conv2d_to_linear``: a patch family) gives the patch projections. A Conv LoRA there is a
Linear LoRA over flattened patches (``conv_to_linear``): ``lora_A`` ``(r, C, *k)`` ->
``(r, C*prod(k))`` and ``lora_B`` ``(out, r, 1, ...)`` -> ``(out, r)`` by reshape (a
``lora_B.bias`` keeps its shape), the rank and alpha unchanged; ``linear_to_conv`` is the
inverse, bitwise, and converts a Linear LoRA trained on the fused ``linear_proj`` just as
exactly. DoRA too: its magnitude is per output channel (``(1, out, 1, ...)`` on a Conv,
``(out,)`` on a Linear: a reshape), and PEFT's Conv and Linear DoRA both divide by the row
norms of ``W + s B A`` over the same elements (equal bitwise on CPU, float32 and bfloat16).
PEFT wraps the fused ``PatchLinear`` as a Linear and feeds its LoRA what the host
passes it: the host's forward calls the Conv's old name, which flattens the patches first
(:class:`fusion_core.families._conv_patch.PatchCall`), so the LoRA gets rows of patches.

Modules no family touches are copied bitwise. What cannot be exact is refused with one
line: a LoRA on a patch Conv held in a torch container (the container calls the fused
``PatchLinear`` itself, with Conv-shaped inputs that a Linear LoRA cannot take), trained
biases or ``modules_to_save`` on fused modules, ``fan_in_fan_out``.

DoRA is exact too when every member of a group has an adapter: its magnitude and the
weight norm it divides by are per output row, and the fused rows are the members' rows
(``W_i + s_i B_i A_i``: the zero blocks add nothing), so the magnitudes concatenate and
split by rows. A member without an adapter would need its base weight's row norms as its
magnitude, which PEFT recomputes in another order (not bitwise): refused.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import AdapterError
from .result import AdaptedModule, AdapterPlan, AdapterStep
from .source import PREFIX, RECORD, AdapterSource, LoraModule, alpha_for

if TYPE_CHECKING:
    from ..plan.fusion_plan import FusionPlan

STACK, SPLIT, SHARE = "stack_a_blockdiag_b", "split_blocks", "share_a_split_b"
TO_LINEAR, TO_CONV = "conv_to_linear", "linear_to_conv"
_LORA = ("lora_A.weight", "lora_B.weight")
_PATCH_KEYS = (*_LORA, "lora_B.bias")  # lora_bias=True: B's bias is per output channel on both sides
_MAGNITUDE = "lora_magnitude_vector"  # DoRA: one magnitude per output row


@dataclass(frozen=True)
class Group:
    """One fused Linear group of the plan (module paths in the model's naming)."""

    family: str
    fused: str
    members: tuple[str, ...]
    sizes: tuple[int, ...]  # each member's output features
    in_features: int


@dataclass(frozen=True)
class Patch:
    """One non-overlapping Conv a patch family turns into a Linear (module paths in the model's naming)."""

    family: str
    conv: str  # the original Conv, e.g. ``visual.patch_embed.proj``
    linear: str  # the fused PatchLinear, e.g. ``visual.patch_embed.linear_proj``
    weight_shape: tuple[int, ...]  # the Conv's weight (out, C, *kernel)
    held: str | None = None  # why a LoRA on it cannot convert (a container calls it), else None


@dataclass
class Step:
    """One planned conversion with what executing it needs (``plain`` is what is shown).

    A patch step (``patch`` set, ``group`` None) reshapes each tensor: ``source_keys[i]`` ->
    ``target_keys[i]``.
    """

    plain: AdapterStep
    group: Group | None
    ranks: tuple[int, ...]  # per member (0: no adapter); for SHARE every member has the fused rank
    ratios: tuple[float, ...]  # per member: its scale / the fused scale (stack) or to undo (split)
    fused_name: str  # the fused module in the adapter's naming
    member_names: tuple[str, ...]
    dora: bool = False  # each module also has a DoRA magnitude (concatenated / split by rows)
    patch: Patch | None = None


@dataclass
class Conversion:
    """Everything a conversion will do, before any tensor data is read."""

    plan: AdapterPlan
    steps: list[Step]
    copied: list[str]  # keys copied bitwise
    out_modules: dict[str, tuple[int, float]]  # adapter module name (output) -> (rank, alpha)
    target_names: set[str]  # module names of the written layout (the adapter's naming)
    record: dict[str, Any] | None  # fusion_adapter.json to write (fused layout)


def linear_groups(plan: FusionPlan) -> tuple[list[Group], list[Patch], dict[str, str]]:
    """The plan's Linear groups, its Conv -> Linear patch projections, and the other modules
    its families transform (path -> family)."""
    from ..families._conv_patch import _CONTAINERS
    from ..families.transforms import Concat, Reshape

    groups: list[Group] = []
    patches: list[Patch] = []
    other: dict[str, str] = {}
    model = plan.inspection.model
    for t in plan.transforms:
        weights = all(k.endswith(".weight") for k in (*t.sources, *t.targets))
        conv = isinstance(t, Reshape) and t.name.startswith("conv") and t.name.endswith("_to_linear")
        if conv and weights and len(t.source_shape) >= 3 and len(t.target_shape) == 2:
            src, dst = t.sources[0].removesuffix(".weight"), t.targets[0].removesuffix(".weight")
            head = src.rpartition(".")[0]
            parent = model.get_submodule(head) if head else model
            held = None
            if type(parent) in _CONTAINERS:
                held = (
                    f"it is held in a {type(parent).__name__}, which calls the fused PatchLinear with Conv-shaped "
                    "inputs: PEFT's Linear LoRA there would be fed unflattened patches"
                )
            patches.append(Patch(t.family, src, dst, tuple(int(d) for d in t.source_shape), held))
        elif isinstance(t, Concat) and weights and t.dim == 0 and all(len(s) == 2 for s in t.source_shapes):
            groups.append(
                Group(
                    t.family,
                    t.targets[0].removesuffix(".weight"),
                    tuple(k.removesuffix(".weight") for k in t.sources),
                    tuple(int(s[0]) for s in t.source_shapes),
                    int(t.source_shapes[0][1]),
                )
            )
        elif not isinstance(t, Concat):
            for k in (*t.sources, *t.targets):
                other[k.rsplit(".", 1)[0]] = t.family
    for pt in patches:  # the bias's Rename belongs to its patch
        other.pop(pt.conv, None)
        other.pop(pt.linear, None)
    return groups, patches, other


def _module_names(plan: FusionPlan, groups: list[Group], patches: list[Patch]) -> tuple[set[str], set[str]]:
    """The module paths of the original model and of the fused one."""
    original = {n for n, _ in plan.inspection.model.named_modules() if n}
    members = {m for g in groups for m in g.members} | {p.conv for p in patches}
    fused = (original - members) | {g.fused for g in groups} | {p.linear for p in patches}
    return original, fused


class _Names:
    """The adapter's module names <-> the model's (PEFT on a base model or on a task model)."""

    def __init__(self, adapter_names: Iterable[str], model_names: set[str], prefix: str) -> None:
        self.add, self.strip = "", ""
        for n in adapter_names:
            if n in model_names:
                break
            if prefix and f"{prefix}.{n}" in model_names:
                self.add = f"{prefix}."
                break
            if prefix and n.startswith(prefix + ".") and n[len(prefix) + 1 :] in model_names:
                self.strip = f"{prefix}."
                break

    def model(self, name: str) -> str:
        return self.add + name.removeprefix(self.strip) if self.strip else self.add + name

    def adapter(self, path: str) -> str:
        return self.strip + path.removeprefix(self.add)


def plan_conversion(plan: FusionPlan, adapter: AdapterSource, layout: str | None = None) -> Conversion:
    """Plan the conversion of ``adapter`` (for the model of ``plan``) into ``layout``.

    Args:
        plan: the fusion plan (its families give the groups).
        adapter: the opened adapter.
        layout: ``"fused"``, ``"original"`` or None (the other layout than the adapter's).

    Raises:
        AdapterError: what cannot be converted exactly, in one line.
    """
    groups, patches, reshaped = linear_groups(plan)
    original, fused = _module_names(plan, groups, patches)
    prefix = getattr(plan.inspection.model, "base_model_prefix", "") or ""
    names = _Names(adapter.modules, original | fused, prefix)
    where = f"{adapter.folder}"
    by_model = {names.model(n): m for n, m in adapter.modules.items()}
    unknown = sorted(p for p in by_model if p not in original and p not in fused)
    if unknown:
        raise AdapterError(
            f"{where}: adapts {unknown[0]}, which is not a module of {plan.model} "
            f"({len(unknown)} such module(s)); is it an adapter of this base model?"
        )
    members = {m: g for g in groups for m in g.members}
    fused_paths = {g.fused: g for g in groups}
    convs = {pt.conv: pt for pt in patches}
    linears = {pt.linear: pt for pt in patches}
    on_members = [p for p in by_model if p in members or p in convs]
    on_fused = [p for p in by_model if p in fused_paths or p in linears]
    if on_members and on_fused:
        raise AdapterError(
            f"{where}: adapts both {on_members[0]} (original layout) and {on_fused[0]} (fused layout); "
            "a mixed adapter is refused"
        )
    recorded = (adapter.record or {}).get("layout")
    source_layout = "fused" if on_fused or (recorded == "fused" and not on_members) else "original"
    layout = layout or ("original" if source_layout == "fused" else "fused")
    if layout not in ("fused", "original"):
        raise AdapterError(f"layout {layout!r} is not 'fused' or 'original'")
    if layout == source_layout:
        raise AdapterError(
            f"{where}: the adapter is already in the {layout} layout for these fusions "
            f"({'it adapts fused modules' if source_layout == 'fused' else 'it adapts no fused module'}); "
            "nothing to convert"
        )
    for p, fam in reshaped.items():
        if p in by_model:
            raise AdapterError(f"{where}: {p} has a LoRA and {fam!r} transforms that module; not converted")
    for p in by_model:
        pt = convs.get(p) or linears.get(p)
        if pt is not None and pt.held:
            raise AdapterError(
                f"{where}: {p} has a LoRA and {pt.family!r} turns that Conv into a Linear, but {pt.held}; "
                f"disable {pt.family!r} for this adapter"
            )
    touched = set(members) | set(fused_paths)
    _refuse_variants(adapter, names, touched | set(convs) | set(linears), where, set(convs) | set(linears))
    cfg = adapter.config
    rslora = adapter.rslora
    steps: list[Step] = []
    done: set[str] = set()
    if layout == "fused":
        for g in groups:
            parts = [by_model.get(m) for m in g.members]
            if any(parts):
                steps.append(_stack(g, parts, names, rslora, where))
                done.update(p.name for p in parts if p)
        for pt in patches:
            mod = by_model.get(pt.conv)
            if mod is not None:
                steps.append(_patch(pt, mod, names, True, where))
                done.add(mod.name)
    else:
        record = _record_groups(adapter, where)
        for g in groups:
            mod = by_model.get(g.fused)
            if mod is not None:
                steps.append(_split(g, mod, names, record.get(g.fused), rslora, where))
                done.add(mod.name)
        for pt in patches:
            mod = by_model.get(pt.linear)
            if mod is not None:
                steps.append(_patch(pt, mod, names, False, where))
                done.add(mod.name)
    copied = [k for k in adapter.tensors if k.removeprefix(PREFIX).split(".lora_")[0] not in done]
    out: dict[str, tuple[int, float]] = {n: (m.rank, m.alpha) for n, m in adapter.modules.items() if n not in done}
    for s in steps:
        for name, r, a in zip(s.plain.target_modules, s.plain.target_ranks, s.plain.target_alphas):
            out[name] = (r, a)
    target_names = {names.adapter(p) for p in (fused if layout == "fused" else original)}
    record_out = None
    if layout == "fused":
        record_out = {
            "schema_version": 1,
            "layout": "fused",
            "fusion_config": plan.fusion_config,
            "groups": [
                {
                    "family": s.group.family,
                    "fused": s.fused_name,
                    "members": list(s.member_names),
                    "ranks": list(s.ranks),
                    "alphas": [adapter.modules[n].alpha if r else None for n, r in zip(s.member_names, s.ranks)],
                }
                for s in steps
                if s.group is not None
            ],
        }
    modules = [AdaptedModule(names.model(m.name), m.rank, m.alpha, m.scale, m.kind) for m in adapter.modules.values()]
    messages = []
    if cfg.get("layers_to_transform") is not None or cfg.get("exclude_modules"):
        messages.append("layers_to_transform / exclude_modules were replaced by the exact list of adapted modules")
    aplan = AdapterPlan(
        adapter=str(adapter.folder),
        source_layout=source_layout,
        layout=layout,
        fusion_config=dict(plan.fusion_config),
        use_rslora=rslora,
        modules=modules,
        steps=[s.plain for s in steps],
        copied_keys=len(copied),
        messages=messages,
    )
    return Conversion(aplan, steps, copied, out, target_names, record_out)


def _refuse_variants(
    adapter: AdapterSource, names: _Names, touched: set[str], where: str, patch_paths: set[str]
) -> None:
    """What plain LoRA on a fused module cannot carry over exactly."""
    cfg = adapter.config
    if cfg.get("target_parameters"):
        raise AdapterError(f"{where}: target_parameters (LoRA on raw parameters) is not converted")
    if cfg.get("layer_replication"):
        raise AdapterError(f"{where}: layer_replication is not converted (module paths would not be the model's)")
    for n, m in adapter.modules.items():
        p = names.model(n)
        if p not in touched:
            continue
        extra = sorted(set(m.keys) - ({*_PATCH_KEYS, _MAGNITUDE} if p in patch_paths else {*_LORA, _MAGNITUDE}))
        if extra:
            raise AdapterError(f"{where}: {p} has {PREFIX}{n}.{extra[0]}, which a fused LoRA cannot carry; refused")
        if m.kind != "lora":
            raise AdapterError(f"{where}: {p} is not a Linear LoRA ({m.kind}); refused")
        if cfg.get("fan_in_fan_out"):
            raise AdapterError(f"{where}: fan_in_fan_out on {p} (Conv1D layers) is not converted")
    saved = cfg.get("modules_to_save") or []
    leaves = {t.rsplit(".", 1)[-1] for t in touched}
    for k in adapter.other_keys:
        path = k.removeprefix(PREFIX)
        for t in touched:
            if path.startswith(names.adapter(t) + "."):
                what = "modules_to_save" if t.rsplit(".", 1)[-1] in saved or saved else "a trained bias"
                raise AdapterError(f"{where}: {k} ({what} on the fused module {t}) cannot be converted exactly")
    for s in saved if isinstance(saved, list) else []:
        if s in leaves or s in touched:
            raise AdapterError(f"{where}: modules_to_save names {s}, a module the fusion replaces; refused")


def _patch(pt: Patch, mod: LoraModule, names: _Names, to_fused: bool, where: str) -> Step:
    """A patch projection's LoRA reshaped: Conv ``A (r, C, *k)``, ``B (O, r, 1, ...)`` <-> Linear ``(r, C*prod(k))``, ``(O, r)``."""
    name = names.model(mod.name)
    out, c, *k = pt.weight_shape
    r = mod.rank
    ones = tuple(1 for _ in k)
    # DoRA: one magnitude per output channel, (1, out, 1, ...) on a Conv and (out,) on a Linear
    conv = {
        "lora_A.weight": (r, c, *k), "lora_B.weight": (out, r, *ones), "lora_B.bias": (out,),
        _MAGNITUDE: (1, out, *ones),
    }  # fmt: skip
    linear = {
        "lora_A.weight": (r, c * math.prod(k)),
        "lora_B.weight": (out, r),
        "lora_B.bias": (out,),
        _MAGNITUDE: (out,),
    }
    src_shapes, dst_shapes = (conv, linear) if to_fused else (linear, conv)
    keys = [k for k in (*_PATCH_KEYS, _MAGNITUDE) if k in mod.keys]
    for key in keys:
        got = tuple(mod.keys[key].shape)
        if got != src_shapes[key]:
            kind = "Conv" if to_fused else "Linear"
            raise AdapterError(
                f"{where}: {PREFIX}{mod.name}.{key} has shape {list(got)}, not the {kind} LoRA shape "
                f"{list(src_shapes[key])} of {name}; refused"
            )
    target = names.adapter(pt.linear if to_fused else pt.conv)
    op = TO_LINEAR if to_fused else TO_CONV
    note = (
        f"{len(k)}-D Conv LoRA as a Linear LoRA over flattened patches (A and B reshaped)"
        if to_fused
        else f"Linear LoRA over flattened patches as a {len(k)}-D Conv LoRA (A and B reshaped)"
    )
    plain = AdapterStep(
        family=pt.family,
        op=op,
        source_modules=(mod.name,),
        target_modules=(target,),
        source_keys=tuple(f"{PREFIX}{mod.name}.{key}" for key in keys),
        source_shapes=tuple(src_shapes[key] for key in keys),
        target_keys=tuple(f"{PREFIX}{target}.{key}" for key in keys),
        target_shapes=tuple(dst_shapes[key] for key in keys),
        source_ranks=(r,),
        target_ranks=(r,),
        target_alphas=(mod.alpha,),
        note=note,
        owner=pt.conv.rsplit(".", 1)[0] if "." in pt.conv else "",
    )
    fused_name = target if to_fused else mod.name
    return Step(plain, None, (r,), (1.0,), fused_name, (names.adapter(pt.conv),), patch=pt)


def _stack(g: Group, parts: list[LoraModule | None], names: _Names, rslora: bool, where: str) -> Step:
    present = [p for p in parts if p is not None]
    dtypes = {p.keys[k].dtype for p in present for k in _LORA}
    if len(dtypes) > 1:
        raise AdapterError(f"{where}: the LoRA tensors of {g.fused}'s members have different dtypes {sorted(dtypes)}")
    ranks = tuple(p.rank if p else 0 for p in parts)
    total = sum(ranks)
    scale = present[0].scale
    ratios = tuple((p.scale / scale) if p else 1.0 for p in parts)
    alpha = alpha_for(scale, total, rslora)
    fused_name = names.adapter(g.fused)
    dora = _dora(g, present, where)
    if dora and len(present) < len(parts):
        missing = ", ".join(names.adapter(m) for m, p in zip(g.members, parts) if p is None)
        raise AdapterError(
            f"{where}: DoRA on {fused_name}: {missing} has no adapter, and its DoRA magnitude would have to be the "
            "base weight's row norms, which PEFT recomputes in another order (not bitwise); adapt every member "
            "of the group or none"
        )
    keys = (*_LORA, _MAGNITUDE) if dora else _LORA
    src_keys, src_shapes = [], []
    for p in present:
        for k in keys:
            src_keys.append(f"{PREFIX}{p.name}.{k}")
            src_shapes.append(tuple(p.keys[k].shape))
    notes = [f"{names.adapter(m)} has no adapter: zero block" for m, p in zip(g.members, parts) if p is None]
    notes += [
        f"{p.name}: scale {p.scale:g} vs {scale:g}, ratio folded into its rows of B"
        for p, r in zip(parts, ratios)
        if p is not None and r != 1.0
    ]
    plain = AdapterStep(
        family=g.family,
        op=STACK,
        source_modules=tuple(p.name for p in present),
        target_modules=(fused_name,),
        source_keys=tuple(src_keys),
        source_shapes=tuple(src_shapes),
        target_keys=tuple(f"{PREFIX}{fused_name}.{k}" for k in keys),
        target_shapes=((total, g.in_features), (sum(g.sizes), total), (sum(g.sizes),))[: len(keys)],
        source_ranks=ranks,
        target_ranks=(total,),
        target_alphas=(alpha,),
        note="; ".join(notes),
        owner=g.fused.rsplit(".", 1)[0] if "." in g.fused else "",
        members=tuple(names.adapter(m) for m in g.members),
    )
    return Step(plain, g, ranks, ratios, fused_name, tuple(names.adapter(m) for m in g.members), dora)


def _dora(g: Group, present: list[LoraModule], where: str) -> bool:
    """Whether the group's modules are DoRA modules (all or none: a mix is refused)."""
    has = {_MAGNITUDE in p.keys for p in present}
    if len(has) > 1:
        raise AdapterError(f"{where}: some members of {g.fused} have a DoRA magnitude and others not; refused")
    return has == {True}


def _record_groups(adapter: AdapterSource, where: str) -> dict[str, dict[str, Any]]:
    rec = adapter.record or {}
    out = {}
    for entry in rec.get("groups") or []:
        if isinstance(entry, dict) and isinstance(entry.get("fused"), str):
            out[entry["fused"]] = entry
    return out


def _split(g: Group, mod: LoraModule, names: _Names, rec: dict[str, Any] | None, rslora: bool, where: str) -> Step:
    member_names = tuple(names.adapter(m) for m in g.members)
    fused_name = mod.name
    total = mod.rank
    dora = _dora(g, [mod], where)
    lora_keys = (*_LORA, _MAGNITUDE) if dora else _LORA
    src_keys = tuple(f"{PREFIX}{mod.name}.{k}" for k in lora_keys)
    src_shapes = tuple(tuple(mod.keys[k].shape) for k in lora_keys)
    ranks: tuple[int, ...] = ()
    alphas: list[Any] = []
    if rec is not None:
        ranks = tuple(int(r) if isinstance(r, int) and not isinstance(r, bool) else -1 for r in rec.get("ranks") or [])
        alphas = list(rec.get("alphas") or [])
        if (
            list(rec.get("members") or []) != list(member_names)
            or len(ranks) != len(member_names)
            or len(alphas) != len(ranks)
            or min(ranks, default=-1) < 0
            or sum(ranks) != total
            or any(
                r and (isinstance(a, bool) or not isinstance(a, (int, float)) or not a > 0)
                for r, a in zip(ranks, alphas)
            )
        ):
            raise AdapterError(
                f"{where}: fusion_adapter.json does not describe {fused_name} as the plan fuses it "
                f"(members {member_names}, rank {total}); was it converted for another model?"
            )
    keys, shapes, out_names, out_ranks, out_alphas, ratios = [], [], [], [], [], []
    if ranks:
        op, note = SPLIT, "parts recovered from the recorded ranks"
        for name, r, a, size in zip(member_names, ranks, alphas, g.sizes):
            if r == 0:
                ratios.append(1.0)
                continue
            from .source import scale_of

            ratios.append(scale_of(a, r, rslora) / mod.scale)
            out_names.append(name)
            out_ranks.append(r)
            out_alphas.append(a)
            keys += [f"{PREFIX}{name}.{k}" for k in lora_keys]
            shapes += [(r, g.in_features), (size, r), (size,)][: len(lora_keys)]
        if dora and 0 in ranks:
            raise AdapterError(f"{where}: DoRA on {fused_name} with members of rank 0 in {RECORD}; refused")
    else:
        op, note = SHARE, f"each part gets all of A (rank {total}) and its rows of B"
        ranks = tuple(total for _ in member_names)
        for name, size in zip(member_names, g.sizes):
            ratios.append(1.0)
            out_names.append(name)
            out_ranks.append(total)
            out_alphas.append(mod.alpha)
            keys += [f"{PREFIX}{name}.{k}" for k in lora_keys]
            shapes += [(total, g.in_features), (size, total), (size,)][: len(lora_keys)]
    plain = AdapterStep(
        family=g.family,
        op=op,
        source_modules=(fused_name,),
        target_modules=tuple(out_names),
        source_keys=src_keys,
        source_shapes=src_shapes,
        target_keys=tuple(keys),
        target_shapes=tuple(shapes),
        source_ranks=(total,),
        target_ranks=tuple(out_ranks),
        target_alphas=tuple(out_alphas),
        note=note,
        owner=g.fused.rsplit(".", 1)[0] if "." in g.fused else "",
        members=member_names,
    )
    return Step(plain, g, ranks, tuple(ratios), fused_name, member_names, dora)


def output_config(source: dict[str, Any], conv: Conversion) -> dict[str, Any]:
    """``adapter_config.json`` for the written layout, in the form PEFT reads.

    ``target_modules`` lists the adapted modules (a leaf name where every module of the
    written layout with that name is adapted, else full paths); ``rank_pattern`` and
    ``alpha_pattern`` give every module whose rank or alpha is not the config's ``r`` /
    ``lora_alpha`` its own (so every module keeps its scale).
    """
    cfg = dict(source)
    r0, a0 = source.get("r", 8), source.get("lora_alpha", 8)
    leaves: dict[str, set[str]] = {}
    for n in conv.target_names:
        leaves.setdefault(n.rsplit(".", 1)[-1], set()).add(n)
    adapted = set(conv.out_modules)
    targets: list[str] = []
    for leaf in sorted({n.rsplit(".", 1)[-1] for n in adapted}):
        mine = {n for n in adapted if n.rsplit(".", 1)[-1] == leaf}
        targets += [leaf] if leaves.get(leaf) == mine else sorted(mine)
    cfg["target_modules"] = targets
    cfg["rank_pattern"] = _patterns({n: r for n, (r, _) in conv.out_modules.items()}, r0)
    cfg["alpha_pattern"] = _patterns({n: a for n, (_, a) in conv.out_modules.items()}, a0)
    cfg["layers_to_transform"] = None
    cfg["layers_pattern"] = None
    cfg["exclude_modules"] = None
    return cfg


def _patterns(values: dict[str, Any], default: Any) -> dict[str, Any]:
    """Pattern keys (PEFT matches ``(.*\\.)?(key)$``) giving each module its value where not ``default``."""
    by_leaf: dict[str, set[Any]] = {}
    for n, v in values.items():
        by_leaf.setdefault(n.rsplit(".", 1)[-1], set()).add(v)
    out: dict[str, Any] = {}
    for n, v in sorted(values.items()):
        leaf = n.rsplit(".", 1)[-1]
        if len(by_leaf[leaf]) == 1:
            if v != default:
                out[re.escape(leaf)] = v
        elif v != default:
            out[re.escape(n)] = v
    return out
