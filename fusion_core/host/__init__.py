"""The engine as a separate process, for the window (``fusion_gui``).

The window never imports torch: it starts ``python -I -m fusion_core.host.worker``
(:func:`fusion_core.run.isolated.isolated_command`) and talks to it with JSON lines
(:mod:`.protocol`): requests go to the engine's standard input, progress, logs, results and
errors come back on its standard output. A crash in a model ends the engine, not the
window, and a cancel can always end a job, by ending the process.

* :mod:`.ops`: the operations, declared once (name, params, result type, long or quick);
* :mod:`.protocol`: the messages (JSON-RPC in shape, with ``$/progress`` and ``$/cancelRequest``);
* :mod:`.wire`: JSON lines and the plain-data encoding of typed values (no torch);
* :mod:`.worker`: the engine's main loop and its operations (imports the engine).
"""
