"""Keyless test fakes: a deterministic embedder, a loopback OpenAI-compatible server, a scripted model.

Nothing in the package imports this module. Tests use:

* :class:`DeterministicEmbedder` – hashing embedder, stable across processes, no model download.
* :class:`LoopbackOpenAIServer` – a real HTTP server on 127.0.0.1 speaking ``/v1/chat/completions``,
  ``/v1/embeddings`` and ``/v1/models``, so the real ``openai`` client is exercised.
* :class:`ScriptedModel` – an in-process :class:`~agently_vecmem.llm.ChatModel` with the same scripting
  API, for fast unit tests without HTTP.

Both fakes are scripted per *phase* (the ``X-VecMem-Phase`` header, else ``"chat"``)::

    server.script("extract", '{"facts": []}', Fault.status(500), {"facts": [{"text": "x"}]})
    server.on("rerank", lambda body: {"scores": [1.0]})

A reply is a ``str`` (assistant content), a ``dict``/``list`` (JSON-dumped), or a :class:`Fault`.
"""

from __future__ import annotations

import base64
import collections
import json
import logging
import math
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .embedders.base import Embedder
from .embedders.hashing import DeterministicEmbedder
from .errors import ConfigurationError, ConfigurationTypeError, ModelError
from .llm.base import ChatModel, Usage

__all__ = [
    "DeterministicEmbedder",
    "Fault",
    "Reply",
    "Handler",
    "RecordedRequest",
    "ReplyScript",
    "LoopbackOpenAIServer",
    "ScriptedModel",
    "approx_tokens",
    "phase_input",
    "PHASE_HEADER",
]

logger = logging.getLogger(__name__)

PHASE_HEADER = "X-VecMem-Phase"

# -- Replies and faults (shared by the server and the scripted model) ------------------------------------


@dataclass(frozen=True)
class Fault:
    """A scripted misbehaviour. Build with the class methods, e.g. ``Fault.status(429, retry_after=0.2)``."""

    kind: str
    status_code: int = 200
    body: Any = None
    retry_after: float | None = None
    seconds: float = 0.0
    then: Any = None
    n_chars: int = 0

    @classmethod
    def status(cls, code: int, body: Any = None, retry_after: float | None = None) -> Fault:
        """HTTP error ``code`` with an OpenAI-style error body (or ``body``), optional ``Retry-After``."""
        return cls("status", status_code=int(code), body=body, retry_after=retry_after)

    @classmethod
    def delay(cls, seconds: float, then: Reply = "ok") -> Fault:
        """Sleep ``seconds`` before answering with ``then`` (use with a short client timeout)."""
        return cls("delay", seconds=float(seconds), then=then)

    @classmethod
    def malformed(cls) -> Fault:
        """HTTP 200 whose body is not valid JSON."""
        return cls("malformed")

    @classmethod
    def empty(cls) -> Fault:
        """A well-formed reply whose content is ``""``."""
        return cls("empty")

    @classmethod
    def oversized(cls, n_chars: int) -> Fault:
        """A well-formed reply whose content is ``n_chars`` characters of filler."""
        return cls("oversized", n_chars=int(n_chars))

    @classmethod
    def drop(cls) -> Fault:
        """Close the connection without answering."""
        return cls("drop")

    @classmethod
    def truncated(cls, then: Reply = '{"memories": [{"summary": "cut') -> Fault:
        """A reply cut by the output cap: content ``then`` with ``finish_reason="length"``."""
        return cls("length", then=then)

    @classmethod
    def invalid_utf8(cls) -> Fault:
        """HTTP 200 whose body holds bytes that are not UTF-8 (in-process: the client's UnicodeDecodeError)."""
        return cls("invalid_utf8")

    @classmethod
    def raises(cls, error: BaseException) -> Fault:
        """In-process only: :class:`ScriptedModel` raises ``error`` as is (any exception type); the
        loopback server answers HTTP 500."""
        return cls("raises", body=error)


