"""Export a checkpoint in the fused layout, or back to the original layout, verified.

The export streams: every output tensor is either a raw byte range of a source shard
(most of them) or the result of one key transform applied to the few source tensors it
needs, read one group at a time. The model is never instantiated with its weights, so
peak memory is bounded by the largest transformed group, not the checkpoint.

It is atomic: the output is written into a temporary sibling of the destination,
verified there (every key, shape and dtype against the plan; each transform inverted
bitwise; optionally the model loaded back and its outputs compared with the source's),
and only then renamed into place. A failure or a cancel leaves no partial output, and
the source folder is only ever read.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..boundary.options import LAYOUTS, ON_WRONG_LOAD, ExportOptions, OptionError
from ..errors import CheckpointError, ExportError, naming
from ..model.checkpoint import INDEX_FILE, CheckpointIndex
from ..plan.fusion_config import GUARD_PREFIX
from ..plan.layout import require_checkpoint
from ..progress import CancelToken, Progress, ProgressCallback, drive
from . import files as fs
from .consumers import LOADS_EXACTLY, LOADS_NOT_COMPARED, LOADS_WRONG, transformers_accepts
from .legacy import legacy_note
from .result import Consumer, ExportResult, ExportVerification, OutputFile, SkippedFile
from .rules import check_dtypes, check_original_keys, guard, legacy_tensors, matched_config, with_own_families
from .writer import OutTensor, iter_write, plan_shards, write_text

if TYPE_CHECKING:
    import torch

    from ..model.sources import ModelSource
    from ..plan.fusion_plan import CheckpointTransform, FusionConfig, FusionPlan, Inspection

__all__ = ["LAYOUTS", "ON_WRONG_LOAD", "ExportResult", "ExportVerification", "export", "iter_export"]


@dataclass
class _Group:
    """One transform applied in the export's direction: read ``inputs``, write ``outputs``."""

    ct: CheckpointTransform
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    fn: Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]
    back: Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]


class _Producer:
    """Computes transformed tensors on demand, one group at a time, keeping no more."""

    def __init__(self, ckpt: CheckpointIndex, groups: list[_Group]) -> None:
        self.ckpt = ckpt
        self.group_of = {key: g for g in groups for key in g.outputs}
        self.pending: dict[int, dict[str, torch.Tensor]] = {}

    def read(self, key: str) -> torch.Tensor:
        info = self.ckpt.tensors[key]
        with self.ckpt.open(info.file) as f:
            return f.get_tensor(key)

    def __call__(self, t: OutTensor) -> torch.Tensor:
        group = self.group_of[t.key]
        results = self.pending.get(id(group))
        if results is None:
            inputs = [self.read(k) for k in group.inputs]
            try:
                outs = group.fn(inputs)
            except ValueError as e:
                raise CheckpointError(f"{self.ckpt.folder}: {group.ct.family}: {e}") from None
            results = self.pending[id(group)] = dict(zip(group.outputs, outs))
        tensor = results.pop(t.key)
        if not results:
            del self.pending[id(group)]
        return tensor


