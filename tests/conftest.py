"""Shared fixtures: an isolated demo cache and the demo checkpoints (tiny real models)."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# engine processes in tests keep no spare child (it would import torch for nothing); test_spares covers them
os.environ.setdefault("FUSION_SPARE_CHILDREN", "0")
# children fork from one zygote per test worker and engine (run/zygote.py): imports paid once
os.environ.setdefault("FUSION_CHILD_ZYGOTE", "1")
# one intra-op thread per process (before torch is imported; children inherit it): three workers
# and their children on two cores, each with torch's default two OpenMP threads, spent about
# half of the suite's CPU time in OpenMP threads spinning while they waited for work (measured:
# 167 s against 87 s of CPU for the check modules); the tiny models gain nothing from a second
# thread, and the tests about timings set their threads themselves
os.environ.setdefault("OMP_NUM_THREADS", "1")


#: seconds each test module took (setup, calls and teardown, summed), measured by a run with
#: FUSION_STORE_DURATIONS=1; only the order of the modules depends on it
DURATIONS = Path(__file__).with_name("durations.json")


def _module(item: pytest.Item | pytest.TestReport) -> str:
    return item.nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest modules first, each kept whole (its fixtures set up once).

    scripts/test.sh runs ``--dist loadfile --no-loadscope-reorder``: each worker takes the
    next whole module in this order when it runs short, which spreads the long modules over
    the workers from the start (longest processing time first) instead of one worker ending
    the run alone. A module not measured yet counts as a median one.
    """
    try:
        seconds = {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        seconds = {}
    default = statistics.median(seconds.values()) if seconds else 0.0
    items.sort(key=lambda item: -seconds.get(_module(item), default))


_durations: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get("FUSION_STORE_DURATIONS") == "1" and not os.environ.get("PYTEST_XDIST_WORKER"):
        _durations[_module(report)] = _durations.get(_module(report), 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _durations and exitstatus == 0:  # a whole, passing run (the controller's reports)
        ranked = sorted(_durations.items(), key=lambda kv: -kv[1])
        DURATIONS.write_text(json.dumps({k: round(v, 1) for k, v in ranked}, indent=1) + "\n")


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Demo checkpoints go to a per-session folder, never the user's cache."""
    root = tmp_path_factory.mktemp("fusion-cache")
    old = os.environ.get("FUSION_INSPECTOR_CACHE")
    os.environ["FUSION_INSPECTOR_CACHE"] = str(root)
    yield root
    if old is None:
        os.environ.pop("FUSION_INSPECTOR_CACHE", None)
    else:
        os.environ["FUSION_INSPECTOR_CACHE"] = old


@pytest.fixture(scope="session")
def qwen2_vl_dir(_isolated_cache: Path) -> Path:
    """The tiny Qwen2-VL demo checkpoint (seeded random weights, Conv3d patch embedding)."""
    from fusion_core.model.demo import demo_path

    return demo_path("qwen2-vl")


@pytest.fixture(scope="session")
def llama_dir(_isolated_cache: Path) -> Path:
    """The tiny Llama demo checkpoint (no patch embedding)."""
    from fusion_core.model.demo import demo_path

    return demo_path("llama")
