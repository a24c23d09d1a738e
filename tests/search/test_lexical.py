"""Tokenizer, stemmer and BM25 (checked against a direct Okapi formula)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agently_vecmem.filters import Scope
from agently_vecmem.records import MemoryRecord
from agently_vecmem.search import lexical
from agently_vecmem.search.cjk import CJK_MODES, cjk_terms, has_cjk
from agently_vecmem.search.lexical import BM25Index, bm25_for_view, stem, tokenize
from agently_vecmem.search.view import ScopeView


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


def test_coverage_is_the_idf_weighted_share_of_the_query_terms() -> None:
    index = BM25Index.build(["a red apple pie", "a green apple", "the blue sky", "apple juice"])
    cov, idf = index.coverage("Where can I find an apple pie recipe?")  # terms: find, appl, pie, recip
    assert len(idf) == 2  # "appl" and "pie"; "find" and "recip" are in no document
    apple, pie = (index.idf_of(t) for t in ("appl", "pie"))
    assert index.idf_of("sky") is not None and index.idf_of("recip") is None
    assert sorted(idf.tolist()) == pytest.approx(sorted([apple, pie]))
    total = apple + pie + 2 * math.log1p((4 + 0.5) / 0.5)
    assert index.unseen_idf() == pytest.approx(math.log1p(4.5 / 0.5))
    assert cov.tolist() == pytest.approx([(apple + pie) / total, apple / total, 0.0, apple / total], rel=1e-5)
    assert index.coverage("apple apple pie")[0][0] == pytest.approx(1.0)  # repeated terms count once
    none, no_idf = index.coverage("the of and")
    assert none.tolist() == [0.0] * 4 and no_idf.size == 0
    assert BM25Index.build([]).coverage("apple")[0].shape == (0,)


def test_best_term_scores_are_each_documents_best_single_term() -> None:
    index = BM25Index.build(["a red apple pie", "a green apple", "the blue sky", "apple juice"])
    query = "apple pie recipe"
    best, full = index.best_term_scores(query), index.scores(query)
    singles = [index.scores(term) for term in ("apple", "pie")]
    assert best.tolist() == pytest.approx(np.maximum(*singles).tolist())
    assert best[0] < full[0] and best[2] == full[2] == 0.0
    assert best[1] == full[1] and best[3] == full[3]  # one matched term: exactly its BM25, to the bit
    assert index.avgdl == pytest.approx(np.mean([3, 2, 2, 2]))  # "a", "the" are stopwords
    assert BM25Index.build([]).best_term_scores("apple").shape == (0,)


def test_term_weights_expand_the_query() -> None:
    index = BM25Index.build(["tea with lemon", "coffee black"])
    plain = index.scores("tea")
    expanded = index.scores("tea", term_weights={"coffe": 0.5})
    assert plain[1] == 0 and expanded[1] > 0 and expanded[0] == pytest.approx(plain[0])


def _dense_reference(index: BM25Index, query: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BM25, best single-term score and coverage of every document, summed over every document as the index
    did before :meth:`BM25Index.match` (one bincount over all of them per signal)."""
    tokens = tokenize(query)
    terms = index._terms(tokens)
    n = index.n_docs
    if not terms:
        return np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(n, np.float32)
    positions = np.concatenate([t.positions for t in terms])
    bm25 = np.bincount(positions, weights=np.concatenate([t.weights * t.idf for t in terms]),
                       minlength=n).astype(np.float32)
    best = np.zeros(n, dtype=np.float32)
    for t in terms:
        np.maximum.at(best, t.positions, t.weights * t.idf)
    idf = np.array([t.idf for t in terms], dtype=np.float32)
    total = float(idf.sum()) + (len(set(tokens)) - len(terms)) * index.unseen_idf()
    mass = np.concatenate([np.full(t.positions.shape[0], w, dtype=np.float64) for t, w in zip(terms, idf, strict=True)])
    coverage = (np.bincount(positions, weights=mass, minlength=n) / total).astype(np.float32)
    return bm25, best, coverage


@pytest.mark.parametrize("n", [40, 3000])  # few documents: postings merged through a mask; many: sorted
def test_match_gives_every_signal_at_the_documents_with_a_query_term(n: int) -> None:
    """The sparse match of a query holds, at exactly the documents with a query term, the BM25 score, best
    single-term score and coverage the dense computation gives, bit for bit; every other document scores 0."""
    index = BM25Index.build(_docs(3, n, 8) + ["onlyhere unique words", "草莓蛋糕很好吃"])
    for q in QUERIES + ["w1 w2 w3 w4 w5 w6 w7 w8", "草莓 dog"]:
        got = index.match(q)
        bm25, best, coverage = _dense_reference(index, q)
        np.testing.assert_array_equal(got.rows, np.flatnonzero(bm25), err_msg=q)
        for values, dense in ((got.bm25, bm25), (got.best, best), (got.coverage, coverage)):
            np.testing.assert_array_equal(values, dense[got.rows], err_msg=q)
            np.testing.assert_array_equal(got.dense(values), dense, err_msg=q)
        picked = np.array([0, 5, n - 1, n + 1])
        np.testing.assert_array_equal(got.at(got.bm25, picked), bm25[picked], err_msg=q)
    assert index.match("nothing known").rows.size == 0
    assert BM25Index.build([]).match("dog").rows.size == 0


