"""``agently-vecmem forget`` and ``agently-vecmem gc``: erasure from the command line (:mod:`..workspace.erasure`).

``forget STORE (--id ID ... | --session ID | --all)`` shows what it will erase (counts) and asks for
confirmation unless ``--yes``; without a terminal it acts only with ``--yes``. ``forget STORE --audit-export
FILE`` writes the erasure audit as JSON lines. ``gc STORE`` applies retention and completes interrupted
forgets; ``gc --server-path DIR`` cleans a ``chroma run`` server's files on its host.

Only argparse is imported here; chromadb and the workspace are imported when a command runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..errors import UsageError

__all__ = ["add_forget_parsers", "cmd_forget", "cmd_gc"]


def _store_args(p: argparse.ArgumentParser, *, optional: bool = False) -> None:
    p.add_argument("store", nargs="?" if optional else None, metavar="STORE",
                   help="embedded Chroma directory; '-' with --host/--port for a server")
    p.add_argument("--host", default=None, help="Chroma server host (STORE is then '-')")
    p.add_argument("--port", type=int, default=8000, help="Chroma server port (default 8000)")
    p.add_argument("--collection", default="vecmem_memory", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="machine-readable output")


def add_forget_parsers(sub: Any) -> None:
    """Add the ``forget`` and ``gc`` subcommands to the CLI's subparsers."""
    p = sub.add_parser("forget", help="erase records for good (by id, session or all of a user); audit export")
    _store_args(p)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--id", dest="ids", action="append", default=None, metavar="ID",
                      help="a record id (repeatable); the record's older versions go with it")
    what.add_argument("--session", default=None, help="every record of this session")
    what.add_argument("--all", action="store_true", help="every record of the user")
    what.add_argument("--audit-export", default=None, metavar="FILE",
                      help="write the erasure audit (ids, counts, times; no content) as JSON lines and exit")
    p.add_argument("--all-users", action="store_true", help="with --audit-export: every user's entries")
    p.add_argument("--user", default=None, help="the user whose records to erase (default: the default user)")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation (required without a terminal)")
    p.set_defaults(handler=cmd_forget)

    g = sub.add_parser("gc", help="apply retention, complete interrupted forgets, clean a server's files")
    _store_args(g, optional=True)
    g.add_argument("--user", default=None, help="only this user (default: every user of the store)")
    g.add_argument("--session-memory-days", type=float, default=None, metavar="N",
                   help="erase SESSION_MEMORY records written more than N days ago")
    g.add_argument("--raw-turn-days", type=float, default=None, metavar="N",
                   help="erase raw turns written more than N days ago")
    g.add_argument("--settings", default=None, metavar="FILE",
                   help="a JSON or YAML file of VecMemory settings: its retention.session_memory_days and "
                        "retention.raw_turn_days apply (the two options above override them)")
    g.add_argument("--server-path", default=None, metavar="DIR",
                   help="the --path directory of a `chroma run` server, on its host: purge the write-ahead log "
                        "rows of every erased id and vacuum (safe while the server runs)")
    g.add_argument("--server-stopped", action="store_true",
                   help="with --server-path: the server is stopped, so also zero the unused capacity of its "
                        "vector index files (never while it runs)")
    g.set_defaults(handler=cmd_gc)


def _check_store(args: argparse.Namespace) -> None:
    if args.host:
        if args.store not in (None, "-"):
            raise UsageError("with --host/--port the store is the server: pass '-' as STORE")
    elif not args.store or args.store == "-":
        raise UsageError("pass STORE (an embedded Chroma directory) or '-' with --host HOST [--port N]")
    elif not os.path.isfile(os.path.join(args.store, "chroma.sqlite3")):
        raise UsageError(f"no memory store at {args.store!r}; pass the directory of an existing Chroma store")
    args.path = args.store


def _out(args: argparse.Namespace, data: dict[str, Any], line: str) -> None:
    if args.json:
        sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
    else:
        print(line)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in sorted(counts.items())) or "nothing"


def cmd_forget(args: argparse.Namespace) -> int:
    """Erase records (after confirmation) or export the audit."""
    from . import _models, _open_workspace

    _check_store(args)
    if args.audit_export:
        return _export_audit(args)
    if not (args.ids or args.session is not None or args.all):
        raise UsageError("say what to forget: --id ID (repeatable), --session ID or --all")
    interactive = sys.stdin.isatty()
    if not args.yes and not interactive:
        raise UsageError("refusing to erase without confirmation: stdin is not a terminal; pass --yes")
    ws = _open_workspace(args)
    try:
        what = {"ids": args.ids, "session": args.session, "everything": args.all}
        plan = ws.forget(**what, dry_run=True)
        where = "the server" if args.host else args.store
        if not args.yes:
            print(f"will erase {plan.erased} records of user {ws.user_id!r} from {where}: {_counts(plan.counts)}")
            if plan.erased == 0:
                return 0
            sys.stdout.write("erase them for good? [y/N] ")
            sys.stdout.flush()
            if sys.stdin.readline().strip().lower() not in ("y", "yes"):
                print("nothing erased")
                return 0
        report = ws.forget(**what)
        models = _models(ws)
    finally:
        ws.close()
    note = "" if report.files_erased or not report.erased else (
        "; the server's files still hold them until `agently-vecmem gc --server-path DIR` runs on its host")
    _out(args, {**report.model_dump(mode="json"), **models},
         f"erased {report.erased} records of user {report.user_id!r}: {_counts(report.counts)}"
         + (f" (+{report.resumed} of an interrupted forget)" if report.resumed else "") + note)
    return 0


