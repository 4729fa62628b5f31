"""Qt item models: thin adapters over the core's data (tree, preview rows, check results)."""

from .. import _pyside_fix

# an editable install may import fusion_gui as a namespace package, skipping its __init__
_pyside_fix.apply()
