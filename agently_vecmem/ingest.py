"""Import an existing chat history into a memory store, through the plugin's own remembering path.

:func:`import_history` reads

- an Agently session export (JSON or YAML, what :meth:`Session.get_json_session` /
  :meth:`Session.get_yaml_session` write; a message may carry ``time``),
- a JSONL file of messages ``{"role", "content", "time"?, "session_id"?}`` (one per line),
- a LoCoMo-shaped file (``locomo10.json`` schema: speaker A is the user, speaker B the assistant, each
  session's ``session_N_date_time`` is the time of its turns),

pairs each user message with the assistant reply that follows it, and hands the pairs to the plugin with
each turn's time. With a model every pair goes through :meth:`VecMemory.after_turn_sync` and is extracted
and consolidated like a live turn. Without one each pair is kept as a raw turn, and the turns go
``checkpoint_every`` at a time through :meth:`VecMemory.after_turns_sync`: the same records as turn by turn
(exact duplicates of the store or of an earlier turn dropped), embedded in one batch and written in one put
(``batched=False``: turn by turn, as with a model). ``turns_per_call=N`` batches N consecutive turns of a
session into one call (their transcript, the first turn's time): one extraction request per N turns.

**Bad input** is reported, never fatal for the rest: a JSONL line that is not JSON or not a valid message is
skipped and listed with its line number in :attr:`ImportReport.problems` (a session export's or LoCoMo
file's bad message with its position). Only a file that cannot be read as a whole raises
:class:`~agently_vecmem.errors.HistoryImportError`.

**Resumable.** Progress is a record in the workspace itself (``collection="vecmem_import"``, invisible to
memory reads), one per session: how many of the session's turns are done and a digest of them. A second run
of the same history skips the done turns (the digest must match; a changed history is imported again from
its start). Without a model, each batch's progress records are written in the same put as its turns, and a
put is all-or-nothing: an interrupted import (an exception, SIGKILL), run again, neither repeats nor loses a
turn. With a model (or ``batched=False``) progress is saved after every turn when a model is used or a
session has undated turns (they are dated at import time, so a re-run would not repeat them exactly);
otherwise every ``checkpoint_every`` turns, and the turns re-run after an interruption are exact duplicates
(same text, same date), which the plugin drops. So an interrupted import, run again, adds nothing twice.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import HistoryImportError
from .history import HistoryFormat, HistoryMessage, HistoryTurn, Problem, pair_turns, read_history
from .records import MemoryRecord, Provenance

__all__ = [
    "HistoryFormat",
    "HistoryMessage",
    "HistoryTurn",
    "Problem",
    "ImportReport",
    "read_history",
    "pair_turns",
    "import_history",
    "PROGRESS_COLLECTION",
]

logger = logging.getLogger(__name__)

#: Record collection of the import progress records (memory reads use ``collection="memory"``).
PROGRESS_COLLECTION = "vecmem_import"


@dataclass(frozen=True)
class ImportReport:
    """What :func:`import_history` did.

    Attributes:
        source: the file.
        format: the format it was read as.
        sessions: sessions in the history.
        turns: user/assistant turns in the history.
        processed: turns handed to the plugin in this run.
        resumed: turns skipped because an earlier run had done them.
        stored: active records written by this run.
        duplicates: turns (or extracted memories) dropped as exact duplicates.
        degraded: turns whose model stages degraded (raw turn kept, consolidation failed, ...).
        problems: skipped input, each with its line number or position.
        seconds: wall time of the import (reading included).
    """

    source: str
    format: str
    sessions: int
    turns: int
    processed: int
    resumed: int
    stored: int
    duplicates: int
    degraded: int
    problems: tuple[Problem, ...]
    seconds: float

    @property
    def turns_per_s(self) -> float:
        return self.processed / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source, "format": self.format, "sessions": self.sessions, "turns": self.turns,
            "processed": self.processed, "resumed": self.resumed, "stored": self.stored,
            "duplicates": self.duplicates, "degraded": self.degraded,
            "problems": [{"where": p.where, "error": p.error} for p in self.problems],
            "seconds": round(self.seconds, 3), "turns_per_s": round(self.turns_per_s, 2),
        }


# ---------------------------------------------------------------------------------------------- progress
def _progress_id(session_id: str) -> str:
    return "vecmem_import_" + hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:32]


def _chain(digest: str, turn: HistoryTurn) -> str:
    return hashlib.sha256((digest + turn.fingerprint()).encode("ascii")).hexdigest()


class _Progress:
    """Per-session import progress kept as records of the workspace (see the module docstring)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self._vector: Any = None

    def load(self, session_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        """``session id -> (turns done, digest)`` of the sessions an earlier run recorded, in one read."""
        sessions = {_progress_id(sid): sid for sid in session_ids}
        found = self.ws.get_many(list(sessions), include_inactive=True)
        return {sessions[r.id]: (int(r.body.get("done", 0)), str(r.body.get("digest", ""))) for r in found}

    def record(self, session_id: str, done: int, digest: str) -> tuple[MemoryRecord, Any]:
        """The progress record of a session and its vector (one row)."""
        import numpy as np

        if self._vector is None:  # a constant unit vector: progress is never searched, no need to embed
            self._vector = np.zeros((1, self.ws.embedder.dim), dtype=np.float32)
            self._vector[0, 0] = 1.0
        record = MemoryRecord(
            id=_progress_id(session_id), collection=PROGRESS_COLLECTION, kind="import_progress",
            memory_scope="GLOBAL_MEMORY", summary=f"import progress of session {session_id}"[:1000],
            body={"session_id": session_id, "done": done, "digest": digest}, importance=0.0,
            provenance=Provenance(plugin="vecmem-import"),
        )
        return record, self._vector[0]

    def save(self, session_id: str, done: int, digest: str) -> None:
        record, vector = self.record(session_id, done, digest)
        self.ws.put(record, vectors=vector[None, :])


@dataclass(frozen=True)
class _TurnSession:
    """What ``after_turn_sync`` reads of a session: its id and how many messages came before the turn."""

    id: str
    position: int = 0

    @property
    def full_context(self) -> range:
        return range(self.position)


@dataclass(frozen=True)
class _Call:
    """One plugin call of a batch: a turn (or ``turns_per_call`` turns merged) and its session's digest after it."""

    session_id: str
    group: Sequence[HistoryTurn]
    turn: HistoryTurn
    digest: str


@dataclass
class _Counts:
    processed: int = 0
    resumed: int = 0
    stored: int = 0
    duplicates: int = 0
    degraded: int = 0


# ---------------------------------------------------------------------------------------------- import
def import_history(
    workspace: Any,
    path: str | os.PathLike[str],
    *,
    fmt: HistoryFormat = "auto",
    session_id: str | None = None,
    model: Any = None,
    settings: Mapping[str, Any] | None = None,
    dated: bool = True,
    progress: bool = False,
    checkpoint_every: int = 50,
    turns_per_call: int = 1,
    on_turn: Callable[[HistoryTurn, dict[str, Any]], None] | None = None,
    batched: bool = True,
) -> ImportReport:
    """Import a chat history file into ``workspace`` through :meth:`VecMemory.after_turn_sync` (without a model:
    :meth:`VecMemory.after_turns_sync`, ``checkpoint_every`` turns per put).

    Args:
        workspace: a :class:`~agently_vecmem.workspace.ChromaWorkspace` (embedded or server).
        path: the history (see :func:`read_history` for the formats).
        fmt: the format, or ``auto``.
        session_id: the session of messages that name none.
        model: a :class:`~agently_vecmem.llm.ChatModel` for extraction + consolidation; None keeps raw turns.
        settings: VecMemory settings (the ``session.memory.VecMemory`` mapping), e.g. ``{"raw_turns":
            {"scope": "GLOBAL_MEMORY"}}``.
        dated: use the history's times (False: turns are dated at import time, as live turns are).
        progress: show a tqdm progress bar over turns.
        checkpoint_every: without a model, write this many turns per put, with their progress (with
            ``batched=False``: save progress every this many turns of dated sessions; after every plugin call
            with a model or undated turns).
        turns_per_call: batch this many consecutive turns of a session into one plugin call (their
            transcript as the user part, the first turn's time): with a model, one extraction (and at most
            one consolidation) call per batch instead of per turn; without one, one raw record per batch.
        on_turn: called after each plugin call with the (merged) turn and the plugin's diagnostics (without a
            model: for each turn of a batch once the batch is written; ``timings_ms`` are the batch's).
        batched: without a model, write ``checkpoint_every`` turns per put (embedded in one batch) together
            with their progress; False: one :meth:`VecMemory.after_turn_sync` call and put per turn, as with
            a model.

    Returns:
        An :class:`ImportReport`; skipped input is in ``problems``, with line numbers.

    Raises:
        HistoryImportError: the file cannot be read as a whole (missing, not JSON/YAML, unknown shape).
        ConfigurationError: ``settings`` are invalid.
        WorkspaceError: the store failed; progress up to the last finished turn (without a model: the last
            written batch) is kept, so running the import again continues there.

    Example:
        >>> report = import_history(ws, "chat.jsonl")            # doctest: +SKIP
        >>> report.processed, report.resumed, report.problems   # doctest: +SKIP
    """
    from .memory.plugin import VecMemory

    if checkpoint_every < 1 or turns_per_call < 1:
        raise HistoryImportError("checkpoint_every and turns_per_call must be at least 1")
    start = time.perf_counter()
    kind, messages, problems = read_history(path, fmt=fmt, session_id=session_id, dated=dated)
    sessions = pair_turns(messages)
    session_settings = {"session": {"memory": {"VecMemory": dict(settings or {})}}}
    plugin = VecMemory(workspace=workspace, settings=session_settings, model=model)
    plugin.config()  # invalid settings fail here, before anything is written
    with_model = plugin.model() is not None
    store = _Progress(plugin.require_store())
    counts = _Counts()
    total = sum(len(t) for t in sessions.values())
    bar = _bar(total, progress, Path(path).name)
    recorded = store.load(list(sessions))
    batch: list[_Call] = []  # without a model: the calls of the next put
    in_batch = 0  # turns in it
    try:
        for sid, turns in sessions.items():
            done, digest = recorded.get(sid, (0, ""))
            skip = _resume_point(turns, done, digest, sid)
            counts.resumed += skip
            bar.update(skip)
            digest = digest if skip else ""  # _resume_point checked it is the digest of turns[:skip]
            if batched and not with_model:
                for group in _groups(turns[skip:], turns_per_call):
                    for done_turn in group:
                        digest = _chain(digest, done_turn)
                    batch.append(_Call(sid, group, group[0] if len(group) == 1 else _merge(group), digest))
                    in_batch += len(group)
                    if in_batch >= checkpoint_every:
                        _write_batch(plugin, store, batch, counts, bar, on_turn)
                        batch, in_batch = [], 0
                continue
            since = 0
            every = 1 if with_model or any(t.time is None for t in turns[skip:]) else checkpoint_every
            for group in _groups(turns[skip:], turns_per_call):
                turn = group[0] if len(group) == 1 else _merge(group)
                diag = plugin.after_turn_sync(
                    session=_TurnSession(sid, 2 * turn.index), user_content=turn.user,
                    assistant_content=turn.assistant, occurred_at=turn.time,
                )
                _count(counts, diag, len(group))
                for done_turn in group:
                    digest = _chain(digest, done_turn)
                since += len(group)
                if since >= every:
                    store.save(sid, group[-1].index + 1, digest)
                    since = 0
                if on_turn is not None:
                    on_turn(turn, diag)
                bar.update(len(group))
            if since:
                store.save(sid, len(turns), digest)
        if batch:
            _write_batch(plugin, store, batch, counts, bar, on_turn)
    finally:
        bar.close()
    report = ImportReport(
        source=str(path), format=kind, sessions=len(sessions), turns=total, processed=counts.processed,
        resumed=counts.resumed, stored=counts.stored, duplicates=counts.duplicates, degraded=counts.degraded,
        problems=tuple(problems), seconds=time.perf_counter() - start,
    )
    for p in problems[:20]:
        logger.warning("%s: skipped %s", path, p)
    logger.info("imported %s: %d turns (%d resumed), %d records, %.1f turns/s", path, report.processed,
                report.resumed, report.stored, report.turns_per_s)
    return report


def _write_batch(plugin: Any, store: _Progress, calls: Sequence[_Call], counts: _Counts, bar: Any,
                 on_turn: Callable[[HistoryTurn, dict[str, Any]], None] | None) -> None:
    """The turns of ``calls`` through :meth:`VecMemory.after_turns_sync`, in one put with the progress of
    their sessions (a session's last call in the batch: how many of its turns are done, their digest)."""
    progress = {c.session_id: (c.group[-1].index + 1, c.digest) for c in calls}
    diags = plugin.after_turns_sync(
        [{"session": _TurnSession(c.session_id, 2 * c.turn.index), "user_content": c.turn.user,
          "assistant_content": c.turn.assistant, "occurred_at": c.turn.time} for c in calls],
        also=[store.record(sid, done, digest) for sid, (done, digest) in progress.items()],
    )
    for call, diag in zip(calls, diags, strict=True):
        _count(counts, diag, len(call.group))
        if on_turn is not None:
            on_turn(call.turn, diag)
        bar.update(len(call.group))


def _digest(turns: Sequence[HistoryTurn]) -> str:
    digest = ""
    for turn in turns:
        digest = _chain(digest, turn)
    return digest


def _resume_point(turns: Sequence[HistoryTurn], done: int, digest: str, sid: str) -> int:
    """How many leading turns an earlier run finished (0 when the history changed under it)."""
    if done <= 0:
        return 0
    if done > len(turns) or _digest(turns[:done]) != digest:
        logger.warning("session %s: the history differs from the one imported before; importing it from the "
                       "start (exact duplicates are dropped)", sid)
        return 0
    return done


def _groups(turns: Sequence[HistoryTurn], size: int) -> list[Sequence[HistoryTurn]]:
    return [turns[i:i + size] for i in range(0, len(turns), size)]


def _merge(group: Sequence[HistoryTurn]) -> HistoryTurn:
    """Several turns as one plugin call: the transcript as the user part, the first turn's time."""
    lines = []
    for t in group:
        if t.user:
            lines.append(f"user: {t.user}")
        if t.assistant:
            lines.append(f"assistant: {t.assistant}")
    when = next((t.time for t in group if t.time is not None), None)
    return HistoryTurn(group[0].session_id, group[0].index, "\n\n".join(lines), None, when,
                       tuple(s for t in group for s in t.sources))


def _count(counts: _Counts, diag: Mapping[str, Any], turns: int = 1) -> None:
    counts.processed += turns
    counts.stored += int(diag.get("stored", 0) or 0)
    counts.duplicates += sum(1 for c in diag.get("consolidation", ()) if c.get("reason") == "exact_duplicate")
    counts.degraded += bool(diag.get("degraded") and diag.get("reason") != "no_model")


class _NoBar:
    def update(self, n: int = 1) -> None:
        return None

    def close(self) -> None:
        return None


def _bar(total: int, enabled: bool, desc: str) -> Any:
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=f"importing {desc}", unit="turn")
