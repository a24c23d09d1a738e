"""A :class:`ChatModel` over any OpenAI-compatible chat-completions endpoint (sync ``openai.OpenAI``).

The SDK client is created with ``max_retries=0``; this module does its own bounded retries (exponential
backoff with jitter; ``Retry-After`` honoured on 429 up to a cap) for 429, 5xx, timeouts and connection
errors. Other 4xx fail at once. Every SDK exception is translated into :class:`ModelError` with
``raise ... from e``.

Async callers use ``await asyncio.to_thread(model.complete, ...)``; there is no async copy.
"""

from __future__ import annotations

import email.utils
import logging
import os
import random
import threading
import time
from collections.abc import Mapping
from typing import Any, Literal

import openai

from ..errors import ConfigurationError, ModelError
from .base import ChatModel, Usage
from .spec import DEFAULT_MAX_RETRIES, DEFAULT_MODEL, DEFAULT_TIMEOUT, model_spec
from .structured import mentions_json

__all__ = ["OpenAIChatModel", "PHASE_HEADER", "DEFAULT_MODEL", "parse_retry_after"]

logger = logging.getLogger(__name__)

#: Request header carrying the caller's phase (lets test servers script replies per phase).
PHASE_HEADER = "X-VecMem-Phase"
#: Appended as a system message in JSON mode when no message mentions JSON (OpenAI rejects
#: ``response_format=json_object`` otherwise).
_JSON_HINT = "Reply with a single JSON object."

JsonMode = Literal["auto", "on", "off"]


