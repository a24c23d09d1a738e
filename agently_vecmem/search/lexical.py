"""Lexical retrieval: a text normalizer/tokenizer and an Okapi BM25 index over a scope snapshot.

The tokenizer lowercases, folds unicode (NFKC), drops possessive ``'s``, splits on anything that is not a
letter or digit, removes English stopwords and stems with a small rule-based stemmer (Porter's steps
1a-1c plus a few derivational suffixes), so ``"paintings"``, ``"painted"`` and ``"painting"`` all become
``"paint"``. A run of Chinese, Japanese or Korean characters becomes character bigrams plus its single
ideographs (:mod:`.cjk`), term by term inside mixed text; digits lose leading zeros; in text with CJK an
ISO or Chinese date also gives a year-month term (``2023年5月``).

:class:`BM25Index` stores postings in append-only segments of sorted numpy keys (term, document) with their
term frequencies, and computes BM25's statistics for a query's terms when it is asked: scoring is one
``np.bincount`` over the postings of the query's terms, appending documents costs their tokens, and removing
some a mask (:meth:`BM25Index.extend`, :meth:`BM25Index.without`). :func:`bm25_for_view` caches the index in
``ScopeView.derived`` so it is built once per immutable snapshot and extended by the next, and :func:`tokenize`
keeps an LRU cache keyed by text, so a rebuild does not re-tokenize the records (of a scope of up to 8,192).

Example:
    >>> index = BM25Index.build(["Caroline painted a sunrise", "Melanie runs"])
    >>> [round(float(s), 3) for s in index.scores("who paints sunrises?")]
    [1.281, 0.0]
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from ..errors import ConfigurationError
from .cjk import CJK_CHARS, cjk_terms, has_cjk
from .scoring import at_positions
from .view import keep_on_rewrite, keeps_holes

__all__ = ["STOPWORDS", "stem", "tokenize", "BM25Index", "Match", "bm25_for_view"]

#: English function words that carry no retrieval signal (question words included: every question has them).
STOPWORDS: frozenset[str] = frozenset(
    """
    a about above after again against all am an and any are aren as at be because been before being below
    between both but by can could couldn did didn do does doesn doing don down during each few for from
    further had hadn has hasn have haven having he her here hers herself him himself his how i if in into
    is isn it its itself just ll me might more most must my myself no nor not now of off on once only or
    other our ours ourselves out over own re s same shall she should so some such t than that the their
    theirs them themselves then there these they this those through to too under until up us ve very was
    wasn we were weren what when where which while who whom whose why will with won would wouldn you your
    yours yourself yourselves also yet ever yeah yes oh hey hi wow really got get gets
    """.split()
)

_TOKEN_RE = re.compile(r"[^\W_]+", re.UNICODE)
#: A CJK run, or a run of other letters/digits (so ``我用thinkpad`` splits into ``我用`` and ``thinkpad``).
_MIXED_TOKEN_RE = re.compile(f"([{CJK_CHARS}]+)|[^\\W_{CJK_CHARS}]+", re.UNICODE)
_POSSESSIVE_RE = re.compile(r"(\w)['’]s\b")
#: ISO dates (``2023-05-12``) and Chinese/Japanese dates (``2023年5月``, ``2023年5月12日``): in text with CJK
#: they also give a year-month term, so ``2023年5月`` finds the record dated ``2023-05-12``.
_DATE_RE = re.compile(r"(\d{4})(?:-(\d{1,2})-\d{1,2}|\s*年\s*(\d{1,2})\s*月)")
_VOWELS = frozenset("aeiou")


def _is_consonant(word: str, i: int) -> bool:
    ch = word[i]
    if ch in _VOWELS:
        return False
    if ch == "y":
        return i == 0 or not _is_consonant(word, i - 1)
    return True


def _measure(stem_: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in ``stem_``."""
    m, prev_vowel = 0, False
    for i in range(len(stem_)):
        cons = _is_consonant(stem_, i)
        if cons and prev_vowel:
            m += 1
        prev_vowel = not cons
    return m


def _has_vowel(stem_: str) -> bool:
    return any(not _is_consonant(stem_, i) for i in range(len(stem_)))


