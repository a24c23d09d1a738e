"""The parameters of the hybrid candidate retriever (:func:`~agently_vecmem.search.candidates.retrieve_candidates`).

How each default was chosen, with the figures, is in ``agently_vecmem/eval/RESULTS.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..errors import ConfigurationError

__all__ = ["Method", "METHODS", "RetrievalParams", "DEFAULT_PARAMS"]

Method = Literal["hybrid", "dense", "lexical", "rrf"]
METHODS: tuple[str, ...] = ("hybrid", "dense", "lexical", "rrf")


@dataclass(frozen=True)
class RetrievalParams:
    """Parameters of :func:`retrieve_candidates`.

    The defaults are the best general setting found on LoCoMo (a step was kept only when it helped both
    halves of its conversations) and, for the lexical limits, the CJK weight and the date boost, on the
    bilingual probe's tune half with LoCoMo as a constraint. Which grid chose each one, and its figures:
    ``agently_vecmem/eval/RESULTS.md``, "Tuning grids behind RetrievalParams".

    Attributes:
        k1: BM25 term-frequency saturation.
        b: BM25 length normalization.
        dense_weight: weight of the z-scored dense signal; the lexical signal gets ``1 - dense_weight``.
        prf_docs: how many first-pass records feed dense pseudo-relevance feedback (0 disables it).
        prf_weight: weight of their mean vector added to the query vector.
        neighbor_weight: share of the best adjacent turn's fused score added to a record (0 disables it).
        neighbor_window: how many turns on each side give context.
        neighbor_decay: weight multiplier per extra turn of distance (``d``-th neighbour:
            ``neighbor_weight·neighbor_decay^(d-1)``).
        session_weight: share of the best fused score of the record's session added to it (0 disables it).
        tag_boost: added (in z-score units) to records carrying any requested tag.
        date_boost: added (in z-score units) to records whose ``occurred_at`` falls in a period the query
            names with its year (``0`` disables it). Chosen on the probe's date questions with LoCoMo's
            user's path as a constraint.
        rrf_k: the RRF constant of the ``"rrf"`` baseline.
        multilingual_dense: for a query with Chinese, Japanese or Korean text over a store embedded with an
            English-only model, take the dense signal from the multilingual models when installed
            (:mod:`.multilingual`); ``False`` always uses the stored vectors.
        cjk_dense_weight: ``dense_weight`` for a CJK query whose dense signal is multilingual: CJK lexical
            terms are character n-grams, noisier than stemmed words, so one shared bigram should not outweigh
            the meaning. Chosen on the probe's tune half together with the e5 + USE blend.
        cjk_space_weight: ``dense_weight`` for a CJK query whose dense signal comes from the store's
            multilingual spaces (:mod:`.spaces`).
        space_centroid: how much of a multilingual space's mean vector over the scope is taken off the query
            (:func:`~agently_vecmem.search.multilingual.space_dense_scores`; ``0`` disables it). Chosen on the
            probe's tune half among filler (``eval probe --filler``): ``agently_vecmem/eval/RESULTS.md``.
        english_space_weight: for a query without CJK text over a store with the ``e5`` space, the share of
            that space's z-scored similarity (with the centroid term, ``space_centroid``) in the dense signal, the
            rest MiniLM's (``0`` disables it; a pooled scope, ``pool_min_records``, uses MiniLM alone). Chosen on
            the probe's tune half among filler with LoCoMo dev as a constraint (``agently_vecmem/eval/RESULTS.md``).
        lexical_z_cap: the largest z-score the lexical signal may reach in the fusion (``0`` disables it).
            Off by default, superseded by the two limits below: it caps strong and weak matches alike, which
            cost recall on LoCoMo's user's path.
        lexical_term_z: about how many standard units one matched query term may add: the BM25 spread is at
            least ``mean idf of the query's known terms / lexical_term_z`` (``0`` disables the floor). Acts
            only when few records share a query word, where the plain z-score overrates the match.
        lexical_coverage_power: each record's BM25 is multiplied by ``coverage^lexical_coverage_power``, the
            idf-weighted share of the query's distinct terms it contains (:meth:`.lexical.BM25Index.coverage`;
            ``0`` disables it). Chosen together with ``lexical_term_z`` on one grid.
        lexical_short_length: in a scope whose records average at most this many index terms (one-line
            facts), the best-scoring query term a record shares earns it nothing: only a second shared term
            and beyond count (``0`` disables it). The best term counts more as records grow, in full from...
        lexical_full_length: ...this mean length up (linearly between the two), so long records are unchanged.
        pool_min_records: from this many records in a scope, a hybrid query scores a pool of likely candidates
            instead of every record (the dense ones found through a sketch of the vectors, :mod:`.sketch`):
            approximate, and far cheaper at a million records (``benchmarks/RESULTS.md``, "Large scopes: a
            pool of candidates"); ``0`` always scores every record. Below it (every scope measured on LoCoMo
            and the probes) retrieval is exact.
        pool_size: how many records of each signal (dense and lexical) the pool takes.
    """

    k1: float = 1.2
    b: float = 0.5
    dense_weight: float = 0.5
    prf_docs: int = 0
    prf_weight: float = 0.5
    neighbor_weight: float = 0.5
    neighbor_window: int = 2
    neighbor_decay: float = 0.4
    session_weight: float = 0.4
    tag_boost: float = 0.5
    rrf_k: int = 60
    multilingual_dense: bool = True
    cjk_dense_weight: float = 0.9
    cjk_space_weight: float = 0.8
    space_centroid: float = 0.5
    english_space_weight: float = 0.4
    lexical_z_cap: float = 0.0
    lexical_term_z: float = 3.0
    lexical_coverage_power: float = 0.25
    lexical_short_length: float = 8.0
    lexical_full_length: float = 16.0
    date_boost: float = 2.0
    pool_min_records: int = 200_000
    pool_size: int = 2000

    def __post_init__(self) -> None:
        if not all(0.0 <= w <= 1.0 for w in (self.dense_weight, self.cjk_dense_weight, self.cjk_space_weight,
                                             self.english_space_weight)):
            raise ConfigurationError("dense_weight, cjk_dense_weight, cjk_space_weight and english_space_weight must be "
                                     "in [0, 1]")
        if not 0.0 <= self.space_centroid <= 1.0:
            raise ConfigurationError("space_centroid must be in [0, 1]")
        if min(self.lexical_z_cap, self.lexical_term_z, self.lexical_coverage_power, self.lexical_short_length,
               self.date_boost) < 0:
            raise ConfigurationError("lexical_z_cap, lexical_term_z, lexical_coverage_power, lexical_short_length and "
                                     "date_boost must be >= 0 (0 disables each)")
        if self.lexical_short_length > 0 and self.lexical_full_length <= self.lexical_short_length:
            raise ConfigurationError("lexical_full_length must be above lexical_short_length")
        if self.neighbor_window < 0 or not 0.0 <= self.neighbor_decay <= 1.0:
            raise ConfigurationError("neighbor_window must be >= 0 and neighbor_decay in [0, 1]")
        if min(self.prf_docs, self.prf_weight, self.neighbor_weight, self.session_weight) < 0 or self.rrf_k <= 0:
            raise ConfigurationError("prf_docs, prf_weight, neighbor_weight, session_weight must be >= 0; rrf_k > 0")
        if self.pool_min_records < 0 or self.pool_size < 1:
            raise ConfigurationError("pool_min_records must be >= 0 (0: never pool) and pool_size >= 1")


DEFAULT_PARAMS = RetrievalParams()
