"""The candidate stage: deterministic hybrid retrieval over one scope snapshot (no model involved).

:func:`retrieve_candidates` is the single retrieval entry point, used by the memory plugin for its
candidate stage and by the evaluation harness (:mod:`agently_vecmem.eval`) for both the tuned method and
the baselines, so what is measured is what runs.

The ``"hybrid"`` method (default):

1. **Two signals** over every record of the scope: dense cosine similarity (``view.dense_scores``) and
   Okapi BM25 over the stemmed, stopword-free record documents (:mod:`.lexical`).
2. **Calibrated score fusion**: each signal is standardized over the scope for this query (mean 0, std 1),
   then combined as ``dense_weight·z(dense) + (1-dense_weight)·z(bm25)``. Unlike rank fusion (RRF) this
   keeps *how much* better the best match is. The lexical signal is sized by its evidence, not only by
   its spread: when only a few records share a query word, most score 0 and the plain z-score of the few
   grows like ``sqrt(n / matches)``, so one shared common word outvoted the meaning. Three limits, all on
   by default:

   * **one matched term is worth about ``lexical_term_z`` standard units**: the BM25 spread is at least
     the mean idf of the query's terms divided by ``lexical_term_z`` (a floor under the standard
     deviation), so a record needs several matched terms, not a sparse distribution, to reach a large z;
     over a broad BM25 distribution (many records share query words) the floor is below the standard
     deviation and changes nothing;
   * **a partial match is partial evidence**: each record's BM25 is multiplied by
     ``coverage^lexical_coverage_power``, its idf-weighted share of the query's distinct terms (a term no
     record contains counts, unmatched, with the idf of an unseen term), so one common word out of five
     counts less than most of the question;
   * **in one-line records, the best shared word is no evidence**: in a scope whose records average at
     most ``lexical_short_length`` index terms (short facts), each record's BM25 loses the score of its
     best-scoring query term, so only a second shared term and beyond count; the discount fades linearly
     to nothing at ``lexical_full_length`` terms, so conversation turns and transcripts are unchanged. A
     six-word fact that shares one word with a paraphrased question mostly shares it by chance, and the
     embedding of so short a text already holds all of it. A CJK text has about two index terms per
     character (bigrams and ideographs), so CJK scopes rarely count as short.

   The same limits apply to CJK queries (their terms are character bigrams and ideographs, :mod:`.cjk`),
   whose fusion uses ``cjk_dense_weight``. The older ``lexical_z_cap`` (best lexical z at most the cap)
   stays available, off by default.
3. **Dense pseudo-relevance feedback** (Rocchio): the query vector is moved towards the mean vector of the
   ``prf_docs`` best first-pass records (``q' = q + prf_weight·mean``), dense scores are recomputed and
   fused again. Conversational memories paraphrase each other, so the top hits pull in their siblings.
4. **Neighbouring-turn context**: a record gains ``neighbor_weight`` × the better fused score of its
   immediate predecessor/successor, plus ``neighbor_weight·neighbor_decay`` × the better of the turns two
   away, and so on up to ``neighbor_window`` turns, in conversation order (same ``provenance.session_id`` and
   ``provenance.session``, ordered by ``provenance.position``/``turn_index``, then ``created_at``). Answers
   often sit one turn after the turn that shares the question's words. Records without a position are not
   turns of a conversation and have no neighbours.
5. **Session-level evidence**: a record gains ``session_weight`` × the best fused score inside its
   conversation session (same group as for neighbours), so turns of the session that talks about the
   question's topic rise together. Records without a ``provenance.session`` form one group per scope,
   where this term is a constant and changes nothing.
6. **Tags**: when ``tags`` are given, records carrying any of them gain ``tag_boost`` (a boost, never a
   filter: untagged records can still win when they match much better).
7. **Dates**: when the query names a calendar period with its year ("in May 2023", "on 7 July, 2023",
   "2023年5月", :mod:`.dates`), records whose ``occurred_at`` falls in it gain ``date_boost`` (a boost too;
   records without ``occurred_at`` are not dated and get nothing).

Baselines through the same function: ``"dense"`` (cosine), ``"lexical"`` (BM25 with the same tokenizer),
``"rrf"`` (reciprocal-rank fusion of the two, constant ``rrf_k``).

For every method, a query with Chinese, Japanese or Korean text over a store embedded with an English-only
model takes its dense signal from a multilingual model computed in-process (:mod:`.multilingual`), and a
CJK query with a multilingual dense signal is fused with ``cjk_dense_weight`` instead of ``dense_weight``.

**Large scopes** (``pool_min_records`` records and more, 200,000 by default): reading every vector costs ~100
ms per query at 1M records, so a hybrid query scores a *pool* instead (:func:`_pool_scores`): the records
nearest the query through a sketch of the vectors (:mod:`.sketch`), the best by the lexical signal, the records
of a period the query names and their conversation neighbours, each scored as above. The pool is approximate
(it may miss a record of the exact top 10: ``benchmarks/bench_pool.py`` measures how often); every smaller
scope, and :func:`score_view` always, is scored exactly. No step of a pooled query passes over every record
but the sketch's: the lexical signals are computed at the records with a query term only
(:meth:`.lexical.BM25Index.match`), and the sketch's best rows are partitioned from above a threshold taken on
a sample of its scores (:func:`.scoring.top_unordered`).

Scores are deterministic: ties are broken by position in the snapshot. What each step buys, and how the
defaults were chosen: ``agently_vecmem/eval/RESULTS.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..errors import ConfigurationError
from ..records import MemoryRecord
from .cjk import has_cjk
from .dates import query_periods
from .lexical import Match, bm25_for_view
from .multilingual import (
    english_space_scores,
    multilingual_cjk_query,
    multilingual_dense_scores,
    space_dense_scores,
)
from .params import DEFAULT_PARAMS, METHODS, Method, RetrievalParams
from .scoring import at_positions, dense_scores, find_sorted, top_k, zscore
from .view import ScopeView, keep_on_rewrite

__all__ = [
    "Candidate",
    "retrieve_candidates",
    "score_view",
    "neighbor_indices",
]

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class Candidate:
    """One retrieved record with its score breakdown.

    Attributes:
        record: the memory record.
        score: the final score of the method (higher is better; comparable only within one query).
        dense: the dense signal: cosine similarity to the (original) query vector, or for a CJK query over an
            English-only store the multilingual signal of :mod:`.multilingual` (a cosine, or a blend of
            z-scores when two models are used).
        lexical: raw BM25 score.
        rank: 1-based rank.
        index: position of the record in the scope snapshot.
        components: named parts of the score (e.g. ``fused``, ``neighbor``, ``tag``).
    """

    record: MemoryRecord
    score: float
    dense: float
    lexical: float
    rank: int
    index: int
    components: dict[str, float] = field(default_factory=dict, compare=False)


#: The lexical match of any query in an empty scope.
_NO_MATCH = Match(0, np.zeros(0, dtype=np.int64), *(np.zeros(0, dtype=np.float32),) * 4)


def _first_term_discount(avgdl: float, params: RetrievalParams) -> float:
    """How much of a record's best-scoring shared term is taken off its BM25 in a scope whose records average
    ``avgdl`` index terms: 1 up to ``lexical_short_length``, 0 from ``lexical_full_length``, linear between."""
    short, full = params.lexical_short_length, params.lexical_full_length
    if short <= 0 or avgdl >= full:
        return 0.0
    return min(1.0, (full - avgdl) / (full - short))


def _lexical_z(match: Match, view: ScopeView, params: RetrievalParams) -> tuple[np.ndarray, np.ndarray, float]:
    """The lexical signal of a query in the fusion: BM25 in standard units, with evidence-sized limits.

    In a scope of short records, each record's BM25 first loses ``discount`` × the score of its best single
    query term (:func:`_first_term_discount`, :meth:`.lexical.BM25Index.best_term_scores`). Then
    ``x = bm25 · coverage^lexical_coverage_power`` (coverage: the idf-weighted share of the query's terms the
    record contains, :meth:`.lexical.BM25Index.coverage`), centred on its mean and divided by
    ``max(std(bm25), mean idf of the query's terms / lexical_term_z, (max - mean) / lexical_z_cap)`` (each
    floor only when its parameter is > 0). Without them this is the plain z-score.

    Every record without a BM25 score has the same value, so the work is over the records that have one
    (``match``: the query's :meth:`.lexical.BM25Index.match` in the scope's index; the scope's mean and spread
    counted over all of them, in float64).

    Returns:
        ``(rows, z, rest)``: the positions with a BM25 score (ascending), their value, and every other
        record's value.
    """
    p_cov, unit_z, cap = params.lexical_coverage_power, params.lexical_term_z, params.lexical_z_cap
    n, rows, lex = match.n_docs, match.rows, match.bm25
    if n == 0:
        return rows, lex, 0.0
    discount = _first_term_discount(bm25_for_view(view, k1=params.k1, b=params.b).avgdl, params)
    if discount > 0:
        # one-line facts: on the probe's English half, all 15 questions that dense ranked right and hybrid
        # wrong lost to a fact sharing exactly one word with them (eval/RESULTS.md, "Short facts")
        lex = np.maximum(lex - np.float32(discount) * match.best, 0)
    mean, spread = _moments(lex, n)
    x = lex
    if p_cov > 0 or unit_z > 0:
        idf = match.idf
        if p_cov > 0:
            x = lex * np.power(match.coverage, p_cov, dtype=np.float32)
        if unit_z > 0 and idf.size:
            spread = max(spread, float(idf.mean()) / unit_z)
    if cap > 0:
        # the cap: the best lexical z is at most ``cap`` (scaled, not clipped, so the order is kept)
        spread = max(spread, (max(float(lex.max()) if lex.size else 0.0, 0.0) - mean) / cap)
    shift, unit = _moments(x, n)[0], (spread if spread > 1e-9 else 1.0)
    return rows, ((x - shift) / unit).astype(np.float32), -shift / unit


def _moments(values: np.ndarray, n: int) -> tuple[float, float]:
    """Mean and standard deviation over ``n`` values: ``values`` and ``n - len(values)`` zeros."""
    v = values.astype(np.float64)
    mean = float(v.sum()) / n
    return mean, max(float(v @ v) / n - mean * mean, 0.0) ** 0.5


def _lexical_z_full(match: Match, view: ScopeView, params: RetrievalParams) -> np.ndarray:
    """:func:`_lexical_z` for every record of the scope."""
    rows, z, rest = _lexical_z(match, view, params)
    out = np.full(match.n_docs, rest, dtype=np.float32)
    out[rows] = z
    return out


class _OrderColumns(NamedTuple):
    """Conversation-order sort columns of a snapshot's records: a group id per record (numbered by first
    appearance of ``(provenance.session_id, provenance.session)``), whether the record lacks a numeric
    position, the position, and the creation time."""

    groups: dict[tuple[str, str], int]
    gid: np.ndarray
    no_pos: np.ndarray
    pos: np.ndarray
    created: np.ndarray

    def extended(self, records: Sequence[MemoryRecord]) -> _OrderColumns:
        """These columns followed by those of ``records`` (this object is not modified)."""
        groups = dict(self.groups)
        gid, no_pos, pos, created = [], [], [], []
        for record in records:
            prov = record.provenance.model_dump()
            key = (str(prov.get("session_id") or record.session_id or ""), str(prov.get("session", "")))
            gid.append(groups.setdefault(key, len(groups)))
            p = prov.get("position", prov.get("turn_index"))
            numeric = isinstance(p, (int, float))
            no_pos.append(not numeric)
            pos.append(float(p) if isinstance(p, (int, float)) else 0.0)
            created.append(record.created_at)
        return _OrderColumns(
            groups,
            np.concatenate([self.gid, np.asarray(gid, dtype=np.int64)]),
            np.concatenate([self.no_pos, np.asarray(no_pos, dtype=bool)]),
            np.concatenate([self.pos, np.asarray(pos, dtype=np.float64)]),
            np.concatenate([self.created, np.asarray(created, dtype=np.float64)]),
        )

    def without(self, keep: np.ndarray) -> _OrderColumns:
        """The columns of the records where ``keep`` is True, groups numbered again by first appearance (as
        :meth:`extended` numbers them over those records)."""
        gid = self.gid[keep]
        _, first = np.unique(gid, return_index=True)
        seen = gid[np.sort(first)]  # old group ids in order of first appearance
        renumber = np.full(len(self.groups), -1, dtype=np.int64)
        renumber[seen] = np.arange(seen.shape[0], dtype=np.int64)
        groups = {key: int(renumber[g]) for key, g in self.groups.items() if renumber[g] >= 0}
        return _OrderColumns(groups, renumber[gid], self.no_pos[keep], self.pos[keep], self.created[keep])


_NO_COLUMNS = _OrderColumns({}, np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.float64),
                            np.zeros(0, np.float64))


def _same_conversation_order(old: MemoryRecord, new: MemoryRecord) -> bool:
    """Whether a record rewritten in place keeps what :class:`_OrderColumns` reads from it."""
    return (old.provenance == new.provenance and old.session_id == new.session_id
            and old.created_at == new.created_at)


keep_on_rewrite("order_columns", _same_conversation_order, drop=lambda columns, keep, _: columns.without(keep))
for _name in ("neighbors", "session_groups", "linked"):  # cheap to link again from the order columns when rows go
    keep_on_rewrite(_name, _same_conversation_order)
keep_on_rewrite("occurred_at", lambda old, new: old.occurred_at == new.occurred_at, drop=lambda a, keep, _: a[keep])


def neighbor_indices(view: ScopeView) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Previous/next record of each record in conversation order (``-1`` when none) and a session group
    id per record, cached per snapshot.

    Conversation order groups records by ``(provenance.session_id, provenance.session)`` and sorts a group
    by ``provenance.position`` (or ``turn_index``), then ``created_at``, then snapshot position. Records
    without a provenance position have no neighbours (``-1`` both ways) but keep their group id.
    """
    return view.cached("neighbors", _link_neighbors)