def iter_export(
    plan: FusionPlan, out_dir: str | os.PathLike[str], options: ExportOptions
) -> Generator[Progress, None, ExportResult]:
    """Export the checkpoint of ``plan`` to ``out_dir``, streaming and verified.

    Args:
        plan: the :class:`FusionPlan` to export (what the user previewed; a model folder
            with safetensors weights). :func:`export` builds one from a source and a
            ``fusion_config``. Families the checkpoint is already fused with are always
            part of the export (first, in their order): a fused checkpoint can gain
            families, and the original layout unfuses them all. That wider plan is a new
            plan object (:func:`~fusion_core.export.rules.with_own_families`), the one the
            result's ``fusion_config`` shows, with a message saying so.
        out_dir: the folder to create (or replace, with ``options.overwrite``).
        options: an :class:`~fusion_core.boundary.options.ExportOptions`:

            - ``layout``: ``"fused"`` (keys of the fused modules, ``fusion_config`` in
              config.json) or ``"original"`` (the model's own layout, no ``fusion_config``).
              The source may hold either; :attr:`FusionPlan.layout` tells which.
            - ``max_shard_size``: as ``save_pretrained``'s (default ``"50GB"``).
            - ``overwrite``: replace a non-empty ``out_dir`` (only once the new one is complete).
            - ``verify_outputs``: load the export back and compare its outputs with the
              source model's, and try its consumers (our loader and stock transformers, in a
              child process: :mod:`fusion_core.export.consumers`); turn off for a checkpoint
              too large to load here.
            - ``allow_copy_as_is``: export a model with nothing to fuse unchanged.
            - ``sync``: fsync the written files before the final rename.
            - ``on_wrong_load``: when stock transformers would load the fused export wrong
              (it knows a family's name but not these modules): ``"guard"`` writes the
              family names as ``"fusion_core:<name>"``, which transformers refuses loudly
              and our loader reads; ``"refuse"`` refuses the export with the reason.
              Without ``verify_outputs`` nothing is tried, and every family name
              transformers accepts is guarded.

    Yields:
        Progress (bytes of tensor data written, then the verification steps).

    Returns:
        An :class:`ExportResult`.

    Raises:
        ModelSourceError, CheckpointError: the source cannot be read.
        LoadError: the checkpoint is in neither layout (or both), or its shapes do not
            match its config.
        ExportError: nothing to fuse, a refused destination, a full disk, a failed
            verification. Nothing is left at ``out_dir`` (an old folder stays as it was).
    """
    t0 = time.perf_counter()
    layout, verify_outputs, sync = options.layout, options.verify_outputs, options.sync
    yield Progress(0, 0, "planning")
    plan, widened = with_own_families(plan)
    insp = plan.inspection
    src = insp.source
    trust_remote_code = src.trust_remote_code
    ckpt = src.checkpoint
    if ckpt is None or src.folder is None:
        raise ExportError(f"{src.name}: has no weights to export (give a model folder with safetensors weights)")
    if plan.is_empty and not options.allow_copy_as_is:
        why = "; ".join(plan.messages) or "no module matches the enabled fusions"
        raise naming(
            ExportError(f"{src.name}: nothing to fuse ({why}); set allow_copy_as_is to export it unchanged"),
            "allow_copy_as_is",
        )
    require_checkpoint(plan, allow_mixed=True)
    legacy = plan.legacy_fused and layout == "fused"
    groups = [] if plan.legacy_fused else _groups(plan, layout, src.folder)
    check_dtypes(groups, ckpt)
    if legacy:
        yield Progress(0, 0, "loading through transformers' conversion (legacy fused checkpoint)")
        outputs, producer = legacy_tensors(plan)
    else:
        outputs = _out_tensors(ckpt, groups)
        producer = _Producer(ckpt, groups)
    wplan = plan_shards(outputs, options.shard_bytes, total_parameters=_source_parameters(ckpt))
    config = _read_config(src.folder, ckpt)
    if plan.is_empty:  # copied as is: config.json too, unless the original layout was asked for
        recorded = config.get("fusion_config") if layout == "fused" else None
    else:
        recorded = matched_config(plan) if layout == "fused" else None
    guarded = recorded is not None and not verify_outputs and transformers_accepts(recorded)
    if guarded:
        recorded = guard(recorded)
    config_text = fs.export_config(config, fusion_config=recorded)
    others, skipped = fs.plan_other_files(src.folder, set(ckpt.files) | {ckpt.index_file or ""})
    legacy_layout = legacy_note(plan, layout)
    if legacy_layout:  # said before anything is written
        yield Progress(0, 0, legacy_layout)

    dest = fs.check_destination(src.folder, out_dir, overwrite=options.overwrite)
    tmp = fs.make_temp_sibling(dest.path)
    finished = False
    total = wplan.total_size
    probe = None
    try:
        # the consumers' child imports torch and transformers and loads the source while we write:
        # the files are verified first, and again once it has read them (after the outputs are compared)
        ckpt.verify()
        probe = _start_probe(src.folder, plan, trust_remote_code, options.max_memory) if verify_outputs else None
        try:
            yield from iter_write(
                wplan, tmp, src.folder, producer, sync=sync, total=total, open_source=ckpt.open_verified
            )
            write_text(tmp / fs.CONFIG_FILE, config_text, sync=sync)
            yield Progress(total, total, "copying other files")
            fs.copy_other_files(others, tmp)
        except OSError as e:
            raise fs.describe_os_error(e, dest.path, total) from None
        yield Progress(total, total, "verifying headers")
        verification = _verify_written(tmp, wplan, ckpt, groups)
        verification.notes.extend(dest.notes)  # leftovers of a killed export, removed
        if legacy_layout:
            verification.notes.append(legacy_layout)
        if layout == "original":
            check_original_keys(insp, tmp)
        consumers: list[Consumer] = []
        if guarded:
            verification.notes.append(
                "consumers not tried (outputs not verified): family names transformers accepts were written "
                f"with the {GUARD_PREFIX!r} prefix, so that it refuses them instead of maybe loading them wrong"
            )
        if verify_outputs:
            yield Progress(total, total, "verifying outputs and trying the consumers (fusion_core, transformers)")
            assert probe is not None
            # our loader's comparison in the consumers' child is the output check: the export is
            # loaded there, not in this process (exactly equal outputs for the original layout)
            answer = probe.run(tmp, dest.path, exact=layout == "original" or plan.is_empty)
            consumers = answer.consumers
            verification.outputs = _require_outputs(answer.outputs, _consumer(consumers, "fusion_core"))
            verification.outputs_checked = True
            stock = _consumer(consumers, "transformers")
            if recorded is not None and stock is not None and stock.status == LOADS_WRONG:
                wrong = stock.detail
                if options.on_wrong_load == "refuse":
                    raise naming(
                        ExportError(
                            f"stock transformers would load this export wrong ({wrong}); nothing was written. "
                            "Export with on_wrong_load guard to write it so that transformers refuses it, "
                            "or with layout original"
                        ),
                        "on_wrong_load",
                        "layout",
                    )
                recorded, guarded = guard(recorded), True
                (tmp / fs.CONFIG_FILE).unlink()  # our own file, in our temporary folder
                write_text(tmp / fs.CONFIG_FILE, fs.export_config(config, fusion_config=recorded), sync=sync)
                yield Progress(total, total, "trying the consumers again (guarded config.json)")
                consumers = _consumers(src.folder, tmp, dest.path, plan, trust_remote_code, options.max_memory)
                verification.notes.append(
                    f"stock transformers loaded the export wrong ({wrong}): its family names were written with "
                    f"the {GUARD_PREFIX!r} prefix, so that transformers refuses them loudly"
                )
            bad = [c for c in consumers if c.status == LOADS_WRONG]
            ours = [
                c
                for c in consumers
                if c.name.startswith("fusion_core") and c.status not in (LOADS_EXACTLY, LOADS_NOT_COMPARED)
            ]
            if bad or ours:
                c = (bad or ours)[0]
                raise ExportError(f"verification failed: {c.name} {c.status} ({c.detail}); nothing was written")
        ckpt.verify()  # the source read by the consumers (and copied above) is still the one validated
        files = sorted(OutputFile(p.name, p.stat().st_size) for p in tmp.iterdir())
        yield Progress(total, total, "moving into place")
        fs.move_into_place(tmp, dest)
        finished = True
    finally:
        if probe is not None:
            probe.close()
        if not finished:
            fs.remove_tree(tmp)
    return ExportResult(
        source=src.name,
        out_dir=dest.path,
        layout=layout,
        source_layout=plan.layout,
        fusion_config=plan.fusion_config,
        files=files,
        tensors=len(outputs),
        transformed=[k for g in groups for k in g.outputs],
        copied_files=[name for name, _ in others],
        skipped_files=[SkippedFile(*s) for s in skipped],
        verification=verification,
        replaced_existing=dest.replaces,
        seconds=time.perf_counter() - t0,
        consumers=consumers,
        written_fusion_config=recorded,
        guarded=guarded,
        messages=[m for m in (widened, legacy_layout) if m],
    )


