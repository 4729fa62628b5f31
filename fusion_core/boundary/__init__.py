"""What crosses the engine's edges: option objects (:mod:`.options`).

Callers (the CLI, the window, the engine process, Python users) build one option object
per operation; it is validated where it is built, so the engine receives only valid
settings and never names a command-line flag. Importing this package imports neither
torch nor transformers.
"""