def _order_columns(view: ScopeView) -> _OrderColumns:
    """The snapshot's sort columns (extended, not recomputed, when a write only appended records)."""
    return view.cached(
        "order_columns",
        lambda v: _NO_COLUMNS.extended(v.records),
        lambda old, v, n: old.extended(v.records[n:]),
    )


def _link_neighbors(view: ScopeView) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = len(view.records)
    cols = _order_columns(view)
    order = np.lexsort((np.arange(n), cols.created, cols.pos, cols.no_pos, cols.gid))
    # Only records with a conversation position are turns with neighbours: facts stored without one
    # (imported notes, GLOBAL memories put directly) are independent, and linking them by creation time
    # lent each one its unrelated predecessor's score (the probe's figures: eval/RESULTS.md, bilingual probe).
    has_pos = ~cols.no_pos
    same = (cols.gid[order[1:]] == cols.gid[order[:-1]]) & has_pos[order[1:]] & has_pos[order[:-1]]
    before, after = order[:-1][same], order[1:][same]
    prev = np.full(n, -1, dtype=np.int64)
    nxt = np.full(n, -1, dtype=np.int64)
    nxt[before], prev[after] = after, before
    return prev, nxt, cols.gid


def _session_groups(view: ScopeView) -> tuple[np.ndarray, np.ndarray]:
    """Records sorted by session group, with the group start offsets (for ``np.maximum.reduceat``)."""

    def build(v: ScopeView) -> tuple[np.ndarray, np.ndarray]:
        group = neighbor_indices(v)[2]
        by_group = np.argsort(group, kind="stable")
        return by_group, np.flatnonzero(np.r_[True, np.diff(group[by_group]) != 0])

    return view.cached("session_groups", build)


