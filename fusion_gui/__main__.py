"""``python -m fusion_gui``: the same as the ``fusion-inspector`` command."""

from __future__ import annotations

from .app import main

raise SystemExit(main())
