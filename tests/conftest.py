"""Shared fixtures: an isolated demo cache and the demo checkpoints (tiny real models)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# engine processes in tests keep no spare child (it would import torch for nothing); test_spares covers them
os.environ.setdefault("FUSION_SPARE_CHILDREN", "0")
# children fork from one zygote per test worker and engine (run/zygote.py): imports paid once
os.environ.setdefault("FUSION_CHILD_ZYGOTE", "1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with the most slow tests first, each kept whole (its fixtures set up once): in
    parallel runs the long tests start early instead of ending the run alone."""
    slow: dict[str, int] = {}
    for item in items:
        slow[item.module.__name__] = slow.get(item.module.__name__, 0) + (item.get_closest_marker("slow") is not None)
    order = {name: i for i, name in enumerate(sorted(slow, key=lambda name: -slow[name]))}
    items.sort(key=lambda item: order[item.module.__name__])


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
