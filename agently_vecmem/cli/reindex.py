"""``agently-vecmem reindex STORE --add-space NAME``: give every record of a store a named vector space
(:mod:`..workspace.reindex`): batched, with a progress bar, resumable after a kill, safe while other
processes write.

Only argparse is imported here; chromadb and the workspace are imported when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import UsageError
from .forget import _check_store, _out, _store_args

__all__ = ["add_reindex_parser", "cmd_reindex"]


def add_reindex_parser(sub: Any) -> None:
    """Add the ``reindex`` subcommand to the CLI's subparsers."""
    p = sub.add_parser("reindex", help="add a named vector space (e.g. e5 for Chinese) to an existing store")
    _store_args(p)
    p.add_argument("--add-space", required=True, metavar="NAME",
                   help="the space to add: e5 (multilingual-e5-small) or use (USE multilingual v3)")
    p.add_argument("--batch", type=int, default=256, help="records embedded and written per step (default 256)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(handler=cmd_reindex)


def cmd_reindex(args: argparse.Namespace) -> int:
    """Add the space; prints what was embedded."""
    from ..search.spaces import KNOWN_SPACES
    from ..workspace.reindex import add_space
    from . import _models, _open_store

    _check_store(args)
    if args.add_space not in KNOWN_SPACES:
        raise UsageError(f"unknown vector space {args.add_space!r}; use one of {', '.join(KNOWN_SPACES)}")
    if args.batch < 1:
        raise UsageError("--batch must be a positive integer")
    ws = _open_store(args, read_only=False, spaces=[args.add_space])
    try:
        report = add_space(ws, args.add_space, batch=args.batch,
                           progress=not args.json and not args.no_progress and sys.stderr.isatty())
        models = _models(ws)
    finally:
        ws.close()
    state = "complete" if report.complete else "not complete (records without it are still being written)"
    _out(args, {**report.to_dict(), **models},
         f"space {report.space} ({report.model}): {report.embedded} of {report.records} records embedded in "
         f"{report.seconds:.1f} s; {state}")
    return 0