def _neighbor_context(fused: np.ndarray, prev: np.ndarray, nxt: np.ndarray, params: RetrievalParams,
                      linked: np.ndarray | None = None) -> np.ndarray:
    """``sum_d neighbor_weight·decay^(d-1)·max(fused[i-d], fused[i+d])`` over ``d = 1..neighbor_window``,
    computed at the positions ``linked`` lists (None: all); 0 elsewhere (a record without neighbours)."""
    padded = np.append(fused, -np.inf).astype(np.float32)
    out = np.zeros(fused.shape[0], dtype=np.float32)
    at = slice(None) if linked is None else linked
    back, fwd = prev[at], nxt[at]
    part = np.zeros(back.shape[0], dtype=np.float32)
    weight = params.neighbor_weight
    for _ in range(params.neighbor_window):
        best = np.maximum(padded[back], padded[fwd])
        part += np.where(np.isfinite(best), weight * best, 0.0).astype(np.float32)
        # -1 indexes the -inf pad, so chains stop at session boundaries
        back = np.where(back >= 0, prev[back], -1)
        fwd = np.where(fwd >= 0, nxt[fwd], -1)
        weight *= params.neighbor_decay
    out[at] = part
    return out


def _linked(view: ScopeView) -> np.ndarray:
    """The positions of the records that have a neighbour (turns of a conversation; facts have none)."""
    def build(v: ScopeView) -> np.ndarray:
        prev, nxt, _ = neighbor_indices(v)
        return np.flatnonzero((prev >= 0) | (nxt >= 0))

    return view.cached("linked", build)


