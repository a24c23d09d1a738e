"""The chat-model interface: one primitive (``_complete``), everything else shared.

A back end implements :meth:`ChatModel._complete`. The base class adds timing and call records
(:class:`CallRecord`), the empty-reply check, and structured output with a counted re-ask budget
(:meth:`ChatModel.structured`).

The interface is synchronous. Async callers use ``await asyncio.to_thread(model.complete, ...)``;
there is deliberately no async copy of this class.
"""

from __future__ import annotations

import collections
import functools
import inspect
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from ..errors import ConfigurationError, ModelError, StructuredOutputError
from .structured import build_reask_messages, format_errors, parse_reply

__all__ = [
    "Usage",
    "CallRecord",
    "UsageSummary",
    "ChatModel",
    "CallSink",
    "summarize_calls",
    "MAX_CALL_RECORDS",
    "TRUNCATED",
]

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

#: How many call records a model keeps (older ones are dropped).
MAX_CALL_RECORDS = 1000
#: ``CallRecord.error_type`` of a reply cut by the output cap (``finish_reason == "length"``).
TRUNCATED = "OutputTruncated"
#: The user message appended after a reply cut by the output cap.
_TRUNCATED_REASK = (
    "Your previous reply was cut off at the output limit. Reply again with one shorter JSON object "
    "(fewer items, shorter texts), and nothing else."
)


