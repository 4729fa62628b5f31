"""The model: what the user named, resolved to a config, a class and a header-only checkpoint index.

``sources`` (model names -> :class:`ModelSource`), ``safety`` (bounded, strict reading of
untrusted files), ``checkpoint`` (safetensors headers, lazy shard reads), ``classes``
(config -> model class), ``demo`` (built-in tiny checkpoints), ``tree`` (the
meta-initialized module tree as plain data), ``cache`` (opened models' tree and discovery
as validated JSON, read without torch, so the window paints a model seen before at once).
"""