def _date_mask(view: ScopeView, periods: Sequence[tuple[float, float]]) -> np.ndarray:
    """Whether each record's ``occurred_at`` falls in any of ``periods`` (records without one: never)."""

    def times(records: Sequence[MemoryRecord]) -> np.ndarray:
        return np.fromiter((np.nan if r.occurred_at is None else r.occurred_at for r in records),
                           dtype=np.float64, count=len(records))

    occurred = view.cached("occurred_at", lambda v: times(v.records),
                           lambda old, v, k: np.concatenate([old, times(v.records[k:])]))
    mask = np.zeros(occurred.shape[0], dtype=bool)
    for start, end in periods:
        mask |= (occurred >= start) & (occurred < end)  # NaN compares False
    return mask


def _tag_mask(records: Sequence[MemoryRecord], tags: Sequence[str]) -> np.ndarray:
    wanted = {t.strip() for t in tags if t and t.strip()}
    return np.fromiter((bool(wanted.intersection(r.tags)) for r in records), dtype=bool, count=len(records))


def _ranks(scores: np.ndarray) -> np.ndarray:
    order = np.lexsort((np.arange(scores.size), -scores))
    ranks = np.empty(scores.size, dtype=np.int64)
    ranks[order] = np.arange(1, scores.size + 1)
    return ranks


