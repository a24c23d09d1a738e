"""The memory browser as a plain ASGI application (served by uvicorn; no web framework needed).

Routes: ``GET /`` (records, or search results with ``q``), ``/record/{id}``, ``/ask``, ``/sessions``,
``/sessions/{id}``, ``/map``, ``/static/*``; the JSON API under ``/api/`` (``info``, ``records``,
``record/{id}``, ``search``, ``ask``, ``sessions``, ``sessions/{id}``, ``facets``, ``map``, and
``POST /api/forget``).

Security: requests must name a loopback ``Host`` unless remote access was allowed (a DNS-rebinding guard);
with an access token every request must carry it (``Authorization: Bearer``, or the cookie set by
visiting ``/?token=...``); state-changing requests are POSTs with the page's CSRF token in
``X-CSRF-Token``. Responses forbid inline scripts (Content-Security-Policy), so an escaping mistake could
not run code either. Errors become a readable page or ``{"error": ...}`` JSON, never a traceback.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import secrets
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode

from ..errors import (
    ConfigurationError,
    HttpError,
    RecordNotFoundError,
    ScopeError,
    VecMemError,
    WorkspaceError,
)
from ..workspace.chroma import ChromaWorkspace
from . import pages
from .ask import ask_trace
from .store import Browser, RecordFilter, record_json

__all__ = ["UIConfig", "MemoryBrowserApp", "HttpError", "LOOPBACK_HOSTS"]

logger = logging.getLogger(__name__)

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
TOKEN_COOKIE = "vecmem_ui_token"
MAX_BODY = 64 * 1024
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
_STATIC = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class UIConfig:
    """How the browser may be used.

    Attributes:
        writable: allow forgetting records (the store must be opened writable too).
        token: an access token every request must carry (required for remote access).
        allow_remote: accept any ``Host`` header (served beyond loopback).
        csrf: the token state-changing requests must send (random per process).
        model: a chat model for the Ask view (None: deterministic).
        ask_settings: ``session.memory.VecMemory`` settings the Ask view uses.
    """

    writable: bool = False
    token: str | None = None
    allow_remote: bool = False
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    model: Any = None
    ask_settings: dict[str, Any] | None = None


@dataclass
class _Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes = b""

    @property
    def is_api(self) -> bool:
        return self.path.startswith("/api/")


def _cookies(header: str) -> dict[str, str]:
    out = {}
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name:
            out[name] = value
    return out


def _host_name(host_header: str) -> str:
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class MemoryBrowserApp:
    """The ASGI app over one store.

    Args:
        open_store: opens the store (called again after a failure, so a store that comes up later works).
        label: where the store is (shown in the header).
        config: access and behaviour (:class:`UIConfig`).

    Example:
        >>> app = MemoryBrowserApp(lambda: ChromaWorkspace(path, read_only=True), label=path)  # doctest: +SKIP
        >>> uvicorn.run(app, host="127.0.0.1", port=8765)                                    # doctest: +SKIP
    """

    def __init__(self, open_store: Callable[[], ChromaWorkspace], *, label: str, config: UIConfig | None = None) -> None:
        self._open_store = open_store
        self.label = label
        self.config = config or UIConfig()
        self._browser: Browser | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ store
    def browser(self) -> Browser:
        """The read model, opening the store on first use (or again after it failed to open)."""
        with self._lock:
            if self._browser is None:
                try:
                    ws = self._open_store()
                except VecMemError:
                    raise
                except Exception as e:  # chromadb raises its own types for an unusable store
                    raise WorkspaceError(f"cannot open the memory store at {self.label} ({type(e).__name__}: {e})") from e
                self._browser = Browser(ws, self.config.model)
            return self._browser

    def close(self) -> None:
        """Close the store (if it was opened)."""
        with self._lock:
            if self._browser is not None:
                self._browser.ws.close()
                self._browser = None

    @property
    def writable(self) -> bool:
        return self.config.writable

    # ------------------------------------------------------------------ ASGI
    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await asyncio.to_thread(self.close)
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        request = _Request(scope["method"], scope["path"],
                           dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)),
                           headers)
        try:
            extra = self._check_access(request)
            if extra is not None:
                await self._send(send, *extra)
                return
            if request.method == "POST":
                request.body = await self._read_body(receive)
            status, ctype, body, more = await asyncio.to_thread(self._dispatch, request)
        except Exception as e:  # noqa: BLE001 - every failure becomes a readable response
            status, text = self._classify(e)
            if request.is_api:
                ctype, body, more = "application/json", json.dumps({"error": text, "status": status}), {}
            else:
                ctype, body, more = "text/html; charset=utf-8", pages.error_page(status, text), {}
        await self._send(send, status, ctype, body, more)

    async def _read_body(self, receive: Receive) -> bytes:
        chunks, size = [], 0
        while True:
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY:
                raise HttpError(413, "request body too large")
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)

    async def _send(self, send: Send, status: int, ctype: str, body: str | bytes, more: dict[str, str]) -> None:
        data = body.encode("utf-8") if isinstance(body, str) else body
        headers = [
            (b"content-type", ctype.encode()), (b"content-length", str(len(data)).encode()),
            (b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY"), (b"cache-control", b"no-store"),
        ]
        headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in more.items()]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    @staticmethod
    def _classify(e: BaseException) -> tuple[int, str]:
        if isinstance(e, HttpError):
            return e.status, str(e)
        if isinstance(e, RecordNotFoundError):
            return 404, e.args[0] if e.args and isinstance(e.args[0], str) else str(e)
        if isinstance(e, (ConfigurationError, ScopeError)):
            return 400, str(e)
        if isinstance(e, WorkspaceError):
            return 503, f"{e} — check that the store exists and the Chroma server is running, then reload."
        if isinstance(e, VecMemError):
            return 500, f"{type(e).__name__}: {e}"
        logger.exception("unexpected error in the memory browser")
        return 500, f"unexpected error ({type(e).__name__}); see the server log"

    # ------------------------------------------------------------------ access control
    def _check_access(self, request: _Request) -> tuple[int, str, str, dict[str, str]] | None:
        """A response refusing the request, a redirect that stores the token, or None to go on."""
        if not self.config.allow_remote and _host_name(request.headers.get("host", "")) not in LOOPBACK_HOSTS:
            raise HttpError(403, "this browser only answers requests for a loopback host name")
        token = self.config.token
        if token:
            offered = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            offered = offered or _cookies(request.headers.get("cookie", "")).get(TOKEN_COOKIE, "")
            from_query = request.query.get("token", "")
            if from_query and hmac.compare_digest(from_query.encode(), token.encode()) and request.method == "GET":
                rest = {k: v for k, v in request.query.items() if k != "token"}
                location = request.path + ("?" + urlencode(rest) if rest else "")
                return 303, "text/plain", "", {
                    "location": location,
                    "set-cookie": f"{TOKEN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"}
            if not offered or not hmac.compare_digest(offered.encode(), token.encode()):
                raise HttpError(401, "an access token is required: open the URL printed at start-up (…/?token=…)")
        if request.method == "POST":
            sent = request.headers.get("x-csrf-token", "")
            if not sent or not hmac.compare_digest(sent.encode(), self.config.csrf.encode()):
                raise HttpError(403, "missing or wrong CSRF token; reload the page and try again")
            origin = request.headers.get("origin")
            if origin and origin.split("://", 1)[-1] != request.headers.get("host", ""):
                raise HttpError(403, "cross-origin request refused")
        elif request.method not in ("GET", "HEAD"):
            raise HttpError(405, f"method {request.method} not allowed")
        return None

    # ------------------------------------------------------------------ routing
    def _dispatch(self, request: _Request) -> tuple[int, str, str | bytes, dict[str, str]]:
        path = request.path
        if path.startswith("/static/"):
            return self._static(path.removeprefix("/static/"))
        if path == "/favicon.ico":
            return 204, "text/plain", "", {}
        if request.is_api:
            return 200, "application/json", json.dumps(self._api(request), ensure_ascii=False, default=str), {}
        if request.method != "GET":
            raise HttpError(405, "use GET for pages")
        title, active, body = self._page(request)
        info = self._info()
        html = pages.layout(title, body, active=active, info=info, csrf=self.config.csrf, writable=self.writable)
        return 200, "text/html; charset=utf-8", html, {}

    @staticmethod
    def _static(name: str) -> tuple[int, str, bytes, dict[str, str]]:
        if name not in _STATIC:
            raise HttpError(404, f"no static file {name!r}")
        data = resources.files("agently_vecmem.ui").joinpath("static", name).read_bytes()
        return 200, _STATIC[name], data, {}

    def _info(self) -> dict[str, Any]:
        browser = self.browser()
        info = browser.ws.info()
        info["where"] = self.label
        info["writable"] = self.writable
        info["model"] = getattr(self.config.model, "model_name", None) if self.config.model is not None else None
        return info

    @staticmethod
    def _int(query: dict[str, str], name: str, default: int) -> int:
        text = query.get(name) or ""
        if not text:
            return default
        try:
            return int(text)
        except ValueError:
            raise HttpError(400, f"{name} must be an integer, got {text!r}") from None

    def _page(self, request: _Request) -> tuple[str, str, str]:
        q, path, b = request.query, request.path, self.browser()
        if path == "/":
            if q.get("q", "").strip():
                result = self._search(q)
                return "Search", "/", pages.search_page(result, q, writable=self.writable)
            page = b.page(RecordFilter.from_query(q), offset=self._int(q, "offset", 0), limit=self._int(q, "limit", 50))
            return "Records", "/", pages.records_page(page, q, writable=self.writable)
        if path.startswith("/record/"):
            record = b.record(unquote(path.removeprefix("/record/")))
            return "Record", "/", pages.record_page(record, b.chain(record), writable=self.writable)
        if path == "/sessions":
            return "Sessions", "/sessions", pages.sessions_page(b.facets())
        if path.startswith("/sessions/"):
            sid = unquote(path.removeprefix("/sessions/"))
            return f"Session {sid}", "/sessions", pages.session_page(b.session(sid))
        if path == "/ask":
            return "Ask", "/ask", pages.ask_page(q, has_model=self.config.model is not None)
        if path == "/map":
            return "Map", "/map", pages.map_page(q)
        raise HttpError(404, f"no page at {path}")

    def _search(self, q: dict[str, str]) -> dict[str, Any]:
        b = self.browser()
        scope = b.scope_of(q.get("scope") or None, q.get("session") or None)
        if scope.session_id and not b.session_exists(scope.session_id):
            raise RecordNotFoundError(f"unknown session {scope.session_id!r}")
        tags = [t.strip() for t in q.get("tag", "").split(",") if t.strip()]
        return b.search(q["q"], scope, k=self._int(q, "k", 20), tags=tags)

    def _api(self, request: _Request) -> Any:
        q, path, b = request.query, request.path.removeprefix("/api"), self.browser()
        if request.method == "POST":
            if path != "/forget":
                raise HttpError(404, f"no POST endpoint at /api{path}")
            return self._forget(request)
        if path == "/info":
            return self._info()
        if path == "/records":
            page = b.page(RecordFilter.from_query(q), offset=self._int(q, "offset", 0), limit=self._int(q, "limit", 50))
            return {"total": page.total, "offset": page.offset, "limit": page.limit,
                    "records": [record_json(r) for r in page.records]}
        if path.startswith("/record/"):
            record = b.record(unquote(path.removeprefix("/record/")))
            return {"record": record_json(record), "chain": [record_json(r) for r in b.chain(record)]}
        if path == "/search":
            if not q.get("q", "").strip():
                raise HttpError(400, "pass q=... to search")
            return self._search(q)
        if path == "/facets" or path == "/sessions":
            return b.facets()
        if path.startswith("/sessions/"):
            return b.session(unquote(path.removeprefix("/sessions/")))
        if path == "/ask":
            question = q.get("q", "").strip()
            if not question:
                raise HttpError(400, "type a question")
            sid = q.get("session", "").strip()
            if sid and not b.session_exists(sid):
                raise RecordNotFoundError(f"unknown session {sid!r}")
            return ask_trace(b.ws, question, sid or f"ui-ask-{secrets.token_hex(4)}", model=self.config.model,
                             settings=self.config.ask_settings)
        if path == "/map":
            scope = b.scope_of(q.get("scope") or None, q.get("session") or None)
            if scope.session_id and not b.session_exists(scope.session_id):
                raise RecordNotFoundError(f"unknown session {scope.session_id!r}")
            return b.projection(scope, color_by=q.get("color") or "session")
        raise HttpError(404, f"no API endpoint at /api{path}")

    def _forget(self, request: _Request) -> dict[str, Any]:
        if not self.writable:
            raise HttpError(403, "this browser is read-only; restart it with --writable to forget records")
        try:
            data = json.loads(request.body or b"{}")
        except (ValueError, UnicodeDecodeError):
            raise HttpError(400, "the body must be JSON: {\"ids\": [...]}") from None
        ids = data.get("ids") if isinstance(data, dict) else None
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids) or len(ids) > 1000:
            raise HttpError(400, "ids must be a non-empty list of record ids (at most 1000)")
        n = self.browser().forget(ids)
        logger.info("forgot %d of %d records from the memory browser", n, len(ids))
        return {"forgotten": n, "ids": ids}
