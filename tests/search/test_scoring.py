"""The search maths shared by every signal: stable top-k and its threshold shortcut over many scores."""

from __future__ import annotations

import numpy as np
import pytest

from agently_vecmem.search.scoring import at_positions, find_sorted, top_k, top_unordered


def _same_set(got: np.ndarray, scores: np.ndarray, k: int) -> None:
    exact = np.sort(scores)[::-1][:k]
    assert len(got) == len(set(got.tolist())) == k
    np.testing.assert_array_equal(np.sort(scores[got])[::-1], exact)


@pytest.mark.parametrize(("n", "k"), [(10, 3), (5000, 18), (100_000, 18), (100_000, 2000), (300_000, 2000)])
def test_top_unordered_finds_the_k_largest(n: int, k: int) -> None:
    rng = np.random.default_rng(n + k)
    for scores in (rng.normal(size=n).astype(np.float32), np.sort(rng.random(n).astype(np.float32)),
                   np.round(rng.random(n), 2).astype(np.float32)):  # random, ascending, many ties
        _same_set(top_unordered(scores, k), scores, k)


def test_top_unordered_with_a_sample_unlike_the_whole_partitions_everything() -> None:
    """Every 64th score high, the rest low: the sample's threshold keeps fewer than k scores, so all of them
    are partitioned (the answer is still the k largest)."""
    scores = np.zeros(65_536, dtype=np.float32)
    scores[::64] = 1.0
    scores[1::64] = 0.5
    got = top_unordered(scores, 2000)
    _same_set(got, scores, 2000)
    assert (scores[got] == 1.0).sum() == 1024
    assert top_unordered(scores, 70_000).shape == (65_536,)


def test_top_k_is_best_first_with_ties_by_position() -> None:
    scores = np.array([0.5, 0.9, 0.5, 0.1, 0.9] * 2000, dtype=np.float32)
    best = top_k(scores, 4000)  # every 0.9, by position
    np.testing.assert_array_equal(best, np.flatnonzero(scores == np.float32(0.9)))
    more = top_k(scores, 4005)[4000:]  # which of the tied 0.5s make the cut is the partition's choice
    assert (scores[more] == np.float32(0.5)).all() and (np.diff(more) > 0).all()
    assert top_k(scores, 0).size == 0 and top_k(np.zeros(0, np.float32), 3).size == 0


def test_values_at_positions_of_a_sorted_list() -> None:
    rows = np.array([2, 5, 9])
    np.testing.assert_array_equal(find_sorted(rows, np.array([5, 3, 9, 11])), [1, -1, 2, -1])
    np.testing.assert_array_equal(at_positions(rows, np.array([1.0, 2.0, 3.0], np.float32), -1.0, np.array([9, 0])),
                                  [3.0, -1.0])
    np.testing.assert_array_equal(find_sorted(np.zeros(0, np.int64), np.array([1])), [-1])
