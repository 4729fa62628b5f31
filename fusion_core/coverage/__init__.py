"""The coverage scan: which architectures transformers knows each family applies to.

``scan`` is the API and report, ``pool`` runs worker processes, ``worker`` scans one model type.
"""
