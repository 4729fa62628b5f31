"""Fused loading: the original weights through transformers, then fusion in place.

Two paths, chosen by the plan's checkpoint layout:

* **original layout** (the usual case): ``from_pretrained`` loads the checkpoint as is (it
  knows every model's legacy key names, e.g. Qwen2-VL's ``visual.`` prefix, and keeps its
  lazy memory mapping), then each matched module instance is fused in place by its family
  (``spec.fuse_module``: a class swap, the weights become views, nothing is copied);
* **fused layout** (a checkpoint exported with ``fusion_config``): the model is built under
  :func:`fusion_core.patching.scoped_patch`, so the fused classes exist only for the
  duration of ``from_pretrained``, and keys must match exactly.

In both cases ``from_pretrained`` gets a config whose ``fusion_config`` has been removed, so
transformers' own fusion (which leaks process-wide state, see DESIGN.md) never runs, and
every missing, unexpected or mis-shaped key is an error listing them, never a silently
random weight. Nothing process-wide is left behind.
"""

from __future__ import annotations

import copy
import logging
import sys
import time
from collections.abc import Generator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..boundary.options import DTYPES, OptionError
from ..errors import CheckpointError, LoadError, one_line
from ..model.upstream_state import upstream_fusion_suspended
from ..plan.fusion_plan import unpolluted
from ..plan.layout import listed, require_checkpoint
from ..progress import Progress
from .results import FusedModule, LoadReport

if TYPE_CHECKING:
    import torch
    from torch import nn

    from ..model.sources import ModelSource
    from ..plan.fusion_plan import FusionPlan

__all__ = ["DTYPES", "LoadResult", "iter_load", "load_original"]


@dataclass
class LoadResult:
    """A loaded (and possibly fused) model with what happened on the way."""

    model: nn.Module
    plan: FusionPlan
    layout: str  # checkpoint layout: "original" | "fused" | "none" (nothing to fuse)
    fused_modules: list[str]
    dtype: str
    seconds: float
    peak_rss_mb: float | None  # this process's peak resident memory so far (None: unknown here)
    device: str = "cpu"
    messages: list[str] = field(default_factory=list)
    #: what ``from_pretrained`` reported (a load with either fails: empty after a load)
    missing_keys: list[str] = field(default_factory=list)
    unexpected_keys: list[str] = field(default_factory=list)

    def report(self) -> LoadReport:
        """The load report (``fusion-core load --json``, a check's ``load``): what this load saw."""
        plan = self.plan
        return LoadReport(
            model=plan.model,
            model_class=plan.model_class,
            fusion_config=plan.fusion_config,
            checkpoint_layout=self.layout,
            fused_modules=[
                FusedModule(path, plan.matched_paths.get(path, ""), _class_name(self.model, path))
                for path in self.fused_modules
            ],
            dtype=self.dtype,
            device=self.device,
            missing_keys=list(self.missing_keys),
            unexpected_keys=list(self.unexpected_keys),
            transforms=plan.rows("load") if self.layout == "original" else [],
            seconds=self.seconds,
            peak_rss_mb=self.peak_rss_mb,
            messages=list(self.messages),
        )


def _class_name(model: nn.Module, path: str) -> str:
    try:
        return type(model.get_submodule(path)).__name__
    except AttributeError:
        return ""


def torch_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """The torch dtype for a name in :data:`DTYPES` (or a torch dtype, passed through).

    Raises:
        OptionError: an unsupported dtype name (option ``dtype``).
    """
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise OptionError("dtype", f"{dtype!r:.40} is not supported; choose one of {', '.join(DTYPES)}")
    return getattr(torch, name)


