"""Shared machinery for patch-embedding families: a non-overlapping ConvNd as one Linear.

A ConvNd whose stride equals its kernel (zero padding, dilation 1, groups 1) cuts its
input into disjoint patches and applies the same affine map to each: exactly a Linear on
the flattened patches. :class:`PatchLinear` is that Linear with the Conv's calling
convention (``(N, C, *spatial) -> (N, O, *spatial // kernel)``), so the original
module's own ``forward`` keeps working unchanged, whatever layout it uses. When each
input sample is a single patch (the Qwen-VL case), the forward is one view, one GEMM and
one view. Given 2-D input (rows of flattened patches) it is a plain Linear.

On a fused host, the Conv's old name (``patch_embed.proj``) gives a :class:`PatchCall`:
it flattens the patches and then calls whatever module is registered as ``linear_proj``
now, so a wrapper that replaced the PatchLinear (PEFT's LoRA ``Linear``, which feeds its
LoRA the same input as its base layer) gets rows of patches, as a Linear expects.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from .base import FusionSpec, Verdict, become_fused, fused_subclass
from .transforms import KeyTransform, Rename, Reshape

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from .base import Workload


def conv_call(
    project: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, kernel: tuple[int, ...], out_features: int
) -> torch.Tensor:
    """A non-overlapping ConvNd's output from ``project``, a Linear over flattened patches.

    ``x`` is the Conv's input (``(N, C, *spatial)``, or unbatched ``(C, *spatial)``): it is
    cut into patches, ``project`` maps the ``(patches, C * prod(kernel))`` rows to
    ``(patches, out_features)`` and the result is laid out as the Conv's
    ``(N, out_features, *spatial // kernel)``. One patch per sample (the Qwen-VL case) is
    one view, one call and one view.
    """
    d = len(kernel)
    if x.dim() == d + 1:  # unbatched input, as ConvNd accepts
        return conv_call(project, x.unsqueeze(0), kernel, out_features).squeeze(0)
    n, c = x.shape[0], x.shape[1]
    spatial = tuple(x.shape[2:])
    if spatial == kernel:  # one patch per sample: view, GEMM, view
        return project(x.reshape(n, c * math.prod(kernel))).view(n, out_features, *([1] * d))
    grid = tuple(s // kk for s, kk in zip(spatial, kernel))
    if any(g * kk != s for g, kk, s in zip(grid, kernel, spatial)):  # Conv drops the remainder
        x = x[(slice(None), slice(None), *(slice(0, g * kk) for g, kk in zip(grid, kernel)))]
    # (N, C, g0, k0, g1, k1, ...) -> (N, g0, g1, ..., C, k0, k1, ...)
    split = [n, c]
    for g, kk in zip(grid, kernel):
        split += [g, kk]
    x = x.reshape(split)
    order = [0, *range(2, 2 + 2 * d, 2), 1, *range(3, 3 + 2 * d, 2)]
    patches = x.permute(order).reshape(-1, c * math.prod(kernel))
    y = project(patches).view(n, *grid, out_features)
    return y.permute(0, d + 1, *range(1, d + 1))


class PatchLinear(nn.Linear):
    """A Linear over flattened patches that is called like the ConvNd it replaces."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: tuple[int, ...],
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_channels * math.prod(kernel_size), out_channels, bias, device=device, dtype=dtype)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = tuple(kernel_size)
        self.stride = tuple(kernel_size)

    @classmethod
    def from_conv(cls, conv: nn.Module) -> PatchLinear:
        """Wrap ``conv``'s parameters without copying: the weight is a view of the Conv's."""
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        weight = conv.weight
        new.in_features = conv.in_channels * math.prod(conv.kernel_size)
        new.out_features = conv.out_channels
        new.in_channels = conv.in_channels
        new.out_channels = conv.out_channels
        new.kernel_size = tuple(conv.kernel_size)
        new.stride = tuple(conv.kernel_size)
        new.weight = nn.Parameter(weight.detach().view(conv.out_channels, -1), requires_grad=weight.requires_grad)
        new.register_parameter("bias", conv.bias)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2 and len(self.kernel_size) > 1:  # rows of flattened patches: a plain Linear
            return super().forward(x)
        return conv_call(super().forward, x, self.kernel_size, self.out_features)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, kernel_size={self.kernel_size} (patch projection)"


def linear_name(attr: str) -> str:
    return f"linear_{attr}"


