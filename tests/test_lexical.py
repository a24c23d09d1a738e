"""Tokenizer, stemmer and BM25 (checked against a direct Okapi formula)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agently_vecmem.filters import Scope
from agently_vecmem.memory.lexical import BM25Index, bm25_for_view, stem, tokenize
from agently_vecmem.records import MemoryRecord
from agently_vecmem.workspace.base import ScopeView


def test_stem_conflates_inflections() -> None:
    assert stem("paintings") == stem("painted") == stem("painting") == "paint"
    assert stem("dance") == stem("danced") == stem("dancing")
    assert stem("hiking") == stem("hikes") == stem("hike")
    assert stem("running") == "run"
    assert stem("2023") == "2023"


def test_tokenize_drops_stopwords_and_possessives() -> None:
    toks = tokenize("When did Caroline's group go to the LGBTQ support-group?")
    assert toks == ("carolin", "group", "go", "lgbtq", "support", "group")
    assert tokenize("") == ()


def _reference_bm25(docs: list[str], query: str, k1: float, b: float) -> np.ndarray:
    toks = [list(tokenize(d)) for d in docs]
    n = len(docs)
    avgdl = sum(len(t) for t in toks) / n
    out = np.zeros(n)
    for term in set(tokenize(query)):
        df = sum(term in t for t in toks)
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, t in enumerate(toks):
            tf = t.count(term)
            if tf:
                out[i] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(t) / avgdl))
    return out


@pytest.mark.parametrize(("k1", "b"), [(1.2, 0.75), (0.9, 0.4), (2.0, 1.0), (1.2, 0.0)])
def test_bm25_matches_reference(k1: float, b: float) -> None:
    docs = [
        "Caroline painted a lake sunrise last year",
        "Melanie runs along the river with her kids and paints pottery",
        "Paint, paint, paint: the painting class was fun",
        "Nothing relevant here at all",
        "",
    ]
    index = BM25Index.build(docs, k1=k1, b=b)
    for query in ["who painted the sunrise", "river run", "paint class", "unknown words only"]:
        np.testing.assert_allclose(index.scores(query), _reference_bm25(docs, query, k1, b), rtol=1e-5, atol=1e-6)


def test_bm25_empty_and_bad_params() -> None:
    assert BM25Index.build([]).scores("anything").shape == (0,)
    with pytest.raises(ValueError):
        BM25Index.build(["a"], b=1.5)


def test_term_weights_expand_the_query() -> None:
    index = BM25Index.build(["tea with lemon", "coffee black"])
    plain = index.scores("tea")
    expanded = index.scores("tea", term_weights={"coffe": 0.5})
    assert plain[1] == 0 and expanded[1] > 0 and expanded[0] == pytest.approx(plain[0])


def _view(texts: list[str], dim: int = 4) -> ScopeView:
    records = tuple(MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=t) for t in texts)
    vecs = np.ones((len(texts), dim), dtype=np.float32) / 2.0
    return ScopeView(Scope.global_memory(), records, vecs, tuple(r.document() for r in records))


def test_index_is_cached_per_view() -> None:
    view = _view(["alpha beta", "beta gamma"])
    first = bm25_for_view(view)
    assert bm25_for_view(view) is first
    assert bm25_for_view(view, k1=2.0) is not first


def test_extend_equals_a_full_build() -> None:
    rng = np.random.default_rng(0)
    words = np.array([f"w{i}" for i in range(300)] + ["paint", "hike", "dog", "music", "garden"])
    docs = [" ".join(row) for row in words[rng.integers(0, len(words), size=(400, 12))].tolist()]
    docs += ["brandnew words appear here", "", "dog dog dog paint"]
    full = BM25Index.build(docs, k1=1.1, b=0.6)
    grown = BM25Index.build(docs[:250], k1=1.1, b=0.6).extend(docs[250:300]).extend(docs[300:])
    assert grown.vocab == full.vocab and grown.n_docs == full.n_docs
    for name in ("indptr", "doc_ids", "weights", "idf", "doc_lengths", "posting_keys", "term_freqs"):
        np.testing.assert_array_equal(getattr(grown, name), getattr(full, name), err_msg=name)
    for q in ["paint the dog", "w12 w80 hike", "brandnew", "nothing known"]:
        np.testing.assert_array_equal(grown.scores(q), full.scores(q))


def test_an_appended_snapshot_extends_its_parents_index(monkeypatch: pytest.MonkeyPatch) -> None:
    view = _view(["alpha beta", "beta gamma"])
    parent = bm25_for_view(view)
    extra = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="gamma delta", created_at=view.records[-1].created_at + 1)
    grown = view.with_records([extra], np.ones((1, 4), dtype=np.float32) / 2.0, [extra.document()], 1)
    assert grown is not None and grown.base == (view.derived, 2)

    def no_rebuild(*_a: object, **_k: object) -> None:
        raise AssertionError("an append-only snapshot must extend the parent's index")

    monkeypatch.setattr(BM25Index, "build", no_rebuild)
    index = bm25_for_view(grown)
    assert index.n_docs == 3 and parent.n_docs == 2, "the parent's index is not modified"
    docs = [r.document() for r in grown.records]
    np.testing.assert_allclose(index.scores("gamma"), _reference_bm25(docs, "gamma", 1.2, 0.75), rtol=1e-5)
