"""The children's linear-time ``dir()`` for transformers' lazy modules returns exactly what transformers' does."""

from __future__ import annotations

import sys

import transformers  # the lazy top-level module
import transformers.models.llama  # noqa: F401 - and a lazy model package
from transformers.utils.import_utils import _LazyModule

from fusion_core.run.hf_speedups import lazy_dir


def test_lazy_dir_is_transformers_dir_in_the_same_order() -> None:
    lazy = [m for name, m in sys.modules.items() if name.startswith("transformers") and isinstance(m, _LazyModule)]
    assert len(lazy) >= 2
    original = vars(_LazyModule)["__dir__"]
    assert original is not lazy_dir  # this process is not a child: transformers' own method
    for module in lazy:
        assert lazy_dir(module) == original(module), module.__name__
    top = sys.modules["transformers"]
    assert "LlamaForCausalLM" in lazy_dir(top)
