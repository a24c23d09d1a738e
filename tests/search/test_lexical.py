"""Tokenizer, stemmer and BM25 (checked against a direct Okapi formula)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agently_vecmem.filters import Scope
from agently_vecmem.records import MemoryRecord
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
    apple, pie = (float(index.idf[index.vocab[t]]) for t in ("appl", "pie"))
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


def test_without_equals_a_build_over_the_kept_documents() -> None:
    """Removing documents filters the postings (no tokenization): every score, coverage and statistic is a
    fresh build's over the documents kept; only term ids may differ (a removed document's only terms go)."""
    rng = np.random.default_rng(1)
    words = np.array([f"w{i}" for i in range(200)] + ["paint", "hike", "dog", "music", "garden"])
    docs = [" ".join(row) for row in words[rng.integers(0, len(words), size=(300, 10))].tolist()]
    docs += ["onlyhere unique words", "", "dog dog dog paint", "草莓蛋糕很好吃"]
    full = BM25Index.build(docs, k1=1.1, b=0.6)
    for keep in [rng.random(len(docs)) < 0.7, np.arange(len(docs)) != 300, np.zeros(len(docs), dtype=bool),
                 np.ones(len(docs), dtype=bool)]:
        kept_docs = [d for d, k in zip(docs, keep, strict=True) if k]
        fresh = BM25Index.build(kept_docs, k1=1.1, b=0.6)
        cut = full.without(keep)
        assert set(cut.vocab) == set(fresh.vocab) and cut.n_docs == fresh.n_docs and cut.avgdl == fresh.avgdl
        np.testing.assert_array_equal(cut.doc_lengths, fresh.doc_lengths)
        for term, tid in fresh.vocab.items():
            assert cut.idf[cut.vocab[term]] == fresh.idf[tid]
        for q in ["paint the dog", "w12 w80 hike", "onlyhere words", "nothing known", "蛋糕", "dog w3 w3"]:
            np.testing.assert_array_equal(cut.scores(q), fresh.scores(q))
            np.testing.assert_array_equal(cut.best_term_scores(q), fresh.best_term_scores(q))
            for a, b in zip(cut.coverage(q), fresh.coverage(q), strict=True):
                np.testing.assert_array_equal(a, b)
        grown_cut, grown = cut.extend(docs[:5]), fresh.extend(docs[:5])  # and it extends like a build
        np.testing.assert_array_equal(grown_cut.scores("dog paint w7"), grown.scores("dog paint w7"))


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
