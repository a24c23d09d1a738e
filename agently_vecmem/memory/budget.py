"""The model budget and the stage timer of one plugin call.

A :class:`ModelBudget` belongs to exactly one ``prepare_request`` / ``after_turn`` / re-extract call. It
counts the requests that call made itself (every :class:`~agently_vecmem.llm.CallRecord` of its requests
is handed to it by :meth:`ChatModel.structured`); nothing is read from the model's shared call log, so
the calls of other threads never mix into this call's figures.

:meth:`ModelBudget.ask` makes one phase request with at most ``attempts`` model requests, whatever the
model replies or raises (any ``Exception``; ``KeyboardInterrupt`` and ``SystemExit`` still stop the
process), and returns the outcome as a value: a validated reply, or an :class:`ErrorInfo` naming the
failure. It never raises because of the model.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..errors import ModelError, StructuredOutputError
from ..llm.base import TRUNCATED, CallRecord, summarize_calls

__all__ = ["Timer", "ErrorInfo", "Asked", "ModelBudget", "NO_MODEL_CALLS"]

logger = logging.getLogger(__name__)

R = TypeVar("R")

#: ``model_calls`` of a call made without a model.
NO_MODEL_CALLS: dict[str, Any] = {"calls": 0, "failed": 0, "total_tokens": 0, "by_phase": {}}


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


@dataclass(frozen=True)
class Asked(Generic[R]):
    """The outcome of one phase request: ``reply`` or ``error``, and the requests it took."""

    reply: R | None
    attempts: int
    error: ErrorInfo | None = None


class ModelBudget:
    """Model requests of one plugin call, counted locally (see module docstring).

    Args:
        model: the chat model (a :class:`~agently_vecmem.llm.ChatModel`), or None.
        timer: the call's timer; each phase's model time is recorded as ``model.<phase>``.
    """

    def __init__(self, model: Any, timer: Timer) -> None:
        self.model = model
        self.timer = timer
        self.records: list[CallRecord] = []

    def ask(
        self, phase: str, messages: list[dict[str, Any]], reply_model: type[R], *, attempts: int,
        max_tokens: int | None,
    ) -> Asked[R]:
        """One structured request: at most ``attempts`` model requests, never raises because of the model.

        Invalid and truncated replies are re-asked with the errors (inside ``ChatModel.structured``);
        transport failures and foreign exceptions use up one attempt each and are tried again while the
        budget lasts.
        """
        made = 0
        first = len(self.records)
        error: BaseException | None = None
        failure = "model_error"
        with self.timer.stage(f"model.{phase}"):
            while made < attempts:
                before = len(self.records)
                try:
                    reply = self.model.structured(
                        messages, reply_model, phase=phase, max_attempts=attempts - made, max_tokens=max_tokens,
                        on_call=self.records.append,
                    )
                except StructuredOutputError as e:
                    made += max(1, len(self.records) - before)
                    error, failure = e, "invalid_reply"
                    break
                except ModelError as e:
                    error, failure = e, "model_error"
                except Exception as e:  # noqa: BLE001 - a foreign ChatModel must not fail the user's turn
                    error, failure = ModelError(f"{type(e).__name__}: {e}", phase=phase), "unexpected_error"
                    error.__cause__ = e
                else:
                    return Asked(reply, made + max(1, len(self.records) - before))
                # A request that left no record (a model bypassing the base class) still costs one attempt.
                made += max(1, len(self.records) - before)
        assert error is not None
        if self.records[first:] and self.records[-1].error_type == TRUNCATED:
            failure = "output_truncated"
        info = ErrorInfo.of(error, failure=failure)
        logger.info("model phase %r failed after %d request(s): %s", phase, made, info.error)
        return Asked(None, made, info)

    def calls(self, phase: str | None = None) -> int:
        """Requests this call made (for ``phase``, or all)."""
        return sum(1 for r in self.records if phase is None or r.phase == phase)

    def accounting(self) -> dict[str, Any]:
        """``timings_ms`` and ``model_calls`` of this call (the diagnostics' accounting keys)."""
        timings = {k: round(v, 3) for k, v in self.timer.ms.items()}
        if self.model is None:
            model_calls, model_ms = dict(NO_MODEL_CALLS, by_phase={}), 0.0
        else:
            usage = summarize_calls(self.records)
            model_calls, model_ms = usage.to_dict(), usage.latency_ms
        timings["total_excluding_model"] = round(max(0.0, sum(self.timer.ms.values()) - model_ms), 3)
        return {"timings_ms": timings, "model_calls": model_calls}