def _view(texts: list[str], dim: int = 4) -> ScopeView:
    records = tuple(MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=t) for t in texts)
    vecs = np.ones((len(texts), dim), dtype=np.float32) / 2.0
    return ScopeView(Scope.global_memory(), records, vecs, tuple(r.document() for r in records))


def test_index_is_cached_per_view() -> None:
    view = _view(["alpha beta", "beta gamma"])
    first = bm25_for_view(view)
    assert bm25_for_view(view) is first
    assert bm25_for_view(view, k1=2.0) is not first


QUERIES = ["paint the dog", "w12 w80 hike", "brandnew", "onlyhere words", "nothing known", "蛋糕", "dog w3 w3"]


def assert_same_index(got: BM25Index, fresh: BM25Index) -> None:
    """Every statistic and score of ``got`` is a fresh build's over the same documents, bit for bit."""
    assert got.n_docs == fresh.n_docs and got.avgdl == fresh.avgdl
    np.testing.assert_array_equal(got.doc_lengths, fresh.doc_lengths)
    for term in fresh.vocab:
        assert got.idf_of(term) == fresh.idf_of(term), term
    for q in QUERIES:
        np.testing.assert_array_equal(got.scores(q), fresh.scores(q), err_msg=q)
        np.testing.assert_array_equal(got.best_term_scores(q), fresh.best_term_scores(q), err_msg=q)
        for a, b in zip(got.coverage(q), fresh.coverage(q), strict=True):
            np.testing.assert_array_equal(a, b, err_msg=q)
    expanded = {"dog": 0.5, "w7": 2.0}
    np.testing.assert_array_equal(got.scores("paint", term_weights=expanded),
                                  fresh.scores("paint", term_weights=expanded))


def _docs(seed: int, n: int, width: int) -> list[str]:
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(300)] + ["paint", "hike", "dog", "music", "garden"])
    return [" ".join(row) for row in words[rng.integers(0, len(words), size=(n, width))].tolist()]


def test_extend_equals_a_full_build() -> None:
    docs = _docs(0, 400, 12) + ["brandnew words appear here", "", "dog dog dog paint"]
    full = BM25Index.build(docs, k1=1.1, b=0.6)
    grown = BM25Index.build(docs[:250], k1=1.1, b=0.6).extend(docs[250:300]).extend(docs[300:])
    assert_same_index(grown, full)
    one_by_one = BM25Index.build(docs[:1], k1=1.1, b=0.6)
    for doc in docs[1:]:
        one_by_one = one_by_one.extend([doc])
    assert_same_index(one_by_one, full)
    assert len(one_by_one.segments) <= 2 * math.log2(len(docs)), "segments of similar size are merged"


