"""Large scopes scored through a pool of candidates: the rows' sketch, the pool's agreement with the exact
path, and the sketch following appends and removals."""

from __future__ import annotations

import numpy as np
import pytest

from agently_vecmem.errors import ConfigurationError
from agently_vecmem.filters import Scope
from agently_vecmem.records import MemoryRecord
from agently_vecmem.search import candidates
from agently_vecmem.search.candidates import retrieve_candidates
from agently_vecmem.search.params import RetrievalParams
from agently_vecmem.search.sketch import SAMPLE_ROWS, Sketch, from_bfloat16, to_bfloat16
from agently_vecmem.search.view import ScopeView

DIM = 24
EXACT = RetrievalParams(pool_min_records=0)
WORDS = ("dog cat tea coffee train plane river mountain guitar piano garden kitchen doctor teacher "
         "football tennis paris tokyo winter summer birthday wedding novel movie").split()


def _records(n: int, rng: np.random.Generator, *, start: int = 0) -> tuple[list[MemoryRecord], np.ndarray]:
    """Conversation turns of 20-turn sessions (neighbours, session groups), some dated and tagged, with
    vectors built from their words (so dense and lexical agree, as with a real embedder)."""
    basis = np.random.default_rng(99).normal(size=(len(WORDS), DIM)).astype(np.float32)
    records, vectors = [], []
    for i in range(start, start + n):
        picked = rng.choice(len(WORDS), size=4, replace=False)
        vec = basis[picked].sum(axis=0) + 0.3 * rng.normal(size=DIM).astype(np.float32)
        vectors.append(vec / np.linalg.norm(vec))
        records.append(MemoryRecord(
            id=f"r{i:06d}", memory_scope="GLOBAL_MEMORY", summary=" ".join(WORDS[j] for j in picked),
            tags=["travel"] if i % 17 == 0 else [], created_at=1000.0 + i, updated_at=1000.0 + i,
            occurred_at=1.68e9 + 86400.0 * (i % 400) if i % 3 == 0 else None,
            provenance={"session_id": f"s{i // 20}", "session": 1, "position": i % 20}))
    return records, np.asarray(vectors, dtype=np.float32)


def _view(n: int, seed: int = 0) -> ScopeView:
    records, vectors = _records(n, np.random.default_rng(seed))
    return ScopeView(Scope.global_memory(), tuple(records), vectors, tuple(r.search_text() for r in records))


def _ids(view: ScopeView, text: str, qvec: np.ndarray, params: RetrievalParams, **kw: object) -> list[str]:
    return [c.record.id for c in retrieve_candidates(view, text, qvec, k=10, params=params, **kw)]  # type: ignore[arg-type]


QUERIES = ["dog river", "what about the piano teacher", "tennis in tokyo in May 2023", "coffee garden birthday"]


@pytest.mark.parametrize("text", QUERIES)
def test_a_pool_holding_the_whole_scope_ranks_as_the_exact_path(text: str) -> None:
    view = _view(3000)
    qvec = view.rows(7)
    whole = RetrievalParams(pool_min_records=1, pool_size=3000)
    assert candidates._pooled(view, text, whole, "hybrid")
    pooled = retrieve_candidates(view, text, qvec, k=10, params=whole)
    exact = retrieve_candidates(view, text, qvec, k=10, params=EXACT)
    assert [c.record.id for c in pooled] == [c.record.id for c in exact]
    for p, e in zip(pooled, exact, strict=True):
        assert p.index == e.index and p.score == pytest.approx(e.score, abs=1e-4)
        assert set(p.components) == set(e.components)
    # tags: the boost reaches pooled records too
    tagged = _ids(view, text, qvec, whole, tags=["travel"])
    assert tagged == _ids(view, text, qvec, EXACT, tags=["travel"])


def test_similar_records_from_every_row_or_from_the_pool() -> None:
    """A write's near-duplicate check (``ScopeView.similar``): the records at or above a cosine, most similar
    first, ties by position; through the pool in a large scope, finding the same near-duplicates (and the
    same nearest records for the extractor, ``ScopeView.search``)."""
    view = _view(3000)
    query = view.rows(7)
    scores = view.dense_scores(query)
    order = np.argsort(-scores, kind="stable")
    expected = [int(j) for j in order if scores[j] >= 0.6]
    found, cosines = view.similar(query, 0.6)
    assert found.tolist() == expected and 7 in expected and len(expected) > 3
    np.testing.assert_allclose(cosines, scores[expected])
    whole, _ = view.similar(query, 0.6, pool_min_records=1, pool_size=3000)
    assert whole.tolist() == expected
    near, _ = view.similar(query, 0.8, pool_min_records=1, pool_size=100)  # the closest, from a small pool
    assert near.tolist() == [j for j in expected if scores[j] >= 0.8] and len(near) == 3
    assert view.similar(query, 0.6, pool_min_records=5000)[0].tolist() == expected  # a small scope: every row
    # the extractor's related memories (``ScopeView.search``): the same top hits from every row or the pool
    exact = [(h.record.id, h.score) for h in view.search(query, 6)]
    assert [h.record.id for h in view.search(query, 6, pool_min_records=1, pool_size=100)] == [i for i, _ in exact]
    assert [(h.record.id, h.score) for h in view.search(query, 6, pool_min_records=1, pool_size=3000)] == exact


