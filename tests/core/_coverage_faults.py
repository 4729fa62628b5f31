"""Fault injection for the coverage scan's worker processes (imported by the workers; not a test).

``inject`` runs before each model type is scanned: some types are made to hang in Python
(the per-type alarm must end them), to hang where the alarm cannot reach (the watchdog
must kill the worker), or to kill their worker (the scan must carry on without them).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

SLOW = "bert"  # hangs in Python code
STUCK = "gpt2"  # hangs with the alarm blocked, like native code
CRASH = "opt"  # the worker process dies
FAULTS = (SLOW, STUCK, CRASH)
HOOK = f"{__name__}:inject"  # for fusion_core.coverage.pool._fault_hook (set by the tests)
WHERE = "FUSION_TEST_COVERAGE_WHERE"  # a file: each worker appends where it runs, per type


def inject(model_type: str) -> None:
    if os.environ.get(WHERE):
        with open(os.environ[WHERE], "a", encoding="utf-8") as f:
            seen = {"type": model_type, "isolated": sys.flags.isolated, "cwd": os.getcwd(), "ppid": os.getppid()}
            f.write(json.dumps(seen) + "\n")
    if model_type == SLOW:
        threading.Event().wait()
    elif model_type == STUCK:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        threading.Event().wait()
    elif model_type == CRASH:
        os._exit(3)
