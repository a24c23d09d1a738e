"""The remembering stages: extract → dedup → consolidate → store, as typed values.

A :class:`Turn` goes in; :func:`extract` turns it into :class:`PendingMemory` values (or the raw turn
when there is no model or the extraction failed) and the FORGET requests the model made about the related
memories it was offered; :func:`forget_requested` erases those (only offered ids, of the call's user, through
the store's ``forget``); :func:`consolidate` drops exact duplicates without the model, asks the model about
near-duplicates and applies ADD / UPDATE / SUPERSEDE / NOOP; :func:`store` writes everything of the turn in
one Workspace put. The pure decisions live in :mod:`.consolidate`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from pydantic import ValidationError

from ..filters import Scope
from ..records import MemoryRecord
from ..search.view import keep_on_rewrite
from .context import CallContext
from .diagnostics import ErrorInfo
from .pending import (
    PendingMemory,
    dedup_key,
    exact_duplicates,
    normalize_memory,
    raw_turn_record,
    supersede,
)
from .prompts import INSTRUCTS, PhaseRequest, default_max_tokens
from .replies import Action, ConsolidateReply, ExtractReply, output_shape

__all__ = ["Turn", "Extraction", "Forgetting", "Verdict", "Consolidation", "StoreResult", "extract",
           "forget_requested", "consolidate", "drop_exact_duplicates", "consolidate_embedded", "store", "store_many"]

_RELATED_MIN_SCORE = 0.3


@dataclass(frozen=True)
class Turn:
    """A completed turn to remember. ``keep_raw``: store the raw turn when extraction is impossible
    (False when re-extracting a raw turn, which stays pending instead)."""

    session_id: str
    user_content: str | None
    assistant_content: str | None
    turn_index: int
    keep_raw: bool = True
    occurred_at: float | None = None  # when the turn happened (epoch seconds); kept on every record of it

    @property
    def text(self) -> str:
        return f"{self.user_content or ''}\n{self.assistant_content or ''}"


@dataclass(frozen=True)
class Extraction:
    """The memories extracted from a turn (or the raw turn) and how the extraction went.

    ``failure``: None, ``no_model`` or ``extract_failed`` (then ``error`` says why).
    """

    pending: tuple[PendingMemory, ...]
    failure: str | None = None
    error: ErrorInfo | None = None
    raw_turn_kept: bool = False
    truncated: int = 0
    related: int = 0
    attempts: int = 0
    invalid: tuple[tuple[str, ErrorInfo], ...] = ()
    #: ids of offered related memories the model asked to FORGET, and how many FORGET answers named
    #: anything else (refused: never erased)
    forget: tuple[str, ...] = ()
    forget_refused: int = 0

    @property
    def degraded(self) -> bool:
        return self.failure is not None

    def diagnostics(self) -> dict[str, Any]:
        if self.failure is not None:
            out: dict[str, Any] = {"extracted": 0, "degraded": True, "reason": self.failure}
            out.update(self.error.as_dict() if self.error else {})
            return {**out, "raw_turn_kept": True} if self.raw_turn_kept else out
        out = {"extracted": len(self.pending), "truncated": self.truncated, "related": self.related,
               "attempts": self.attempts}
        if self.invalid:
            out["invalid_memories"] = [{"summary": summary, **e.as_dict()} for summary, e in self.invalid]
        return out


@dataclass(frozen=True)
class Forgetting:
    """What the FORGET answers of a turn erased: ids and counts only (the diagnostics never hold the
    forgotten text)."""

    requested: tuple[str, ...] = ()
    refused: int = 0
    erased: tuple[str, ...] = ()
    dropped: int = 0

    def __bool__(self) -> bool:
        return bool(self.requested or self.refused)

    def diagnostics(self) -> dict[str, Any]:
        return {"requested": len(self.requested) + self.refused, "refused": self.refused,
                "erased": len(self.erased), "ids": list(self.erased), "dropped": self.dropped}


@dataclass(frozen=True)
class Verdict:
    """One consolidation decision as the ``consolidation`` diagnostics list it."""

    action: str
    reason: str
    id: str | None = None
    target_id: str | None = None
    summary: str | None = None
    neighbors: tuple[str, ...] | None = None
    error: ErrorInfo | None = None

    @property
    def degraded(self) -> bool:
        return self.error is not None

    def diagnostics(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action}
        for key in ("id", "target_id"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out["reason"] = self.reason
        if self.summary is not None:
            out["summary"] = self.summary
        if self.neighbors is not None:
            out["neighbors"] = list(self.neighbors)
        if self.error is not None:
            out.update(degraded=True, **self.error.as_dict())
        return out


@dataclass(frozen=True)
class Consolidation:
    """What to write (new records with vectors, replaced records marked superseded) and the verdicts."""

    to_store: tuple[tuple[MemoryRecord, Any], ...]
    verdicts: tuple[Verdict, ...]

    @property
    def degraded(self) -> bool:
        return any(v.degraded for v in self.verdicts)

    def diagnostics(self) -> list[dict[str, Any]]:
        return [v.diagnostics() for v in self.verdicts]


@dataclass(frozen=True)
class StoreResult:
    """The records written by one put."""

    stored: tuple[MemoryRecord, ...] = ()

    @property
    def active(self) -> list[MemoryRecord]:
        return [r for r in self.stored if r.status == "active"]

    @property
    def superseded(self) -> list[MemoryRecord]:
        return [r for r in self.stored if r.status == "superseded"]


def _scope_of(record: MemoryRecord) -> Scope:
    return Scope.of(record.memory_scope, record.session_id)


# ---------------------------------------------------------------------------------------------- extract
def related_memories(call: CallContext, turn: Turn) -> dict[str, MemoryRecord]:
    """Existing memories most similar to the turn, shown to the extractor for consolidation."""
    n = call.config.extract.related_memories
    if n <= 0:
        return {}
    with call.timer.stage("embed_turn"):
        qvec = call.store.embed_query(turn.text[:2000])
    related: dict[str, MemoryRecord] = {}
    with call.timer.stage("related"):
        # Up to n per scope: a large global scope must not crowd out the session's own memories.
        for scope in (Scope.session_memory(turn.session_id), Scope.global_memory()):
            hits = call.view(scope).search(qvec, 2 * n, pool_min_records=call.params.pool_min_records,
                                           pool_size=call.params.pool_size)
            # Raw turns are not memories to refine; they are re-extracted on their own (reextract_pending).
            hits = [h for h in hits if h.record.extracted and h.score >= _RELATED_MIN_SCORE]
            related.update((h.record.id, h.record) for h in hits[:n])
    return related


def _raw(call: CallContext, turn: Turn, failure: str, error: ErrorInfo | None = None) -> Extraction:
    raw_cfg = call.config.raw_turns
    if not (turn.keep_raw and raw_cfg.enabled):
        return Extraction((), failure, error)
    record = raw_turn_record(
        session_id=turn.session_id, user_content=turn.user_content, assistant_content=turn.assistant_content,
        turn_index=turn.turn_index, max_chars=raw_cfg.max_chars, reason=failure, plugin=call.plugin_name,
        scope=raw_cfg.scope, occurred_at=turn.occurred_at,
    )
    return Extraction((PendingMemory(record, reason="raw_turn"),), failure, error, raw_turn_kept=True)


def extract(call: CallContext, turn: Turn) -> Extraction:
    """Memories of a turn as pending records; the raw turn when extraction is impossible or fails."""
    if call.model is None:
        return _raw(call, turn, "no_model")
    cfg = call.config.extract
    half = cfg.max_context_chars // 2
    related = related_memories(call, turn)
    asked = call.ask(
        PhaseRequest(
            "extract", instruct=INSTRUCTS["extract"], output=output_shape(ExtractReply),
            input={
                "session_id": turn.session_id,
                "user_content": (turn.user_content or "")[:half],
                "assistant_content": (turn.assistant_content or "")[:half],
                "body_schema": call.config.body_schema,
                "max_memories": cfg.max_memories,
                "related_memories": [
                    {"id": r.id, "scope": r.memory_scope, "summary": r.summary} for r in related.values()
                ],
            },
            max_tokens=default_max_tokens("extract", cfg.max_memories),
        ),
        ExtractReply, attempts=2,
    )
    if asked.reply is None:
        return _raw(call, turn, "extract_failed", asked.error)
    # FORGET may only name a memory offered above (this session's or the user's global ones): anything
    # else (another session's record, an un-offered global one, another user's) is refused, never erased.
    forget = [m.target_id for m in asked.reply.memories if m.action == "FORGET" and m.target_id in related]
    refused = sum(1 for m in asked.reply.memories if m.action == "FORGET" and m.target_id not in related)
    ranked = sorted((m for m in asked.reply.memories if m.action != "FORGET"), key=lambda m: -m.importance)
    kept = ranked[: cfg.max_memories]
    pending: list[PendingMemory] = []
    invalid: list[tuple[str, ErrorInfo]] = []
    for memory in kept:
        try:
            record = normalize_memory(
                memory, session_id=turn.session_id, turn_index=turn.turn_index, plugin=call.plugin_name,
                occurred_at=turn.occurred_at,
            )
        except (ValidationError, ValueError) as e:
            invalid.append(((memory.summary or "")[:200], ErrorInfo.of(e)))
            continue
        if record is None:
            continue
        # The extractor already judged these existing memories: no second model call about them.
        action: Action = "ADD" if memory.action == "FORGET" else memory.action  # FORGET items were taken above
        item = PendingMemory(record, action=action, target_id=memory.target_id, reason="extract",
                             shown=frozenset(related))
        target = related.get(memory.target_id or "")
        if item.action != "ADD" and (target is None or _scope_of(target) != _scope_of(record)):
            item = replace(item, action="ADD", target_id=None, reason="invalid_target")
        elif target is not None:
            item = replace(item, target=target)
        pending.append(item)
    return Extraction(tuple(pending), truncated=max(0, len(ranked) - len(kept)), related=len(related),
                      attempts=asked.attempts, invalid=tuple(invalid),
                      forget=tuple(dict.fromkeys(i for i in forget if i)), forget_refused=refused)


# ---------------------------------------------------------------------------------------------- forget
def forget_requested(call: CallContext, extraction: Extraction) -> tuple[Forgetting, tuple[PendingMemory, ...]]:
    """Erase the offered memories the model answered FORGET for (with their versions, through the store's
    ``forget``: bound to the call's user) and drop the pending memories that would refine or replace them.

    Returns:
        What was erased, and the pending memories left to consolidate.
    """
    if not extraction.forget:
        return Forgetting(refused=extraction.forget_refused), extraction.pending
    with call.timer.stage("forget"):
        report = call.store.forget(ids=list(extraction.forget))
    call.forget_views()  # consolidation must not see (or dedup against) what is gone
    erased = set(report.ids)
    kept = tuple(p for p in extraction.pending if p.target_id not in erased)
    return Forgetting(extraction.forget, extraction.forget_refused, tuple(report.ids),
                      len(extraction.pending) - len(kept)), kept


# ---------------------------------------------------------------------------------------------- consolidate
def _dedup_keys(call: CallContext, scope: Scope) -> Counter[tuple[str, str | None, str]]:
    """Dedup keys of a scope's records, each with how many records have it, cached on the snapshot (extended
    when records are appended, counted down when records leave)."""
    return call.view(scope).cached(
        "dedup_keys",
        lambda v: Counter(map(dedup_key, v.records)),
        lambda old, v, n: old + Counter(map(dedup_key, v.records[n:])),
    )


keep_on_rewrite("dedup_keys", lambda old, new: dedup_key(old) == dedup_key(new),
                drop=lambda keys, keep, view: keys - Counter(dedup_key(view.records[int(i)])
                                                             for i in np.flatnonzero(~keep)))


def consolidate(call: CallContext, pending: tuple[PendingMemory, ...]) -> Consolidation:
    """Decide ADD / UPDATE / SUPERSEDE / NOOP for each pending memory; returns what to store."""
    fresh, verdicts = drop_exact_duplicates(call, pending)
    if not fresh:
        return Consolidation((), tuple(verdicts))
    with call.timer.stage("embed_memories"):
        vectors = call.store.embedder.embed_documents([p.record.document() for p in fresh])
    return consolidate_embedded(call, [replace(item, vector=vec) for item, vec in zip(fresh, vectors, strict=True)],
                                verdicts)


def drop_exact_duplicates(
    call: CallContext, pending: tuple[PendingMemory, ...], seen: set[tuple[str, str | None, str]] | None = None,
) -> tuple[list[PendingMemory], list[Verdict]]:
    """The pending memories that are no exact duplicate of an active record of their scope, of an earlier
    pending one or of a ``seen`` key (records about to be written in the same put, see
    :func:`~.pipeline.remember_many`), and a NOOP verdict for each one dropped."""
    with call.timer.stage("dedup"):
        existing: set[tuple[str, str | None, str]] = set(seen or ())
        for scope_key in {(p.record.memory_scope, p.record.session_id) for p in pending}:
            existing.update(_dedup_keys(call, Scope.of(*scope_key)))
        dups = set(exact_duplicates(pending, existing))
    fresh = [item for i, item in enumerate(pending) if i not in dups]
    return fresh, [Verdict("NOOP", "exact_duplicate", summary=pending[i].record.summary) for i in sorted(dups)]


def consolidate_embedded(call: CallContext, fresh: list[PendingMemory], verdicts: list[Verdict]) -> Consolidation:
    """:func:`consolidate` after deduplication, of non-duplicate memories with their vectors set."""
    fresh = _judge_near_duplicates(call, fresh, verdicts)
    to_store = _apply_actions(call, fresh, verdicts)
    return Consolidation(tuple(to_store), tuple(verdicts))


def _near_duplicates(call: CallContext, fresh: list[PendingMemory]) -> list[tuple[int, list[MemoryRecord]]]:
    cfg = call.config.consolidate
    asks: list[tuple[int, list[MemoryRecord]]] = []
    for i, item in enumerate(fresh):
        if item.action != "ADD" or item.reason == "raw_turn":
            continue
        view = call.view(_scope_of(item.record))
        if not len(view):
            continue
        found, _ = view.similar(item.vector, cfg.similarity_threshold, pool_min_records=call.params.pool_min_records,
                                pool_size=call.params.pool_size)
        near: list[MemoryRecord] = []
        for j in found.tolist():
            record = view.records[j]
            if record.extracted and record.id not in item.shown:
                near.append(record)
                if len(near) == cfg.max_neighbors:
                    break
        if near:
            asks.append((i, near))
    return asks


def _judge_near_duplicates(
    call: CallContext, fresh: list[PendingMemory], verdicts: list[Verdict]
) -> list[PendingMemory]:
    if not call.config.consolidate.enabled:
        return fresh
    asks = _near_duplicates(call, fresh)
    if not asks:
        return fresh
    if call.model is None:
        verdicts += [Verdict("ADD", "near_duplicate_unjudged", summary=fresh[i].record.summary,
                             neighbors=tuple(r.id for r in near)) for i, near in asks]
        return fresh
    asked = call.ask(
        PhaseRequest(
            "consolidate", instruct=INSTRUCTS["consolidate"], output=output_shape(ConsolidateReply),
            input={
                "new_memories": [
                    {"index": i, "scope": fresh[i].record.memory_scope, "summary": fresh[i].record.summary,
                     "body": fresh[i].record.body,
                     "existing": [{"id": r.id, "summary": r.summary, "body": r.body} for r in near]}
                    for i, near in asks
                ],
            },
            max_tokens=default_max_tokens("consolidate", len(asks)),
        ),
        ConsolidateReply, attempts=2,
    )
    if asked.reply is None:
        verdicts.append(Verdict("ADD", "consolidate_failed", error=asked.error))
        return fresh
    allowed = {i: {r.id: r for r in near} for i, near in asks}
    out = list(fresh)
    for decision in asked.reply.decisions:
        targets = allowed.get(decision.index)
        if targets is None or decision.action == "ADD":
            continue
        item = out[decision.index]
        target = targets.get(decision.target_id or "")
        if target is None:
            verdicts.append(Verdict("ADD", "invalid_target", summary=item.record.summary))
            continue
        merged: Mapping[str, Any] | None = item.merged
        if decision.action == "UPDATE" and (decision.summary or decision.body):
            merged = {k: v for k, v in (("summary", decision.summary), ("body", decision.body)) if v}
        out[decision.index] = replace(item, action=decision.action, target_id=target.id, reason="consolidate",
                                      target=target, merged=merged)
    return out


def _apply_actions(
    call: CallContext, fresh: list[PendingMemory], verdicts: list[Verdict]
) -> list[tuple[MemoryRecord, Any]]:
    out: list[tuple[MemoryRecord, Any]] = []
    reembed: list[int] = []
    superseded: dict[str, MemoryRecord] = {}
    for item in fresh:
        record, action, reason = item.record, item.action, item.reason
        if action in ("UPDATE", "SUPERSEDE") and item.target_id in superseded:
            # Two new memories replacing one record: the first replaces it, the second is added.
            action, reason = "ADD", "target_already_replaced"
        if action == "NOOP":
            verdicts.append(Verdict("NOOP", reason, target_id=item.target_id, summary=record.summary))
            continue
        if action in ("UPDATE", "SUPERSEDE"):
            target = item.target
            assert target is not None  # set together with target_id by extract / the consolidate judgment
            merged = dict(item.merged or {})
            changes: dict[str, Any] = {"supersedes": target.id, **merged}
            changes["provenance"] = record.provenance.model_copy(update={"consolidation": action.lower()})
            try:
                record = MemoryRecord.model_validate(record.model_copy(update=changes).model_dump())
            except ValidationError as e:  # a merged summary/body the record contract rejects
                verdicts.append(Verdict(action, "invalid_merge", error=ErrorInfo.of(e)))
                changes = {k: v for k, v in changes.items() if k not in ("summary", "body")}
                record = MemoryRecord.model_validate(record.model_copy(update=changes).model_dump())
                merged = {}
            if merged:
                reembed.append(len(out))
            superseded[target.id] = supersede(target, record.id)
            verdicts.append(Verdict(action, reason, id=record.id, target_id=target.id, summary=record.summary))
        else:
            verdicts.append(Verdict("ADD", reason, id=record.id, summary=record.summary))
        out.append((record, item.vector))
    if reembed:
        with call.timer.stage("embed_memories"):
            vecs = call.store.embedder.embed_documents([out[i][0].document() for i in reembed])
        for i, vec in zip(reembed, vecs, strict=True):
            out[i] = (out[i][0], vec)
    if superseded:
        old_vectors = call.store.get_vectors(list(superseded))
        out.extend(zip(superseded.values(), old_vectors, strict=True))
    return out


# ---------------------------------------------------------------------------------------------- store
def store(call: CallContext, consolidation: Consolidation) -> StoreResult:
    """Write everything of this turn in one Workspace put (validated as a whole first)."""
    items = consolidation.to_store
    if not items:
        return StoreResult()
    with call.timer.stage("store"):
        stored = call.store.put([r for r, _ in items], vectors=np.asarray([v for _, v in items], dtype=np.float32))
    return StoreResult(tuple(stored))


def store_many(
    call: CallContext, consolidations: Sequence[Consolidation], also: Sequence[tuple[MemoryRecord, Any]] = (),
) -> list[StoreResult]:
    """Write everything of several turns, and ``also`` (records with their vectors, e.g. the importer's
    progress), in one Workspace put: all of it or, when the put fails, nothing. One result per turn."""
    items = [item for c in consolidations for item in c.to_store] + list(also)
    if not items:
        return [StoreResult() for _ in consolidations]
    with call.timer.stage("store"):
        stored = call.store.put([r for r, _ in items], vectors=np.asarray([v for _, v in items], dtype=np.float32))
    out, start = [], 0
    for c in consolidations:
        out.append(StoreResult(tuple(stored[start:start + len(c.to_store)])))
        start += len(c.to_store)
    return out
