"""Import an existing chat history into a memory store, through the plugin's own remembering path.

:func:`import_history` reads

- an Agently session export (JSON or YAML, what :meth:`Session.get_json_session` /
  :meth:`Session.get_yaml_session` write; a message may carry ``time``),
- a JSONL file of messages ``{"role", "content", "time"?, "session_id"?}`` (one per line),
- a LoCoMo-shaped file (``locomo10.json`` schema: speaker A is the user, speaker B the assistant, each
  session's ``session_N_date_time`` is the time of its turns),

pairs each user message with the assistant reply that follows it, and hands every pair to
:meth:`VecMemory.after_turn_sync` with the turn's time: without a model each pair is kept as a raw turn,
with one it is extracted and consolidated like a live turn. ``turns_per_call=N`` batches N consecutive
turns of a session into one call (their transcript, the first turn's time): one extraction request per N
turns.

**Bad input** is reported, never fatal for the rest: a JSONL line that is not JSON or not a valid message is
skipped and listed with its line number in :attr:`ImportReport.problems` (a session export's or LoCoMo
file's bad message with its position). Only a file that cannot be read as a whole raises
:class:`~agently_vecmem.errors.HistoryImportError`.

**Resumable.** Progress is a record in the workspace itself (``collection="vecmem_import"``, invisible to
memory reads), one per session: how many of the session's turns are done and a digest of them. A second run
of the same history skips the done turns (the digest must match; a changed history is imported again from
its start). Progress is saved after every turn when a model is used; without a model every
``checkpoint_every`` turns, and the turns re-run after an interruption are exact duplicates, which the
plugin drops (raw turns with equal text in one scope). So an interrupted import, run again, adds nothing
twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import HistoryImportError, RecordValidationError
from .records import MemoryRecord, format_validation_error, parse_time

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

HistoryFormat = Literal["auto", "jsonl", "json", "yaml", "locomo"]
#: Record collection of the import progress records (memory reads use ``collection="memory"``).
PROGRESS_COLLECTION = "vecmem_import"
_FORMATS = ("auto", "jsonl", "json", "yaml", "locomo")


class HistoryMessage(BaseModel):
    """One message of an imported history (the JSONL line shape; other keys are ignored)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    role: str = Field(min_length=1, max_length=50)
    content: str
    time: float | None = None
    session_id: str | None = Field(default=None, min_length=1, max_length=500)
    #: Where the message came from (``"line 12"``, a LoCoMo ``dia_id``), for reports and evaluation.
    source: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _content_text(cls, value: Any) -> Any:
        """Content parts (``[{"type": "text", "text": ...}, ...]``) become their joined text."""
        if isinstance(value, list):
            texts = [p.get("text") if isinstance(p, Mapping) else p for p in value]
            if not all(isinstance(t, str) for t in texts):
                raise ValueError("content parts must be strings or {'type': 'text', 'text': str} objects")
            return "\n".join(texts)
        return value

    @field_validator("time", mode="before")
    @classmethod
    def _time(cls, value: Any) -> Any:
        return None if value is None or value == "" else parse_time(value, what="time")

    @field_validator("session_id", mode="before")
    @classmethod
    def _session_id(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


@dataclass(frozen=True)
class Problem:
    """A skipped piece of input: ``where`` (``"line 7"``, ``"full_context[3]"``) and why."""

    where: str
    error: str

    def __str__(self) -> str:
        return f"{self.where}: {self.error}"


@dataclass(frozen=True)
class HistoryTurn:
    """A user message and the assistant reply after it (either may be missing), with the turn's time."""

    session_id: str
    index: int
    user: str | None
    assistant: str | None
    time: float | None
    sources: tuple[str, ...] = ()

    def fingerprint(self) -> str:
        text = json.dumps([self.user, self.assistant, self.time], ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


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


# ---------------------------------------------------------------------------------------------- reading
def _error_text(e: Exception) -> str:
    if isinstance(e, ValidationError):
        return format_validation_error(e, "message")
    return str(e)


def _message(data: Any, where: str, problems: list[Problem], **defaults: Any) -> HistoryMessage | None:
    if not isinstance(data, Mapping):
        problems.append(Problem(where, f"a message must be an object with role and content, got {type(data).__name__}"))
        return None
    try:
        return HistoryMessage.model_validate({**defaults, **data} if defaults else data)
    except (ValidationError, RecordValidationError, ValueError) as e:
        problems.append(Problem(where, _error_text(e)))
        return None


def _read_jsonl(path: Path, default_session: str, problems: list[Problem]) -> list[HistoryMessage]:
    out: list[HistoryMessage] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as e:
                problems.append(Problem(f"line {lineno}", f"not JSON: {e.msg} (column {e.colno})"))
                continue
            msg = _message(data, f"line {lineno}", problems)
            if msg is not None:
                out.append(msg.model_copy(update={"session_id": msg.session_id or default_session,
                                                  "source": f"line {lineno}"}))
    return out


def _load_document(path: Path, fmt: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
        if fmt == "yaml":
            import yaml

            return yaml.safe_load(text)
        try:
            return json.loads(text)
        except json.JSONDecodeError:  # the session export is read with json5 (comments, trailing commas)
            import json5

            return json5.loads(text)
    except Exception as e:  # noqa: BLE001 - yaml/json5/decoding raise many types; the message is what matters
        raise HistoryImportError(f"{path}: cannot read it as {fmt.upper()}: {e}") from None


def _session_messages(data: Mapping[str, Any], session_id: str, problems: list[Problem]) -> list[HistoryMessage]:
    full = data.get("full_context")
    if not isinstance(full, list):
        raise HistoryImportError("a session export needs a 'full_context' list of messages")
    out = []
    for i, item in enumerate(full):
        where = f"full_context[{i}]"
        msg = _message(item, where, problems)
        if msg is not None:
            out.append(msg.model_copy(update={"session_id": session_id, "source": where}))
    return out


def locomo_time(date_time: str) -> float | None:
    """``"1:56 pm on 8 May, 2023"`` (LoCoMo's session stamp) as epoch seconds (UTC), or None."""
    text = " ".join(str(date_time or "").replace(",", " ").split())
    for pattern in ("%I:%M %p on %d %B %Y", "%d %B %Y", "%I:%M %p on %d %b %Y", "%d %b %Y"):
        try:
            return datetime.strptime(text, pattern).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue
    return None


def _locomo_messages(samples: Sequence[Any], problems: list[Problem], dated: bool) -> list[HistoryMessage]:
    import re

    out: list[HistoryMessage] = []
    for n, sample in enumerate(samples):
        conv = sample.get("conversation") if isinstance(sample, Mapping) else None
        if not isinstance(conv, Mapping) or not sample.get("sample_id"):
            problems.append(Problem(f"sample[{n}]", "not a LoCoMo sample (needs sample_id and conversation)"))
            continue
        sid = str(sample["sample_id"])
        user_speaker = conv.get("speaker_a")
        sessions = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))
        for s in sessions:
            stamp = conv.get(f"session_{s}_date_time")
            when = locomo_time(str(stamp)) if dated and stamp else None
            if dated and stamp and when is None:
                problems.append(Problem(f"{sid} session_{s}_date_time", f"unknown date format {stamp!r}; undated"))
            turns = conv[f"session_{s}"]
            if not isinstance(turns, list):
                problems.append(Problem(f"{sid} session_{s}", "not a list of turns"))
                continue
            for j, t in enumerate(turns):
                where = f"{sid} session_{s}[{j}]"
                if not isinstance(t, Mapping) or not isinstance(t.get("text"), str) or not t.get("speaker"):
                    problems.append(Problem(where, "a LoCoMo turn needs speaker and text"))
                    continue
                text = f"{t['speaker']}: {t['text']}"
                if t.get("blip_caption"):
                    text += f" [shares an image: {t['blip_caption']}]"
                role = "user" if t["speaker"] == user_speaker else "assistant"
                msg = _message({"role": role, "content": text, "time": when, "session_id": sid,
                                "source": str(t.get("dia_id") or where)}, where, problems)
                if msg is not None:
                    out.append(msg)
    return out


def _detect(path: Path, data: Any) -> str:
    if isinstance(data, Mapping) and "full_context" in data:
        return "session"
    if isinstance(data, Mapping) and "conversation" in data:
        return "locomo"
    if isinstance(data, list) and data and all(isinstance(d, Mapping) for d in data):
        if all("conversation" in d for d in data):
            return "locomo"
        if all("role" in d for d in data):
            return "messages"
    raise HistoryImportError(
        f"{path}: not a history this importer knows: expected an Agently session export (a 'full_context' "
        "list), a LoCoMo file (samples with 'conversation'), a JSON list of {role, content} messages, or "
        "a .jsonl file of messages"
    )


def read_history(
    path: str | os.PathLike[str], *, fmt: HistoryFormat = "auto", session_id: str | None = None,
    dated: bool = True,
) -> tuple[str, list[HistoryMessage], list[Problem]]:
    """Read a history file into messages, collecting problems instead of failing on them.

    Args:
        path: the file.
        fmt: ``auto`` (by extension and content), ``jsonl``, ``json`` / ``yaml`` (session export or
            message list), ``locomo``.
        session_id: the session of messages that name none (default: the export's ``id``, else the file
            name without extension).
        dated: keep the history's times (False: every turn is dated at import time).

    Returns:
        ``(format read, messages in file order, problems)``.

    Raises:
        HistoryImportError: the file is missing, unreadable as a whole, or of no known shape.
    """
    p = Path(path)
    if fmt not in _FORMATS:
        raise HistoryImportError(f"unknown history format {fmt!r}; use one of {', '.join(_FORMATS)}")
    if not p.is_file():
        raise HistoryImportError(f"no such file: {str(p)!r}")
    default_session = session_id or p.stem
    problems: list[Problem] = []
    suffix = p.suffix.lower()
    if fmt == "jsonl" or (fmt == "auto" and suffix in (".jsonl", ".ndjson")):
        messages, kind = _read_jsonl(p, default_session, problems), "jsonl"
    else:
        doc_fmt = "yaml" if fmt == "yaml" or (fmt == "auto" and suffix in (".yaml", ".yml")) else "json"
        data = _load_document(p, doc_fmt)
        kind = _detect(p, data)
        if fmt == "locomo" and kind != "locomo":
            raise HistoryImportError(f"{p}: not a LoCoMo file (a list of samples with 'conversation')")
        if kind == "session":
            sid = session_id or (str(data["id"]) if data.get("id") not in (None, "") else default_session)
            messages = _session_messages(data, sid, problems)
            kind = f"session-{doc_fmt}"
        elif kind == "locomo":
            messages = _locomo_messages(data if isinstance(data, list) else [data], problems, dated)
        else:
            messages = []
            for i, item in enumerate(data):
                msg = _message(item, f"[{i}]", problems)
                if msg is not None:
                    messages.append(msg.model_copy(update={"session_id": msg.session_id or default_session,
                                                           "source": f"[{i}]"}))
            kind = f"messages-{doc_fmt}"
    if not dated:
        messages = [m.model_copy(update={"time": None}) for m in messages]
    return kind, messages, problems


def pair_turns(messages: Iterable[HistoryMessage]) -> dict[str, list[HistoryTurn]]:
    """Group messages by session (first-seen order) and pair each user message with the assistant reply
    that follows it. A user message followed by another user message is a turn without a reply; an
    assistant message without a user message before it, a turn without a user part. Other roles (system,
    tool) are not turns. The turn's time is its user message's (else the reply's)."""
    open_user: dict[str, HistoryMessage | None] = {}
    sessions: dict[str, list[HistoryTurn]] = {}

    def emit(sid: str, user: HistoryMessage | None, reply: HistoryMessage | None) -> None:
        turns = sessions.setdefault(sid, [])
        when = user.time if user is not None and user.time is not None else (reply.time if reply else None)
        sources = tuple(m.source for m in (user, reply) if m is not None and m.source)
        turns.append(HistoryTurn(sid, len(turns), user.content if user else None, reply.content if reply else None,
                                 when, sources))

    for msg in messages:
        sid = msg.session_id or "default"
        sessions.setdefault(sid, [])
        pending = open_user.get(sid)
        if msg.role == "user":
            if pending is not None:
                emit(sid, pending, None)
            open_user[sid] = msg
        elif msg.role == "assistant":
            emit(sid, pending, msg)
            open_user[sid] = None
    for sid, pending in open_user.items():
        if pending is not None:
            emit(sid, pending, None)
    return {sid: turns for sid, turns in sessions.items() if turns}


# ---------------------------------------------------------------------------------------------- progress
def _progress_id(session_id: str) -> str:
    return "vecmem_import_" + hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:32]