def export(
    source: FusionPlan | Inspection | ModelSource | str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    fusion_config: FusionConfig | None = None,
    *,
    options: ExportOptions | None = None,
    trust_remote_code: bool = False,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
    **settings: Any,
) -> ExportResult:
    """Export ``source`` to ``out_dir``: the convenient form of :func:`iter_export`.

    Args:
        source: a :class:`FusionPlan`, or a model folder (or any spec
            :func:`fusion_core.resolve` takes that has weights), a resolved source or an
            opened model, planned here with ``fusion_config`` (``None``: the checkpoint's
            own ``fusion_config``).
        out_dir: the folder to create.
        fusion_config: the families, when ``source`` is not a plan, e.g. ``{"patch_embeddings": True}``.
        options: an :class:`~fusion_core.boundary.options.ExportOptions`; or, instead, its
            fields as keyword ``settings`` (``layout``, ``max_shard_size``, ``overwrite``,
            ``verify_outputs``, ``allow_copy_as_is``, ``sync``, ``on_wrong_load``).
        trust_remote_code: passed to :func:`fusion_core.resolve` (specs only).
        progress, cancel: a progress callback and a cancel token.

    Raises:
        Cancelled: ``cancel`` was set; nothing was left at ``out_dir``.
        OptionError: a bad setting (named by its option).
        The errors of :func:`iter_export`.
    """
    from ..plan.fusion_plan import as_plan

    if options is not None and settings:
        raise OptionError(sorted(settings)[0], "given next to an options object")
    if options is None:
        unknown = sorted(set(settings) - set(ExportOptions.__dataclass_fields__))
        if unknown:
            raise OptionError(unknown[0], "is not an option of export")
        options = ExportOptions(**settings)
    plan = as_plan(source, fusion_config, trust_remote_code=trust_remote_code)
    return drive(iter_export(plan, out_dir, options), progress, cancel)


