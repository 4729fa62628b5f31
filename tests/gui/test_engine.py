"""The engine runs in its own process: the window never imports torch, survives a crash, and cancels for sure."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from fusion_core.errors import EngineStopped
from fusion_gui import engine as engine_module

PATCH = "model.visual.patch_embed"
JOB_TIMEOUT_MS = 180_000

WINDOW_SCRIPT = textwrap.dedent(
    """
    import sys
    from PySide6.QtCore import QEventLoop, QTimer
    from fusion_core.boundary.options import CheckOptions
    from fusion_gui.app import create_app
    from fusion_gui.main_window import MainWindow
    from fusion_gui.settings import Settings
    from fusion_gui.state import AppState

    app = create_app()
    state = AppState(Settings(read_only=True))
    window = MainWindow(state)
    window.show()

    def wait(signal, seconds=300):
        loop = QEventLoop()
        got = []
        signal.connect(lambda *a: (got.append(a), loop.quit()))
        QTimer.singleShot(seconds * 1000, loop.quit)
        return got, loop

    got, loop = wait(state.model_changed)
    state.open_model("demo:qwen2-vl")
    loop.exec()
    assert got, "not opened"
    while state.plan_pending:
        app.processEvents()
    for name in state.family_order:
        state.set_family_enabled(name, name == "patch_embeddings")
    got, loop = wait(window.diff.diff_ready)
    window.show_tab("diff")
    loop.exec()
    assert got and got[0][0] is not None, "no diff"
    got, loop = wait(state.checks_finished)
    state.run_checks(CheckOptions.build(repeats=1, upstream=False, time_budget=0))
    loop.exec()
    assert got and got[0][0].passed, "checks"
    checked = got[0][0]
    got, loop = wait(state.comparison_changed)
    window.compare_with("demo:llama", values=True)  # A against B, values streamed in the engine
    loop.exec()
    assert got and got[0][0] is not None and got[0][0].values is not None, "no comparison"
    from fusion_gui.panels.save_dialog import save_view

    for name in ("tree.png", "tree.svg", "report.html"):  # rendered and written in the window process
        save_view(state, name)
    got = [(checked,)]
    print(type(got[0][0]).__name__, "torch" in sys.modules, "transformers" in sys.modules, flush=True)
    state.shutdown()
    """
)


def test_the_window_process_never_imports_torch(tmp_path):
    """Open, plan, diff, checks, a comparison and saved images from a fresh window process: the results
    arrive typed, torch stays out."""
    env = {**os.environ, "FUSION_INSPECTOR_SETTINGS": str(tmp_path / "settings.ini")}
    proc = subprocess.run(
        [sys.executable, "-c", WINDOW_SCRIPT], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-3:] == ["CheckResult", "False", "False"]


def _checks_running(qtbot, window):
    """Start the checks (no upstream) and wait for their first progress: (engine, its pid, the Checks panel)."""
    engine = window.state.jobs.engine
    assert engine.pid and engine.running
    panel = window.checks
    panel.upstream_box.setChecked(False)
    with qtbot.waitSignal(
        window.state.job_progressed, timeout=JOB_TIMEOUT_MS, check_params_cb=lambda name, *_: name == "checks"
    ):
        panel.run()
    return engine, engine.pid, panel


@pytest.mark.slow
def test_an_engine_crash_fails_the_job_and_the_window_goes_on(qtbot, window, open_model, only_fusions):
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "patch_embeddings")
    engine, old_pid, panel = _checks_running(qtbot, window)
    failures = []
    window.state.jobs.current.failed.connect(failures.append)
    with qtbot.waitSignal(window.state.job_ended, timeout=JOB_TIMEOUT_MS) as ended:
        os.kill(old_pid, signal.SIGKILL)  # a crash in native code, as a segfault in a model would end it
    assert ended.args[:2] == ["checks", "failed"]
    assert isinstance(failures[0], EngineStopped) and "started again" in str(failures[0])
    assert "killed by signal 9 (SIGKILL, the kernel's out-of-memory killer?)" in str(failures[0])
    qtbot.waitUntil(lambda: engine.pid not in (0, old_pid), timeout=60_000)
    # the new engine has the model open again: plans, checks and the tree work as before
    only_fusions(window, "patch_embeddings", "qkv")
    assert window.state.plan is not None and set(window.state.plan.fusion_config) == {"patch_embeddings", "qkv"}
    only_fusions(window, "patch_embeddings")
    with qtbot.waitSignal(window.state.checks_finished, timeout=JOB_TIMEOUT_MS) as done:
        panel.run()
    assert done.args[0].passed and [m.path for m in done.args[0].modules] == [PATCH]
    assert window.tree.select_path(PATCH)


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP")
def test_cancel_ends_a_job_that_does_not_stop(qtbot, window, open_model, only_fusions, monkeypatch):
    """A job stuck where it cannot see the cancel (here: the engine is frozen) still ends, by ending the engine."""
    monkeypatch.setattr(engine_module, "CANCEL_GRACE_S", 1.0)
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "patch_embeddings")
    engine, old_pid, panel = _checks_running(qtbot, window)
    os.kill(old_pid, signal.SIGSTOP)
    try:
        with qtbot.waitSignal(window.state.job_ended, timeout=30_000) as ended:
            panel.cancel_button.click()
    finally:
        try:
            os.kill(old_pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert ended.args[:2] == ["checks", "cancelled"]
    qtbot.waitUntil(lambda: not window.state.busy and engine.pid not in (0, old_pid), timeout=60_000)
    only_fusions(window, "patch_embeddings", "gate_up")
    assert window.state.plan is not None and "gate_up" in window.state.plan.fusion_config
    assert panel.run_button.isEnabled() and window.open_action.isEnabled()


def test_a_call_answers_with_its_typed_result(qtbot, window):
    """engine.call(OP, Params) -> Job[Result]: the typed result arrives, the job is a finished future."""
    from fusion_core.boundary.options import CheckOptions
    from fusion_core.errors import UsageError
    from fusion_core.host.ops import CHECK, LISTS, CheckParams, ModelLists, NoParams, OpenParams
    from fusion_core.plan.plan_data import PlanData

    jobs = window.state.jobs
    job = jobs.call(LISTS, NoParams(), background=True)
    assert not job.done() and job.name == "lists"
    with qtbot.waitSignal(job.succeeded, timeout=JOB_TIMEOUT_MS) as sig:
        pass
    lists = sig.args[0]
    assert isinstance(lists, ModelLists) and "llama" in [name for name, _ in lists.demos]
    assert job.done() and not job.cancelled() and job.result() is lists and job.exception() is None
    seen = []
    job.add_done_callback(seen.append)
    assert seen == [job]
    # an engine error arrives as its own class, through the same future
    nothing = PlanData(1, "m", "C", {}, (), {}, {}, False, "none", (), ())  # a plan, of a session the engine lacks
    failing = jobs.call(CHECK, CheckParams("no-such-session", nothing, CheckOptions()), background=True)
    with qtbot.waitSignal(failing.failed, timeout=JOB_TIMEOUT_MS) as sig:
        pass
    assert isinstance(sig.args[0], UsageError) and failing.exception() is sig.args[0]
    with pytest.raises(UsageError, match="no model is open"):
        failing.result()
    with pytest.raises(TypeError, match="lists takes NoParams"):
        jobs.call(LISTS, OpenParams("s", "demo:llama"), background=True)


def test_the_engine_reopens_the_model_whenever_it_starts_again(qtbot, window, open_model, only_fusions):
    """Past the restart cap the engine waits for the next request; the process that request
    starts has the model open again (issue 31: every plan then failed with "no model is open
    in the engine" until the user reopened it)."""
    open_model(window, "demo:llama")
    engine = window.state.jobs.engine
    old_pid = engine.pid
    engine._restarts = [time.monotonic()] * engine_module.MAX_RESTARTS  # the cap is reached by this crash
    os.kill(old_pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: not engine.running, timeout=30_000)
    only_fusions(window, "qkv", "gate_up")  # a plan: the first request after the cap starts the engine
    assert engine.pid not in (0, old_pid)
    assert window.state.plan is not None and set(window.state.plan.fusion_config) == {"qkv", "gate_up"}
    assert window.state.plan_error == ""