def _ends_cvc(word: str) -> bool:
    if len(word) < 3:
        return False
    return (
        _is_consonant(word, -3 % len(word))
        and not _is_consonant(word, len(word) - 2)
        and _is_consonant(word, len(word) - 1)
        and word[-1] not in "wxy"
    )


_STEP2 = (
    ("ational", "ate"), ("tional", "tion"), ("ization", "ize"), ("iveness", "ive"), ("fulness", "ful"),
    ("ousness", "ous"), ("ation", "ate"), ("ness", ""), ("ment", ""), ("ful", ""), ("li", ""),
)


@lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """Reduce an English word to a crude stem (Porter steps 1a-1c plus common derivational suffixes).

    Args:
        word: a lowercase token.

    Returns:
        The stem; words of three characters or fewer and digits are returned unchanged.
    """
    if len(word) <= 3 or not word.isalpha():
        return word
    # step 1a: plurals
    if word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("ies"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    # step 1b: -eed, -ed, -ing
    if word.endswith("eed"):
        if _measure(word[:-3]) > 0:
            word = word[:-1]
    else:
        for suffix in ("ed", "ing"):
            if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]) and len(word) - len(suffix) >= 3:
                word = word[: -len(suffix)]
                if word.endswith(("at", "bl", "iz")):
                    word += "e"
                elif len(word) > 2 and word[-1] == word[-2] and word[-1] not in "lsz":
                    word = word[:-1]
                elif _measure(word) == 1 and _ends_cvc(word):
                    word += "e"
                break
    # step 1c: y -> i after a vowel-bearing stem
    if word.endswith("y") and _has_vowel(word[:-1]) and len(word) > 3:
        word = word[:-1] + "i"
    # a few derivational suffixes (only when a real stem remains)
    for suffix, repl in _STEP2:
        if word.endswith(suffix) and _measure(word[: -len(suffix)]) > 0 and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)] + repl
            break
    # Porter step 5a: a final silent e is dropped so "dance"/"danced"/"dancing" meet at "danc"
    if word.endswith("e") and len(word) > 3:
        m = _measure(word[:-1])
        if m > 1 or (m == 1 and not _ends_cvc(word[:-1])):
            word = word[:-1]
    return word


@lru_cache(maxsize=131_072)
def tokenize(text: str) -> tuple[str, ...]:
    """Normalize, split, drop stopwords and stem a text. Cached by text (LRU, 131k entries).

    Args:
        text: any text (a record document or a query).

    Returns:
        The index terms, in text order (duplicates kept: term frequency matters).
    """
    norm = unicodedata.normalize("NFKC", text).lower()
    norm = _POSSESSIVE_RE.sub(r"\1", norm)
    out: list[str] = []
    if not has_cjk(norm):
        for tok in _TOKEN_RE.findall(norm):
            if tok in STOPWORDS or (len(tok) == 1 and not tok.isdigit()):
                continue
            out.append(_number(tok) if tok.isdigit() else stem(tok))
        return tuple(out)
    for match in _MIXED_TOKEN_RE.finditer(norm):
        if match.group(1):
            out.extend(cjk_terms(match.group(1)))
            continue
        tok = match.group(0)
        if tok in STOPWORDS or (len(tok) == 1 and not tok.isdigit()):
            continue
        out.append(_number(tok) if tok.isdigit() else stem(tok))
    out.extend(f"{m.group(1)}年{int(m.group(2) or m.group(3))}月" for m in _DATE_RE.finditer(norm))
    return tuple(out)


def _number(tok: str) -> str:
    """Digits without leading zeros, so ``2023-05-12`` and ``2023年5月`` share the month term ``5``."""
    return tok.lstrip("0") or "0"


class _Segment(NamedTuple):
    """Postings of some documents: sorted unique keys ``term << 32 | document`` and their term frequencies."""

    keys: np.ndarray  # int64
    tf: np.ndarray  # float32


class _Term(NamedTuple):
    """One query term's live postings: positions (ascending), BM25 weights, and the term's idf."""

    token: str
    positions: np.ndarray
    weights: np.ndarray
    idf: float


