"""An example third-party fusion family package (see docs/extending.md).

Registers ``kv_proj`` through the ``fusion_inspector.families`` entry point group.
"""

from .kv_family import KVProjFusion

__all__ = ["KVProjFusion"]
