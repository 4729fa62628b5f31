"""One exception hierarchy for the engine, shared by the CLI and the GUI.

Every error names the file, key or family concerned and says what to do. The CLI maps
``exit_code`` to its process exit status; the GUI shows ``str(error)`` in a dialog.
A message that tells the user to change a setting names the *option*
(``allow_copy_as_is``), never a command-line flag, and lists it in ``options``
(:func:`naming`): the CLI shows each as its flag.
"""

from __future__ import annotations

from typing import TypeVar

E = TypeVar("E", bound="FusionError")


class FusionError(Exception):
    """Base of every error the engine raises on purpose (exit code 1)."""

    exit_code = 1
    #: the option names (``fusion_core.boundary.options``, ``trust_remote_code``...) the message names
    options: tuple[str, ...] = ()


def naming(error: E, *options: str) -> E:
    """``error``, recording that its message names ``options`` (the CLI shows them as flags)."""
    error.options = options
    return error


class UsageError(FusionError):
    """The caller asked for something that cannot make sense (exit code 2)."""

    exit_code = 2


class UnknownFamilyError(UsageError):
    """A fusion family name that is not registered."""


class InvalidFusionConfigError(UsageError):
    """A ``fusion_config`` value that is neither a bool nor a mapping."""


class FamilyConflictError(UsageError):
    """Two enabled families transform the same checkpoint keys (a usage error: exit code 2)."""


class ModelSourceError(FusionError):
    """A model source that cannot be resolved (missing folder, bad config, not cached...)."""


class ConfigError(ModelSourceError):
    """A ``config.json`` that is unreadable, not JSON, or names an unknown architecture."""


class PlanMismatchError(ModelSourceError):
    """A plan file whose source changed since it was made (a weight file, the config), or whose
    families no longer match the modules it lists: it is not run."""


class CheckpointError(FusionError):
    """A weight file that is missing, corrupt, truncated or hostile."""


class UnsafeModelError(FusionError):
    """A model folder asks for something we do not do without an opt-in (remote code, pickle)."""


class RemoteCodeError(UnsafeModelError):
    """A config that asks for custom code shipped with the model (``auto_map``).

    The one unsafe case with an opt-in (``trust_remote_code``); ``files`` lists the Python
    files the config names, for a dialog that shows them before the user decides.
    """

    def __init__(self, message: str, files: list[str] | None = None) -> None:
        super().__init__(message)
        self.files = list(files or [])


class LoadError(FusionError):
    """Loading produced missing or unexpected keys, or shapes that do not match."""


class ExportError(FusionError):
    """An export that cannot be written (destination, disk, verification)."""


class AdapterError(FusionError):
    """A LoRA adapter that cannot be converted exactly, or whose conversion failed verification."""


class CheckError(FusionError):
    """An inference check that could not run."""


class Cancelled(FusionError):
    """The user cancelled a long operation; nothing was left half-written."""


class EngineStopped(FusionError):
    """The engine process ended while it ran something (a crash, or killed to cancel for sure)."""


def one_line(error: BaseException, *, first: bool = False, named: bool = False, limit: int | None = None) -> str:
    """A single-line message for ``error``: what the CLI prints on stderr, and what a message
    quotes of a third-party exception.

    Args:
        error: the exception.
        first: only its first line (a transformers traceback text, a long validation
            report), instead of every line joined with spaces.
        named: prefixed with the exception's type (``KeyError: 'x'``), for an exception
            that is not ours (its type is part of what it says).
        limit: at most this many characters of the message (text from a model is data:
            bounded before it goes into a message of ours).

    Returns:
        The message; the exception's type name when it has no text.
    """
    lines = [part.strip() for part in str(error).strip().splitlines() if part.strip()]
    text = (lines[0] if first else " ".join(lines)) if lines else ""
    if limit is not None:
        text = text[:limit]
    if named:
        return f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text or type(error).__name__


#: the most characters of one name (a tensor key, a file name, a ``model_type``) a message quotes
QUOTE_LIMIT = 120
#: the most characters of one whole message (the CLI's error line, the window's error box)
MESSAGE_LIMIT = 2_000


def quoted(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``value`` quoted for a message, cut to ``limit`` characters with its full length.

    Names come from model folders and may be megabytes long: ``'aaaa…' (50,000,000
    characters)``. Short names read as ``repr`` does (``'model.safetensors'``), control
    characters escaped. Only the kept part is ever formatted, so quoting a 50 MB key costs
    nothing. Non-strings (a shape, a value of the wrong type) are quoted by their ``repr``,
    cut the same way.

    This is the one place that decides how long a quoted name may be: the engine's
    messages, the CLI and the window all quote through it.
    """
    if not isinstance(value, str):
        if isinstance(value, (list, tuple, dict)) and len(value) > limit:  # never repr a huge container
            return f"<a {type(value).__name__} of {len(value):,} items>"
        try:
            text = repr(value)
        except (RecursionError, ValueError):  # nested too deep; an int of too many digits
            return f"<a {type(value).__name__} too large to show>"
        return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"
    if len(value) <= limit:
        return repr(value)
    head = repr(value[:limit])
    return f"{head[:-1]}…{head[-1]} ({len(value):,} characters)"


def bounded(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` cut to at most ``limit`` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters not shown)"