def test_half_width_rows_keep_eight_significant_bits() -> None:
    """The rows a loaded snapshot's pool scores (bfloat16): within 2**-8 of the float32 value, rounded to
    nearest, zeros and signs kept, and a cosine within ~1e-3 of the float32 one."""
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(200, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors[0, :3] = (0.0, -0.0, 1.0)
    half = to_bfloat16(vectors)
    assert half.dtype == np.uint16 and half.shape == vectors.shape
    back = from_bfloat16(half)
    assert back.dtype == np.float32 and back.shape == vectors.shape
    np.testing.assert_allclose(back, vectors, rtol=2.0 ** -8, atol=0)
    assert back[0, 0] == 0.0 and np.signbit(back[0, 1]) and back[0, 2] == 1.0
    np.testing.assert_allclose(back @ vectors[5], vectors @ vectors[5], atol=1e-3)
    assert from_bfloat16(half[[3, 1]]).tolist() == back[[3, 1]].tolist()  # rows picked, as a pool reads them


def test_a_small_pool_finds_most_of_the_exact_top_ten() -> None:
    view = _view(6000, seed=1)
    rng = np.random.default_rng(5)
    small = RetrievalParams(pool_min_records=1, pool_size=300)
    overlap = []
    for i in rng.choice(len(view), size=12, replace=False):
        text = view.records[int(i)].summary
        exact = _ids(view, text, view.rows(int(i)), EXACT)
        overlap.append(len(set(exact) & set(_ids(view, text, view.rows(int(i)), small))) / 10)
        assert view.records[int(i)].id in _ids(view, text, view.rows(int(i)), small)  # the record itself
    assert np.mean(overlap) >= 0.8


def test_the_pool_is_used_from_pool_min_records_and_not_for_cjk_or_baselines() -> None:
    view = _view(50)
    assert not candidates._pooled(view, "dog", RetrievalParams(pool_min_records=51), "hybrid")
    assert candidates._pooled(view, "dog", RetrievalParams(pool_min_records=50), "hybrid")
    assert not candidates._pooled(view, "dog", EXACT, "hybrid")
    assert not candidates._pooled(view, "dog", RetrievalParams(pool_min_records=1), "dense")
    assert not candidates._pooled(view, "我的狗叫什么", RetrievalParams(pool_min_records=1), "hybrid")
    assert RetrievalParams().pool_min_records == 200_000  # LoCoMo and the probes are scored exactly
    with pytest.raises(ConfigurationError, match="pool_size"):
        RetrievalParams(pool_size=0)
    with pytest.raises(ConfigurationError, match="pool_min_records"):
        RetrievalParams(pool_min_records=-1)


def test_the_sketch_follows_appends_and_removals_without_a_rebuild() -> None:
    view = _view(400)
    params = RetrievalParams(pool_min_records=1, pool_size=50)
    retrieve_candidates(view, "dog", view.rows(0), k=5, params=params)
    sketch = view._cols.rows.sketch
    assert isinstance(sketch, Sketch) and sketch.size == 400
    assert view.vector_bytes >= sketch.nbytes
    new, vecs = _records(30, np.random.default_rng(8), start=400)
    grown = view.with_records(new, vecs, [r.search_text() for r in new], version=2)
    assert grown is not None and grown._cols.rows.sketch is sketch and sketch.size == 430  # projected in place
    target = new[12]
    assert _ids(grown, target.summary, vecs[12], params)[0] == target.id
    assert target.id not in _ids(view, target.summary, vecs[12], params)  # the older snapshot does not see it
    gone = grown.without({target.id, "r000005"}, version=3)
    assert gone is not None and gone._cols.rows.sketch is sketch
    for rid in (target.id, "r000005"):
        positions = gone.dense_pool(grown.rows(grown.id_index().get(rid)), 10)
        assert rid not in {gone.records[int(p)].id for p in positions}
        assert np.all(np.diff(positions) > 0) and np.all(positions < len(gone))
    # a record's own vector finds it, at its position in this snapshot
    at = gone.id_index().get(new[3].id)
    assert at is not None and at in set(gone.dense_pool(vecs[3], 20).tolist())


def test_the_sketch_estimates_the_dense_spread_on_a_sample() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(SAMPLE_ROWS * 2, DIM)).astype(np.float32) + 0.5
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    sketch = Sketch(vectors, len(vectors), dims=8)
    assert sketch.sample.shape == (SAMPLE_ROWS, DIM) and sketch.basis.shape == (DIM, 7) and sketch.codes.shape[1] == 8
    q = vectors[0]
    mean, std = sketch.dense_moments(q)
    exact = vectors @ q
    assert mean == pytest.approx(float(exact.mean()), abs=0.01) and std == pytest.approx(float(exact.std()), rel=0.03)
    # from the sample's moments: its own scores' mean and spread, built or restored from a snapshot's parts
    on_sample = (sketch.sample.astype(np.float64) @ q.astype(np.float64))
    restored = Sketch.restored(sketch.basis, sketch.sample, sketch.codes_of(slice(None)))
    for moments in (sketch.dense_moments(q), restored.dense_moments(q), restored.dense_moments(q)):
        assert moments == pytest.approx((float(on_sample.mean()), float(on_sample.std())), rel=1e-9, abs=1e-12)
    assert restored.nbytes > sketch.sample.nbytes + 8 * DIM * DIM  # (its second moment, computed once)
    # rows of a few directions plus noise (as sentence vectors are): the sketch ranks the query's row first
    low = rng.normal(size=(4000, 6)) @ rng.normal(size=(6, DIM)) + 0.05 * rng.normal(size=(4000, DIM))
    low = (low / np.linalg.norm(low, axis=1, keepdims=True)).astype(np.float32)
    top = Sketch(low, 5000, dims=8).top_rows(low[17], 4000, 20)
    assert 17 in set(top.tolist()) and len(top) == 20
    assert len(Sketch(low, 5000).top_rows(low[17], 10, 20)) == 10  # fewer rows than asked: all of them