def _query_vector(view: ScopeView, query_vector: np.ndarray) -> np.ndarray:
    qvec = np.asarray(query_vector, dtype=np.float32).reshape(-1)
    if len(view) and qvec.shape[0] != view.dim:
        raise ConfigurationError(f"query vector has dimension {qvec.shape[0]}, the scope's vectors {view.dim}")
    return qvec


def _pooled(view: ScopeView, query_text: str, params: RetrievalParams, method: Method) -> bool:
    """Whether :func:`retrieve_candidates` scores a pool (:func:`_pool_scores`) instead of every record: a
    hybrid query over a scope of at least ``pool_min_records`` (not 0) whose dense signal is the stored
    vectors (a CJK query that a multilingual space or model would answer is scored exactly)."""
    return (method == "hybrid" and 0 < params.pool_min_records <= len(view)
            and not (params.multilingual_dense and has_cjk(query_text)))


def score_view(
    view: ScopeView,
    query_text: str,
    query_vector: np.ndarray,
    *,
    params: RetrievalParams = DEFAULT_PARAMS,
    tags: Sequence[str] = (),
    method: Method = "hybrid",
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Score every record of a snapshot (the vectorized core of :func:`retrieve_candidates`), exactly, at
    every scope size.

    Returns:
        ``(scores, components)``: the final score per record and named per-record arrays
        (always ``dense`` and ``lexical``; for hybrid also ``fused``, ``neighbor``, ``tag``).

    Raises:
        ValueError: unknown method or a query vector of the wrong dimension.
    """
    if method not in METHODS:
        raise ConfigurationError(f"unknown retrieval method {method!r}; use one of {', '.join(METHODS)}")
    n = len(view)
    qvec = _query_vector(view, query_vector)
    # a CJK query over an English-only store: the dense signal comes from a multilingual model (.multilingual)
    use_alt = params.multilingual_dense and n and method != "lexical"
    # (from the store's multilingual space when it has one; else, as before spaces, computed in-process)
    alt = space_dense_scores(view, query_text, params.space_centroid) if use_alt else None
    from_space = alt is not None
    if use_alt and alt is None:
        alt = multilingual_dense_scores(view, query_text)
    if alt is not None:
        dense = alt
    else:
        dense = view.dense_scores(qvec) if n else np.zeros(0, dtype=np.float32)
        if params.english_space_weight > 0 and n and method == "hybrid":  # (the baselines stay MiniLM's)
            extra = english_space_scores(view, query_text, params.space_centroid)
            if extra is not None:
                beta = np.float32(params.english_space_weight)
                dense = ((1 - beta) * zscore(dense) + beta * zscore(extra)).astype(np.float32)
    match = bm25_for_view(view, k1=params.k1, b=params.b).match(query_text) if n else _NO_MATCH
    lexical = match.dense(match.bm25)
    comps: dict[str, np.ndarray] = {"dense": dense, "lexical": lexical}
    if method == "dense":
        scores = dense.copy()
    elif method == "lexical":
        scores = lexical.copy()
    elif method == "rrf":
        scores = (1.0 / (params.rrf_k + _ranks(dense)) + 1.0 / (params.rrf_k + _ranks(lexical))).astype(np.float32)
    else:
        cjk = alt is not None or multilingual_cjk_query(view, query_text)
        w = params.cjk_space_weight if from_space else params.cjk_dense_weight if cjk else params.dense_weight
        lex_z = _lexical_z_full(match, view, params)
        fused = w * zscore(dense) + (1.0 - w) * lex_z
        if params.prf_docs > 0 and params.prf_weight > 0 and n > params.prf_docs and alt is None:
            top = top_k(fused, params.prf_docs)
            expanded = qvec + params.prf_weight * view.rows(top).mean(axis=0)
            expanded /= max(float(np.linalg.norm(expanded)), 1e-9)
            fused = w * zscore(view.dense_scores(expanded)) + (1.0 - w) * lex_z
        links = groups = None
        if (params.neighbor_weight > 0 or params.session_weight > 0) and n > 1:
            prev, nxt, group = neighbor_indices(view)
            links, groups = (prev, nxt, _linked(view)), (group, *_session_groups(view))
        periods = query_periods(query_text) if params.date_boost > 0 and n else []
        scores = _with_context(fused, comps, params, links, groups,
                               _tag_mask(view.records, tags) if tags and params.tag_boost else None,
                               _date_mask(view, periods) if periods else None)
    return scores.astype(np.float32), comps


def _with_context(fused: np.ndarray, comps: dict[str, np.ndarray], params: RetrievalParams,
                  links: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None,
                  groups: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
                  tag: np.ndarray | None, date: np.ndarray | None) -> np.ndarray:
    """The hybrid score: ``fused`` plus the neighbour, session, tag and date terms (steps 4-7), each kept in
    ``comps`` by name. ``links``: ``(prev, nxt, linked)`` (:func:`_neighbor_context`); ``groups``:
    ``(group, by_group, starts)`` (:func:`_session_groups`); ``tag``/``date``: the records' masks."""
    comps["fused"] = fused
    scores = fused.copy()
    if links is not None and params.neighbor_weight > 0:
        neighbor = _neighbor_context(fused, *links[:2], params, links[2])
        scores = scores + neighbor
        comps["neighbor"] = neighbor
    if groups is not None and params.session_weight > 0:
        group, by_group, starts = groups
        session_best = np.maximum.reduceat(fused[by_group], starts)
        session = (params.session_weight * session_best[group]).astype(np.float32)
        scores = scores + session
        comps["session"] = session
    for name, mask, boost in (("tag", tag, params.tag_boost), ("date", date, params.date_boost)):
        if mask is not None:
            term = mask * np.float32(boost)
            scores = scores + term
            comps[name] = term
    return scores


def _pool_scores(view: ScopeView, query_text: str, qvec: np.ndarray, params: RetrievalParams,
                 tags: Sequence[str]) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Hybrid scores of a large scope's likely candidates only (``params.pool_min_records``): its pool.

    The pool is the ``pool_size`` records nearest the query through the rows' sketch
    (:meth:`.view.ScopeView.dense_pool`), the ``pool_size`` best by the lexical signal, the records in a
    period the query names (when at most ``4 · pool_size``), and their conversation neighbours up to
    ``neighbor_window`` turns. Each is scored as :func:`score_view` scores it, with the dense signal's mean
    and spread over the scope estimated on the sketch's sample and the lexical signal's exact; a neighbour or
    a session member outside the pool counts as absent. Approximate in which records are scored, and, over a
    scope loaded from its snapshot, in the dense scores' last digits (the sketch's half-width rows:
    :meth:`.view.ScopeView.pool_rows`); recall against the exact path: ``benchmarks/bench_pool.py``.

    Returns:
        ``(positions, scores, components)``: the pool (ascending positions) and its arrays.
    """
    n = len(view)
    size = params.pool_size
    near = view.dense_pool(qvec, size)
    match = bm25_for_view(view, k1=params.k1, b=params.b).match(query_text)
    lex_rows, lex_z, lex_rest = _lexical_z(match, view, params)
    core = np.union1d(near, lex_rows[top_k(lex_z, size)])
    periods = query_periods(query_text) if params.date_boost > 0 else []
    dated = _date_mask(view, periods) if periods else None
    if dated is not None:
        in_period = np.flatnonzero(dated)
        if in_period.size <= 4 * size:
            core = np.union1d(core, in_period)
    prev, nxt, group = neighbor_indices(view)
    parts, edge = [core], core
    for _ in range(params.neighbor_window if params.neighbor_weight > 0 else 0):
        edge = np.concatenate([prev[edge], nxt[edge]])
        edge = edge[edge >= 0]
        parts.append(edge)
    pool = np.unique(np.concatenate(parts))  # (one sort of every part, not one per turn of the window)
    w = params.cjk_dense_weight if multilingual_cjk_query(view, query_text) else params.dense_weight
    z = at_positions(lex_rows, lex_z, lex_rest, pool)
    vectors = view.pool_rows(pool)  # gathered once: the feedback pass scores the same rows again

    def fuse(query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dense = dense_scores(vectors, query)
        mean, std = view.dense_moments(query)
        return dense, (w * (dense - np.float32(mean)) / np.float32(std if std > 1e-9 else 1.0) + (1.0 - w) * z)

    dense, fused = fuse(qvec)
    if params.prf_docs > 0 and params.prf_weight > 0 and n > params.prf_docs:
        expanded = qvec + params.prf_weight * vectors[top_k(fused, params.prf_docs)].mean(axis=0)
        fused = fuse(expanded / max(float(np.linalg.norm(expanded)), 1e-9))[1]
    fused = fused.astype(np.float32)
    comps: dict[str, np.ndarray] = {"dense": dense, "lexical": match.at(match.bm25, pool)}
    links = (find_sorted(pool, prev[pool]), find_sorted(pool, nxt[pool]), None)
    _, slot = np.unique(group[pool], return_inverse=True)
    by_group = np.argsort(slot, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(slot[by_group]) != 0])
    scores = _with_context(fused, comps, params, links if n > 1 else None, (slot, by_group, starts) if n > 1 else None,
                           _tag_mask([view.records[int(i)] for i in pool], tags) if tags and params.tag_boost else None,
                           None if dated is None else dated[pool])
    return pool, scores.astype(np.float32), comps


def warm_view(view: ScopeView, params: RetrievalParams = DEFAULT_PARAMS) -> None:
    """Build the structures a first retrieval over ``view`` needs (BM25 index, conversation neighbours, and the
    sketch of a scope large enough for the pool) now: before a snapshot is persisted, so a fresh process loads
    them instead of building."""
    if len(view):
        bm25_for_view(view, k1=params.k1, b=params.b)
        _session_groups(view)
        if 0 < params.pool_min_records <= len(view):
            view.build_sketch()


def retrieve_candidates(
    view: ScopeView,
    query_text: str,
    query_vector: np.ndarray,
    *,
    k: int,
    params: RetrievalParams = DEFAULT_PARAMS,
    tags: Sequence[str] = (),
    method: Method = "hybrid",
) -> list[Candidate]:
    """The top-``k`` records of a scope snapshot for a query: a pure, deterministic function.

    Args:
        view: the scope snapshot (``workspace.view(scope)``); its BM25 index and neighbour links are
            cached in ``view.derived``.
        query_text: the query as text (for BM25).
        query_vector: the query embedding (``workspace.embed_query(text)``), same model as the scope.
        k: how many candidates to return (fewer when the scope is smaller).
        params: scoring parameters (default :data:`DEFAULT_PARAMS`).
        tags: records carrying any of these tags get ``params.tag_boost`` added to their score
            (hybrid only). A boost, not a filter: untagged records are still returned.
        method: ``"hybrid"`` (default), or a baseline: ``"dense"``, ``"lexical"`` (BM25), ``"rrf"``.

    Returns:
        Candidates sorted by score (best first, ties by snapshot position), one per record, ranks 1..k. From
        ``params.pool_min_records`` records, a hybrid query's candidates come from a pool (module docstring,
        "Large scopes").

    Raises:
        ValueError: ``k`` < 1, unknown method, or a query vector of the wrong dimension.

    Example:
        >>> view = workspace.view(Scope.session_memory("conv-26"))            # doctest: +SKIP
        >>> qvec = workspace.embed_query("When did Caroline paint a sunrise?")  # doctest: +SKIP
        >>> [c.record.summary for c in retrieve_candidates(view, "When ...", qvec, k=5)]  # doctest: +SKIP
    """
    if k < 1:
        raise ConfigurationError("k must be a positive integer")
    if len(view) == 0:
        return []
    if _pooled(view, query_text, params, method):
        positions, scores, comps = _pool_scores(view, query_text, _query_vector(view, query_vector), params, tags)
    else:
        positions = None
        scores, comps = score_view(view, query_text, query_vector, params=params, tags=tags, method=method)
    out: list[Candidate] = []
    seen: set[str] = set()
    for i in top_k(scores, min(len(scores), k + 8)):
        rec = view.records[int(i if positions is None else positions[i])]
        if rec.id in seen:  # a snapshot holds one row per id; guard anyway
            continue
        seen.add(rec.id)
        parts = {name: float(arr[i]) for name, arr in comps.items()}
        out.append(Candidate(rec, float(scores[i]), parts["dense"], parts["lexical"], len(out) + 1,
                             int(i if positions is None else positions[i]), parts))
        if len(out) == k:
            break
    return out
