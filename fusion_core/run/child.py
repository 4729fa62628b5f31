"""The one entry point of our isolated children: the heavy imports first, then the job it is given.

:class:`fusion_core.run.isolated.WarmChild` starts ``python -I -m fusion_core.run.child``
from an empty folder. The child imports torch, transformers and its model-loading machinery
(about 3 s on one core: most of a child's time to its answer), then reads one line that
names what it serves (the :data:`SERVE` request), and hands its input to that
module's ``serve()``. A child serves one job and ends, so nothing one load leaves in the
process (transformers' fusion registries leak, DESIGN.md upstream defect 3) reaches another.

Because what it serves comes last, a long-lived process (the window's engine, a test
worker) can fork its children from a *zygote* that did the imports once
(:mod:`fusion_core.run.zygote`), or start a *spare* child ahead of any operation
(:func:`fusion_core.run.isolated.keep_spares`): the next check or export then finds one
whose imports are done.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass

from ..boundary.ops import Op

__all__ = ["SERVE", "SERVES", "ServeParams", "main", "serve", "warm"]

#: the modules a child may serve (each has a ``serve() -> int`` reading its requests on stdin)
SERVES = (
    "fusion_core.run.upstream",
    "fusion_core.export.consumers",
    "fusion_core.adapter.consumers",
    "fusion_core.coverage.worker",
)


@dataclass(frozen=True)
class ServeParams:
    """A child's first line: the module it serves (one of :data:`SERVES`)."""

    module: str


#: a child's first request (in :data:`fusion_core.host.ops.CHILD_OPS`, as every child's operation)
SERVE: Op[ServeParams, None] = Op("child/serve", ServeParams, type(None))


def warm() -> None:
    """The imports every child needs (also the zygote's, :mod:`fusion_core.run.zygote`)."""
    import logging
    import os
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch  # noqa: F401
    import transformers.modeling_utils  # noqa: F401 - pulls core_model_loading, generation, masking
    from transformers.utils import logging as hf_logging

    from . import capture, hf_speedups, loading  # noqa: F401

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    hf_speedups.install()


def main() -> int:
    """Warm up, then serve the module named by the first line of stdin (none: the parent gave up)."""
    warm()
    return serve()


def serve() -> int:
    """Serve the module named by the first line of stdin (none: the parent gave up)."""
    line = sys.stdin.readline()
    if not line:
        return 0
    try:
        target = SERVE.read_request(line).module
    except ValueError as e:
        sys.stderr.write(f"a child's first line names what it serves: {e}\n")
        return 2
    if target not in SERVES:
        sys.stderr.write(f"a child serves one of {', '.join(SERVES)}, not {target!r:.80}\n")
        return 2
    return int(importlib.import_module(target).serve())


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # tearing the interpreter down with torch and transformers loaded takes seconds
