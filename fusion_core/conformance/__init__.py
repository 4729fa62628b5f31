"""The conformance kit: every fusion family through the same properties.

For plugin authors' own pytest::

    from fusion_core.conformance import check_family

    def test_my_family_conforms():
        report = check_family(MyFusion())
        assert report.passed, report.summary()

and from the command line: ``fusion-core [--family-file F.py] families --self-test [NAME ...] [--json]``.
What it checks, on the demos and on the family's :meth:`~fusion_core.families.FusionSpec.sample_configs`:
see :mod:`fusion_core.conformance.kit` and ``docs/extending.md``.

The kit loads, checks and exports, so it sits above ``export`` in the layers contract.
"""

from __future__ import annotations

from .kit import PROPERTIES, check_family
from .report import ConformanceReport, PropertyResult

__all__ = ["PROPERTIES", "ConformanceReport", "PropertyResult", "check_family"]
