"""``agently-vecmem``: demo, chat, inspect, export / import, ingest, forget / gc, reindex and eval on a Chroma
memory store.

Exit codes: 0 ok; 2 for anything the user can fix (bad arguments or input files, an unreachable store or
model): one line on stderr saying what is wrong and what to do, no traceback; 1 for an unexpected error
(a bug: its traceback is shown). ``--debug`` (or ``AGENTLY_VECMEM_DEBUG=1``) also shows the traceback of
exit-2 errors. Heavy modules (chromadb, torch, rich, openai) are imported inside the commands so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, NoReturn

from ..embedders import EMBEDDER_CHOICES
from ..errors import UsageError
from .options import model_from_args

__all__ = ["main", "build_parser", "UsageError", "error_line"]

EXIT_OK, EXIT_USAGE = 0, 2
SCOPES = ("GLOBAL_MEMORY", "SESSION_MEMORY")
PROG = "agently-vecmem"
DEBUG_ENV = "AGENTLY_VECMEM_DEBUG"


class _Parser(argparse.ArgumentParser):
    """argparse whose errors go through :func:`main`'s handler (one line, exit 2) instead of usage + exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


# ---------------------------------------------------------------------------------------------- helpers
def _console(args: argparse.Namespace, *, stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _open_workspace(args: argparse.Namespace, *, read_only: bool = False) -> Any:
    """The store the arguments name, bound to ``--user`` when given."""
    ws = _open_store(args, read_only=read_only)
    user = getattr(args, "user", None)
    if user is None:
        return ws
    try:
        return ws.for_user(user)
    except Exception:
        ws.close()
        raise


def _open_store(args: argparse.Namespace, *, read_only: bool, spaces: list[str] | None = None) -> Any:
    from ..embedders import resolve_embedder
    from ..workspace import ChromaWorkspace

    embedder = resolve_embedder(args.embedder)
    collection = getattr(args, "collection", None) or "vecmem_memory"
    if getattr(args, "host", None):
        return ChromaWorkspace(embedder=embedder, host=args.host, port=args.port, collection=collection,
                               read_only=read_only, spaces=spaces)
    path = args.path
    if read_only and not os.path.isdir(path):
        raise UsageError(f"no memory store at {path!r}; pass --path DIR (or --host/--port for a server)")
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{path!r} is a file, not a Chroma directory; pass a directory")
    from ..errors import VecMemError, WorkspaceError

    try:
        return ChromaWorkspace(path, embedder=embedder, collection=collection, read_only=read_only, spaces=spaces)
    except (VecMemError, OSError):
        raise
    except Exception as e:  # chromadb raises its own types (and bare Exception) for an unusable directory
        raise WorkspaceError(
            f"cannot open the Chroma store at {path!r} ({type(e).__name__}: {e}); check the path and its "
            "permissions"
        ) from e


def _models(ws: Any) -> dict[str, Any]:
    """``{"embedder": model id, "spaces": {name: model id}}`` of an open store: what every ``--json`` records."""
    from ..workspace.embedding_models import embedding_models

    return embedding_models(ws)


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")


# ---------------------------------------------------------------------------------------------- commands
def cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    model: Any = None if args.no_model else "env"
    result = run_demo(path=args.path, embedder=args.embedder, model=model, quiet=args.json)
    if args.json:
        _print_json(result.to_dict())
    return EXIT_OK


def cmd_chat(args: argparse.Namespace) -> int:
    from ..session import Session

    model = model_from_args(args)
    ws = _open_workspace(args)
    console = _console(args)
    try:
        session = Session(id=args.session).use_memory(mode="VecMemory", workspace=ws, model=model)
        interactive = sys.stdin.isatty()
        if interactive:
            console.print(f"chat with memory (session {args.session}, store {args.path}); /quit to leave")
        while True:
            if interactive:
                console.print("[bold]you[/bold]> ", end="")
            line = sys.stdin.readline()
            if not line:
                break
            text = line.strip()
            if not text:
                continue
            if text in ("/quit", "/exit"):
                break
            reply = session.chat(text, model=model)
            console.print(f"[bold]assistant[/bold]: {reply}")
            if args.show_memory:
                diag = [d for d in session.memory.diagnostics if d["phase"] == "prepare_request"]
                if diag:
                    pk = diag[-1].get("packages", {})
                    console.print("[dim]memory: " + ", ".join(
                        f"{k} {v.get('selected_count')}/{v.get('candidate_count')}" for k, v in pk.items()) + "[/dim]")
    finally:
        ws.close()
    return EXIT_OK


def _inspect_rows(args: argparse.Namespace, ws: Any) -> list[dict[str, Any]]:
    from ..filters import ALL_SCOPES, Scope

    if args.scope == "SESSION_MEMORY" and not args.session:
        scope = Scope(None, None, "memory", include_inactive=args.all)
        where: dict[str, Any] = {"memory_scope": "SESSION_MEMORY"}
    elif args.scope:
        scope = Scope(args.scope, args.session if args.scope == "SESSION_MEMORY" else None,
                      include_inactive=args.all)
        where = {}
    else:
        scope = ALL_SCOPES if args.all else Scope(None, None, "memory")
        where = {}
    if args.session and args.scope != "SESSION_MEMORY":
        where["session_id"] = args.session
    if args.tag:
        where["tags"] = {"$contains": args.tag}
    if args.query:
        hits = ws.search(args.query, scope=scope, k=args.limit, where=where or None)
        return [{**_row(h.record), "score": round(h.score, 4)} for h in hits]
    records = ws.scan(scope=scope, where=where or None)
    records.sort(key=lambda r: (-r.created_at, r.id))
    return [_row(r) for r in records[: args.limit]]


def _row(record: Any) -> dict[str, Any]:
    from datetime import datetime, timezone

    return {
        "id": record.id, "scope": record.memory_scope, "session_id": record.session_id,
        "tags": list(record.tags), "summary": record.summary, "status": record.status,
        "extracted": record.extracted, "importance": record.importance,
        "plugin": record.provenance.plugin,
        "created_at": datetime.fromtimestamp(record.created_at, tz=timezone.utc).isoformat(timespec="seconds"),
    }


def cmd_inspect(args: argparse.Namespace) -> int:
    ws = _open_workspace(args, read_only=True)
    try:
        rows = _inspect_rows(args, ws)
        count = ws.count()
        users = ws.user_counts()
        models = _models(ws)
    finally:
        ws.close()
    if args.json:
        _print_json({"count": len(rows), "total": count, "user_id": ws.user_id, "users": users, **models,
                     "records": rows})
        return EXIT_OK
    from rich.table import Table

    table = Table(title=f"{len(rows)} of {count} records", expand=True)
    for col, style in (("scope", "cyan"), ("session", "magenta"), ("tags", "green"), ("summary", None),
                       ("status", None), ("id", "dim")):
        table.add_column(col, style=style, ratio=3 if col == "summary" else None,
                         no_wrap=col in ("scope", "id"))
    if args.query:
        table.add_column("score", justify="right")
    for r in rows:
        cells = [r["scope"], r["session_id"] or "", ", ".join(r["tags"]), r["summary"], r["status"], r["id"]]
        if args.query:
            cells.append(f"{r['score']:.3f}")
        table.add_row(*cells)
    console = _console(args)
    console.print(table)
    console.print(f"user {ws.user_id!r}; records per user in the store: "
                  + ", ".join(f"{user} {n}" for user, n in users.items()))
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    ws = _open_workspace(args, read_only=True)
    try:
        n = ws.export_jsonl(args.out, progress=not args.json and sys.stderr.isatty())
        models = _models(ws)
        model = models["embedder"]
    finally:
        ws.close()
    if args.json:
        _print_json({"exported": n, "path": args.out, "embedder_model": model, **models})
    else:
        _console(args).print(f"exported {n} records with {model} vectors to {args.out}")
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    if not os.path.isfile(args.file):
        raise UsageError(f"no such file: {args.file!r}; pass the path of a JSONL file written by `export`")
    ws = _open_workspace(args)
    try:
        n = ws.import_jsonl(args.file, reembed=args.reembed, progress=not args.json and sys.stderr.isatty())
        models = _models(ws)
        model = models["embedder"]
    finally:
        ws.close()
    if args.json:
        _print_json({"imported": n, "path": args.path, "reembedded": args.reembed, "embedder_model": model,
                     **models})
    else:
        _console(args).print(f"imported {n} records into {args.path}" + (f" (re-embedded with {model})"
                                                                          if args.reembed else ""))
    return EXIT_OK


def cmd_ingest(args: argparse.Namespace) -> int:
    from ..ingest import import_history

    if args.host and args.dir != "-":
        raise UsageError("with --host/--port the store is the server: pass '-' as DIR")
    if not args.host and args.dir == "-":
        raise UsageError("DIR '-' means a server: pass --host HOST [--port N]")
    if not os.path.isfile(args.file):
        raise UsageError(f"no such file: {args.file!r}")
    args.path = args.dir
    model = model_from_args(args) if args.model else None
    ws = _open_workspace(args)
    try:
        report = import_history(
            ws, args.file, fmt=args.format, session_id=args.session, model=model, dated=not args.no_dates,
            progress=not args.json and not args.no_progress and sys.stderr.isatty(),
            turns_per_call=args.turns_per_call,
        )
        models = _models(ws)
    finally:
        ws.close()
    if args.json:
        _print_json({**report.to_dict(), **models})
        return EXIT_OK
    console = _console(args)
    console.print(
        f"imported {report.processed} turns of {report.sessions} session(s) from {args.file} ({report.format}) "
        f"into {'the server' if args.host else args.dir}: {report.stored} records, {report.duplicates} exact "
        f"duplicates dropped, {report.resumed} turns already done, {report.turns_per_s:.1f} turns/s "
        f"(embedder {models['embedder']})"
    )
    for problem in report.problems[:50]:
        console.print(f"[yellow]skipped[/yellow] {problem}", markup=True, highlight=False)
    if len(report.problems) > 50:
        console.print(f"... and {len(report.problems) - 50} more skipped (see --json)")
    return EXIT_OK


def cmd_eval_missing(args: argparse.Namespace) -> int:
    detail = getattr(args, "eval_error", None) or "agently_vecmem.eval is missing"
    raise UsageError(f"the eval command is not available in this installation ({detail})")


# ---------------------------------------------------------------------------------------------- parser
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _add_user_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", default=None,
                   help="only this user's memory (default: the default user, the store's single user)")


