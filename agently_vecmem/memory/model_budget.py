"""The model budget of one plugin call.

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
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..errors import ModelError, StructuredOutputError
from ..llm.base import TRUNCATED, CallRecord, summarize_calls
from .diagnostics import ErrorInfo, Timer

__all__ = ["Asked", "ModelBudget", "NO_MODEL_CALLS"]

logger = logging.getLogger(__name__)

R = TypeVar("R")

#: ``model_calls`` of a call made without a model.
NO_MODEL_CALLS: dict[str, Any] = {"calls": 0, "failed": 0, "total_tokens": 0, "by_phase": {}}


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