def _export_audit(args: argparse.Namespace) -> int:
    from . import _models, _open_workspace

    ws = _open_workspace(args, read_only=True)
    try:
        entries = ws.erasure_audit(all_users=args.all_users)
        models = _models(ws)
    finally:
        ws.close()
    with open(args.audit_export, "w", encoding="utf-8") as f:
        for entry in entries:
            f.write(json.dumps(entry.model_dump(mode="json"), ensure_ascii=False) + "\n")
    _out(args, {"entries": len(entries), "path": args.audit_export, **models},
         f"wrote {len(entries)} erasure audit entries to {args.audit_export}")
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    """Retention and completion of interrupted forgets on a store; file purge of a server's directory."""
    if args.store is None and not args.host and not args.server_path:
        raise UsageError("pass STORE, '-' with --host HOST [--port N], or --server-path DIR")
    from ..workspace.embedding_models import NO_MODELS

    result: dict[str, Any] = dict(NO_MODELS)  # gc --server-path alone opens no store: no model runs
    lines = []
    if args.store is not None or args.host:
        result["retention"], models = _gc_store(args)
        result.update(models)
        lines.append(f"retention and interrupted forgets: erased {sum(result['retention'].values())} records "
                     f"({', '.join(f'{u} {n}' for u, n in result['retention'].items()) or 'no users'})")
    if args.server_path:
        from ..workspace.erasure import purge_store_files

        if not os.path.isdir(args.server_path):
            raise UsageError(f"no directory {args.server_path!r}; pass the --path directory of the Chroma server")
        report = purge_store_files(args.server_path, collection=args.collection, scrub_index=args.server_stopped)
        result["server_path"] = report.model_dump(mode="json")
        lines.append(f"purged {report.log_rows_purged} log rows of {report.ids} erased ids from "
                     f"{args.server_path} and vacuumed it"
                     + (f"; zeroed {report.index_bytes_zeroed} unused index bytes" if args.server_stopped else
                        " (run it again with --server-stopped while the server is stopped to clean its index "
                        "files too)"))
    _out(args, result, "\n".join(lines))
    return 0


def _retention(args: argparse.Namespace) -> tuple[float | None, float | None]:
    """Retention days from ``--settings`` (validated as VecMemory settings), overridden by the options."""
    session_days, raw_days = args.session_memory_days, args.raw_turn_days
    if args.settings:
        import yaml

        from ..errors import DataFileError
        from ..memory.config import resolve_settings

        try:
            with open(args.settings, encoding="utf-8") as f:
                data = yaml.safe_load(f)
        except (OSError, yaml.YAMLError) as e:
            raise DataFileError(f"cannot read the settings file {args.settings!r}: {e}") from e
        retention = resolve_settings({"session": {"memory": {"VecMemory": data or {}}}}).retention
        session_days = retention.session_memory_days if session_days is None else session_days
        raw_days = retention.raw_turn_days if raw_days is None else raw_days
    return session_days, raw_days


def _gc_store(args: argparse.Namespace) -> tuple[dict[str, int], dict[str, Any]]:
    """Retention and interrupted forgets of every user (or ``--user``): records erased per user, and the
    store's :func:`~agently_vecmem.workspace.embedding_models.embedding_models`."""
    from . import _models, _open_store

    _check_store(args)
    session_days, raw_days = _retention(args)
    ws = _open_store(args, read_only=False)
    try:
        users = [args.user] if args.user else sorted(
            set(ws.user_counts()) | {e.user_id for e in ws.erasure_audit(all_users=True) if e.state == "started"})
        erased: dict[str, int] = {}
        for user in users:
            bound = ws.for_user(user)
            n = bound.forget(ids=[]).resumed
            if session_days is not None or raw_days is not None:
                n += bound.apply_retention(session_memory_days=session_days, raw_turn_days=raw_days).erased
            erased[user] = n
        if ws.mode == "embedded":
            from ..workspace.erasure import purge_store_files

            purge_store_files(ws.path, collection=ws.collection_name, scrub_index=True)  # our store: no other writer
        return erased, _models(ws)
    finally:
        ws.close()
