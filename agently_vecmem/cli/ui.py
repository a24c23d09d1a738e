"""``agently-vecmem ui STORE``: serve the memory browser (:mod:`agently_vecmem.ui`) on loopback.

Only argparse is imported here; the app, uvicorn and chromadb are imported when the command runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from ..errors import UsageError

__all__ = ["add_ui_parser", "cmd_ui", "TOKEN_ENV"]

logger = logging.getLogger(__name__)

TOKEN_ENV = "AGENTLY_VECMEM_UI_TOKEN"


def add_ui_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``ui`` subcommand to the CLI's subparsers."""
    p = sub.add_parser("ui", help="browse a store in a local web page (records, search, ask, sessions, map)")
    p.add_argument("store", nargs="?", metavar="STORE",
                   help="embedded Chroma directory (omit, or '-', with --host/--port)")
    p.add_argument("--host", default=None, help="Chroma server host (instead of STORE)")
    p.add_argument("--port", type=int, default=8000, help="Chroma server port (default 8000)")
    p.add_argument("--collection", default="vecmem_memory", help=argparse.SUPPRESS)
    p.add_argument("--user", default=None, help="show this user's memory (default: the default user)")
    p.add_argument("--bind", default="127.0.0.1:8765", help="address to serve on (default 127.0.0.1:8765; loopback only "
                   "unless --allow-remote)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--read-only", dest="writable", action="store_false",
                      help="never change the store (the default)")
    mode.add_argument("--writable", dest="writable", action="store_true",
                      help="open the store writable and allow forgetting records from the page")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback --bind (requires an access token)")
    p.add_argument("--token", default=None, help=f"access token for every request (env {TOKEN_ENV})")
    p.add_argument("--model", default=None, help="chat model for the Ask view's plan and rerank (OpenAI-compatible)")
    p.add_argument("--base-url", default=None, help="endpoint of --model (env OPENAI_BASE_URL)")
    p.add_argument("--api-key", default=None, help="API key of --model (env OPENAI_API_KEY)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per model request")
    p.set_defaults(handler=cmd_ui, writable=False)
    return p


def _check_bind(args: argparse.Namespace) -> tuple[str, int, str | None]:
    from ..ui.server import is_loopback, parse_bind

    host, port = parse_bind(args.bind)
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if not is_loopback(host):
        if not args.allow_remote:
            raise UsageError(f"refusing to serve on {host!r}: the memory browser binds to loopback only; pass "
                             "--allow-remote with --token (or "
                             f"{TOKEN_ENV}) to serve beyond this machine")
        if not token:
            raise UsageError(f"--allow-remote needs an access token: pass --token TOKEN or set {TOKEN_ENV}")
        if len(token) < 16:
            raise UsageError("the access token is too short: use at least 16 characters")
    return host, port, token


def cmd_ui(args: argparse.Namespace) -> int:
    """Check the arguments, open the store once (to fail fast with one line), then serve until Ctrl-C."""
    host, port, token = _check_bind(args)
    if args.host:
        if args.store not in (None, "-"):
            raise UsageError("with --host/--port the store is the server: omit STORE (or pass '-')")
    elif not args.store or args.store == "-":
        raise UsageError("pass STORE (an embedded Chroma directory) or --host HOST [--port N]")
    elif not os.path.isfile(os.path.join(args.store, "chroma.sqlite3")):
        raise UsageError(f"no memory store at {args.store!r}; pass the directory of an existing Chroma store")
    from ..embedders import resolve_embedder
    from ..ui import UIConfig, create_app
    from ..ui.server import serve

    model = None
    if args.model or args.base_url:
        from .options import model_from_args

        model = model_from_args(args)
    config = UIConfig(writable=args.writable, token=token, allow_remote=args.allow_remote, model=model)
    app = create_app(args.store, host=args.host, port=args.port, embedder=resolve_embedder(args.embedder),
                     collection=args.collection, config=config, user=args.user)
    app.browser()  # opens the store now: a missing server or a wrong embedder is one line, exit 2
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    print(f"memory browser on {url} ({'writable' if args.writable else 'read-only'}, embedder "
          f"{app.browser().ws.embedder.model_id}); Ctrl-C to stop", file=sys.stderr)
    try:
        serve(app, host, port)
    finally:
        app.close()
    return 0