#: torch's own containers: they cannot host a fused class (patched class-level for every
#: model), so a convolution inside one belongs to the nearest ancestor that is not one
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
#: containers that look their children up by key (``layers[0]`` is ``_modules["0"]``): a
#: child renamed ``linear_0`` would no longer be found
_KEYED = (nn.ModuleList, nn.ModuleDict)
_HELD = "held in a "
#: a convolution with more input channels than this (RGB, RGBA, a depth or mask channel
#: added) takes feature maps, not pixels: a mid-network one
_MAX_PIXEL_CHANNELS = 4


def overlap_problem(conv: nn.Module) -> str | None:
    """Why ``conv`` is not a non-overlapping convolution, or None when it is one.

    Non-overlapping: stride == kernel, zero padding (``"valid"`` too), dilation 1, groups 1,
    not transposed, and a kernel of more than one element (a 1x1 convolution is already a
    per-position Linear: reshaping it gains nothing).
    """
    dims = len(conv.kernel_size)
    zeros, ones = (0,) * dims, (1,) * dims
    if getattr(conv, "transposed", False):
        return "is a transposed convolution"
    if tuple(conv.stride) != tuple(conv.kernel_size):
        return f"stride {tuple(conv.stride)} != kernel {tuple(conv.kernel_size)}"
    # padding="valid" (SigLIP and others) is zero padding spelled as a string
    if conv.padding != "valid" and (isinstance(conv.padding, str) or tuple(conv.padding) != zeros):
        return f"padding {conv.padding!r} is not zero"
    if tuple(conv.dilation) != ones:
        return f"dilation {tuple(conv.dilation)} is not 1"
    if conv.groups != 1:
        return f"groups {conv.groups} != 1"
    if math.prod(conv.kernel_size) == 1:
        return "kernel 1: already a per-position Linear, nothing to gain"
    return None


def owned_convs(module: nn.Module, conv_type: type[nn.Module]) -> list[tuple[str, nn.Module, str | None]]:
    """The ``conv_type`` convolutions ``module`` hosts: its children, and those inside its
    torch containers (``downsampling_layer.1``), as ``(relative path, conv, problem)``.

    ``problem`` is None for a non-overlapping convolution this family converts, else why not.
    """
    found: list[tuple[str, nn.Module, str | None]] = []
    stack: list[tuple[str, nn.Module, type | None]] = [("", module, None)]
    while stack:
        prefix, parent, keyed = stack.pop(0)
        for name, child in parent._modules.items():
            if child is None:
                continue
            rel = f"{prefix}{name}"
            if type(child) is conv_type:
                problem = overlap_problem(child)
                if problem is None and keyed is not None:
                    problem = (
                        f"{_HELD}{keyed.__name__} (looked up by key {name!r}), so it cannot become "
                        f"{linear_name(name)!r} without breaking the model's own indexing"
                    )
                found.append((rel, child, problem))
            elif type(child) in _CONTAINERS:
                inner = type(child) if type(child) in _KEYED else keyed
                stack.append((f"{rel}.", child, inner))
    return found


def fused_key_path(rel: str) -> str:
    """``patch_conv`` -> ``linear_patch_conv``; ``downsampling_layer.1`` -> ``downsampling_layer.linear_1``."""
    head, _, last = rel.rpartition(".")
    return f"{head}.{linear_name(last)}" if head else linear_name(last)


class FusedPatchEmbeddingMixin(nn.Module):
    """Mixed in front of the original class: each non-overlapping Conv it hosts becomes a
    :class:`PatchLinear`.

    The Linear is registered as ``linear_<attr>`` in the Conv's place (so fused checkpoints
    use the same key names as transformers' own fusion, and a Sequential keeps its order)
    and a direct child stays reachable under the original ``<attr>`` (as a :class:`PatchCall`
    over ``linear_<attr>``), so the original ``forward`` runs unchanged. A Conv inside a
    torch container is called by the container: its PatchLinear takes the Conv's inputs
    itself. An instance hosting none is left as it is.
    """

    _conv_type: ClassVar[type[nn.Module]] = nn.Conv3d

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        type(self)._convert(self)

    @classmethod
    def _convert(cls, module: nn.Module) -> None:
        aliases = dict(module.__dict__.get("_fusion_aliases") or {})
        for rel, conv, problem in owned_convs(module, cls._conv_type):
            if problem is not None:
                continue
            head, _, attr = rel.rpartition(".")
            parent = module.get_submodule(head) if head else module
            items = list(parent._modules.items())
            parent._modules.clear()
            for name, child in items:  # in place: a Sequential runs its children in order
                if name == attr:
                    parent._modules[linear_name(attr)] = PatchLinear.from_conv(conv)
                else:
                    parent._modules[name] = child
            if not head:
                aliases[attr] = linear_name(attr)
        module.__dict__["_fusion_aliases"] = aliases

    def __getattr__(self, name: str) -> object:
        aliases = self.__dict__.get("_fusion_aliases")
        if aliases is not None and name in aliases:
            return PatchCall(self, aliases[name])
        return super().__getattr__(name)