@dataclass(frozen=True)
class Usage:
    """Token counts reported by the endpoint (``None`` when it did not report them)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class CallRecord:
    """One call of :meth:`ChatModel._complete`, as seen by the caller.

    Attributes:
        phase: The phase label passed by the caller (``"chat"``, ``"extract"``, ...).
        latency_ms: Wall time of the call, including the back end's own retries.
        prompt_tokens: Reported prompt tokens, or ``None``.
        completion_tokens: Reported completion tokens, or ``None``.
        ok: False when the call raised, or (for structured calls) the reply failed validation.
        error_type: The exception class name when ``ok`` is False (``"ValidationError"``,
            ``"ReplyParseError"`` for an unusable structured reply).
        attempt: 1-based attempt number inside :meth:`ChatModel.structured`; 1 for plain calls.
        finish_reason: The endpoint's ``finish_reason`` (``"length"``: cut by ``max_tokens``), or ``None``.
    """

    phase: str
    latency_ms: float
    prompt_tokens: int | None
    completion_tokens: int | None
    ok: bool
    error_type: str | None = None
    attempt: int = 1
    finish_reason: str | None = None


#: Receives every call record of one caller's requests (e.g. a per-call budget), besides the shared log.
CallSink = Callable[[CallRecord], None]


@dataclass(frozen=True)
class UsageSummary:
    """Totals over a set of call records (see :func:`summarize_calls`)."""

    calls: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    by_phase: dict[str, int] = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "failed": self.failed,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "latency_ms": round(self.latency_ms, 3),
            "by_phase": dict(self.by_phase),
        }


def summarize_calls(records: list[CallRecord]) -> UsageSummary:
    """Sum calls, failures, tokens (missing counts as 0) and latency; count calls per phase."""
    by_phase: dict[str, int] = {}
    for r in records:
        by_phase[r.phase] = by_phase.get(r.phase, 0) + 1
    return UsageSummary(
        calls=len(records),
        failed=sum(1 for r in records if not r.ok),
        prompt_tokens=sum(r.prompt_tokens or 0 for r in records),
        completion_tokens=sum(r.completion_tokens or 0 for r in records),
        latency_ms=sum(r.latency_ms for r in records),
        by_phase=by_phase,
    )


class ChatModel(ABC):
    """A chat-completion model behind one primitive.

    Subclasses implement :meth:`_complete`. Public methods:

    * :meth:`complete` – one call, returns the assistant text.
    * :meth:`structured` – JSON reply validated against a pydantic model, re-asked on failure.
    * :attr:`calls` – the retained call records (:func:`summarize_calls` totals them).

    Subclasses call ``super().__init__()``. Thread-safe: the call log is guarded by a lock; subclasses
    must make ``_complete`` thread-safe.
    Sync only; from async code use ``await asyncio.to_thread(model.structured, ...)``.

    Example:
        >>> reply = model.structured(messages, Facts, phase="extract")
        >>> summarize_calls(model.calls).total_tokens
    """

    #: A label for logs and diagnostics.
    model_name: str = "model"

    def __init__(self) -> None:
        self._calls_lock = threading.Lock()
        self._calls: collections.deque[CallRecord] = collections.deque(maxlen=MAX_CALL_RECORDS)

    @abstractmethod
    def _complete(
        self, messages: list[dict[str, Any]], *, phase: str, json_mode: bool
    ) -> tuple[str | None, Usage | None] | tuple[str | None, Usage | None, str | None]:
        """Send one chat request.

        A back end that can cap the reply length also accepts ``max_tokens: int | None`` (it is passed
        only to back ends whose ``_complete`` has that parameter).

        Args:
            messages: OpenAI-style message dicts.
            phase: Caller's phase label (back ends may forward it, e.g. as a header).
            json_mode: Ask the endpoint for a JSON object reply if it supports that.

        Returns:
            The assistant content (``None``/empty is turned into :class:`ModelError` by the caller), the
            token usage if known and, optionally, the ``finish_reason`` (``"length"``: cut by the cap).

        Raises:
            ModelError: transport or HTTP failure after the back end's own retries.
        """

    # -- public API -----------------------------------------------------------------------------------

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        phase: str = "chat",
        json_mode: bool = False,
        max_tokens: int | None = None,
    ) -> str:
        """Send ``messages`` and return the assistant's text.

        Args:
            messages: OpenAI-style message dicts (``{"role": ..., "content": ...}``).
            phase: Label recorded in the :class:`CallRecord` and forwarded to the back end.
            json_mode: Ask for a JSON object reply (the text is returned unparsed).
            max_tokens: Output cap sent to back ends that support it (a cut reply is returned as is).

        Returns:
            The non-empty reply text.

        Raises:
            ModelError: the call failed or the reply was empty.
        """
        text, usage, latency_ms, finish = self._timed_call(
            messages, phase=phase, json_mode=json_mode, attempt=1, max_tokens=max_tokens
        )
        self._record(CallRecord(phase, latency_ms, *_tokens(usage), ok=True, attempt=1, finish_reason=finish))
        return text

    def structured(
        self,
        messages: list[dict[str, Any]],
        reply_model: type[M],
        *,
        phase: str,
        max_attempts: int = 2,
        max_tokens: int | None = None,
        on_call: CallSink | None = None,
    ) -> M:
        """Ask for a JSON reply and validate it against ``reply_model``, re-asking on invalid replies.

        Each attempt calls the model in JSON mode, strips code fences, decodes the first JSON object and
        validates it with ``reply_model.model_validate``. On failure the invalid reply and a user message
        listing the validation errors are appended to the conversation and the model is asked again,
        at most ``max_attempts`` calls in total.

        A reply cut by the output cap (``finish_reason == "length"``) is a failed attempt too (recorded
        with ``error_type`` :data:`TRUNCATED`) and is re-asked for a shorter reply. A reply the parser
        cannot handle at all (e.g. JSON nested past the recursion limit) is an invalid reply, not a crash.

        Transport failures (:class:`ModelError` from the back end, after its own retries, and empty
        replies) are not re-asked: they propagate at once, since a re-ask would just repeat the call.

        Args:
            messages: The conversation; it should describe the expected JSON shape.
            reply_model: Pydantic model the reply must match.
            phase: Phase label for call records and the back end.
            max_attempts: Total model calls allowed (>= 1).
            max_tokens: Output cap per call, sent to back ends that support it.
            on_call: Also receives the record of every call made here (success or failure), so a
                caller can count its own requests without reading the shared log.

        Returns:
            The validated ``reply_model`` instance.

        Raises:
            StructuredOutputError: no valid reply within ``max_attempts``; carries ``attempts``,
                ``last_raw`` and one error text per attempt.
            ModelError: a call failed.
            ConfigurationError: ``max_attempts`` < 1 (also a ``ValueError``).
        """
        if max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be >= 1, got {max_attempts}")
        conversation = list(messages)
        errors: list[str] = []
        raw = ""
        for attempt in range(1, max_attempts + 1):
            raw, usage, latency_ms, finish = self._timed_call(
                conversation, phase=phase, json_mode=True, attempt=attempt, max_tokens=max_tokens,
                on_call=on_call,
            )
            if finish == "length":
                errors.append(f"- the reply was cut off at the output limit (max_tokens={max_tokens})")
                self._record(
                    CallRecord(phase, latency_ms, *_tokens(usage), ok=False, error_type=TRUNCATED,
                               attempt=attempt, finish_reason=finish),
                    on_call,
                )
                logger.info("structured reply for phase %r cut by the output cap (attempt %d/%d)",
                            phase, attempt, max_attempts)
                conversation = build_reask_messages(conversation, raw, "", template=_TRUNCATED_REASK)
                continue
            try:
                result = parse_reply(raw, reply_model)
            except Exception as e:  # noqa: BLE001 - any parser failure is an invalid reply, re-asked
                error_text = format_errors(e)
                errors.append(error_text)
                self._record(
                    CallRecord(
                        phase,
                        latency_ms,
                        *_tokens(usage),
                        ok=False,
                        error_type=type(e).__name__,
                        attempt=attempt,
                        finish_reason=finish,
                    ),
                    on_call,
                )
                logger.info(
                    "structured reply for phase %r invalid (attempt %d/%d): %s",
                    phase,
                    attempt,
                    max_attempts,
                    error_text.replace("\n", "; "),
                )
                conversation = build_reask_messages(conversation, raw, error_text)
                continue
            self._record(
                CallRecord(phase, latency_ms, *_tokens(usage), ok=True, attempt=attempt, finish_reason=finish),
                on_call,
            )
            return result
        raise StructuredOutputError(
            f"{self.model_name}: no valid {reply_model.__name__} reply for phase {phase!r} "
            f"after {max_attempts} attempt(s): {errors[-1].splitlines()[0] if errors else ''}",
            phase=phase,
            attempts=max_attempts,
            last_raw=raw,
            errors=errors,
        )

    @property
    def calls(self) -> list[CallRecord]:
        """All retained call records (at most :data:`MAX_CALL_RECORDS`), oldest first; totals of any slice
        come from :func:`summarize_calls`."""
        with self._calls_lock:
            return list(self._calls)

    # -- internals ------------------------------------------------------------------------------------

    def _timed_call(
        self,
        messages: list[dict[str, Any]],
        *,
        phase: str,
        json_mode: bool,
        attempt: int,
        max_tokens: int | None = None,
        on_call: CallSink | None = None,
    ) -> tuple[str, Usage | None, float, str | None]:
        """Call ``_complete``, time it, check for an empty reply; record failures (successes: caller)."""
        kwargs: dict[str, Any] = {"phase": phase, "json_mode": json_mode}
        if max_tokens is not None and _accepts_max_tokens(type(self)):
            kwargs["max_tokens"] = max_tokens
        start = time.perf_counter()
        try:
            text, usage, finish = _unpack(self._complete(messages, **kwargs))
        except Exception as e:
            latency_ms = (time.perf_counter() - start) * 1000.0
            self._record(
                CallRecord(
                    phase, latency_ms, None, None, ok=False, error_type=type(e).__name__, attempt=attempt
                ),
                on_call,
            )
            raise
        latency_ms = (time.perf_counter() - start) * 1000.0
        if text is None or not text.strip():
            self._record(
                CallRecord(
                    phase, latency_ms, *_tokens(usage), ok=False, error_type="ModelError", attempt=attempt,
                    finish_reason=finish,
                ),
                on_call,
            )
            raise ModelError(f"{self.model_name}: empty reply (phase {phase!r})", phase=phase)
        return text, usage, latency_ms, finish

    def _record(self, record: CallRecord, on_call: CallSink | None = None) -> None:
        with self._calls_lock:
            self._calls.append(record)
        if on_call is not None:
            on_call(record)


@functools.cache
def _accepts_max_tokens(cls: type) -> bool:
    """Whether a back end's ``_complete`` takes ``max_tokens`` (older subclasses do not)."""
    try:
        params = inspect.signature(cls._complete).parameters  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return False
    return "max_tokens" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _unpack(result: Any) -> tuple[str | None, Usage | None, str | None]:
    """``_complete``'s (text, usage) or (text, usage, finish_reason)."""
    if len(result) == 3:
        return result[0], result[1], result[2]
    text, usage = result
    return text, usage, None


def _tokens(usage: Usage | None) -> tuple[int | None, int | None]:
    if usage is None:
        return None, None
    return usage.prompt_tokens, usage.completion_tokens
