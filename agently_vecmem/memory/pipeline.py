"""One plugin call, top to bottom: the two memory pipelines and the diagnostics built from their values.

Retrieval (``VecMemory.prepare_request``, before each model request)::

    RetrievalRequest ─ make_plan ─> Plan ─ find_candidates ─> {scope: ScopeCandidates}
        ─ judge ─> Judgment ─ package_scopes ─> {scope: ScopePackage} ─> Retrieved

Remembering (``VecMemory.after_turn``, after each completed turn; ``reextract_pending`` per raw turn)::

    Turn ─ extract ─> Extraction ─ forget_requested ─> Forgetting ─ consolidate ─> Consolidation ─ store
        ─> StoreResult ─> Remembered

Without a model, :func:`remember_many` runs the same stages over many turns with one embedding batch and
one put (the importer's path, ``VecMemory.after_turns_sync``).

Every stage reads the Workspace through its :class:`~.context.CallContext` (one snapshot per scope per
call) and asks the model through the call's :class:`~.budget.ModelBudget` (at most ``1 + retries``
requests per phase, counted locally, never raising because of the model). The diagnostics dict the
plugin returns and keeps is built once, at the end, by :func:`retrieval_diagnostics` /
:func:`turn_diagnostics` / :func:`reextract_diagnostics` from the frozen values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ConfigurationError
from ..records import MemoryRecord, record_ref
from .context import CallContext
from .pending import dedup_key, supersede
from .remembering import (
    Consolidation,
    Extraction,
    Forgetting,
    StoreResult,
    Turn,
    consolidate,
    consolidate_embedded,
    drop_exact_duplicates,
    extract,
    forget_requested,
    store,
    store_many,
)
from .retrieval import Plan, RetrievalRequest, ScopePackage, find_candidates, judge, make_plan, package_scopes

__all__ = [
    "Retrieved",
    "Remembered",
    "Reextracted",
    "retrieve",
    "remember",
    "remember_many",
    "reextract",
    "retrieval_diagnostics",
    "turn_diagnostics",
    "reextract_diagnostics",
]


@dataclass(frozen=True)
class Retrieved:
    """The final plan and the packages to inject, per scope name."""

    plan: Plan
    packages: dict[str, ScopePackage]


@dataclass(frozen=True)
class Remembered:
    """A turn's extraction, consolidation and what was written."""

    extraction: Extraction
    consolidation: Consolidation
    stored: StoreResult
    forgetting: Forgetting = Forgetting()


@dataclass(frozen=True)
class Reextracted:
    """One raw turn run through extraction again; ``remembered`` is None when the extraction failed."""

    raw_id: str
    extraction: Extraction
    remembered: Remembered | None = None


# ---------------------------------------------------------------------------------------------- retrieval
def retrieve(call: CallContext, request: RetrievalRequest) -> Retrieved:
    """plan → candidates → judgment → fallbacks → packages."""
    plan = make_plan(call, request)
    candidates = find_candidates(call, plan, request)
    judgment = judge(call, plan, candidates, request)
    packages = package_scopes(call, candidates, judgment, query=plan.query)
    return Retrieved(judgment.plan, packages)


def retrieval_diagnostics(call: CallContext, retrieved: Retrieved) -> dict[str, Any]:
    """``prepare_request``'s diagnostics: degraded, plan, packages, timings_ms, model_calls."""
    packages = {name: pkg.diagnostics() for name, pkg in retrieved.packages.items()}
    degraded = (retrieved.plan.status.degraded and call.model is not None) or any(
        pkg.rerank.degraded for pkg in retrieved.packages.values()
    )
    signal = call.multilingual_signal(retrieved.plan.query)
    return {"degraded": degraded, "plan": retrieved.plan.diagnostics(), "packages": packages,
            **({"multilingual": signal} if signal else {}), **call.accounting()}


# ---------------------------------------------------------------------------------------------- remembering
def remember(call: CallContext, turn: Turn) -> Remembered:
    """extract → forget → dedup → consolidate → store."""
    extraction = extract(call, turn)
    forgetting, pending = forget_requested(call, extraction)
    consolidation = consolidate(call, pending)
    return Remembered(extraction, consolidation, store(call, consolidation), forgetting)