class OpenAIChatModel(ChatModel):
    """Chat model over the synchronous ``openai.OpenAI`` client.

    Args:
        model: Model name sent with each request.
        base_url: Endpoint, e.g. ``"http://127.0.0.1:8000/v1"``; ``None`` uses the SDK default.
        api_key: API key; local servers accept any value (``"not-needed"`` is used when ``None`` and
            ``OPENAI_API_KEY`` is unset).
        timeout: Per-request timeout in seconds.
        max_retries: Extra attempts after a retryable failure (429, 5xx, timeout, connection error).
        backoff: Base delay in seconds; attempt ``n`` waits ``backoff * 2**n`` plus up to 25 % jitter.
        max_backoff: Cap in seconds for any single wait, including a server's ``Retry-After``.
        json_mode: ``"auto"`` sends ``response_format={"type": "json_object"}`` for JSON calls; if the
            endpoint answers 400 it retries once without, and if that succeeds stops sending it
            (remembered for this instance);
            ``"on"`` always sends it; ``"off"`` never does.
        client: A ready ``openai.OpenAI`` client (its own retries are turned off with ``with_options``).
        extra_headers: Headers added to every request.

    Raises:
        ConfigurationError: bad ``json_mode`` or negative ``max_retries``.

    Example:
        >>> model = OpenAIChatModel("qwen2.5", base_url="http://127.0.0.1:8000/v1", api_key="x")
        >>> model.complete([{"role": "user", "content": "Hi"}])
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        backoff: float = 0.5,
        max_backoff: float = 20.0,
        json_mode: JsonMode | bool = "auto",
        client: openai.OpenAI | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        if json_mode is True:
            json_mode = "on"
        elif json_mode is False:
            json_mode = "off"
        if json_mode not in ("auto", "on", "off"):
            raise ConfigurationError(f"json_mode must be 'auto', 'on' or 'off', got {json_mode!r}")
        if max_retries < 0:
            raise ConfigurationError("max_retries must be >= 0")
        self.model = model
        self.model_name = model
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.json_mode: JsonMode = json_mode
        self.extra_headers = dict(extra_headers or {})
        self._rf_lock = threading.Lock()
        self._response_format_rejected = False
        if client is None:
            client = openai.OpenAI(
                base_url=base_url,
                api_key=api_key or os.environ.get("OPENAI_API_KEY") or "not-needed",
                timeout=self.timeout,
                max_retries=0,
            )
        elif hasattr(client, "with_options"):
            client = client.with_options(max_retries=0)
        self._client = client

    @classmethod
    def from_env(cls, **kwargs: Any) -> OpenAIChatModel | None:
        """Build a model from ``OPENAI_API_KEY``, ``OPENAI_BASE_URL`` and ``OPENAI_MODEL``.

        The environment is read by :func:`~agently_vecmem.llm.spec.model_spec` (one set of defaults for
        every way a model is built).

        Args:
            **kwargs: Passed to the constructor (``timeout``, ``max_retries``, ...); they win over the
                environment.

        Returns:
            The model, or ``None`` when neither an API key nor a base URL is configured.
        """
        spec = model_spec(from_env=True)
        if not spec.configured:
            return None
        return cls(**{**spec.kwargs(), **kwargs})

    @property
    def response_format_supported(self) -> bool:
        """False once the endpoint rejected ``response_format`` (``json_mode="auto"`` only)."""
        return not self._response_format_rejected

    def __repr__(self) -> str:
        return (
            f"OpenAIChatModel(model={self.model!r}, base_url={str(getattr(self._client, 'base_url', ''))!r})"
        )

    # -- the primitive ---------------------------------------------------------------------------------

    def _complete(
        self, messages: list[dict[str, Any]], *, phase: str, json_mode: bool, max_tokens: int | None = None
    ) -> tuple[str | None, Usage | None, str | None]:
        send_rf = json_mode and (
            self.json_mode == "on" or (self.json_mode == "auto" and not self._response_format_rejected)
        )
        if send_rf and not mentions_json(messages):
            messages = [*messages, {"role": "system", "content": _JSON_HINT}]
        retry = 0
        rf_error: str | None = None  # set while testing whether a 400 was caused by response_format
        while True:
            try:
                response = self._create(messages, phase=phase, response_format=send_rf, max_tokens=max_tokens)
                result = _content_and_usage(response, phase)
            except openai.BadRequestError as e:
                if send_rf and self.json_mode == "auto":
                    # Retry once without response_format (not counted as a retry: a different request).
                    rf_error, send_rf = e.message, False
                    continue
                raise _translate(e, phase) from e
            except (openai.APIStatusError, openai.APIConnectionError) as e:
                status = getattr(e, "status_code", None)
                retryable = status is None or status == 429 or status >= 500
                if not retryable or retry >= self.max_retries:
                    raise _translate(e, phase, retries=retry) from e
                delay = self._delay(retry, e)
                logger.info(
                    "%s phase %r: %s; retry %d/%d in %.2fs",
                    self.model,
                    phase,
                    _describe(e),
                    retry + 1,
                    self.max_retries,
                    delay,
                )
                time.sleep(delay)
                retry += 1
                continue
            except openai.OpenAIError as e:
                raise _translate(e, phase) from e
            except ValueError as e:  # the SDK lets a 200 with an undecodable body escape as JSONDecodeError
                raise ModelError(
                    f"malformed response body: {_short(str(e))} (phase {phase!r})", phase=phase
                ) from e
            if rf_error is not None:
                # Only a 400 that goes away without response_format proves the endpoint rejects it.
                with self._rf_lock:
                    self._response_format_rejected = True
                logger.warning(
                    "%s rejected response_format=json_object (400: %s); not sending it from now on",
                    self.model,
                    _short(rf_error),
                )
            return result

    def _create(
        self, messages: list[dict[str, Any]], *, phase: str, response_format: bool, max_tokens: int | None = None
    ) -> Any:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "extra_headers": {**self.extra_headers, PHASE_HEADER: phase},
            "timeout": self.timeout,
        }
        if max_tokens is not None:
            # max_tokens, not max_completion_tokens: local servers (llama.cpp, vLLM, Ollama) read this one.
            kwargs["max_tokens"] = int(max_tokens)
        if response_format:
            kwargs["response_format"] = {"type": "json_object"}
        return self._client.chat.completions.create(**kwargs)

    def _delay(self, retry: int, error: Exception) -> float:
        """Seconds to wait before retry number ``retry`` (0-based)."""
        response = getattr(error, "response", None)
        if getattr(error, "status_code", None) == 429 and response is not None:
            retry_after = parse_retry_after(response.headers)
            if retry_after is not None:
                return min(retry_after, self.max_backoff)
        base = self.backoff * (2**retry)
        return min(base * (1.0 + 0.25 * random.random()), self.max_backoff)


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from ``retry-after-ms`` / ``retry-after`` (seconds or HTTP date); ``None`` if absent/bad."""
    lowered = {k.lower(): v for k, v in headers.items()}
    value = lowered.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _content_and_usage(response: Any, phase: str) -> tuple[str | None, Usage | None, str | None]:
    """The reply's content, token usage and ``finish_reason`` (``"length"``: cut by ``max_tokens``)."""
    choices = getattr(response, "choices", None)
    if not choices:
        raise ModelError(f"malformed reply: no choices in {_short(repr(response))}", phase=phase)
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None) if message is not None else None
    if content is not None and not isinstance(content, str):
        raise ModelError(f"malformed reply: content is {type(content).__name__}", phase=phase)
    finish = getattr(choices[0], "finish_reason", None)
    finish = finish if isinstance(finish, str) else None
    usage = getattr(response, "usage", None)
    if usage is None:
        return content, None, finish
    return content, Usage(
        prompt_tokens=getattr(usage, "prompt_tokens", None),
        completion_tokens=getattr(usage, "completion_tokens", None),
    ), finish


def _translate(error: Exception, phase: str, *, retries: int = 0) -> ModelError:
    suffix = f" after {retries} retr{'y' if retries == 1 else 'ies'}" if retries else ""
    return ModelError(
        f"{_describe(error)}{suffix} (phase {phase!r})",
        phase=phase,
        status=getattr(error, "status_code", None),
    )


def _describe(error: Exception) -> str:
    if isinstance(error, openai.APITimeoutError):
        return "request timed out"
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__ or error.__context__
        return f"connection error ({type(cause).__name__ if cause else 'unknown'}: {_short(str(cause or error))})"
    if isinstance(error, openai.APIStatusError):
        return f"HTTP {error.status_code}: {_short(error.message)}"
    return f"{type(error).__name__}: {_short(str(error))}"


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