class PatchCall:
    """What a fused host's old Conv name (``patch_embed.proj``) gives: the Conv's calling
    convention over whatever module is registered under the fused name now.

    Calling it cuts the Conv-shaped input into rows of flattened patches, calls the module
    currently in ``host._modules[name]`` (the :class:`PatchLinear`, or a wrapper that
    replaced it, such as PEFT's LoRA ``Linear``: it receives 2-D patches, as a Linear
    expects) and lays the result out as the Conv's output. ``.weight`` of an unwrapped
    :class:`PatchLinear` is the Conv's: the Linear's weight viewed in the Conv's shape. Other
    attributes (``.kernel_size``, ``.in_channels``), and a wrapper's weight, are that module's,
    else those of the :class:`PatchLinear` it wraps. Made on each access: it holds no state of
    its own.
    """

    __slots__ = ("_host", "_name")

    def __init__(self, host: nn.Module, name: str) -> None:
        self._host = host
        self._name = name

    def _patch_linear(self) -> nn.Module:
        """The PatchLinear inside whatever wraps it now (PEFT's ``base_layer``, ``original_module``)."""
        module = self._host._modules[self._name]
        return next((m for m in module.modules() if isinstance(m, PatchLinear)), module)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        module = self._host._modules[self._name]
        linear = module if type(module) is PatchLinear else self._patch_linear()
        return conv_call(module, x, linear.kernel_size, linear.out_features)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in PatchCall.__slots__:  # copy, pickle, an unset slot
            raise AttributeError(name)
        module = self._host._modules[self._name]
        if name == "weight" and type(module) is PatchLinear:
            return _conv_shaped(module)
        try:
            return getattr(module, name)
        except AttributeError:
            inner = self._patch_linear()
            if inner is module:
                raise
            return getattr(inner, name)

    def __repr__(self) -> str:
        return f"PatchCall({self._name!r}: {self._host._modules[self._name]!r})"


def _conv_shaped(linear: PatchLinear) -> torch.Tensor:
    """The Linear's weight as the Conv's ``(out, in, *kernel)``, sharing its storage: code that
    reads the Conv's weight shape (ViLT's ``_, _, ph, pw = projection.weight.shape``) or
    initializes it in place (CLIP's ``_init_weights``) still works. Detached (a leaf), with
    transformers' "already initialized" mark of the parameter, so a loaded weight is not
    initialized again through it."""
    weight = linear.weight
    view = weight.detach().view(linear.out_channels, linear.in_channels, *linear.kernel_size)
    if getattr(weight, "_is_hf_initialized", False):
        view._is_hf_initialized = True
    return view