def peak_rss_mb() -> float | None:
    """This process's peak resident memory in MiB (None where the OS does not say)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def plain_config(config: Any) -> Any:
    """A deep copy of ``config`` without ``fusion_config`` (also in nested sub-configs).

    transformers' ``from_pretrained`` applies its own fusion whenever the config carries
    ``fusion_config``; ours must never trigger it.
    """
    from transformers import PretrainedConfig

    config = copy.deepcopy(config)
    stack = [config]
    seen: set[int] = set()
    while stack:
        cfg = stack.pop()
        if id(cfg) in seen:
            continue
        seen.add(id(cfg))
        if "fusion_config" in vars(cfg):
            delattr(cfg, "fusion_config")
        stack.extend(v for v in vars(cfg).values() if isinstance(v, PretrainedConfig))
    return config


def require_weights(source: ModelSource) -> None:
    if source.checkpoint is None or source.folder is None:
        raise LoadError(
            f"{source.name}: no weights (config only); loading needs a folder with model.safetensors "
            "or a sharded index (export or download the checkpoint first)"
        )


def weights_loader(cls: type) -> tuple[Any, str]:
    """The ``from_pretrained`` to call for ``cls``, and a note when it is not the class's own.

    A few classes override ``from_pretrained`` to load more than weights after the fact
    (Qwen2.5-Omni: speaker presets from a pickle, required to exist, and it cannot return a
    loading report). The weights are the same either way; we use the base implementation.
    """
    from transformers import PreTrainedModel

    base = PreTrainedModel.from_pretrained.__func__  # type: ignore[attr-defined]
    own = getattr(cls.from_pretrained, "__func__", None)
    if own is None or own is base or not issubclass(cls, PreTrainedModel):
        return cls.from_pretrained, ""
    note = (
        f"{cls.__name__} overrides from_pretrained to load extra files; the weights were loaded with "
        "PreTrainedModel.from_pretrained, the extras were not"
    )
    return base.__get__(cls, cls), note


def from_pretrained(
    source: ModelSource,
    config: Any,
    dtype: torch.dtype,
    *,
    state_dict: dict[str, Any] | None = None,
    notes: list[str] | None = None,
    info_out: dict[str, Any] | None = None,
    device_map: dict[str, Any] | None = None,
    keep: ExitStack | None = None,
) -> nn.Module:
    """``from_pretrained`` with ``output_loading_info``; any key problem is a :class:`LoadError`.

    ``device_map``: accelerate's placement (:mod:`fusion_core.run.offload`); it needs ``keep``,
    the stack that holds, for as long as the model reads them, the validated files pinned
    (disk blocks are read from the checkpoint's files for each call) and a temporary offload
    folder (disk blocks converted to another dtype).

    ``config`` must already be free of ``fusion_config`` (see :func:`plain_config`).
    ``info_out``, when given, receives transformers' loading info (its missing and
    unexpected keys: empty, since either is an error).
    """
    from ..patching import current_class

    cls = current_class(source.model_class)  # fused when the plan fuses the root (Pixtral's patch_conv)
    where = str(source.folder)
    kwargs: dict[str, Any] = {"config": config, "dtype": dtype, "output_loading_info": True}
    if device_map is not None:  # accelerate's placement (fusion_core.run.offload): blocks beyond the budget on disk
        import tempfile

        assert keep is not None, "an offloaded model needs a stack that outlives it"
        folder = keep.enter_context(tempfile.TemporaryDirectory(prefix="fusion-offload-"))
        kwargs.update(device_map=device_map, offload_folder=folder)
    # Never forwarded: transformers would import Python files from the folder (custom_generate/...).
    # Our opt-in only means "build the class transformers ships for this model_type" (docs/security.md).
    loader, note = weights_loader(cls)
    if note and notes is not None:
        notes.append(note)
    try:
        with upstream_fusion_suspended(notes):
            if state_dict is None:
                assert source.checkpoint is not None
                # a folder of exactly the files validated at the open, re-verified and held open
                if keep is not None:
                    model, info = loader(str(keep.enter_context(source.checkpoint.pinned())), **kwargs)
                else:
                    with source.checkpoint.pinned() as folder:
                        model, info = loader(str(folder), **kwargs)
            else:
                model, info = loader(None, state_dict=state_dict, **kwargs)
    except (OSError, RuntimeError, ValueError, KeyError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise LoadError(f"{where}: transformers could not load the checkpoint: {one_line(e, first=True)}") from e
    problems = []
    if info.get("missing_keys"):
        problems.append(f"missing keys (would be randomly initialized): {listed(list(info['missing_keys']))}")
    if info.get("unexpected_keys"):
        problems.append(f"unexpected keys: {listed(list(info['unexpected_keys']))}")
    if info.get("mismatched_keys"):
        items = [f"{k} {list(a)} vs {list(b)}" for k, a, b in sorted(info["mismatched_keys"])]
        problems.append(f"shape mismatches: {listed(items)}")
    if info.get("error_msgs"):
        problems.append(f"errors: {'; '.join(map(str, info['error_msgs']))}")
    if problems:
        raise LoadError(f"{where}: {cls.__name__}: " + "; ".join(problems))
    if info_out is not None:
        info_out.update(info)
    return model


def iter_load(
    plan: FusionPlan,
    *,
    dtype: str | torch.dtype = "float32",
    device: str = "cpu",
    max_memory: int | None = None,
) -> Generator[Progress, None, LoadResult]:
    """Load the model of ``plan`` with the plan applied, as a progress generator.

    When the weights at ``dtype`` do not fit in ``max_memory`` (bytes; default: the memory
    available), an original-layout checkpoint loads through accelerate's ``device_map``
    (:mod:`fusion_core.run.offload`): blocks beyond the budget stay on disk and are read for
    each call, and the matched modules among them stay unfused (said in ``messages``): a
    fused module needs its weights in memory.

    Args:
        plan: the :class:`FusionPlan` to run (what the user previewed; a model with weights).
            :func:`fusion_core.load` builds one from a source and a ``fusion_config``.
        dtype: ``float32``, ``bfloat16`` or ``float16``.
        device: where the model goes after loading (loading itself maps the files lazily).

    Returns:
        A :class:`LoadResult`; ``result.model.config.fusion_config`` records what was applied,
        ``result.plan`` is the plan that ran (a new one when :func:`unpolluted` rebuilt it).

    Raises:
        LoadError: missing, unexpected or mis-shaped keys, or a checkpoint in neither layout.
        CheckpointError, ModelSourceError: unreadable source or checkpoint.
        OptionError: a bad dtype.
    """
    from ..patching import scoped_patch

    t0 = time.perf_counter()
    wanted = torch_dtype(dtype)
    dtype_name = str(wanted).removeprefix("torch.")
    yield Progress(0, 4, "opening model")
    plan, rebuilt = unpolluted(plan)
    src = plan.source
    require_weights(src)
    require_checkpoint(plan)
    layout = plan.layout if plan.layout in ("original", "fused") else "none"
    if plan.legacy_fused:  # transformers splits the stored fused projections; we fuse in place after
        layout = "original"
    # each family as the plan configured it (its options), so the fused classes are the plan's
    matched = [(m, fam.spec) for fam in plan.families for m in fam.discovery.matches]
    total = 3 + len(matched)
    yield Progress(1, total, f"loading weights ({layout} layout)")
    config = plain_config(src.config)
    notes = [rebuilt, *plan.messages] if rebuilt else list(plan.messages)
    info: dict[str, Any] = {}
    memory = None
    if str(device).startswith("cpu"):
        from .offload import memory_plan

        def fused_meta() -> nn.Module:  # placed as it will be built: with the fused classes
            import torch

            from ..patching import current_class

            with scoped_patch(plan.patch_mapping), torch.device("meta"):
                return current_class(src.model_class)(config)

        # the fused meta model is built only when the weights do not fit
        memory = memory_plan(plan, dtype_name, device, max_memory, meta=fused_meta if layout == "fused" else None)
        if memory.offloaded or memory.asked:
            notes.append(f"memory: {memory.describe()}")
    if layout == "fused":
        # fused classes exist only while the skeleton is built and filled; never across a yield
        with scoped_patch(plan.patch_mapping):
            if memory is not None and memory.offloaded:
                model = _offloaded(src, config, wanted, memory, notes, info)
            else:
                model = from_pretrained(src, config, wanted, notes=notes, info_out=info)
    elif memory is not None and memory.offloaded:
        model = _offloaded(src, config, wanted, memory, notes, info)
    else:
        model = from_pretrained(src, config, wanted, notes=notes, info_out=info)
    on_disk = []
    if memory is not None and memory.offloaded and layout != "fused":
        from .switch import offloaded_paths

        on_disk = offloaded_paths(model, [m.path for m, _ in matched])
        if on_disk:
            notes.append(f"{len(on_disk)} matched module(s) left unfused: their weights are on disk ({on_disk[0]}, …)")
    fused: list[str] = []
    for i, (match, spec) in enumerate(matched):
        yield Progress(2 + i, total, f"fusing {match.path}")
        if match.path in on_disk:
            continue
        module = model.get_submodule(match.path)
        if layout != "fused":
            _unhook(module)
            spec.fuse_module(module)
        if type(module) is not match.fused_class:
            raise LoadError(f"{src.folder}: {match.path} is {type(module).__name__}, not {match.fused_class.__name__}")
        fused.append(match.path)
    if plan.fusion_config:
        model.config.fusion_config = copy.deepcopy(plan.fusion_config)
    if str(device) != "cpu":
        yield Progress(total - 1, total, f"moving to {device}")
        model.to(device)
    seconds = time.perf_counter() - t0
    yield Progress(total, total, "loaded")
    logging.getLogger(__name__).debug("loaded %s in %.2fs", src.name, seconds)
    return LoadResult(
        model=model,
        plan=plan,
        layout=layout,
        fused_modules=fused,
        dtype=dtype_name,
        seconds=seconds,
        peak_rss_mb=peak_rss_mb(),
        device=str(device),
        messages=notes,
        missing_keys=sorted(info.get("missing_keys") or ()),
        unexpected_keys=sorted(info.get("unexpected_keys") or ()),
    )


def _unhook(module: nn.Module) -> None:
    """Drop accelerate's hooks from a module whose weights are in memory (a ``device_map``
    load): a hook keeps the forward of the class it was added to, which fusion replaces."""
    if any("_hf_hook" in m.__dict__ for m in module.modules()):
        from accelerate.hooks import remove_hook_from_module

        remove_hook_from_module(module, recurse=True)


def _offloaded(src: ModelSource, config: Any, dtype: Any, memory: Any, notes: list[str], info: dict) -> nn.Module:
    """``from_pretrained`` with the memory plan's ``device_map``; the checkpoint's files stay
    pinned, and the offload folder stays, for as long as the model lives."""
    import weakref

    stack = ExitStack()
    try:
        model = from_pretrained(
            src, config, dtype, notes=notes, info_out=info, device_map=memory.device_map, keep=stack
        )
    except BaseException:
        stack.close()
        raise
    weakref.finalize(model, stack.close)
    return model


def load_original(
    plan: FusionPlan,
    *,
    dtype: str | torch.dtype = "float32",
    device: str = "cpu",
    device_map: dict[str, Any] | None = None,
    keep: ExitStack | None = None,
) -> nn.Module:
    """The original, unfused model of ``plan``, exactly as its weights say.

    ``device_map``: accelerate's placement (:mod:`fusion_core.run.offload`); ``keep`` then
    holds what the model reads from for as long as it lives (see :func:`from_pretrained`).

    Built on the plan's own opened model and source; the checkpoint is validated against
    the plan once (:func:`~fusion_core.plan.layout.require_checkpoint`, shared with the fused load of a
    check; some families fused and others not is fine here). Never triggers transformers'
    own fusion. The keys the checkpoint holds in the fused layout (a checkpoint exported
    with ``fusion_config``, planned with its families) are converted back to the original layout on the way in (exact: the inverse transforms
    are reshapes and renames); that path reads every tensor into memory instead of mapping
    the files lazily.

    Raises:
        LoadError, CheckpointError, ModelSourceError, OptionError: see :func:`iter_load`.
    """
    wanted = torch_dtype(dtype)
    src = plan.source
    require_weights(src)
    config = plain_config(src.config)
    require_checkpoint(plan, allow_mixed=True)  # the keys held fused are unfused; the others are original already
    if any(ct.present == "fused" for ct in plan.checkpoint_transforms):
        model = from_pretrained(src, config, wanted, state_dict=_original_state_dict(src, plan))
    else:  # ``device_map``: accelerate's placement, weights beyond a memory budget read from disk per call
        model = from_pretrained(src, config, wanted, device_map=device_map, keep=keep)
    if str(device) != "cpu" and device_map is None:
        model.to(device)
    return model


def _original_state_dict(source: ModelSource, plan: FusionPlan) -> dict[str, Any]:
    """Read a fused-layout checkpoint into original-layout tensors (checkpoint key names)."""
    ckpt = source.checkpoint
    assert ckpt is not None and source.folder is not None
    by_file: dict[str, list[str]] = {}
    for key, info in ckpt.tensors.items():
        by_file.setdefault(info.file, []).append(key)
    tensors: dict[str, Any] = {}
    for name, keys in by_file.items():
        with ckpt.open(name) as f:
            for key in keys:
                tensors[key] = f.get_tensor(key)
    for ct in plan.checkpoint_transforms:
        if ct.present != "fused":
            continue
        restored = ct.transform.inverse([tensors.pop(k) for k in ct.target_keys])
        tensors.update(zip(ct.source_keys, restored))
    return tensors
