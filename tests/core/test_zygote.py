"""The zygote: children forked from one process that imported torch and transformers once."""

from __future__ import annotations

import json
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
    isolated.use_zygote(True)  # the test worker's own zygote, when it has one already
    try:
        yield
    finally:
        isolated.use_zygote(None)  # back to what the environment says


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _forked(child: isolated.WarmChild) -> int:
    assert isinstance(child.proc, isolated._ForkedChild)
    return child.proc.wait_forked(120)


def test_children_fork_from_one_zygote_and_each_serves_one_job(zygote, qwen2_vl_dir: Path) -> None:
    result = check(qwen2_vl_dir, PE, repeats=1, time_budget=0)  # the upstream reference, forked
    assert result.passed and result.upstream.max_abs_diff is not None and not result.upstream.error, result.upstream
    assert [f.status for f in result.upstream.families] == ["differs"]  # the Qwen2-VL defect, measured there
    zygote_pid = isolated._zygotes[-1].proc.pid

    child = isolated.WarmChild(None)
    pid = _forked(child)
    assert _parent(pid) == zygote_pid  # the same zygote: its imports paid once
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


def test_one_zygote_per_environment_and_a_dead_ones_requests_start_on_their_own(zygote, monkeypatch) -> None:
    isolated.WarmChild(None).finish(120)
    first = isolated._zygotes[-1]
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "another test (call)")  # volatile: the same zygote
    same = isolated.WarmChild(None)
    assert _parent(_forked(same)) == first.proc.pid
    assert same.finish(60).returncode == 0
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

    # a request the zygote never forks (stopped, then killed): a child of our own, on its pipes
    second.proc.send_signal(signal.SIGSTOP)
    monkeypatch.setenv("FUSION_TEST_MARK", "zygote-env")
    stuck = isolated.WarmChild(None)
    stuck.proc.kill()  # never forked: killing it does not wait for the stuck zygote
    assert stuck.finish(10).returncode == -signal.SIGKILL
    orphan = isolated.WarmChild(None)
    assert isolated._zygotes[-1] is second
    second.proc.kill()
    second.proc.wait(30)
    assert _parent(_forked(orphan)) == os.getpid()
    orphan.assign("fusion_core.host.worker")
    done = orphan.finish(120)
    assert done.returncode == 2 and "serves one of" in done.stderr
    third = isolated._zygote_for(dict(second.env))  # the dead one is never asked again
    assert third is not second and second not in isolated._zygotes
    isolated._zygotes.remove(third)  # it need not finish its imports
    third.close()


def test_a_forked_child_takes_the_environment_and_folder_it_was_asked_with(tmp_path: Path) -> None:
    from fusion_core.run import zygote

    env = {"FUSION_TEST_MARK": "asked", "PYTEST_CURRENT_TEST": "x (call)", "PATH": os.environ.get("PATH", "")}
    fds = [os.open(os.devnull, os.O_RDONLY), *reversed(os.pipe()), os.open(os.devnull, os.O_WRONLY)]
    stdin, out_w, out_r, stderr = fds
    pid = os.fork()
    if pid == 0:  # what the zygote's child does, then report what it has
        try:
            zygote._become_child([stdin, out_w, stderr], str(tmp_path), env)
            os.write(1, json.dumps({"env": dict(os.environ), "cwd": os.getcwd()}).encode())
        finally:
            os._exit(0)
    for fd in (stdin, out_w, stderr):
        os.close(fd)
    with os.fdopen(out_r) as f:
        got = json.loads(f.read())
    assert os.waitpid(pid, 0)[1] == 0
    assert got == {"env": env, "cwd": str(tmp_path)}
    assert isolated.zygote_key(env) == {"FUSION_TEST_MARK": "asked", "PATH": env["PATH"]}