def _require_outputs(outputs: dict[str, Any] | None, ours: Consumer | None) -> dict[str, Any]:
    """The output comparison of an export, or the ExportError that stops it.

    Args:
        outputs: :func:`~fusion_core.export.verify.compare_outputs`' summary from the
            consumers' child (None: our loader did not load the export, or the model did not run).
        ours: our loader's consumer entry, which says why.
    """
    if outputs is None:
        detail = ours.detail if ours is not None else "no answer"
        if ours is not None and ours.status == LOADS_WRONG:
            raise ExportError(f"verification failed: the exported model does not run: {detail}")
        raise ExportError(f"verification failed: the export does not load back: {detail}")
    if outputs.get("passed") is False:
        raise ExportError(
            f"verification failed: the export's outputs differ from the source model's ({outputs.get('differs')}; "
            f"tolerance {outputs.get('tolerance')}); nothing was written"
        )
    return outputs


def _fused_paths(plan: FusionPlan) -> list[str]:
    return [m.path for fam in plan.families for m in fam.discovery.matches]


def _start_probe(folder: Path, plan: FusionPlan, trust: bool, max_memory: Any = None) -> Any:
    from .consumers import ConsumerProbe

    return ConsumerProbe(folder, _fused_paths(plan), trust_remote_code=trust, max_memory=max_memory)


def _consumers(
    folder: Path, written: Path, dest: Path, plan: FusionPlan, trust: bool, max_memory: Any = None
) -> list[Consumer]:
    """The consumers in a fresh child (after a guarded rewrite: the first child answered once)."""
    from .consumers import try_consumers

    return try_consumers(folder, written, dest, _fused_paths(plan), trust_remote_code=trust, max_memory=max_memory)


def _consumer(consumers: list[Consumer], name: str) -> Consumer | None:
    """The consumer entry of ``name`` ("fusion_core", "transformers"), if it was tried."""
    return next((c for c in consumers if c.name.startswith(name)), None)


def _groups(plan: FusionPlan, layout: str, folder: Path) -> list[_Group]:
    """The transforms to apply, on the checkpoint's key names, in the export's direction."""
    groups = []
    for ct in plan.checkpoint_transforms:
        t = ct.transform
        try:
            if ct.present == "original":
                t.forward_shapes(ct.source_shapes)
            else:
                t.inverse_shapes(ct.target_shapes)
        except ValueError as e:
            raise CheckpointError(
                f"{folder}: {e} (tensor shapes do not match the config; is it the checkpoint of this model?)"
            ) from None
        if ct.present == layout:
            continue  # already in the requested layout: copied as is
        if layout == "fused":
            groups.append(_Group(ct, ct.source_keys, ct.target_keys, t.forward, t.inverse))
        else:
            groups.append(_Group(ct, ct.target_keys, ct.source_keys, t.inverse, t.forward))
    return groups


