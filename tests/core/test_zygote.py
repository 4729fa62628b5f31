"""The zygote: children forked from one process that imported torch and transformers once."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from fusion_core import check
from fusion_core.run import isolated

PE = {"patch_embeddings": True}


@pytest.fixture
def zygote():
    isolated.close_zygote()
    isolated.use_zygote(True)
    try:
        yield
    finally:
        isolated.use_zygote(None)  # back to what the environment says
        isolated.close_zygote()


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _forked(child: isolated.WarmChild) -> int:
    child.proc.wait_forked(120)
    assert child.proc.pid is not None
    return child.proc.pid


def test_children_fork_from_one_zygote_and_each_serves_one_job(zygote, qwen2_vl_dir: Path) -> None:
    first = check(qwen2_vl_dir, PE, repeats=1, time_budget=0)  # the upstream reference, forked
    assert first.passed and first.upstream.ran and not first.upstream.error, first.upstream
    zygote_pid = isolated._zygotes[-1].proc.pid
    second = check(qwen2_vl_dir, PE, repeats=1, time_budget=0)
    assert second.upstream.ran and not second.upstream.error
    assert [f.status for f in second.upstream.families] == [f.status for f in first.upstream.families]
    assert isolated._zygotes[-1].proc.pid == zygote_pid  # the same zygote: its imports paid once

    child = isolated.WarmChild(None)
    pid = _forked(child)
    assert _parent(pid) == zygote_pid
    deadline = time.monotonic() + 30
    while (cwd := Path(os.readlink(f"/proc/{pid}/cwd"))).name.startswith("fusion-zygote-"):  # until it moved
        assert time.monotonic() < deadline, cwd
        time.sleep(0.01)
    assert cwd.name.startswith("fusion-child-") and list(cwd.iterdir()) == []  # its own empty folder
    assert child.finish(60).returncode == 0  # no module to serve: it ends at once

    refused = isolated.child_for("fusion_core.host.worker")  # not a child's job: its stderr comes back
    done = refused.finish(60)
    assert done.returncode == 2 and "serves one of" in done.stderr

    killed = isolated.WarmChild("fusion_core.run.upstream")
    _forked(killed)
    killed.proc.kill()
    assert killed.finish(60).returncode == -signal.SIGKILL
    early = isolated.WarmChild("fusion_core.run.upstream")  # killed before the zygote forked it, maybe
    early.proc.kill()
    assert early.finish(60).returncode == -signal.SIGKILL


def test_an_environment_change_gets_its_own_zygote_and_the_old_one_is_kept(zygote, monkeypatch) -> None:
    isolated.WarmChild(None).finish(120)
    first = isolated._zygotes[-1]
    monkeypatch.setenv("FUSION_TEST_MARK", "zygote-env")
    child = isolated.WarmChild(None)
    pid = _forked(child)
    second = isolated._zygotes[-1]
    assert second is not first and _parent(pid) == second.proc.pid
    assert b"FUSION_TEST_MARK=zygote-env" in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert child.finish(60).returncode == 0
    monkeypatch.delenv("FUSION_TEST_MARK")
    back = isolated.WarmChild(None)  # the environment as it was: the first zygote, still warm
    assert _parent(_forked(back)) == first.proc.pid
    assert back.finish(60).returncode == 0


def test_children_asked_of_a_zygote_that_dies_start_on_their_own(zygote) -> None:
    child = isolated.WarmChild(None)  # a new zygote: still importing when it is killed
    zygote_proc = isolated._zygotes[-1].proc
    zygote_proc.send_signal(signal.SIGKILL)
    zygote_proc.wait(30)
    pid = _forked(child)
    assert _parent(pid) == os.getpid()  # started by us, on the pipes it was given
    child.assign("fusion_core.host.worker")
    done = child.finish(120)
    assert done.returncode == 2 and "serves one of" in done.stderr
    after = isolated.WarmChild(None)  # the next child gets a new zygote
    assert _parent(_forked(after)) == isolated._zygotes[-1].proc.pid != zygote_proc.pid
    assert after.finish(60).returncode == 0
