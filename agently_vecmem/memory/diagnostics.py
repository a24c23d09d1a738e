"""Values the plugin's diagnostics are made of: the per-stage timer of a call and why something failed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import ModelError

__all__ = ["ErrorInfo", "Timer"]


class Timer:
    """Accumulates wall time per stage, in milliseconds."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.ms[name] = self.ms.get(name, 0.0) + (time.perf_counter() - start) * 1000


@dataclass(frozen=True)
class ErrorInfo:
    """Why a phase (or one of its items) failed, as diagnostics show it.

    Attributes:
        error: the message (at most 500 characters).
        error_type: the exception class; a foreign exception from the model is wrapped in ``ModelError``.
        cause_type: the class of the wrapped cause, when it is not a ``ModelError``.
        failure: the kind of failure (phase failures only): ``output_truncated`` (the reply was cut by
            ``max_tokens``), ``invalid_reply`` (no valid JSON reply), ``model_error`` (transport, HTTP,
            empty reply) or ``unexpected_error`` (the model raised something else).
    """

    error: str
    error_type: str
    cause_type: str | None = None
    failure: str | None = None

    @classmethod
    def of(cls, e: BaseException, *, failure: str | None = None) -> ErrorInfo:
        cause = e.__cause__
        cause_type = type(cause).__name__ if isinstance(e, ModelError) and cause is not None and not isinstance(
            cause, ModelError
        ) else None
        return cls(str(e)[:500], type(e).__name__, cause_type, failure)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.error, "error_type": self.error_type}
        if self.cause_type is not None:
            out["cause_type"] = self.cause_type
        if self.failure is not None:
            out["failure"] = self.failure
        return out
