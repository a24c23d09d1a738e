"""Pure stages of storing: normalize extracted memories, raw turns, duplicate detection, applying
consolidation verbs. The plugin does the I/O (model, embeddings, Workspace) around these."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..records import MAX_TAG_CHARS, MAX_TAGS, MEMORY_SCOPES, MemoryRecord, Provenance
from .replies import Action, ExtractedMemory

__all__ = [
    "PendingMemory",
    "normalize_memory",
    "raw_turn_record",
    "dedup_key",
    "merge_tags",
    "supersede",
]

_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class PendingMemory:
    """A new memory on its way to the store, with the consolidation verb decided for it.

    Attributes:
        record: the new record.
        action: ADD, UPDATE, SUPERSEDE or NOOP.
        target_id: the existing record an UPDATE / SUPERSEDE / NOOP refers to.
        reason: why the action was chosen (``extract``, ``consolidate``, ``raw_turn``, ``invalid_target``...).
        vector: the record's embedding (set once the memory is embedded).
        shown: ids of existing memories the extractor already saw (no second model call about them).
        target: the existing record named by ``target_id`` (UPDATE / SUPERSEDE / NOOP).
        merged: a merged summary/body the model gave for an UPDATE.
    """

    record: MemoryRecord
    action: Action = "ADD"
    target_id: str | None = None
    reason: str = ""
    vector: Any = None
    shown: frozenset[str] = frozenset()
    target: MemoryRecord | None = None
    merged: Mapping[str, Any] | None = None


def merge_tags(*groups: Iterable[Any] | str | None) -> list[str]:
    """Stripped, de-duplicated tags in first-seen order (Agently's ``_merge_tags``)."""
    out: list[str] = []
    for group in groups:
        items = [group] if isinstance(group, str) else list(group or [])
        for item in items:
            tag = str(item).strip()
            if tag and tag not in out:
                out.append(tag)
    return out


def normalize_memory(
    memory: ExtractedMemory, *, session_id: str, turn_index: int, plugin: str = "VecMemory",
    occurred_at: float | None = None,
) -> MemoryRecord | None:
    """An extracted memory as a record, or None when it has neither summary nor body.

    Raises:
        pydantic.ValidationError: the memory cannot be a record (e.g. a body with NaN or over the size
            limit); the caller skips it with a diagnostic.

    Mirrors AgentlyMemory: the scope is upper-cased and an invalid one becomes SESSION_MEMORY; a string
    body is wrapped as ``{"summary": body}``; tags are stripped and de-duplicated.
    """
    summary = (memory.summary or "").strip()
    body = memory.body
    if not summary and body in (None, "", {}):
        return None
    if isinstance(body, str):
        body = {"summary": body}
    scope = (memory.scope or "SESSION_MEMORY").strip().upper()
    if scope not in MEMORY_SCOPES:
        scope = "SESSION_MEMORY"
    if not summary:
        summary = str(next(iter((body or {}).values()), ""))[:300]
    # Model-written tags are capped, not rejected: one long tag should not cost the whole memory.
    tags = [str(t)[:MAX_TAG_CHARS] for t in merge_tags(memory.tags)][:MAX_TAGS]
    return MemoryRecord(
        memory_scope=scope,  # type: ignore[arg-type]
        session_id=session_id if scope == "SESSION_MEMORY" else None,
        summary=summary[:1000],
        body=body or {"summary": summary},
        tags=tags,
        importance=memory.importance,
        occurred_at=occurred_at,
        provenance=Provenance(plugin=plugin, session_id=session_id, turn_index=turn_index),
    )


def raw_turn_record(
    *,
    session_id: str,
    user_content: str | None,
    assistant_content: str | None,
    turn_index: int,
    max_chars: int,
    scope: str = "SESSION_MEMORY",
    reason: str,
    plugin: str = "VecMemory",
    occurred_at: float | None = None,
) -> MemoryRecord:
    """The whole turn kept as a memory that is not extracted yet (retrievable, re-extractable)."""
    half = max(50, max_chars // 2)
    user = (user_content or "").strip()[:half]
    assistant = (assistant_content or "").strip()[:half]
    head = _SPACE.sub(" ", user or assistant)[:300]
    return MemoryRecord(
        memory_scope=scope,  # type: ignore[arg-type]
        session_id=session_id if scope == "SESSION_MEMORY" else None,
        summary=f"Turn: {head}",
        body={"user": user, "assistant": assistant},
        tags=["raw_turn"],
        importance=0.3,
        extracted=False,
        occurred_at=occurred_at,
        provenance=Provenance.model_validate(
            {"plugin": plugin, "session_id": session_id, "turn_index": turn_index, "raw_reason": reason}
        ),
    )


def dedup_key(record: MemoryRecord) -> tuple[str, str | None, str]:
    """Records with equal keys are exact duplicates: same scope, session and normalized text."""
    return (record.memory_scope, record.session_id, _SPACE.sub(" ", record.document().lower()).strip())


def supersede(old: MemoryRecord, new_id: str | None) -> MemoryRecord:
    """The old record marked superseded, pointing at its replacement (never deleted).

    ``new_id`` is None when nothing replaces it one to one (a raw turn whose re-extraction found nothing
    new to keep).
    """
    return old.model_copy(update={"status": "superseded", "superseded_by": new_id, "updated_at": time.time()})


def exact_duplicates(pending: Sequence[PendingMemory], existing_keys: set[tuple[str, str | None, str]]) -> list[int]:
    """Indexes of pending memories that duplicate an existing record or an earlier pending one."""
    seen = set(existing_keys)
    dups = []
    for i, item in enumerate(pending):
        key = dedup_key(item.record)
        if key in seen:
            dups.append(i)
        seen.add(key)
    return dups