def remember_many(
    call: CallContext, turns: Sequence[Turn], *, also: Sequence[tuple[MemoryRecord, Any]] = (),
) -> list[Remembered]:
    """Turns without a model (each kept as a raw turn), as :func:`remember` would keep them one after another
    (each deduplicated against the store and the turns before it), with one embedding batch and one put that
    also writes ``also`` (records with their vectors): all of it, or nothing when the put fails.

    Raises:
        ConfigurationError: the call has a model (extraction is per turn: use :func:`remember`).
    """
    if call.model is not None:
        raise ConfigurationError("remember_many is the path without a model; with one, remember each turn")
    seen: set[tuple[str, str | None, str]] = set()
    prepared = []
    for turn in turns:
        extraction = extract(call, turn)  # the raw turn: no model, no I/O
        forgetting, pending = forget_requested(call, extraction)  # nothing to forget without a model
        fresh, verdicts = drop_exact_duplicates(call, pending, seen)
        seen.update(dedup_key(p.record) for p in fresh)
        prepared.append((extraction, forgetting, fresh, verdicts))
    docs = [p.record.document() for _, _, fresh, _ in prepared for p in fresh]
    vectors: Any = ()
    if docs:
        with call.timer.stage("embed_memories"):
            vectors = call.store.embedder.embed_documents(docs)
    consolidations, start = [], 0
    for _, _, fresh, verdicts in prepared:
        if not fresh:
            consolidations.append(Consolidation((), tuple(verdicts)))
            continue
        embedded = [replace(p, vector=vectors[start + i]) for i, p in enumerate(fresh)]
        start += len(fresh)
        consolidations.append(consolidate_embedded(call, embedded, verdicts))
    stored = store_many(call, consolidations, also)
    return [Remembered(extraction, consolidation, result, forgetting)
            for (extraction, forgetting, _, _), consolidation, result in zip(prepared, consolidations, stored,
                                                                              strict=True)]


def turn_diagnostics(call: CallContext, remembered: Remembered) -> dict[str, Any]:
    """``after_turn``'s diagnostics: stored, refs, superseded, the extraction's, consolidation, accounting."""
    stored = remembered.stored
    return {
        "enabled": True,
        "degraded": remembered.extraction.degraded or remembered.consolidation.degraded,
        "stored": len(stored.active),
        "refs": [record_ref(r) for r in stored.active],
        "superseded": [r.id for r in stored.superseded],
        **remembered.extraction.diagnostics(),
        "consolidation": remembered.consolidation.diagnostics(),
        **({"forgotten": remembered.forgetting.diagnostics()} if remembered.forgetting else {}),
        **call.accounting(),
    }


def reextract(call: CallContext, raw: MemoryRecord) -> Reextracted:
    """A raw turn through the remembering pipeline again; on success the raw turn is marked superseded
    (pointing at the first new memory, or at nothing when the turn held nothing new)."""
    turn = Turn(
        session_id=raw.provenance.session_id or raw.session_id or "",
        user_content=raw.body.get("user"), assistant_content=raw.body.get("assistant"),
        turn_index=raw.provenance.turn_index or 0, keep_raw=False, occurred_at=raw.occurred_at,
    )
    extraction = extract(call, turn)
    if extraction.degraded:
        return Reextracted(raw.id, extraction)
    forgetting, pending = forget_requested(call, extraction)
    consolidation = consolidate(call, pending)
    stored = store(call, consolidation)
    new_ids = [r.id for r in stored.active]
    with call.timer.stage("store"):
        call.store.put(supersede(raw, new_ids[0] if new_ids else None), vectors=call.store.get_vectors([raw.id]))
    call.forget_views()  # the next raw turn must see what this one wrote
    return Reextracted(raw.id, extraction, Remembered(extraction, consolidation, stored, forgetting))


def reextract_diagnostics(call: CallContext, results: list[Reextracted]) -> dict[str, Any]:
    """``reextract_pending``'s diagnostics: pending, done, per-turn results, accounting."""
    rows = []
    for result in results:
        if result.remembered is None:
            rows.append({"id": result.raw_id, **result.extraction.diagnostics()})
            continue
        new_ids = [r.id for r in result.remembered.stored.active]
        rows.append({"id": result.raw_id, "stored": len(new_ids), "new_ids": new_ids,
                     "consolidation": result.remembered.consolidation.diagnostics()})
    return {
        "pending": len(results),
        "done": sum(1 for r in results if r.remembered is not None),
        "results": rows,
        **call.accounting(),
    }
