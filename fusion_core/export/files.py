"""The file-system side of export: destination checks, a temporary sibling, the final swap.

An export never writes where it would hurt: not into the source folder (or anything that
resolves to it), not through a symlinked destination, not over a non-empty folder unless
asked, and never in place: everything goes to a temporary sibling folder that is renamed
into place once complete and verified. The other files of the source folder are copied,
but a link that resolves outside the source folder is not followed.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ExportError, UsageError, naming
from ..model.checkpoint import INDEX_FILE, SINGLE_FILE, allowed_roots
from . import staging
from .staging import clean_stale, make_temp_sibling, remove_tree, sync_folder

__all__ = [
    "Destination",
    "check_destination",
    "clean_stale",
    "copy_other_files",
    "describe_os_error",
    "export_config",
    "make_temp_sibling",
    "move_into_place",
    "plan_other_files",
    "remove_tree",
    "sync_folder",
]

CONFIG_FILE = "config.json"
# Weights in another format would describe the source layout, not the exported one.
WEIGHT_SUFFIXES = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".h5",
    ".msgpack",
    ".gguf",
    ".onnx",
    ".pkl",
    ".pickle",
    ".npz",
)


@dataclass
class Destination:
    """A checked destination: where the output goes and whether it replaces a folder."""

    path: Path
    replaces: bool  # an existing non-empty folder will be replaced (overwrite)
    exists: bool
    notes: list[str] = field(default_factory=list)  # leftovers of killed exports, removed


def check_destination(source_folder: Path, out_dir: str | os.PathLike[str], *, overwrite: bool) -> Destination:
    """Refuse destinations that would touch the source, follow a link, or lose data.

    Args:
        source_folder: the model folder being exported.
        out_dir: what the user named.
        overwrite: allow replacing a non-empty folder that holds a model export.

    Returns:
        The checked destination (its parent exists afterwards). The leftovers of exports
        to it that were killed (their process is gone) are removed first, and said in
        ``notes``.

    Raises:
        UsageError: an empty name (an unset ``$OUT``), the root, the home folder, the
            working directory, or an ancestor of the source or of the working directory.
        ExportError: inside the source, a link, a file, not empty without ``overwrite``,
            or (with ``overwrite``) a folder that is not a model export; naming the path.
    """
    raw = os.fspath(out_dir)
    if not raw.strip():
        raise UsageError("export: the destination is empty (an unset variable?); name the folder to create")
    out = Path(os.path.abspath(os.path.expanduser(raw)))
    if out.is_symlink():
        raise ExportError(
            f"{out}: is a symbolic link (to {os.readlink(out)}); an export never follows a link out of the "
            "folder you named. Give the real folder instead"
        )
    real = out.resolve()
    src = Path(source_folder).resolve()
    _refuse_precious(out, real, src)
    if real == src or src in real.parents:
        raise ExportError(f"{out}: is inside the source model folder {src}; choose a folder outside it")
    parent = out.parent
    if parent.exists() and not parent.is_dir():
        raise ExportError(f"{out}: cannot be created: {parent} is a file, not a folder")
    if not parent.exists():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ExportError(f"{out}: cannot create its parent folder {parent} ({e.strerror or e})") from None
    notes = clean_stale(out)  # a killed export's temp folders; an interrupted swap is rolled back
    exists = out.exists()
    if exists and not out.is_dir():
        raise ExportError(f"{out}: exists and is not a folder; choose another destination")
    replaces = False
    if exists:
        try:
            with os.scandir(out) as entries:
                names = {e.name for e in entries}
        except OSError as e:
            raise ExportError(f"{out}: cannot be read ({e.strerror or e})") from None
        if names and not overwrite:
            raise naming(
                ExportError(
                    f"{out}: is not empty; set overwrite to replace it (the old folder is kept until the new "
                    "one is complete and verified)"
                ),
                "overwrite",
            )
        if names and not _is_model_export(names):
            raise naming(
                ExportError(
                    f"{out}: is not empty and holds no model export (config.json with safetensors weights); "
                    "overwrite only replaces a previous export. Choose a new or empty folder"
                ),
                "overwrite",
            )
        replaces = bool(names)
    # from here on the destination is its resolved path, checked above: a link among its parents
    # that is flipped to the source during the export is no longer on the way (issue 32)
    return Destination(real.parent / out.name, replaces, exists, notes)


def _refuse_precious(out: Path, real: Path, src: Path) -> None:
    """The folders an export must never replace, whatever the flags (exit 2: a usage error)."""
    cwd = Path.cwd().resolve()
    home = Path.home().resolve()
    why = None
    if real.parent == real:
        why = "is the root of the file system"
    elif real == home:
        why = "is your home folder"
    elif real == cwd:
        why = "is the working directory"
    elif real in cwd.parents:
        why = "contains the working directory"
    elif real in src.parents:
        why = f"contains the source model folder {src}"
    if why:
        raise UsageError(f"export: {out} {why}; an export never writes there. Name a new folder for the export")


def _is_model_export(names: set[str]) -> bool:
    """A folder that holds what an export writes: config.json and safetensors weights."""
    return CONFIG_FILE in names and (SINGLE_FILE in names or INDEX_FILE in names)


def move_into_place(tmp: Path, dest: Destination) -> None:
    """Move the finished ``tmp`` folder to the destination (atomically swapped when it replaces one).

    Raises:
        ExportError: the rename failed; ``dest`` is as it was.
    """
    staging.move_into_place(tmp, dest.path, dest.replaces)


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def plan_other_files(
    source_folder: Path, checkpoint_files: set[str]
) -> tuple[list[tuple[str, Path]], list[tuple[str, str]]]:
    """Which top-level files of the source to copy (name, real path), and which not and why.

    ``checkpoint_files`` (the shards and index being converted) are left out silently.
    """
    roots = allowed_roots(source_folder)
    copy: list[tuple[str, Path]] = []
    skipped: list[tuple[str, str]] = []
    with os.scandir(source_folder) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        name = entry.name
        if name == CONFIG_FILE or name in checkpoint_files:
            continue  # rewritten for the exported layout
        if name.endswith(WEIGHT_SUFFIXES) or name.endswith(".index.json"):
            skipped.append((name, "other weights (another format or variant); not converted, not copied"))
            continue
        if name.startswith("."):
            skipped.append((name, "hidden entry"))
            continue
        path = Path(entry.path)
        if entry.is_symlink():
            try:
                target = path.resolve(strict=True)
            except (OSError, RuntimeError):
                skipped.append((name, "a broken link"))
                continue
            if not _inside(target, roots):
                skipped.append((name, f"a link resolving outside the model folder ({target}); not followed"))
                continue
        else:
            target = path
        if target.is_dir():
            skipped.append((name, "a folder (only top-level files are copied)"))
            continue
        if not target.is_file():
            skipped.append((name, "not a regular file"))
            continue
        copy.append((name, target))
    return copy, skipped


def copy_other_files(files: list[tuple[str, Path]], dest_folder: Path) -> list[int]:
    """Copy each (name, real path) into ``dest_folder``; return the sizes copied.

    Raises:
        OSError: from the file system (the caller turns it into a message).
    """
    sizes = []
    for name, target in files:
        out = dest_folder / name
        if out.exists():
            raise ExportError(f"{out}: would be written twice; the source folder has a conflicting file")
        shutil.copyfile(target, out, follow_symlinks=False)
        sizes.append(out.stat().st_size)
    return sizes


def export_config(config: dict[str, Any], *, fusion_config: dict[str, Any] | None) -> str:
    """``config.json`` text for the export, formatted as transformers writes it.

    With ``fusion_config`` it is recorded (our loader re-applies the fusion, and so does
    transformers for the families it knows); with ``None`` it is removed, so that a plain
    load of an original-layout export is a plain, unfused model. Keys are sorted as
    ``save_pretrained`` sorts them, except inside ``fusion_config``: its order is the
    order the families are applied in, the user's.
    """
    data = dict(config)
    data.pop("fusion_config", None)
    text = json.dumps(data, indent=2, sort_keys=True)
    if fusion_config is None:
        return text + "\n"
    sorted_keys = sorted([*data, "fusion_config"])
    parts = []
    for key in sorted_keys:
        value = fusion_config if key == "fusion_config" else data[key]
        dumped = json.dumps(value, indent=2, sort_keys=key != "fusion_config")
        parts.append(f"  {json.dumps(key)}: " + dumped.replace("\n", "\n  "))
    return "{\n" + ",\n".join(parts) + "\n}\n"


def describe_os_error(e: OSError, dest: Path, total_bytes: int) -> ExportError:
    """One clear message for a file-system failure during an export."""
    where = e.filename or dest
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        need = f"{total_bytes / 1e9:.2f} GB" if total_bytes >= 10**8 else f"{total_bytes / 1e6:.1f} MB"
        return ExportError(
            f"{where}: no space left on the device while exporting (needs about {need}); "
            f"nothing was written to {dest}. Free some space or choose another destination"
        )
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ExportError(f"{where}: not writable ({e.strerror}); nothing was written to {dest}")
    return ExportError(f"{where}: {e.strerror or e}; nothing was written to {dest}")