def _out_tensors(ckpt: CheckpointIndex, groups: list[_Group]) -> list[OutTensor]:
    """Every output tensor, in the source's physical order (a group where its first input was)."""
    file_rank = {name: i for i, name in enumerate(ckpt.files)}
    order = sorted(ckpt.tensors.values(), key=lambda i: (file_rank.get(i.file, 0), i.start, i.key))
    inputs = {key: g for g in groups for key in g.inputs}
    out: list[OutTensor] = []
    placed: set[int] = set()
    for info in order:
        g = inputs.get(info.key)
        if g is None:
            out.append(OutTensor(info.key, info.dtype, info.shape, raw=info))
            continue
        if id(g) in placed:
            continue
        placed.add(id(g))
        shapes = g.ct.target_shapes if g.outputs == g.ct.target_keys else g.ct.source_shapes
        for key, shape in zip(g.outputs, shapes):
            out.append(OutTensor(key, info.dtype, tuple(shape)))
    return out


def _source_parameters(ckpt: CheckpointIndex) -> int | None:
    """The source index's ``total_parameters`` (transforms keep it), when it has one."""
    if not ckpt.index_file:
        return None
    import json

    try:
        meta = json.loads((ckpt.folder / ckpt.index_file).read_text(encoding="utf-8")).get("metadata") or {}
    except (OSError, ValueError, AttributeError):
        return None
    value = meta.get("total_parameters") if isinstance(meta, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _read_config(folder: Path, ckpt: CheckpointIndex | None = None) -> dict[str, Any]:
    """The source's ``config.json``, read through the descriptor verified against the open's
    identity when the checkpoint recorded one (the config written out is the one validated)."""
    from ..model.checkpoint import fd_path
    from ..model.sources import read_config_dict

    if ckpt is None or fs.CONFIG_FILE not in ckpt.identities:
        return read_config_dict(folder / fs.CONFIG_FILE)
    fd = ckpt.open_verified(fs.CONFIG_FILE)
    try:
        return read_config_dict(Path(fd_path(fd) or folder / fs.CONFIG_FILE))
    finally:
        os.close(fd)


def _verify_written(folder: Path, wplan: Any, ckpt: CheckpointIndex, groups: list[_Group]) -> ExportVerification:
    """Re-open what was written: every key, shape, dtype and offset as planned; transforms invert."""
    from ..model.checkpoint import read_index

    try:
        written = read_index(folder)
    except CheckpointError as e:
        raise ExportError(f"verification failed, the export is unreadable: {e}") from None
    if written is None:
        raise ExportError(f"verification failed: {folder} holds no weights after writing")
    expected = wplan.tensors
    problems = sorted(set(expected) ^ set(written.tensors))
    for key, (file, t) in expected.items():
        got = written.tensors.get(key)
        if got is None:
            continue
        if (got.file, got.dtype, got.shape, got.nbytes) != (file, t.dtype, tuple(t.shape), t.nbytes):
            problems.append(f"{key}: {got.file} {got.dtype} {list(got.shape)}, planned {file} {t.dtype} {t.shape}")
    if problems:
        raise ExportError(f"verification failed: written tensors differ from the plan: {'; '.join(problems[:5])}")
    inverted = _check_inverses(written, ckpt, groups)
    return ExportVerification(
        tensors_checked=len(written.tensors),
        files_checked=len(written.files) + (1 if written.index_file == INDEX_FILE else 0),
        transforms_inverted=inverted,
    )


def _check_inverses(written: CheckpointIndex, ckpt: CheckpointIndex, groups: list[_Group]) -> int:
    """Convert each written group back and compare it bitwise with the source tensors."""
    import torch

    reader = _Producer(written, [])
    source = _Producer(ckpt, [])
    for g in groups:
        back = g.back([reader.read(k) for k in g.outputs])
        for key, tensor in zip(g.inputs, back):
            original = source.read(key)
            same = tensor.shape == original.shape and tensor.dtype == original.dtype
            if not same or not torch.equal(_bits(tensor), _bits(original)):
                raise ExportError(f"verification failed: {key} does not convert back bitwise from the export")
    return len(groups)


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes (so that NaNs and -0.0 compare exactly)."""
    import torch

    return tensor.contiguous().reshape(-1).view(torch.uint8)
