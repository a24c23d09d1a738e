"""One error root for the whole package.

Every error raised on purpose by agently-vecmem derives from :class:`VecMemError`. Argument errors also
derive from :class:`ValueError` so callers that already catch ``ValueError`` keep working. Errors from
outside SDKs (chromadb, openai) are translated at the edge with ``raise ... from e``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "VecMemError",
    "ConfigurationError",
    "ScopeError",
    "RecordValidationError",
    "EmbedderMismatchError",
    "WorkspaceLockedError",
    "WorkspaceError",
    "RecordNotFoundError",
    "ModelError",
    "StructuredOutputError",
    "MemoryModeError",
    "ConfigurationTypeError",
    "DataFileError",
    "SessionDataError",
    "UsageError",
    "ReplyParseError",
    "RecordContentNotFoundError",
    "ScopeAccessError",
    "HistoryImportError",
    "HttpError",
]


class VecMemError(Exception):
    """Root of every error raised by agently-vecmem."""


class ConfigurationError(VecMemError, ValueError):
    """A setting, option or argument has a wrong value or type."""


class ConfigurationTypeError(ConfigurationError, TypeError):
    """An argument has the wrong type (also a ``TypeError``, what Python raises there)."""


class SessionDataError(ConfigurationError, TypeError):
    """Session data has the wrong shape (also a ``TypeError``, as Agently raises there)."""


class DataFileError(ConfigurationError):
    """An input data file is missing, unreadable, not valid JSON, or has the wrong shape.

    The message names the file and what was expected; the original error is chained (``from e``).
    """


class UsageError(ConfigurationError):
    """A command-line usage problem: the ``agently-vecmem`` CLI prints it on one line and exits with 2."""


class ScopeError(VecMemError, ValueError):
    """A memory scope or scope filter is invalid (unknown scope name, missing session id, ...)."""


class ScopeAccessError(ScopeError, PermissionError):
    """A record outside the caller's visible scopes was requested (also ``PermissionError``, as Agently's
    ContextSource contract expects)."""


class RecordValidationError(VecMemError, ValueError):
    """A memory record does not satisfy the record contract."""


class WorkspaceError(VecMemError):
    """The storage layer failed (Chroma error, unreadable path, ...)."""


class RecordNotFoundError(WorkspaceError, KeyError):
    """No record with the requested id exists."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else "record not found"


class RecordContentNotFoundError(RecordNotFoundError, FileNotFoundError):
    """A record's content is not stored (Agently's Workspace backend contract: its callers catch
    ``FileNotFoundError``)."""


class EmbedderMismatchError(WorkspaceError):
    """A collection was opened with an embedder whose model or dimension differs from the recorded one."""


class WorkspaceLockedError(WorkspaceError):
    """Another process already writes to this embedded Chroma path."""


class ModelError(VecMemError):
    """A call to the language model failed (transport, HTTP status, timeout) after its retries."""

    def __init__(self, message: str, *, phase: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.phase = phase
        self.status = status


class ReplyParseError(VecMemError, ValueError):
    """A raw model reply contains no usable JSON value (raised while parsing; the structured-output loop
    turns it into a re-ask, and into :class:`StructuredOutputError` once the budget is spent)."""


class StructuredOutputError(ModelError):
    """The model did not return a reply matching the expected schema within the re-ask budget.

    Attributes:
        attempts: how many model calls were made.
        last_raw: the last raw text the model returned.
        errors: the validation error text of each attempt.
    """

    def __init__(
        self,
        message: str,
        *,
        phase: str | None = None,
        attempts: int = 0,
        last_raw: str | None = None,
        errors: list[str] | None = None,
    ) -> None:
        super().__init__(message, phase=phase)
        self.attempts = attempts
        self.last_raw = last_raw
        self.errors = list(errors or [])

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "attempts": self.attempts, "last_raw": self.last_raw, "errors": self.errors}


class MemoryModeError(VecMemError, ValueError):
    """A session memory mode is not registered, or a memory plugin lacks what it needs (a Workspace)."""


class HistoryImportError(VecMemError, ValueError):
    """A chat history file cannot be imported as a whole (missing, unreadable, of no known shape)."""


class HttpError(VecMemError):
    """A request the memory browser (``agently-vecmem ui``) refuses or cannot answer: its HTTP status and a
    message for the user."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