class ConvPatchFusion(FusionSpec):
    """Non-overlapping ConvNd (patch embeddings, downsampling, spatial reduction) -> one Linear.

    Decided by structure: a module is a candidate when it hosts a non-overlapping
    convolution of :attr:`conv_type` (a child, or inside its torch containers), wherever it
    sits; one named like a patch embedding is a candidate with any such convolution, so an
    overlapping patch embedding is rejected with its reason.
    """

    conv_type: ClassVar[type[nn.Module]] = nn.Conv3d
    #: a module named like a patch embedding that holds a Linear and no convolution is
    #: explained as a near miss ("already a Linear"); the 2-D family does this
    explains_linear: ClassVar[bool] = False

    @property
    def _dims(self) -> int:
        return {nn.Conv1d: 1, nn.Conv2d: 2, nn.Conv3d: 3}[self.conv_type]

    def is_candidate(self, path: str, module: nn.Module) -> bool:
        children = module._modules
        if not children or type(module) in _CONTAINERS or isinstance(module, nn.modules.conv._ConvNd):
            return False
        conv_type = self.conv_type
        if not any(type(c) is conv_type or type(c) in _CONTAINERS for c in children.values()):
            return False  # the common case, decided without a walk
        convs = owned_convs(module, conv_type)
        if not convs:
            return False
        if any(p is None or p.startswith(_HELD) for _r, _c, p in convs):
            return True
        named = super().is_candidate(path, module)  # a patch embedding by name: its overlap is explained
        return named and self._pattern is not None

    def near_miss(self, path: str, module: nn.Module) -> str | None:
        if not self.explains_linear or self._pattern is None or self._pattern.search(path) is None:
            return None
        if isinstance(module, nn.Linear):
            return f"already a Linear ({type(module).__name__}): nothing to fuse"
        children = list(module._modules.values())
        if any(isinstance(c, nn.modules.conv._ConvNd) for c in module.modules()):
            return None
        if any(isinstance(c, nn.Linear) for c in children):
            how = " (unfolded patches)" if any(isinstance(c, nn.Unfold) for c in children) else ""
            return f"already a Linear{how}: nothing to fuse"
        return None

    def judge(self, module: nn.Module) -> Verdict:
        conv_name = self.conv_type.__name__
        convs = owned_convs(module, self.conv_type)
        good = [(r, c) for r, c, p in convs if p is None]
        if good:
            parts = [f"{r}: {conv_name} kernel {tuple(c.kernel_size)} == stride, no padding" for r, c in good]
            return Verdict.yes("; ".join(parts))
        if convs:
            rel, _conv, problem = convs[0]
            return Verdict.no(f"{rel} {problem}")
        return Verdict.untouched(f"this instance holds no {conv_name}")

    def make_fused_class(self, original_cls: type) -> type:
        mixin = type(f"_FusedPatch{self._dims}dMixin", (FusedPatchEmbeddingMixin,), {"_conv_type": self.conv_type})
        return fused_subclass(original_cls, mixin, self.name)

    def make_transforms(self, config: PretrainedConfig, modules: Mapping[str, nn.Module]) -> list[KeyTransform]:
        transforms: list[KeyTransform] = []
        for path, module in modules.items():
            prefix = f"{path}." if path else ""
            for rel, conv, problem in owned_convs(module, self.conv_type):
                if problem is not None:
                    continue
                src = f"{prefix}{rel}"
                dst = f"{prefix}{fused_key_path(rel)}"
                shape = tuple(conv.weight.shape)
                transforms.append(
                    Reshape(
                        family=self.name,
                        sources=(f"{src}.weight",),
                        targets=(f"{dst}.weight",),
                        source_shape=shape,
                        target_shape=(shape[0], math.prod(shape[1:])),
                        name=f"conv{self._dims}d_to_linear",
                        inverse_name=f"linear_to_conv{self._dims}d",
                    )
                )
                if conv.bias is not None:
                    transforms.append(Rename(family=self.name, sources=(f"{src}.bias",), targets=(f"{dst}.bias",)))
        return transforms

    def fuse_module(self, module: nn.Module) -> None:
        fused = self.fused_class(type(module))
        become_fused(module, fused)
        fused._convert(module)

    def sample_inputs(
        self, module: nn.Module, config: PretrainedConfig | None, workload: Workload
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Flattened patches (Qwen-VL style) or an image / clip at the module's expected size,
        whichever the module's forward takes (see :meth:`FusionSpec.sample_inputs`).

        Raises:
            ValueError: the module accepts none of them (each attempt's error is named).
        """
        from ._sample_inputs import first_accepted

        conv = next((c for _r, c, p in owned_convs(module, self.conv_type) if p is None), None)
        if conv is not None and int(conv.in_channels) > _MAX_PIXEL_CHANNELS:
            # downsampling, spatial reduction: its inputs are what the layers before it make
            raise NotImplementedError(
                f"{type(module).__name__} holds a mid-network {self.conv_type.__name__} "
                f"({int(conv.in_channels)} input channels): only the end-to-end run makes its feature maps"
            )
        return first_accepted(module, _patch_samples(self, module, config, workload), "a patch embedding")


def _patch_samples(
    spec: ConvPatchFusion, module: nn.Module, config: PretrainedConfig | None, workload: Workload
) -> Iterable[tuple[str, tuple[tuple[Any, ...], dict[str, Any]]]]:
    """Candidate inputs for a patch embedding: flattened patches, an image or a clip."""
    from . import _sample_inputs as s

    conv = next((c for _r, c, p in owned_convs(module, spec.conv_type) if p is None), None)
    if conv is None:
        for child in module.modules():  # fused: the PatchLinear stands where the Conv was
            if isinstance(child, PatchLinear):
                conv = child
                break
    if conv is None:
        raise ValueError(f"{type(module).__name__} has no {spec.conv_type.__name__} to make inputs for")
    kernel = tuple(int(k) for k in conv.kernel_size)
    channels = int(conv.in_channels)
    gen = s.generator(workload)
    batch = max(1, int(workload.batch))
    own = getattr(module, "image_size", None)
    size = workload.image_size or own or s.config_value(config, "image_size", "crop_size") or s.DEFAULT_IMAGE_SIZE
    if isinstance(size, (list, tuple)):
        height, width = int(size[0]), int(size[-1])
    elif isinstance(size, dict):
        height = int(size.get("height", size.get("shortest_edge", s.DEFAULT_IMAGE_SIZE)))
        width = int(size.get("width", height))
    else:
        height = width = int(size)
    ph, pw = kernel[-2], kernel[-1]
    merge = int(s.config_value(config, "spatial_merge_size") or 1)
    gh = max(merge, (height // ph) // merge * merge)
    gw = max(merge, (width // pw) // merge * merge)
    params = s.parameters(module)
    interpolate = "interpolate_pos_encoding" in params and workload.image_size is not None
    frames = workload.frames
    if len(kernel) == 3:
        t = max(1, (frames or kernel[0]) // kernel[0])
        patches = s.randn(workload, gen, batch * t * gh * gw, channels * math.prod(kernel))
        flat_note = f"{batch * t * gh * gw} flattened patches ({t}x{gh}x{gw} grid)"
        clip_t = frames or int(s.config_value(config, "num_frames", "frames_per_clip") or 2 * kernel[0])
        flat_first = "hidden_states" in params or hasattr(module, "temporal_patch_size")

        def clips() -> Iterator[tuple[str, tuple[tuple[Any, ...], dict[str, Any]]]]:
            # made only when the flattened patches are refused: a 1024 px clip is large
            clip = s.randn(workload, gen, batch, channels, clip_t, gh * ph, gw * pw)
            yield f"clip {tuple(clip.shape)} frames first", ((clip.transpose(1, 2).contiguous(),), {})
            yield f"clip {tuple(clip.shape)} channels first", ((clip,), {})

        flat = [(flat_note, ((patches,), {}))]
        return itertools.chain(flat, clips()) if flat_first else itertools.chain(clips(), flat)
    image = s.randn(workload, gen, batch, channels, gh * ph if merge > 1 else height, gw * pw if merge > 1 else width)
    cands = []
    if interpolate:
        cands.append((f"image {tuple(image.shape)}", ((image,), {"interpolate_pos_encoding": True})))
    extra: dict[str, Any] = {}
    grid = (batch, image.shape[-2] // ph, image.shape[-1] // pw)
    if "patch_attention_mask" in params:  # every patch kept (Idefics3, Aria, Phi-4-multimodal)
        extra["patch_attention_mask"] = torch.ones(grid, dtype=torch.bool)
    extra.update(s.patch_grids(params, batch, grid[1], grid[2]))  # each image's patch grid (MiniCPM-V)
    cands.append((f"image {tuple(image.shape)}" + (f" with {', '.join(extra)}" if extra else ""), ((image,), extra)))
    patches = s.randn(workload, gen, batch * gh * gw, channels * math.prod(kernel))
    grid_kw = next((k for k in ("grid_thw", "image_grid_thw") if k in params), None)
    if grid_kw is not None:  # flattened patches of a stated grid (Kimi-K2.5)
        grid_thw = torch.tensor([[1, gh, gw]] * batch)
        cands.append((f"{batch * gh * gw} flattened patches with {grid_kw}", ((patches,), {grid_kw: grid_thw})))
        tiles = patches.view(batch * gh * gw, channels, ph, pw)  # one small image per patch
        cands.append((f"{batch * gh * gw} patches of {ph}x{pw} px with {grid_kw}", ((tiles,), {grid_kw: grid_thw})))
    cands.append((f"{batch * gh * gw} flattened patches", ((patches,), {})))
    return cands
