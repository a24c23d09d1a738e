"""Reading chat histories for import: Agently session exports (JSON/YAML), JSONL messages and LoCoMo-shaped
files become validated :class:`HistoryMessage` objects (problems collected, never fatal line by line), and
:func:`pair_turns` makes user/assistant turns of them. :mod:`agently_vecmem.ingest` stores the turns."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import HistoryImportError, RecordValidationError
from .records import format_validation_error, parse_time

__all__ = [
    "HistoryFormat",
    "HistoryMessage",
    "HistoryTurn",
    "Problem",
    "read_history",
    "pair_turns",
    "locomo_time",
]

HistoryFormat = Literal["auto", "jsonl", "json", "yaml", "locomo"]
_FORMATS: tuple[str, ...] = get_args(HistoryFormat)


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
            strings = [t for t in texts if isinstance(t, str)]
            if len(strings) != len(texts):
                raise RecordValidationError("content parts must be strings or {'type': 'text', 'text': str} objects")
            return "\n".join(strings)
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


# ---------------------------------------------------------------------------------------------- reading
def _error_text(e: Exception) -> str:
    if isinstance(e, ValidationError):
        return format_validation_error(e, "message")
    return str(e)


def _message(data: Any, where: str, problems: list[Problem], *, source: str | None = None,
             session: str | None = None, default_session: str | None = None) -> HistoryMessage | None:
    """One message read at ``where`` (its ``source`` unless one is given), in ``session`` if given, else its
    own session id or ``default_session``; None (and a problem at ``where``) when it is not a valid message."""
    if not isinstance(data, Mapping):
        problems.append(Problem(where, f"a message must be an object with role and content, got {type(data).__name__}"))
        return None
    try:
        msg = HistoryMessage.model_validate(data)
    except (ValidationError, RecordValidationError, ValueError) as e:
        problems.append(Problem(where, _error_text(e)))
        return None
    sid = session if session is not None else (msg.session_id or default_session)
    return msg.model_copy(update={"session_id": sid, "source": source or where})


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
            msg = _message(data, f"line {lineno}", problems, default_session=default_session)
            if msg is not None:
                out.append(msg)
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
        msg = _message(item, f"full_context[{i}]", problems, session=session_id)
        if msg is not None:
            out.append(msg)
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
                msg = _message({"role": role, "content": text, "time": when, "session_id": sid}, where, problems,
                               source=str(t.get("dia_id") or where))
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
                msg = _message(item, f"[{i}]", problems, default_session=default_session)
                if msg is not None:
                    messages.append(msg)
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