def _chain(digest: str, turn: HistoryTurn) -> str:
    return hashlib.sha256((digest + turn.fingerprint()).encode("ascii")).hexdigest()


class _Progress:
    """Per-session import progress kept as records of the workspace (see the module docstring)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self._vector = None

    def load(self, session_id: str) -> tuple[int, str]:
        found = self.ws.get_many([_progress_id(session_id)], include_inactive=True)
        if not found:
            return 0, ""
        body = found[0].body
        return int(body.get("done", 0)), str(body.get("digest", ""))

    def save(self, session_id: str, done: int, digest: str) -> None:
        import numpy as np

        if self._vector is None:  # a constant unit vector: progress is never searched, no need to embed
            self._vector = np.zeros((1, self.ws.embedder.dim), dtype=np.float32)
            self._vector[0, 0] = 1.0
        record = MemoryRecord(
            id=_progress_id(session_id), collection=PROGRESS_COLLECTION, kind="import_progress",
            memory_scope="GLOBAL_MEMORY", summary=f"import progress of session {session_id}"[:1000],
            body={"session_id": session_id, "done": done, "digest": digest}, importance=0.0,
            provenance={"plugin": "vecmem-import"},
        )
        self.ws.put(record, vectors=self._vector)


@dataclass(frozen=True)
class _TurnSession:
    """What ``after_turn_sync`` reads of a session: its id and how many messages came before the turn."""

    id: str
    position: int = 0

    @property
    def full_context(self) -> range:
        return range(self.position)


@dataclass
class _Counts:
    processed: int = 0
    resumed: int = 0
    stored: int = 0
    duplicates: int = 0
    degraded: int = 0
    per_session: dict[str, int] = field(default_factory=dict)


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
) -> ImportReport:
    """Import a chat history file into ``workspace`` through :meth:`VecMemory.after_turn_sync`.

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
        checkpoint_every: save progress every this many turns without a model (after every plugin call with
            one).
        turns_per_call: batch this many consecutive turns of a session into one plugin call (their
            transcript as the user part, the first turn's time): with a model, one extraction (and at most
            one consolidation) call per batch instead of per turn; without one, one raw record per batch.
        on_turn: called after each plugin call with the (merged) turn and the plugin's diagnostics.

    Returns:
        An :class:`ImportReport`; skipped input is in ``problems``, with line numbers.

    Raises:
        HistoryImportError: the file cannot be read as a whole (missing, not JSON/YAML, unknown shape).
        ConfigurationError: ``settings`` are invalid.
        WorkspaceError: the store failed; progress up to the last finished turn is kept, so running the
            import again continues there.

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
    every = 1 if plugin.model() is not None else checkpoint_every
    store = _Progress(plugin._require_store())
    counts = _Counts()
    total = sum(len(t) for t in sessions.values())
    bar = _bar(total, progress, Path(path).name)
    try:
        for sid, turns in sessions.items():
            done, digest = store.load(sid)
            skip = _resume_point(turns, done, digest, sid)
            counts.resumed += skip
            bar.update(skip)
            digest = _digest(turns[:skip])
            since = 0
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