def _add_store_args(p: argparse.ArgumentParser, *, default_path: str = ".vecmem/chroma", server: bool = True) -> None:
    p.add_argument("--path", default=default_path, help=f"embedded Chroma directory (default {default_path})")
    if server:
        p.add_argument("--host", default=None, help="Chroma server host (instead of --path)")
        p.add_argument("--port", type=int, default=8000, help="Chroma server port (default 8000)")
    p.add_argument("--collection", default="vecmem_memory", help=argparse.SUPPRESS)
    _add_user_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")


def build_parser(*, with_eval: bool = False) -> argparse.ArgumentParser:
    """The argument parser (subcommands demo, chat, inspect, export, import, ingest, eval).

    Args:
        with_eval: build the real ``eval`` subcommand (its module is heavy to import; ``main`` asks for it
            only when the command is ``eval``, so ``--help`` stays fast).
    """
    parser = _Parser(
        prog=PROG,
        description="Long-term vector memory for Agently, on Chroma.",
        epilog="Exit codes: 0 ok; 2 bad input or an unreachable store/model (one line says what to do); "
               f"1 unexpected error. --debug or {DEBUG_ENV}=1 shows tracebacks.",
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    parser.add_argument("--embedder", choices=EMBEDDER_CHOICES, default="auto",
                        help="embedding model (all offline): auto (default: onnx when installed, else minilm), "
                             "minilm (sentence-transformers on torch), onnx (the same MiniLM without torch, "
                             "much faster to start), multilingual (USE multilingual v3), e5 (multilingual-e5-small, "
                             "the better Chinese retriever), hash (tests)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser("demo", help="scripted sessions showing what is remembered and retrieved")
    demo.add_argument("--path", default=".vecmem/demo", help="Chroma directory, recreated each run (default .vecmem/demo)")
    demo.add_argument("--no-model", action="store_true", help="ignore OPENAI_* settings: deterministic path")
    demo.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")
    demo.set_defaults(handler=cmd_demo)

    chat = sub.add_parser("chat", help="interactive chat with memory (reads stdin lines; /quit to leave)")
    chat.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (env OPENAI_BASE_URL)")
    chat.add_argument("--model", default=None, help="model name (env OPENAI_MODEL)")
    chat.add_argument("--api-key", default=None, help="API key (env OPENAI_API_KEY)")
    chat.add_argument("--timeout", type=float, default=None, help="seconds per model request (default 60)")
    chat.add_argument("--session", default="cli", help="session id (default cli)")
    chat.add_argument("--show-memory", action="store_true", help="print how many memories were injected")
    _add_store_args(chat)
    chat.set_defaults(handler=cmd_chat)

    insp = sub.add_parser("inspect", help="list or search the records of a store")
    _add_store_args(insp)
    insp.add_argument("--scope", choices=SCOPES, default=None, help="only this memory scope")
    insp.add_argument("--session", default=None, help="only records of this session id")
    insp.add_argument("--tag", default=None, help="only records carrying this tag")
    insp.add_argument("--query", default=None, help="semantic search (best first) within the selection")
    insp.add_argument("--all", action="store_true", help="include superseded and deleted records")
    insp.add_argument("--limit", type=_positive_int, default=50, help="at most this many records (default 50)")
    insp.set_defaults(handler=cmd_inspect)

    exp = sub.add_parser("export", help="write every record with its vector to a JSONL file")
    exp.add_argument("path", help="embedded Chroma directory")
    exp.add_argument("out", help="output .jsonl file")
    _add_user_arg(exp)
    exp.add_argument("--json", action="store_true", help="machine-readable output")
    exp.set_defaults(handler=cmd_export)

    imp = sub.add_parser("import", help="load a JSONL export into a store")
    imp.add_argument("path", help="embedded Chroma directory (created when missing)")
    imp.add_argument("file", help="input .jsonl file")
    imp.add_argument("--reembed", action="store_true", help="embed again with --embedder (another model's file)")
    _add_user_arg(imp)
    imp.add_argument("--json", action="store_true", help="machine-readable output")
    imp.set_defaults(handler=cmd_import)

    ing = sub.add_parser("ingest", help="import a chat history (session export, JSONL messages, LoCoMo) as memories")
    ing.add_argument("dir", metavar="DIR", help="embedded Chroma directory (created when missing); '-' with --host")
    ing.add_argument("file", metavar="FILE",
                     help="history: an Agently session export (.json/.yaml), a .jsonl of {role, content, time?, "
                          "session_id?} messages, or a LoCoMo-shaped .json")
    ing.add_argument("--format", choices=("auto", "jsonl", "json", "yaml", "locomo"), default="auto",
                     help="history format (default: by extension and content)")
    ing.add_argument("--session", default=None, help="session id of messages that name none (default: file name)")
    ing.add_argument("--no-dates", action="store_true", help="ignore the history's times (turns dated now)")
    ing.add_argument("--turns-per-call", type=int, default=1,
                     help="batch N consecutive turns into one plugin call (with --model: one extraction call "
                          "per N turns)")
    ing.add_argument("--model", default=None,
                     help="extract + consolidate with this chat model (OpenAI-compatible); default: raw turns")
    ing.add_argument("--base-url", default=None, help="endpoint of --model (env OPENAI_BASE_URL)")
    ing.add_argument("--api-key", default=None, help="API key of --model (env OPENAI_API_KEY)")
    ing.add_argument("--timeout", type=float, default=60.0, help="seconds per model request")
    ing.add_argument("--host", default=None, help="Chroma server host (instead of DIR)")
    ing.add_argument("--port", type=int, default=8000, help="Chroma server port (default 8000)")
    ing.add_argument("--collection", default="vecmem_memory", help=argparse.SUPPRESS)
    _add_user_arg(ing)
    ing.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    ing.add_argument("--json", action="store_true", help="machine-readable output")
    ing.set_defaults(handler=cmd_ingest)

    import importlib.util

    if importlib.util.find_spec("agently_vecmem.eval") is None:
        ev = sub.add_parser("eval", help="retrieval evaluation (not installed)")
        ev.set_defaults(handler=cmd_eval_missing)
    elif with_eval:
        try:
            from .eval import add_eval_parser
        except ImportError as e:
            ev = sub.add_parser("eval", help="retrieval evaluation (unavailable)")
            ev.set_defaults(handler=cmd_eval_missing, eval_error=str(e))
        else:
            add_eval_parser(sub)
    else:
        sub.add_parser("eval", help="evaluate retrieval quality (agently-vecmem eval --help)", add_help=False)
    importlib.import_module(".ui", __package__).add_ui_parser(sub)
    importlib.import_module(".forget", __package__).add_forget_parsers(sub)
    importlib.import_module(".reindex", __package__).add_reindex_parser(sub)
    return parser


_HINTS = (  # (error class name, what to do), first match wins; the message itself comes first
    ("UsageError", ""),
    ("DataFileError", "check the file path and its contents"),
    ("EmbedderMismatchError", ""),
    ("WorkspaceLockedError", ""),
    ("RecordValidationError", "check the input data"),
    ("WorkspaceError", "check --path (or --host/--port) and that the store is reachable"),
    ("ModelError", "check --base-url/--model/--api-key (or OPENAI_BASE_URL/OPENAI_MODEL/OPENAI_API_KEY) "
                   "and that the endpoint is up"),
    ("ConfigurationError", f"see `{PROG} --help`"),
)


#: A message containing one of these already says what to do (no generic hint appended).
_ADVICE = ("`", "pass ", "use ", "Start ", "start ", "check ", "set ", "--")


def error_line(error: BaseException) -> str:
    """The one line the CLI prints for an error it expects: what is wrong, then what to do."""
    if isinstance(error, OSError) and error.strerror:
        where = error.filename if error.filename is not None else ""
        text = f"{error.strerror}: {where!r}" if where else error.strerror
        hint = "check the path and its permissions"
    else:
        text = str(error) or type(error).__name__
        names = {cls.__name__ for cls in type(error).__mro__}
        hint = next((h for name, h in _HINTS if name in names), "")
        if isinstance(error, json.JSONDecodeError):
            hint = "the file is not valid JSON"
    text = "; ".join(part.strip() for part in text.splitlines() if part.strip())
    if hint and not any(says_what_to_do in text for says_what_to_do in _ADVICE):
        text = f"{text} ({hint})"
    return f"{PROG}: error: {text}"


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code.

    Every error the user can fix (a :class:`~agently_vecmem.errors.VecMemError`, an ``OSError``, a JSON
    decode error) becomes one line on stderr and exit status 2; ``--debug`` or ``AGENTLY_VECMEM_DEBUG=1``
    prints the traceback first. Anything else is a bug and propagates with its traceback (exit 1).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]  # accepted anywhere on the line
    from ..errors import VecMemError

    try:
        parser = build_parser(with_eval="eval" in argv)
        args = parser.parse_args(argv)
        if getattr(args, "handler", None) is None:
            parser.print_help()
            return EXIT_USAGE
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except (VecMemError, OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        if debug:
            import traceback

            traceback.print_exc()
        print(error_line(e), file=sys.stderr)
        return EXIT_USAGE