@dataclass(frozen=True, eq=False)
class BM25Index:
    """An immutable Okapi BM25 index in append-only segments.

    Documents have a physical number (their order of indexing) and a position (their index in the snapshot:
    the physical order without the removed ones). Postings are kept per segment as sorted keys ``term << 32 |
    physical document`` with raw term frequencies; BM25's statistics (document frequency, idf, the
    length-normalized weight of each posting) are computed at query time for the query's terms only, so
    :meth:`extend` costs the new documents (a small segment; segments of similar size are merged, so a scope
    has O(log n) of them) and :meth:`without` a mask over the documents (postings of removed ones are
    skipped, and dropped once they pass an eighth of the kept documents), not a pass over every posting.
    Every score equals a fresh :meth:`build` over the same documents, bit for bit.

    Attributes:
        k1: term-frequency saturation.
        b: document-length normalization.
        n_docs: number of documents.
        vocab: term → term id, every term indexed so far (shared and only grown by the indexes extended from
            one build; a term no document of this index contains has no postings here).
        segments: the postings, oldest documents first.
        lengths: ``(n_physical,)`` float32 token count of each physical document.
        position: ``(n_physical,)`` int64 position of each physical document, -1 when removed (None: no
            document was removed, physical number = position).
        doc_lengths: ``(n_docs,)`` float32 token count of each document, by position.
        avgdl: mean document length in index terms (1.0 when no document has any), the length BM25
            normalizes by.
    """

    k1: float
    b: float
    n_docs: int
    vocab: dict[str, int]
    segments: tuple[_Segment, ...] = field(repr=False)
    lengths: np.ndarray = field(repr=False)
    position: np.ndarray | None = field(repr=False)
    doc_lengths: np.ndarray = field(repr=False)
    avgdl: float = 1.0

    @classmethod
    def build(cls, documents: Sequence[str], *, k1: float = 1.2, b: float = 0.75) -> BM25Index:
        """Index ``documents`` (tokenized through the cached :func:`tokenize` when there are few of them).

        Args:
            documents: the texts, position = document id.
            k1: term-frequency saturation (>= 0).
            b: length normalization in [0, 1].

        Raises:
            ValueError: ``k1`` or ``b`` out of range.
        """
        if k1 < 0 or not 0.0 <= b <= 1.0:
            raise ConfigurationError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        vocab: dict[str, int] = {}
        keys, tf, lengths = _postings(documents, vocab, 0)
        return cls._of(k1, b, vocab, (_Segment(keys, tf),), lengths, None, lengths)

    @classmethod
    def _of(cls, k1: float, b: float, vocab: dict[str, int], segments: tuple[_Segment, ...], lengths: np.ndarray,
            position: np.ndarray | None, doc_lengths: np.ndarray) -> BM25Index:
        n = doc_lengths.shape[0]
        avgdl = float(doc_lengths.mean()) if n and doc_lengths.sum() > 0 else 1.0
        return cls(k1, b, n, vocab, segments, lengths, position, doc_lengths, avgdl)

    def extend(self, documents: Sequence[str]) -> BM25Index:
        """The index of this index's documents followed by ``documents`` (positions ``n_docs, n_docs+1, ...``),
        scoring as :meth:`build` over all of them, at the cost of the new documents' tokens (a new segment,
        merged with its predecessors while they are not more than twice its size) and a copy of the
        per-document lengths (4-12 bytes a document). This index is not modified."""
        physical = self.lengths.shape[0]
        keys, tf, lengths = _postings(documents, self.vocab, physical)
        position = self.position
        if position is not None:
            position = np.concatenate([position, np.arange(self.n_docs, self.n_docs + len(documents))])
        return self._of(self.k1, self.b, self.vocab, _merged(self.segments + (_Segment(keys, tf),)),
                        np.concatenate([self.lengths, lengths]), position,
                        np.concatenate([self.doc_lengths, lengths]))

    def without(self, keep: np.ndarray) -> BM25Index:
        """The index of the documents where the boolean array ``keep`` (by position) is True, renumbered in
        order, scoring as :meth:`build` over them: a mask over the documents, the postings shared; once the
        removed documents pass an eighth of the kept ones, the postings are filtered once. This index is not
        modified."""
        live = np.arange(self.n_docs) if self.position is None else np.flatnonzero(self.position >= 0)
        kept = live[keep]
        position = np.full(self.lengths.shape[0], -1, dtype=np.int64)
        position[kept] = np.arange(kept.shape[0])
        doc_lengths = self.doc_lengths[keep]
        if keeps_holes(self.lengths.shape[0] - kept.shape[0], kept.shape[0]):
            return self._of(self.k1, self.b, self.vocab, self.segments, self.lengths, position, doc_lengths)
        keys = np.concatenate([s.keys for s in self.segments])
        tf = np.concatenate([s.tf for s in self.segments])
        at = position[keys & _DOC_MASK]
        alive = at >= 0
        keys, tf = ((keys[alive] >> _DOC_BITS) << _DOC_BITS) | at[alive], tf[alive]
        if len(self.segments) > 1:  # each segment is sorted (positions keep the order), their concatenation not
            order = np.argsort(keys)
            keys, tf = keys[order], tf[order]
        return self._of(self.k1, self.b, self.vocab, (_Segment(keys, tf),), doc_lengths, None, doc_lengths)

    def _term(self, token: str) -> _Term | None:
        """The live postings of an index term with their weights and the term's idf (None: in no document)."""
        tid = self.vocab.get(token)
        if tid is None:
            return None
        lo, hi = tid << _DOC_BITS, (tid + 1) << _DOC_BITS
        docs, tfs = [], []
        for seg in self.segments:
            i, j = np.searchsorted(seg.keys, (lo, hi))
            if j > i:
                docs.append(seg.keys[i:j] & _DOC_MASK)
                tfs.append(seg.tf[i:j])
        if not docs:
            return None
        physical, tf = (docs[0], tfs[0]) if len(docs) == 1 else (np.concatenate(docs), np.concatenate(tfs))
        positions = physical
        if self.position is not None:
            positions = self.position[physical]
            alive = positions >= 0
            if not alive.all():
                positions, tf, physical = positions[alive], tf[alive], physical[alive]
                if not positions.shape[0]:
                    return None
        df = float(positions.shape[0])
        norm = self.k1 * (1.0 - self.b + self.b * self.lengths[physical] / self.avgdl)
        weights = (tf * (self.k1 + 1.0) / (tf + norm)).astype(np.float32)
        return _Term(token, positions, weights, float(np.float32(np.log1p((self.n_docs - df + 0.5) / (df + 0.5)))))

    def _terms(self, tokens: Sequence[str]) -> list[_Term]:
        """The distinct query terms some document contains, in order of first appearance. The last query's are
        kept (hybrid retrieval asks :meth:`scores`, :meth:`best_term_scores` and :meth:`coverage` in turn)."""
        key = tuple(tokens)
        last = self.__dict__.get("_last")
        if last is not None and last[0] == key:
            return last[1]
        terms = [t for t in map(self._term, dict.fromkeys(key)) if t is not None]
        self.__dict__["_last"] = (key, terms)  # one assignment: safe beside readers in other threads
        return terms

    def __getstate__(self) -> dict[str, Any]:
        """The index without its last query's terms (what a persisted snapshot pickles)."""
        return {k: v for k, v in self.__dict__.items() if k != "_last"}

    def idf_of(self, term: str) -> float | None:
        """The idf of an index term (a token of :func:`tokenize`), None when no document contains it."""
        got = self._term(term)
        return None if got is None else got.idf

    def unseen_idf(self) -> float:
        """The idf of a term no document contains (``df = 0``): the rarest a term can be in this index."""
        return math.log1p((self.n_docs + 0.5) / 0.5)

    def match(self, query: str, *, term_weights: dict[str, float] | None = None) -> Match:
        """The documents containing any of the query's terms, with every per-document signal of the query at
        them (:class:`Match`): work in the query's postings, never a pass over every document (at 1M records
        a query's terms are in ~2% of them: ~0.6 ms here, where the scores of every document took ~5 ms).

        Args:
            query: the query text (tokenized like documents; repeated query terms count once).
            term_weights: optional multipliers of the BM25 score per (stemmed) term, e.g. for query
                expansion (terms not in the query are added; the coverage and best-term score ignore them).
        """
        tokens = list(tokenize(query))
        known = self._terms(tokens)
        scored = known
        if term_weights:
            scored = self._terms(tokens + [t for t in term_weights if t not in tokens])
        idf = np.array([t.idf for t in known], dtype=np.float32)
        empty = np.zeros(0, dtype=np.float32)
        if not scored or self.n_docs == 0:
            return Match(self.n_docs, np.zeros(0, dtype=np.int64), empty, empty, empty, idf)
        rows, slots = self._union([t.positions for t in scored])
        weights = [t.weights * (t.idf * (term_weights or {}).get(t.token, 1.0)) for t in scored]
        # one float64 sum per document, over its terms in query order: bit for bit the scores of a bincount
        # over every document
        bm25 = np.bincount(np.concatenate(slots), weights=np.concatenate(weights), minlength=rows.shape[0])
        best = np.zeros(rows.shape[0], dtype=np.float32)
        coverage = np.zeros(rows.shape[0], dtype=np.float32)
        known_slots = slots[:len(known)]  # (the query's own terms come first among the scored)
        total = float(idf.sum()) + (len(set(tokens)) - len(known)) * self.unseen_idf()
        if known:
            for t, at in zip(known, known_slots, strict=True):
                np.maximum.at(best, at, t.weights * t.idf)
            if total > 0:
                mass = np.concatenate([np.full(at.shape[0], w, dtype=np.float64) for at, w in zip(known_slots, idf,
                                                                                                    strict=True)])
                coverage = (np.bincount(np.concatenate(known_slots), weights=mass, minlength=rows.shape[0])
                            / total).astype(np.float32)
        return Match(self.n_docs, rows, bm25.astype(np.float32), best, coverage, idf)

    def _union(self, positions: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """The ascending distinct documents of several postings' positions, and where each position is among
        them: sorted when the postings are few, through a mask over the documents when many (both the same)."""
        joined = np.concatenate(positions)
        if joined.shape[0] * 8 <= self.n_docs:
            rows, inverse = np.unique(joined, return_inverse=True)
        else:
            seen = np.zeros(self.n_docs, dtype=bool)
            seen[joined] = True
            rows = np.flatnonzero(seen)
            inverse = np.searchsorted(rows, joined)
        bounds = np.cumsum([p.shape[0] for p in positions])[:-1]
        return rows, np.split(inverse, bounds)

    def coverage(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """How much of the query each document matches, and the idf of the query's known terms.

        Coverage is the idf-weighted share of the query's distinct terms a document contains:
        ``sum(idf of matched terms) / sum(idf of all query terms)``, where a query term no document contains
        counts with :meth:`unseen_idf` (it is the query's most specific word, and nothing matches it).
        One shared common word out of several rarer ones is then a small share.

        Returns:
            ``(coverage, idf)``: float32 ``(n_docs,)`` values in [0, 1] (all 0 when the query has no terms
            or the index no documents), and the float32 idf of each distinct query term the index knows.
        """
        got = self.match(query)
        return got.dense(got.coverage), got.idf

    def best_term_scores(self, query: str) -> np.ndarray:
        """The largest single-term share of each document's BM25 for ``query`` (float32, ``(n_docs,)``): the
        score of its best-scoring query term alone, 0 where it matches none. A document matching one query
        term scores exactly this in :meth:`scores`."""
        got = self.match(query)
        return got.dense(got.best)

    def scores(self, query: str, *, term_weights: dict[str, float] | None = None) -> np.ndarray:
        """BM25 score of every document for ``query`` (float32, shape ``(n_docs,)``).

        Args:
            query: the query text (tokenized like documents; repeated query terms count once).
            term_weights: optional multipliers per (stemmed) term, e.g. for query expansion.
        """
        got = self.match(query, term_weights=term_weights)
        return got.dense(got.bm25)


class Match(NamedTuple):
    """A query's lexical signals at the documents containing any of its terms (:meth:`BM25Index.match`);
    every other document scores 0 in each."""

    n_docs: int
    #: the documents (positions, ascending) containing a query term
    rows: np.ndarray
    #: float32 BM25 score at ``rows``
    bm25: np.ndarray
    #: float32 score of the best-scoring single query term at ``rows`` (:meth:`BM25Index.best_term_scores`)
    best: np.ndarray
    #: float32 idf-weighted share of the query's terms at ``rows`` (:meth:`BM25Index.coverage`)
    coverage: np.ndarray
    #: float32 idf of each distinct query term some document contains
    idf: np.ndarray

    def dense(self, values: np.ndarray) -> np.ndarray:
        """``values`` (one per row) for every document, 0 where the query matches nothing (float32)."""
        out = np.zeros(self.n_docs, dtype=np.float32)
        out[self.rows] = values
        return out

    def at(self, values: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """``values`` (one per row) at some documents' ``positions``, 0 where the query matches nothing."""
        return at_positions(self.rows, values, 0.0, positions)


_DOC_BITS = 32
_MAX_DOCS = 1 << _DOC_BITS
_DOC_MASK = _MAX_DOCS - 1


def _merged(segments: tuple[_Segment, ...]) -> tuple[_Segment, ...]:
    """``segments`` with the newest merged into its predecessor while that is at most twice its size: O(log n)
    segments, each posting merged O(log n) times."""
    segs = list(segments)
    while len(segs) > 1 and segs[-2].keys.shape[0] <= 2 * segs[-1].keys.shape[0]:
        new = segs.pop()
        old = segs.pop()
        at = np.searchsorted(old.keys, new.keys)  # new documents have larger numbers: after their term's old ones
        segs.append(_Segment(np.insert(old.keys, at, new.keys), np.insert(old.tf, at, new.tf)))
    return tuple(segs)


#: Guards the assignment of new term ids in a vocabulary shared by indexes extended in several threads.
_VOCAB_LOCK = threading.Lock()


#: Documents indexed at once past which they are tokenized without :func:`tokenize`'s cache: a big scope's
#: build would only churn it (it holds fewer entries than such a scope has records), and the texts and tokens
#: it kept, allocated among the scope's whole read, held a first worker's memory: after reading 100k records
#: from Chroma and serving them from their snapshot, 354k more small objects in 3.3x the allocator's arenas
#: than a worker that loaded the snapshot (``tracemalloc``, ``sys._debugmallocstats``).
_CACHED_BUILD_MAX = 8_192


def _postings(documents: Sequence[str], vocab: dict[str, int], first_id: int) -> tuple[np.ndarray, ...]:
    """Sorted unique posting keys (``term << 32 | doc``) with term frequencies, and the document lengths, of
    ``documents`` numbered from ``first_id``; new terms are added to ``vocab`` in order of appearance."""
    split = tokenize if len(documents) <= _CACHED_BUILD_MAX else tokenize.__wrapped__
    tokens = [split(doc) for doc in documents]
    lengths = np.array([len(toks) for toks in tokens], dtype=np.float32)
    with _VOCAB_LOCK:
        term_ids = [vocab.setdefault(t, len(vocab)) for toks in tokens for t in toks]
    tids = np.asarray(term_ids, dtype=np.int64)
    dids = np.repeat(np.arange(first_id, first_id + len(documents), dtype=np.int64), lengths.astype(np.int64))
    keys, tf = np.unique((tids << _DOC_BITS) | dids, return_counts=True)
    return keys, tf.astype(np.float32), lengths


def bm25_for_view(view: Any, *, k1: float = 1.2, b: float = 0.75) -> BM25Index:
    """The BM25 index of a :class:`~agently_vecmem.search.view.ScopeView`, built once per snapshot.

    The index is cached in ``view.derived`` under ``("bm25", k1, b)``; a snapshot that only appended records
    to an indexed one extends that index (the new records' tokens), any other builds it anew (reusing the
    tokenization cache).
    """
    return view.cached(
        ("bm25", float(k1), float(b)),
        lambda v: BM25Index.build(v.documents, k1=k1, b=b),
        lambda old, v, n: old.extend(v.documents[n:]),
    )


keep_on_rewrite("bm25", drop=lambda index, keep, _: index.without(keep))  # built from the documents alone
