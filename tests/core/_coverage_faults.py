"""Fault injection for the coverage scan's worker processes (imported by the workers; not a test).

``inject`` runs before each model type is scanned: some types are made to hang in Python
(the per-type alarm must end them), to hang where the alarm cannot reach (the watchdog
must kill the worker), or to kill their worker (the scan must carry on without them).
"""

from __future__ import annotations

import os
import signal
import threading

SLOW = "bert"  # hangs in Python code
STUCK = "gpt2"  # hangs with the alarm blocked, like native code
CRASH = "opt"  # the worker process dies
FAULTS = (SLOW, STUCK, CRASH)
HOOK = f"{__name__}:inject"  # for fusion_core.coverage.pool._fault_hook (set by the tests)


def inject(model_type: str) -> None:
    if model_type == SLOW:
        threading.Event().wait()
    elif model_type == STUCK:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        threading.Event().wait()
    elif model_type == CRASH:
        os._exit(3)
