"""Issue 13, item 5: a killed export leaves the destination absent or complete, and the next run cleans up.

The export runs in a child process (the CLI, forked with its imports done) with a private
fault variable that kills it with SIGKILL, or pauses it for a SIGTERM/SIGHUP, at a named step. Afterwards the
destination is either absent, or exactly the previous export, or exactly a verified
reference export; the next export to the same place reports and removes what the killed
one left, and leaves nothing else behind.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import _forked
import pytest
from _export_helpers import FUSION, copy_model, folder_digest, leftovers

from fusion_core import export
from fusion_core.model.checkpoint import read_index

SHARDS = "200KB"  # several shards, so a kill can land between two of them


@pytest.fixture
def src(qwen2_vl_dir: Path, tmp_path: Path) -> Path:
    return copy_model(qwen2_vl_dir, tmp_path / "src")


@pytest.fixture
def reference(src: Path, tmp_path: Path) -> dict[str, str]:
    """What a complete export of ``src`` holds, written as the killed runs write it (--no-verify-outputs:
    without the consumers tried, config.json guards the family names; see docs/cli-json.md)."""
    ref = tmp_path / "ref"
    export(src, ref, FUSION, max_shard_size=SHARDS, verify_outputs=False)
    return folder_digest(ref)


def _cli(src: Path, out: Path, env: dict[str, str], *extra: str) -> _forked.Forked:
    """``fusion-core export`` in a process of its own (forked with the imports done: ``tests/_forked.py``)."""
    argv = ["export", str(src), str(out), "--fusion", "patch_embeddings"]
    argv += ["--max-shard-size", SHARDS, "--no-verify-outputs", *extra]
    return _forked.start(argv, env={**os.environ, **env}, cwd=out.parent)


def _killed(src: Path, out: Path, step: str, *extra: str, exchange: bool = True) -> None:
    env = {"_FUSION_EXPORT_FAULT": f"kill:{step}"}
    if not exchange:
        env["_FUSION_EXPORT_NO_EXCHANGE"] = "1"
    proc = _cli(src, out, env, *extra)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, err


def _next_run_cleans(src: Path, out: Path, reference: dict[str, str], overwrite: bool) -> list[str]:
    result = export(src, out, FUSION, max_shard_size=SHARDS, verify_outputs=False, overwrite=overwrite)
    assert folder_digest(out) == reference
    assert leftovers(out.parent) == []
    return result.verification.notes


@pytest.mark.slow
@pytest.mark.parametrize("step", ["shard-written", "before-swap"])
def test_killed_new_export_leaves_no_destination(src: Path, tmp_path: Path, reference, step: str) -> None:
    out = tmp_path / "out"
    _killed(src, out, step)
    assert not out.exists()
    left = leftovers(tmp_path)
    assert len(left) == 1 and left[0].startswith(".out.fusion-export-tmp-"), left
    notes = _next_run_cleans(src, out, reference, overwrite=False)
    assert any(left[0] in n and "killed" in n for n in notes), notes


@pytest.mark.parametrize(
    ("step", "exchange", "expect"),
    [
        ("shard-written", True, "old"),
        ("before-swap", True, "old"),
        ("after-swap", True, "new"),  # exchanged: the old folder waits under the temp name
        ("after-aside", False, "absent"),  # two-step swap killed between its renames
        ("after-swap", False, "new"),
    ],
)
def test_killed_overwrite_keeps_old_or_new(
    src: Path, tmp_path: Path, reference, step: str, exchange: bool, expect: str
) -> None:
    out = tmp_path / "out"
    export(src, out, FUSION, layout="fused", verify_outputs=False)  # the previous export: one shard
    old = folder_digest(out)
    assert old != reference
    _killed(src, out, step, "--overwrite", exchange=exchange)
    if expect == "old":
        assert folder_digest(out) == old
    elif expect == "new":
        assert folder_digest(out) == reference
        assert read_index(out) is not None
    else:
        assert not out.exists()
    assert leftovers(tmp_path)
    notes = _next_run_cleans(src, out, reference, overwrite=True)
    cleanup = [n for n in notes if n.startswith(("removed", "restored"))]  # not the consumers' note
    assert cleanup and all("killed" in n for n in cleanup), notes
    if expect == "absent":
        assert any("restored out" in n for n in notes), notes


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
@pytest.mark.parametrize("signum", [signal.SIGTERM, getattr(signal, "SIGHUP", signal.SIGTERM)])
def test_sigterm_and_sighup_clean_up_like_sigint(src: Path, tmp_path: Path, signum: int) -> None:
    out = tmp_path / "out"
    ready = tmp_path / "paused"
    proc = _cli(src, out, {"_FUSION_EXPORT_FAULT": "pause:shard-written", "_FUSION_EXPORT_FAULT_READY": str(ready)})
    deadline = time.monotonic() + 120
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # a child process, not the GUI: polling its marker file is the only way
    assert ready.exists(), proc.communicate()[1]
    assert leftovers(tmp_path), "the export should be mid-way, its temp folder present"
    proc.send_signal(signum)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err
    assert "Traceback" not in err
    assert not out.exists()
    assert leftovers(tmp_path) == []
