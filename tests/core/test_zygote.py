"""The zygote: children forked from one process that imported torch and transformers once."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fusion_core import check
from fusion_core.boundary.ops import CHILD_MARK
from fusion_core.run import child as child_entry
from fusion_core.run import isolated
from fusion_core.run import zygote as server

PE = {"patch_embeddings": True}
ROOT = str(Path(server.__file__).resolve().parents[2])

# the zygote's own loop without its imports of torch and transformers (a second, not seven):
# each child prints where it runs, then exits with the code its first line says, or signals itself
LIGHT = r"""
import os, socket, sys, threading
sys.path.insert(0, sys.argv[1])
from fusion_core.run import zygote
assert threading.active_count() == 1
given = zygote._serve(socket.socket(fileno=int(os.environ["FUSION_ZYGOTE_FD"])))
if given is None:
    os._exit(0)
zygote._become_child(*given)
line = sys.stdin.readline().split()
print(os.getcwd(), os.environ.get("FUSION_TEST_MARK"), flush=True)
if line[0] == "signal":
    os.kill(os.getpid(), int(line[1]))
os._exit(int(line[0]))
"""


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


def _light(*, fd: int, cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-I", "-c", LIGHT, ROOT],
        env={"PATH": os.environ.get("PATH", ""), "FUSION_ZYGOTE_FD": str(fd)},
        cwd=cwd,
        pass_fds=(fd,),
        stdin=subprocess.DEVNULL,
    )


def test_the_zygote_refuses_what_it_cannot_fork_and_serves_on(tmp_path: Path) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.settimeout(60)
    proc = _light(fd=theirs.fileno(), cwd=tmp_path)
    theirs.close()

    def ask(data: bytes, fds: list[int]) -> object:
        socket.send_fds(ours, [data], fds)
        return server.read_answer(ours.recv(65536))

    def pipes() -> tuple[list[int], int, int]:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        return [in_r, out_w, os.open(os.devnull, os.O_WRONLY)], in_w, out_r

    folder = tmp_path / "child"
    folder.mkdir()
    request = server.ZYGOTE_FORK.request_line(server.ZygoteFork(str(folder), {"FUSION_TEST_MARK": "asked"})).encode()
    bad = (
        b"not json",
        b"\xff",
        child_entry.SERVE.request_line(
            child_entry.ServeParams("fusion_core.run.upstream")
        ).encode(),  # another op's request
        request.replace(b'"asked"', b"7"),  # an environment value that is not a string
    )
    try:
        for data in bad:
            theirs_fds, in_w, out_r = pipes()
            answer = ask(data, theirs_fds)
            assert isinstance(answer, server.ZygoteRefused), answer
            for fd in (*theirs_fds, in_w):
                os.close(fd)
            assert os.read(out_r, 100) == b""  # the zygote closed its copies of the refused request's pipes
            os.close(out_r)
        refused = ask(request, [])
        assert isinstance(refused, server.ZygoteRefused) and "3 descriptors" in refused.error

        for first, code in (("7", 7), ("signal 15", -signal.SIGTERM)):  # still serving
            theirs_fds, in_w, out_r = pipes()
            forked = ask(request, theirs_fds)
            assert isinstance(forked, server.ZygoteForked) and _parent(forked.pid) == proc.pid
            for fd in theirs_fds:
                os.close(fd)
            os.write(in_w, first.encode() + b"\n")
            os.close(in_w)
            with os.fdopen(out_r) as out:
                assert out.read() == f"{folder} asked\n"
            assert server.read_answer(ours.recv(65536)) == server.ZygoteExited(forked.pid, code)
    finally:
        ours.close()
        proc.wait(60)
    assert proc.returncode == 0  # its parent closed the socket: it ends


def test_our_end_of_a_zygote_starts_runs_and_ends_its_children(tmp_path: Path) -> None:
    light = [sys.executable, "-I", "-c", LIGHT, ROOT]
    env = {"PATH": os.environ.get("PATH", ""), "FUSION_TEST_MARK": "ours"}
    never = [sys.executable, "-c", "raise SystemExit(99)"]  # started only if the zygote cannot fork
    z = isolated._Zygote(env, light)
    try:
        for first, code in (("0", 0), ("5", 5), ("signal 15", -signal.SIGTERM)):
            child = z.fork(never, env, str(tmp_path))
            assert _parent(child.wait_forked(60)) == z.proc.pid
            child.stdin.write(first + "\n")
            out, _ = child.communicate(60)
            assert (out, child.returncode) == (f"{tmp_path} ours\n", code)
        killed = z.fork(never, env, str(tmp_path))
        killed.wait_forked(60)
        killed.kill()
        assert killed.communicate(60) == ("", "") and killed.returncode == -signal.SIGKILL
        assert z.alive()
    finally:
        z.close()
    assert z.proc.returncode == 0


GARBLED = r"""
import os, socket, sys, time
sock = socket.socket(fileno=int(os.environ["FUSION_ZYGOTE_FD"]))
socket.recv_fds(sock, 1 << 18, 3)
sock.send(sys.argv[1].encode("utf-8", "surrogateescape"))
time.sleep(600)
"""


@pytest.mark.parametrize(
    "said",
    ["hello", "\udcff", CHILD_MARK + '{"method": "child/zygote_fork", "result": {"pid": "12"}}'],
    ids=["not a message", "not utf-8", "not its shape"],
)
def test_a_zygote_that_says_what_we_cannot_read_is_ended_and_its_requests_start_on_their_own(
    said: str, tmp_path: Path
) -> None:
    env = {"PATH": os.environ.get("PATH", "")}
    plain = [sys.executable, "-c", "import sys; print('plain', sys.stdin.read().strip())"]
    z = isolated._Zygote(env, [sys.executable, "-I", "-c", GARBLED, said])
    try:
        child = z.fork(plain, env, str(tmp_path))
        child.stdin.write("asked\n")
        out, _ = child.communicate(60)  # started by us once the zygote's answer made no sense
        assert (out, child.returncode) == ("plain asked\n", 0)
        assert z.proc.wait(60) == -signal.SIGKILL and not z.alive()
    finally:
        z.close()