def test_a_big_build_leaves_the_tokenize_cache_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``_CACHED_BUILD_MAX`` documents a build tokenizes without the cache (it would only churn it and hold
    a big read's texts); the index is the same either way."""
    monkeypatch.setattr(lexical, "_CACHED_BUILD_MAX", 50)
    docs = _docs(3, 200, 8)
    tokenize.cache_clear()
    big = BM25Index.build(docs)
    assert tokenize.cache_info().currsize == 0
    small = BM25Index.build(docs[:40]).extend(docs[40:80])
    assert tokenize.cache_info().currsize == len(set(docs[:80]))
    assert_same_index(small.extend(docs[80:]), big)


def test_without_equals_a_build_over_the_kept_documents() -> None:
    """Removing documents masks them (no tokenization, postings shared until the removed ones pass an eighth
    of the kept ones, then filtered once): every score, coverage and statistic is a fresh build's over the
    documents kept."""
    rng = np.random.default_rng(1)
    docs = _docs(1, 300, 10) + ["onlyhere unique words", "", "dog dog dog paint", "草莓蛋糕很好吃"]
    full = BM25Index.build(docs, k1=1.1, b=0.6)
    for keep in [rng.random(len(docs)) < 0.7, np.arange(len(docs)) != 300, np.zeros(len(docs), dtype=bool),
                 np.ones(len(docs), dtype=bool)]:
        kept_docs = [d for d, k in zip(docs, keep, strict=True) if k]
        fresh = BM25Index.build(kept_docs, k1=1.1, b=0.6)
        cut = full.without(keep)
        assert_same_index(cut, fresh)
        assert_same_index(cut.extend(docs[:5]), fresh.extend(docs[:5]))  # and it extends like a build
    one_removed = full.without(np.arange(len(docs)) != 300)
    assert one_removed.segments is full.segments, "a small removal shares the postings"
    assert one_removed.idf_of("onlyher") is None and full.idf_of("onlyher") is not None


def test_interleaved_appends_and_removals_equal_a_build() -> None:
    """Random appends and removals, in any order, from one parent (as snapshots of a scope branch): each index
    scores as a build over its documents, and the parent is never changed."""
    rng = np.random.default_rng(7)
    pool = _docs(7, 600, 8) + ["onlyhere unique words", "", "草莓蛋糕很好吃", "dog dog dog paint"]
    docs = pool[:40]
    index = BM25Index.build(docs)
    for step in range(60):
        if rng.random() < 0.6:
            new = [pool[int(i)] for i in rng.integers(0, len(pool), size=int(rng.integers(1, 20)))]
            index, docs = index.extend(new), docs + new
        else:
            keep = rng.random(len(docs)) < rng.choice([0.5, 0.95, 0.99])
            index, docs = index.without(keep), [d for d, k in zip(docs, keep, strict=True) if k]
        if step % 10 == 9:
            parent, parent_docs = index, list(docs)
            branch = parent.extend(pool[:3])  # a sibling snapshot grows the shared vocabulary
            assert_same_index(branch, BM25Index.build(parent_docs + pool[:3]))
            assert_same_index(parent, BM25Index.build(parent_docs))
    assert_same_index(index, BM25Index.build(docs))


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


# ------------------------------------------------------------------ Chinese, Japanese, Korean, mixed text
ZH_FACTS = [
    "我对花生过敏，推荐零食的时候请注意。",
    "我家的狗叫饼干，是一只三岁的比格犬。",
    "我在成都一家儿童医院当护士。",
    "我每天早上六点沿着河边跑步。",
    "我最喜欢的小说是《百年孤独》。",
]


def test_chinese_is_split_into_bigrams_and_ideographs() -> None:
    toks = tokenize("我对花生过敏，请推荐零食时注意。")
    assert {"花生", "过敏", "零食", "推荐", "注意"} <= set(toks)
    assert {"花", "敏"} <= set(toks)  # single ideographs let a one-morpheme paraphrase score
    assert "我" not in toks and "我对" not in toks  # function characters and their bigrams are dropped
    # question words carry no topic
    assert not {"什么", "什", "么"} & set(tokenize("我对什么过敏？"))
    assert "过敏" in tokenize("我对什么过敏？")


def test_japanese_and_korean_runs_use_bigrams() -> None:
    ja = tokenize("東京で働いています")
    assert "東京" in ja and "東" in ja and "い" not in ja  # kana syllables are not unigrams
    ko = tokenize("저는 서울에서 일합니다")
    assert "서울" in ko and "울에" in ko and "서" not in ko


def test_mixed_text_is_handled_term_by_term() -> None:
    toks = tokenize("我用ThinkPad X1写Go")
    assert toks[-4:] == ("thinkpad", "x1", "写", "go")
    assert tokenize("我在学Python和machine learning") == ("在学", "学", "python", "machin", "learn")
    # English text is analysed exactly as before: the CJK path never runs for it
    assert tokenize("The dancers were painting") == ("dancer", "paint")


def test_numbers_drop_leading_zeros_so_dates_meet() -> None:
    assert tokenize("date: 2023-05-12") == ("date", "2023", "5", "12")
    assert {"2023", "5"} <= set(tokenize("2023年5月我做了什么？"))
    assert tokenize("007 0") == ("7", "0")
    # in text with CJK, ISO and Chinese dates also give one year-month term
    assert tokenize("跑步\ndate: 2023-05-12 (Friday, 12 May 2023)")[-1] == "2023年5月"
    assert tokenize("2023年 5 月我做了什么？")[-1] == "2023年5月"
    assert "2023年5月" not in tokenize("date: 2023-05-12")  # English text is analysed as before


def test_bm25_ranks_chinese_paraphrases() -> None:
    index = BM25Index.build(ZH_FACTS)
    for query, expected in [("我对什么食物过敏？", 0), ("我的狗是什么品种？", 1), ("我在哪家医院工作？", 2),
                            ("我一般几点去跑步？", 3), ("我最爱读哪本小说？", 4)]:
        scores = index.scores(query)
        assert int(np.argmax(scores)) == expected, (query, scores)


@pytest.mark.parametrize("mode", CJK_MODES)
def test_cjk_modes(mode: str) -> None:
    terms = cjk_terms("我对花生过敏", mode=mode)  # type: ignore[arg-type]
    assert "过敏" in terms
    if mode == "jieba":
        assert "花生" in terms and "生过" not in terms  # dictionary words, no cross-word bigrams
    elif mode != "jieba":
        assert "生过" in terms
    # kana and hangul runs use bigrams in every mode
    assert "東京" in cjk_terms("東京で", mode=mode)  # type: ignore[arg-type]


def test_cjk_mode_errors_and_detection() -> None:
    with pytest.raises(ValueError):
        cjk_terms("花生", mode="words")  # type: ignore[arg-type]
    assert has_cjk("Go写的") and has_cjk("ソウル") and has_cjk("서울") and not has_cjk("café naïve")
