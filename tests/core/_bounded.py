"""Helpers of the round-four attack tests (issue 32): a bounded CLI probe and a tiny LLaVA with its processor files.

An attack that runs the CLI runs in a forked process of its own (``tests/_forked.py``)
under an address-space limit of its size at the start plus 2 GiB (``RLIMIT_AS``), so a
regression fails with a MemoryError instead of taking the machine's memory; its peak
growth (from a reset high-water mark) must stay under 2 GB and its time under 60 s, and it
ends in one line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import _forked
import pytest

_PROBE = """
import json, resource, sys, time
import torch, transformers
from fusion_core.cli.main import main
vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + 2 * 2**30, resource.RLIM_INFINITY))
open("/proc/self/clear_refs", "w").write("5")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
code = main(sys.argv[1:])
seconds = time.perf_counter() - t0
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
print(json.dumps({"code": code, "grown": grown, "seconds": seconds}))
"""


def probe(*argv: str) -> tuple[dict, str, str]:
    """Run ``fusion-core *argv`` forked and bounded: (measures, stdout before them, stderr)."""
    done = _forked.run(argv, code=_PROBE, timeout=120)
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-2000:]
    result = json.loads(lines[-1])
    print(f"bound: {argv[0]}: {result['seconds']:.1f} s, {result['grown'] / 1e6:.0f} MB grown")  # shown with -s
    assert result["grown"] <= 2e9, result
    assert result["seconds"] <= 60, result
    return result, "\n".join(lines[:-1]), done.stderr


def one_line(err: str, *words: str) -> None:
    assert err.count("\n") == 1 and err.startswith("fusion-core: error: "), err
    for word in words:
        assert word in err, err


@pytest.fixture(scope="module")
def llava_with_processor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from _check_models import llava
    from transformers import AutoConfig, CLIPImageProcessorPil, LlavaProcessor

    from fusion_core.model.tokenizer import synthetic_tokenizer

    folder = llava(tmp_path_factory.mktemp("round4") / "llava")
    config = AutoConfig.from_pretrained(folder)
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessorPil(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}),
        tokenizer=synthetic_tokenizer(config, {"image_token": "<image>"}),
        patch_size=7,
        vision_feature_select_strategy="default",
        chat_template="{% for m in messages %}{{ m['role'] }}{% endfor %}",
    )
    processor.save_pretrained(folder)
    return folder


def copy_folder(folder: Path, to: Path) -> Path:
    shutil.copytree(folder, to)
    return to


def edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def sparse(path: Path, size: int) -> Path:
    """A file of ``size`` zero bytes that uses no disk (a hole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
    return path
