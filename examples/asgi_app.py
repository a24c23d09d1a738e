"""A minimal multi-user, multi-worker chat service: every worker process shares one store on a Chroma server,
and every user has their own memory in it.

Run it (three shells)::

    chroma run --path ./chroma-data --host 127.0.0.1 --port 8000
    VECMEM_CHROMA_PORT=8000 OPENAI_BASE_URL=https://api.openai.com/v1 OPENAI_API_KEY=sk-... \\
        uvicorn --app-dir examples asgi_app:app --workers 2 --port 8080
    curl -s localhost:8080/chat -d '{"user": "alice", "conversation": "c1", "message": "I live in Porto."}'

``POST /chat`` with ``{"user": USER, "conversation": ID, "message": TEXT}`` answers ``{"reply": TEXT, "worker":
PID}``. Each worker opens ``ChromaWorkspace(host=..., port=...)`` once; every request binds it to its user
(``workspace.for_user(user)``), so a user's GLOBAL_MEMORY (durable facts about the user) follows them into
every conversation of theirs and never into another user's. A memory written while one worker answers is
used by the next turn any worker answers (read-your-writes across processes). In a real service the user
comes from authentication, never from the request body. Plain ASGI (no web framework): uvicorn comes with
chromadb.

Environment: ``VECMEM_CHROMA_HOST`` (127.0.0.1), ``VECMEM_CHROMA_PORT`` (8000), ``VECMEM_COLLECTION``
(vecmem_memory), ``VECMEM_EMBEDDER`` (auto: ONNX MiniLM if installed, else torch MiniLM; ``hash`` for tests),
``VECMEM_MODEL`` (gpt-4o-mini), ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from typing import Any

from agently_vecmem.embedders import resolve_embedder
from agently_vecmem.errors import ConfigurationError, VecMemError
from agently_vecmem.llm import OpenAIChatModel
from agently_vecmem.session import Session
from agently_vecmem.workspace import ChromaWorkspace

_state: dict[str, Any] = {}
_guard = threading.Lock()


def _setup() -> dict[str, Any]:
    """Open the shared Workspace and the model once per worker process (lazily: after uvicorn forks)."""
    with _guard:
        if not _state:
            _state["workspace"] = ChromaWorkspace(
                host=os.environ.get("VECMEM_CHROMA_HOST", "127.0.0.1"),
                port=int(os.environ.get("VECMEM_CHROMA_PORT", "8000")),
                collection=os.environ.get("VECMEM_COLLECTION", "vecmem_memory"),
                embedder=resolve_embedder(os.environ.get("VECMEM_EMBEDDER", "auto")),
            )
            _state["model"] = OpenAIChatModel(
                model=os.environ.get("VECMEM_MODEL", "gpt-4o-mini"),
                base_url=os.environ.get("OPENAI_BASE_URL"), api_key=os.environ.get("OPENAI_API_KEY"),
            )
            _state["sessions"] = {}
        return _state


def chat(user: str, conversation: str, message: str) -> str:
    """One turn of ``user``'s ``conversation``: retrieve their memories (fresh from every worker's writes), ask
    the model, remember."""
    state = _setup()
    with _guard:
        session = state["sessions"].get((user, conversation))
        if session is None:
            memory = state["workspace"].for_user(user)  # this user's memory only
            session = Session(id=conversation).use_memory(mode="VecMemory", workspace=memory, model=state["model"])
            state["sessions"][(user, conversation)] = session
    return session.chat(message, model=state["model"])


async def _body(receive: Any) -> bytes:
    chunks = []
    while True:
        event = await receive()
        chunks.append(event.get("body", b""))
        if not event.get("more_body"):
            return b"".join(chunks)


async def _send_json(send: Any, status: int, payload: Any) -> None:
    data = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The ASGI entry point (``uvicorn asgi_app:app``)."""
    if scope["type"] == "lifespan":
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/chat":
        await _send_json(send, 404, {"error": "POST /chat with {\"user\": ..., \"conversation\": ..., \"message\": ...}"})
        return
    try:
        request = json.loads(await _body(receive))
        user, conversation, message = str(request["user"]), str(request["conversation"]), str(request["message"])
    except (ValueError, KeyError, TypeError) as e:
        await _send_json(send, 400, {"error": f"bad request: {e}"})
        return
    try:
        # Session.chat blocks (model and Chroma calls): keep the event loop free for other requests.
        reply = await asyncio.to_thread(chat, user, conversation, message)
    except ConfigurationError as e:  # e.g. an empty user id
        await _send_json(send, 400, {"error": str(e)})
        return
    except VecMemError as e:  # e.g. the Chroma server is down: the message says how to start it
        await _send_json(send, 503, {"error": str(e), "worker": os.getpid()})
        return
    await _send_json(send, 200, {"reply": reply, "worker": os.getpid()})