Reply = str | dict | list | Fault
Handler = Callable[[dict], Reply]


def default_handler(body: dict) -> Reply:
    """Reply ``"{}"`` to JSON-mode requests and ``"ok"`` otherwise."""
    fmt = body.get("response_format")
    wants_json = isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema")
    return "{}" if wants_json else "ok"


def reply_content(reply: Reply) -> str | Fault:
    """Turn a reply into assistant content; faults that only change the content are applied here.

    Returns:
        The content string, or the :class:`Fault` for faults the transport must act on
        (``status``, ``delay``, ``malformed``, ``drop``).
    """
    if isinstance(reply, Fault):
        if reply.kind == "length":
            then = reply_content(reply.then)
            if not isinstance(then, str):
                raise ConfigurationTypeError("Fault.truncated(then) needs a str, dict or list reply")
            return reply
        if reply.kind == "empty":
            return ""
        if reply.kind == "oversized":
            return ("lorem ipsum " * (reply.n_chars // 12 + 1))[: reply.n_chars]
        return reply
    if isinstance(reply, str):
        return reply
    if isinstance(reply, (dict, list)):
        return json.dumps(reply)
    raise ConfigurationTypeError(f"a scripted reply must be str, dict, list or Fault, got {type(reply).__name__}")


def approx_tokens(text: str) -> int:
    """A rough token count (~4 characters per token), used for the fakes' ``usage``."""
    return max(1, math.ceil(len(text) / 4)) if text else 0


def phase_input(body: dict[str, Any]) -> dict[str, Any]:
    """The JSON ``[INPUT]`` section of a memory-phase request body (as recorded by
    :class:`LoopbackOpenAIServer`), i.e. exactly what the model was given to work on."""
    text = next(m["content"] for m in body["messages"] if m["role"] == "user")
    start = text.index("[INPUT]:\n") + len("[INPUT]:\n")
    return json.loads(text[start: text.index("\n\n[OUTPUT]:", start)])


def _prompt_text(body: dict) -> str:
    parts = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        parts.append(content if isinstance(content, str) else json.dumps(content))
    return "\n".join(parts)


@dataclass(frozen=True)
class RecordedRequest:
    """One request as received: ``path``, ``phase``, ``headers`` (lower-cased), ``body`` and a
    ``timestamp`` from ``time.monotonic()`` taken on arrival."""

    path: str
    phase: str
    headers: dict[str, str]
    body: Any
    timestamp: float


class ReplyScript:
    """Per-phase reply queues, handlers and a request log; thread-safe.

    The scripting API of both fakes (:class:`LoopbackOpenAIServer` and :class:`ScriptedModel` inherit it),
    so one reply-resolution path serves HTTP and in-process tests alike.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[str, collections.deque[Reply]] = collections.defaultdict(collections.deque)
        self._handlers: dict[str, Handler] = {}
        self._default: Handler = default_handler
        self._requests: list[RecordedRequest] = []

    def script(self, phase: str, *replies: Reply) -> None:
        """Queue ``replies`` for ``phase``; they are consumed first-in first-out, before any handler."""
        for reply in replies:
            reply_content(reply)  # fail fast on a wrong type
        with self._lock:
            self._queues[phase].extend(replies)

    def on(self, phase: str, handler: Handler) -> None:
        """Answer ``phase`` with ``handler(body)`` once its queue is empty."""
        with self._lock:
            self._handlers[phase] = handler

    def set_default(self, handler: Handler) -> None:
        """Handler for phases with neither queued replies nor a handler."""
        with self._lock:
            self._default = handler

    def reset(self) -> None:
        """Forget queued replies, handlers, the custom default handler and recorded requests."""
        with self._lock:
            self._queues.clear()
            self._handlers.clear()
            self._default = default_handler
            self._requests.clear()

    def pending(self, phase: str | None = None) -> int:
        """Number of queued replies not yet consumed (for ``phase``, or all)."""
        with self._lock:
            if phase is not None:
                return len(self._queues.get(phase, ()))
            return sum(len(q) for q in self._queues.values())

    def _pop_scripted(self, phase: str) -> Reply | None:
        """Take the next queued reply for ``phase`` (handlers are not consulted), or ``None``."""
        with self._lock:
            queue = self._queues.get(phase)
            return queue.popleft() if queue else None

    def _next_reply(self, phase: str, body: dict) -> Reply:
        """The queued reply for ``phase``, else its handler's, else the default handler's."""
        with self._lock:
            queue = self._queues.get(phase)
            if queue:
                return queue.popleft()
            handler = self._handlers.get(phase, self._default)
        return handler(body)  # outside the lock: handlers may be slow or script more replies

    def _record_request(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every recorded request, in arrival order."""
        with self._lock:
            return list(self._requests)

    def requests_for(self, phase: str) -> list[RecordedRequest]:
        """Recorded requests whose phase is ``phase``."""
        return [r for r in self.requests if r.phase == phase]

    def chat_bodies(self, phase: str | None = None) -> list[dict]:
        """JSON bodies of the chat requests (optionally for one phase)."""
        return [
            r.body
            for r in self.requests
            if r.path.endswith("chat/completions") and (phase is None or r.phase == phase)
        ]


def _completion_payload(body: dict, content: str, finish_reason: str = "stop") -> dict[str, Any]:
    prompt_tokens = approx_tokens(_prompt_text(body))
    completion_tokens = approx_tokens(content)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model") or "loopback"),
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _error_payload(code: int, message: str | None = None) -> dict[str, Any]:
    kind = (
        "rate_limit_exceeded" if code == 429 else ("server_error" if code >= 500 else "invalid_request_error")
    )
    return {
        "error": {"message": message or f"scripted HTTP {code}", "type": kind, "param": None, "code": kind}
    }


# -- Loopback server -------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the openai client pools connections
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        logger.debug("loopback %s - %s", self.address_string(), format % args)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        owner = self.server.owner
        self._record(None)
        if self.path.rstrip("/") == "/v1/models":
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "loopback"} for m in owner.models]
            self._send_json(200, {"object": "list", "data": data})
        else:
            self._send_json(404, _error_payload(404, f"no route GET {self.path}"))

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            self._record(raw.decode("utf-8", "replace"))
            self._send_json(400, _error_payload(400, "request body is not JSON"))
            return
        request = self._record(body)
        try:
            if self.path.rstrip("/") == "/v1/chat/completions":
                self._chat(request)
            elif self.path.rstrip("/") == "/v1/embeddings":
                self._embeddings(request)
            else:
                self._send_json(404, _error_payload(404, f"no route POST {self.path}"))
        except (BrokenPipeError, ConnectionResetError):
            logger.debug("loopback: client went away during %s", self.path)
            self.close_connection = True

    def _record(self, body: Any) -> RecordedRequest:
        headers = {k.lower(): v for k, v in self.headers.items()}
        default_phase = "embeddings" if self.path.rstrip("/").endswith("/embeddings") else "chat"
        request = RecordedRequest(
            path=self.path,
            phase=headers.get(PHASE_HEADER.lower(), default_phase),
            headers=headers,
            body=body,
            timestamp=time.monotonic(),
        )
        self.server.owner._record_request(request)
        return request

    def _chat(self, request: RecordedRequest) -> None:
        body = request.body if isinstance(request.body, dict) else {}
        if self.server.owner.latency > 0:
            time.sleep(self.server.owner.latency)
        try:
            reply = self.server.owner._next_reply(request.phase, body)
        except Exception as e:  # a broken test handler should show up as a 500, not a hung client
            logger.exception("loopback handler for phase %r failed", request.phase)
            self._send_json(500, _error_payload(500, f"handler error: {e!r}"))
            return
        self._answer(body, reply)

    def _answer(self, body: dict, reply: Reply) -> None:
        content = reply_content(reply)
        if isinstance(content, str) and body.get("stream"):
            self._send_stream(body, content)
        elif isinstance(content, str):
            self._send_json(200, _completion_payload(body, content))
        elif not self._apply_fault(content, body):
            time.sleep(content.seconds)
            self._answer(body, content.then)

    def _apply_fault(self, fault: Fault, body: dict | None = None) -> bool:
        """Act on a transport-level fault; False for ``delay`` (the caller sleeps and answers). ``body``: the
        chat request, for the faults that answer it (``length``, ``invalid_utf8``)."""
        if fault.kind == "length":
            self._send_json(200, _completion_payload(body or {}, str(reply_content(fault.then)), "length"))
        elif fault.kind == "invalid_utf8":
            data = json.dumps(_completion_payload(body or {}, "@@")).encode("utf-8")
            self._send_bytes(200, data.replace(b"@@", b"\xff\xfe{\xc3("), "application/json")
        elif fault.kind == "raises":
            self._send_json(500, _error_payload(500, f"scripted exception {fault.body!r}"))
        elif fault.kind == "status":
            headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
            payload = fault.body if fault.body is not None else _error_payload(fault.status_code)
            self._send_json(fault.status_code, payload, headers)
        elif fault.kind == "malformed":
            self._send_bytes(200, b'{"choices": [{"message": {"content": "trunc', "application/json")
        elif fault.kind == "drop":
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        elif fault.kind == "delay":
            return False
        else:
            raise ConfigurationError(f"unknown fault {fault.kind!r}")
        return True

    def _embeddings(self, request: RecordedRequest) -> None:
        scripted = self.server.owner._pop_scripted(request.phase)
        if scripted is not None:
            if not isinstance(scripted, Fault) or scripted.kind not in ("status", "delay", "malformed", "drop"):
                raise ConfigurationError("only status/delay/malformed/drop faults can be scripted for embeddings")
            if not self._apply_fault(scripted):
                time.sleep(scripted.seconds)
            else:
                return
        body = request.body if isinstance(request.body, dict) else {}
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) for t in inputs):
            self._send_json(400, _error_payload(400, "input must be a string or a non-empty list of strings"))
            return
        vectors = self.server.owner.embedder.embed_documents(inputs)
        as_base64 = body.get("encoding_format") == "base64"
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode()
                if as_base64
                else v.tolist(),
            }
            for i, v in enumerate(vectors)
        ]
        tokens = sum(approx_tokens(t) for t in inputs)
        self._send_json(
            200,
            {
                "object": "list",
                "data": data,
                "model": str(body.get("model") or "loopback"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def _send_stream(self, body: dict, content: str) -> None:
        """A ``stream=True`` request (Agently's default): the reply as server-sent events, one content chunk
        and a finish chunk with the usage, then ``[DONE]``."""
        payload = _completion_payload(body, content)
        base = {k: payload[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
        events = [
            {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": content},
                                  "finish_reason": None}]},
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": payload["usage"]},
        ]
        data = b"".join(b"data: " + json.dumps(e).encode("utf-8") + b"\n\n" for e in events)
        self._send_bytes(200, data + b"data: [DONE]\n\n", "text/event-stream")

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(payload).encode("utf-8"), "application/json", headers)

    def _send_bytes(
        self, status: int, data: bytes, ctype: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: LoopbackOpenAIServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)


class LoopbackOpenAIServer(ReplyScript):
    """A real OpenAI-compatible HTTP server on 127.0.0.1 (random port), scripted per phase.

    Args:
        embedder: Embedder behind ``/v1/embeddings`` (default :class:`DeterministicEmbedder`).
        models: Model ids listed by ``GET /v1/models``.
        latency: Seconds each chat completion sleeps before answering, like a real model (default 0).

    Example:
        >>> with LoopbackOpenAIServer() as server:
        ...     server.script("extract", {"facts": []})
        ...     model = OpenAIChatModel("m", base_url=server.base_url, api_key="x", max_retries=0)
        ...     model.complete([{"role": "user", "content": "json please"}], phase="extract", json_mode=True)
        '{"facts": []}'
    """

    def __init__(
        self, embedder: Embedder | None = None, *, models: Iterable[str] = ("loopback",), latency: float = 0.0
    ) -> None:
        ReplyScript.__init__(self)
        self.embedder = embedder or DeterministicEmbedder()
        #: seconds every chat completion waits before answering (a real model's latency, for benchmarks)
        self.latency = float(latency)
        self.models = list(models)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("server is not running")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` (only while running)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LoopbackOpenAIServer:
        """Bind and serve in a daemon thread; returns ``self``."""
        if self._server is None:
            self._server = _Server(self)
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.01},
                name=f"loopback-openai-{self.port}",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (requests still sleeping in a ``delay`` are abandoned)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> LoopbackOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- Scripted in-process model ---------------------------------------------------------------------------


class ScriptedModel(ReplyScript, ChatModel):
    """An in-process :class:`ChatModel` answering from the same scripts as :class:`LoopbackOpenAIServer`.

    Each call is recorded as a :class:`RecordedRequest` with path ``"chat/completions"`` and an
    OpenAI-shaped body (``model``, ``messages``, ``response_format`` in JSON mode), so handlers work for
    both fakes. Faults map to what :class:`~agently_vecmem.llm.OpenAIChatModel` would raise after its
    retries: ``status``/``malformed``/``drop`` → :class:`ModelError`; ``delay`` longer than ``timeout`` →
    :class:`ModelError` (after sleeping only ``timeout``); ``empty`` → ``"empty reply"`` ModelError;
    ``truncated`` → the content with ``finish_reason="length"``; ``invalid_utf8`` → ``UnicodeDecodeError``;
    ``raises(e)`` → ``e`` as is. ``max_tokens`` is recorded in the request body.

    Args:
        default: Optional default handler (see :meth:`set_default`).
        timeout: Seconds after which a scripted ``delay`` counts as a timeout.
        model_name: Reported in error messages and request bodies.
    """

    def __init__(
        self, default: Handler | None = None, *, timeout: float = 30.0, model_name: str = "scripted"
    ) -> None:
        ChatModel.__init__(self)
        ReplyScript.__init__(self)
        if default is not None:
            self.set_default(default)
        self.timeout = float(timeout)
        self.model_name = model_name

    def _complete(
        self, messages: list[dict[str, Any]], *, phase: str, json_mode: bool, max_tokens: int | None = None
    ) -> tuple[str | None, Usage | None, str]:
        body: dict[str, Any] = {"model": self.model_name, "messages": [dict(m) for m in messages]}
        if json_mode:
            body["response_format"] = {"type": "json_object"}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        self._record_request(
            RecordedRequest("chat/completions", phase, {PHASE_HEADER.lower(): phase}, body, time.monotonic())
        )
        content = reply_content(self._next_reply(phase, body))
        finish = "stop"
        while isinstance(content, Fault):
            if content.kind == "delay":
                if content.seconds > self.timeout:
                    time.sleep(self.timeout)
                    raise ModelError(f"{self.model_name}: request timed out (phase {phase!r})", phase=phase)
                time.sleep(content.seconds)
                content = reply_content(content.then)
            elif content.kind == "length":
                content, finish = reply_content(content.then), "length"
            elif content.kind == "raises":
                raise content.body
            elif content.kind == "invalid_utf8":
                raise UnicodeDecodeError("utf-8", b"\xff\xfe", 0, 1, "invalid start byte")
            elif content.kind == "status":
                raise ModelError(
                    f"{self.model_name}: HTTP {content.status_code} (phase {phase!r})",
                    phase=phase,
                    status=content.status_code,
                )
            else:
                raise ModelError(f"{self.model_name}: {content.kind} response (phase {phase!r})", phase=phase)
        return content, Usage(approx_tokens(_prompt_text(body)), approx_tokens(content)), finish
