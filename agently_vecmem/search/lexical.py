"""Lexical retrieval: a text normalizer/tokenizer and an Okapi BM25 index over a scope snapshot.

The tokenizer lowercases, folds unicode (NFKC), drops possessive ``'s``, splits on anything that is not a
letter or digit, removes English stopwords and stems with a small rule-based stemmer (Porter's steps
1a-1c plus a few derivational suffixes), so ``"paintings"``, ``"painted"`` and ``"painting"`` all become
``"paint"``. A run of Chinese, Japanese or Korean characters becomes character bigrams plus its single
ideographs (:mod:`.cjk`), term by term inside mixed text; digits lose leading zeros; in text with CJK an
ISO or Chinese date also gives a year-month term (``2023年5月``).

:class:`BM25Index` stores postings in a compressed-sparse-row layout built with numpy: for each term the
documents it occurs in and a precomputed per-posting weight ``tf·(k1+1) / (tf + k1·(1-b+b·dl/avgdl))``.
Scoring a query is then one ``np.bincount`` over the postings of its terms. :func:`bm25_for_view` caches
the index in ``ScopeView.derived`` so it is built once per immutable snapshot, and :func:`tokenize` keeps
an LRU cache keyed by text, so rebuilding after one new record does not re-tokenize the others.

Example:
    >>> index = BM25Index.build(["Caroline painted a sunrise", "Melanie runs"])
    >>> [round(float(s), 3) for s in index.scores("who paints sunrises?")]
    [1.281, 0.0]
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from ..errors import ConfigurationError
from .cjk import CJK_CHARS, cjk_terms, has_cjk
from .view import keep_on_rewrite

__all__ = ["STOPWORDS", "stem", "tokenize", "BM25Index", "bm25_for_view"]

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


@dataclass(frozen=True, eq=False)
class BM25Index:
    """An immutable Okapi BM25 index in CSR layout.

    Attributes:
        k1: term-frequency saturation.
        b: document-length normalization.
        n_docs: number of documents.
        vocab: term → term id.
        indptr: ``(n_terms + 1,)`` offsets into ``doc_ids``/``weights`` (postings of term ``t`` are
            ``indptr[t]:indptr[t+1]``).
        doc_ids: ``(n_postings,)`` int32 document of each posting.
        weights: ``(n_postings,)`` float32 saturated, length-normalized term frequency.
        idf: ``(n_terms,)`` float32 ``log(1 + (N - df + 0.5) / (df + 0.5))`` (always positive).
        doc_lengths: ``(n_docs,)`` float32 token count of each document.
        posting_keys: ``(n_postings,)`` int64 sorted ``term << 32 | doc`` of each posting (for :meth:`extend`).
        term_freqs: ``(n_postings,)`` float32 raw term frequency of each posting.
        avgdl: mean document length in index terms (1.0 when no document has any), the length BM25
            normalizes by.
    """

    k1: float
    b: float
    n_docs: int
    vocab: dict[str, int]
    indptr: np.ndarray
    doc_ids: np.ndarray
    weights: np.ndarray
    idf: np.ndarray
    doc_lengths: np.ndarray = field(repr=False)
    posting_keys: np.ndarray = field(repr=False)
    term_freqs: np.ndarray = field(repr=False)
    avgdl: float = 1.0

    @classmethod
    def build(cls, documents: Sequence[str], *, k1: float = 1.2, b: float = 0.75) -> BM25Index:
        """Index ``documents`` (tokenized through the cached :func:`tokenize`).

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
        return cls._finish(k1, b, vocab, keys, tf, lengths)

    def extend(self, documents: Sequence[str]) -> BM25Index:
        """The index of this index's documents followed by ``documents`` (new ids ``n_docs, n_docs+1, ...``),
        identical to :meth:`build` over all of them but costing only the new documents' tokens plus a
        vectorized merge. This index is not modified."""
        vocab = dict(self.vocab)
        keys, tf, lengths = _postings(documents, vocab, self.n_docs)
        # new documents have the largest ids, so each new posting goes after its term's old postings
        at = np.searchsorted(self.posting_keys, keys)
        return self._finish(
            self.k1, self.b, vocab, np.insert(self.posting_keys, at, keys), np.insert(self.term_freqs, at, tf),
            np.concatenate([self.doc_lengths, lengths]),
        )

    def without(self, keep: np.ndarray) -> BM25Index:
        """The index of the documents where the boolean array ``keep`` is True, renumbered in order: the same
        index :meth:`build` gives over them (but for term ids, which no score depends on), from a vectorized
        filter of the postings instead of tokenizing them again. This index is not modified."""
        doc_mask = _MAX_DOCS - 1
        in_kept = keep[self.posting_keys & doc_mask]
        keys = self.posting_keys[in_kept]
        terms = keys >> _DOC_BITS
        used = np.zeros(len(self.vocab), dtype=bool)
        used[terms] = True
        new_term = np.cumsum(used, dtype=np.int64) - 1
        new_doc = np.cumsum(keep, dtype=np.int64) - 1
        keys = (new_term[terms] << _DOC_BITS) | new_doc[keys & doc_mask]  # both maps keep the order: still sorted
        vocab = {t: int(new_term[i]) for t, i in self.vocab.items() if used[i]}
        return self._finish(self.k1, self.b, vocab, keys, self.term_freqs[in_kept], self.doc_lengths[keep])

    @classmethod
    def _finish(
        cls, k1: float, b: float, vocab: dict[str, int], keys: np.ndarray, tf: np.ndarray, lengths: np.ndarray
    ) -> BM25Index:
        """The CSR index from sorted posting keys (``term << 32 | doc``), term frequencies and lengths."""
        n = lengths.shape[0]
        p_term = keys >> _DOC_BITS
        p_doc = (keys & (_MAX_DOCS - 1)).astype(np.int32)
        n_terms = len(vocab)
        df = np.bincount(p_term, minlength=n_terms).astype(np.float64)
        indptr = np.zeros(n_terms + 1, dtype=np.int64)
        indptr[1:] = np.cumsum(df).astype(np.int64)
        avgdl = float(lengths.mean()) if n and lengths.sum() > 0 else 1.0
        norm = k1 * (1.0 - b + b * lengths[p_doc] / avgdl)
        weights = (tf * (k1 + 1.0) / (tf + norm)).astype(np.float32)
        idf = np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)
        return cls(k1, b, n, vocab, indptr, p_doc, weights, idf, lengths, keys, tf, avgdl)

    def query_terms(self, query: str) -> list[int]:
        """Distinct known term ids of a query (unknown terms cannot score and are dropped)."""
        return self._known_ids(tokenize(query))

    def _known_ids(self, tokens: Sequence[str]) -> list[int]:
        """Distinct term ids of the known ``tokens``, in order of first appearance."""
        seen: dict[int, None] = {}
        for tok in tokens:
            tid = self.vocab.get(tok)
            if tid is not None:
                seen.setdefault(tid, None)
        return list(seen)

    def unseen_idf(self) -> float:
        """The idf of a term no document contains (``df = 0``): the rarest a term can be in this index."""
        return math.log1p((self.n_docs + 0.5) / 0.5)

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
        tokens = tokenize(query)
        terms = set(tokens)
        tids = self._known_ids(tokens)
        idf = self.idf[tids].astype(np.float32) if tids else np.zeros(0, dtype=np.float32)
        total = float(idf.sum()) + (len(terms) - len(tids)) * self.unseen_idf()
        if not tids or total <= 0 or self.n_docs == 0:
            return np.zeros(self.n_docs, dtype=np.float32), idf
        docs = [self.doc_ids[self.indptr[t]:self.indptr[t + 1]] for t in tids]
        mass = np.concatenate([np.full(d.shape[0], w, dtype=np.float64) for d, w in zip(docs, idf, strict=True)])
        matched = np.bincount(np.concatenate(docs), weights=mass, minlength=self.n_docs)
        return (matched / total).astype(np.float32), idf

    def best_term_scores(self, query: str) -> np.ndarray:
        """The largest single-term share of each document's BM25 for ``query`` (float32, ``(n_docs,)``): the
        score of its best-scoring query term alone, 0 where it matches none. A document matching one query
        term scores exactly this in :meth:`scores`."""
        best = np.zeros(self.n_docs, dtype=np.float32)
        for t in self.query_terms(query):
            lo, hi = self.indptr[t], self.indptr[t + 1]
            np.maximum.at(best, self.doc_ids[lo:hi], self.weights[lo:hi] * float(self.idf[t]))
        return best

    def scores(self, query: str, *, term_weights: dict[str, float] | None = None) -> np.ndarray:
        """BM25 score of every document for ``query`` (float32, shape ``(n_docs,)``).

        Args:
            query: the query text (tokenized like documents; repeated query terms count once).
            term_weights: optional multipliers per (stemmed) term, e.g. for query expansion.
        """
        if self.n_docs == 0:
            return np.zeros(0, dtype=np.float32)
        tids = self.query_terms(query)
        if term_weights:
            extra = [self.vocab[t] for t in term_weights if t in self.vocab and self.vocab[t] not in tids]
            tids = tids + extra
        if not tids:
            return np.zeros(self.n_docs, dtype=np.float32)
        inv = {v: k for k, v in self.vocab.items()} if term_weights else None
        docs, wts = [], []
        for t in tids:
            lo, hi = self.indptr[t], self.indptr[t + 1]
            w = float(self.idf[t])
            if inv is not None:
                w *= term_weights.get(inv[t], 1.0)  # type: ignore[union-attr]
            docs.append(self.doc_ids[lo:hi])
            wts.append(self.weights[lo:hi] * w)
        return np.bincount(np.concatenate(docs), weights=np.concatenate(wts), minlength=self.n_docs).astype(
            np.float32
        )


_DOC_BITS = 32
_MAX_DOCS = 1 << _DOC_BITS


def _postings(documents: Sequence[str], vocab: dict[str, int], first_id: int) -> tuple[np.ndarray, ...]:
    """Sorted unique posting keys (``term << 32 | doc``) with term frequencies, and the document lengths, of
    ``documents`` numbered from ``first_id``; new terms are added to ``vocab`` in order of appearance."""
    term_ids: list[int] = []
    lengths = np.zeros(len(documents), dtype=np.float32)
    for i, doc in enumerate(documents):
        toks = tokenize(doc)
        lengths[i] = len(toks)
        term_ids.extend(vocab.setdefault(t, len(vocab)) for t in toks)
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
