"""Calendar periods named in a query, and the date boost of hybrid retrieval that uses them."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from agently_vecmem.embedders.hashing import DeterministicEmbedder
from agently_vecmem.errors import ConfigurationError
from agently_vecmem.filters import Scope
from agently_vecmem.records import MemoryRecord
from agently_vecmem.search.candidates import retrieve_candidates
from agently_vecmem.search.dates import query_periods
from agently_vecmem.search.params import DEFAULT_PARAMS, RetrievalParams
from agently_vecmem.workspace import ChromaWorkspace


def days(text: str) -> list[tuple[str, str]]:
    """Each period as (first day, day after the last), undoing the half-day slack."""
    out = []
    for start, end in query_periods(text):
        first = datetime.fromtimestamp(start + 43200, tz=timezone.utc).date()
        after = datetime.fromtimestamp(end - 43200, tz=timezone.utc).date()
        out.append((first.isoformat(), after.isoformat()))
    return out


@pytest.mark.parametrize(("text", "want"), [
    ("What did I do in May 2023?", [("2023-05-01", "2023-06-01")]),
    ("What did Mel paint in July, 2023?", [("2023-07-01", "2023-08-01")]),
    ("What setback did she face in Dec. 2023?", [("2023-12-01", "2024-01-01")]),
    ("What painting did Melanie show on October 13, 2023?", [("2023-10-13", "2023-10-14")]),
    ("What did Gina find on 1 February, 2023?", [("2023-02-01", "2023-02-02")]),
    ("the pet she lost on the 3rd of June 2023", [("2023-06-03", "2023-06-04")]),
    ("How often did she go to the beach in 2023?", [("2023-01-01", "2024-01-01")]),
    ("December of 2022", [("2022-12-01", "2023-01-01")]),
    ("2023年5月我做了什么？", [("2023-05-01", "2023-06-01")]),
    ("2023年5月12日发生了什么", [("2023-05-12", "2023-05-13")]),
    ("2024年我去了哪里？", [("2024-01-01", "2025-01-01")]),
    ("我在2023-05-12做了什么", [("2023-05-12", "2023-05-13")]),
    ("2023/5/12 的会议", [("2023-05-12", "2023-05-13")]),
    ("2023년 5월에 무엇을 했나요?", [("2023-05-01", "2023-06-01")]),
    ("in May 2023 and on 7 July, 2023", [("2023-05-01", "2023-06-01"), ("2023-07-07", "2023-07-08")]),
])
def test_periods_named_with_their_year(text: str, want: list[tuple[str, str]]) -> None:
    assert days(text) == want


@pytest.mark.parametrize("text", [
    "What did I do in May?",           # no year: which May?
    "5月我做了什么？",
    "I paid 2023 dollars for it",      # four digits are not a year without a preposition
    "on 31 February 2023",             # not a date
    "2023年13月",
    "last week",
    "",
])
def test_no_period(text: str) -> None:
    assert query_periods(text) == []


def test_the_most_specific_reading_wins() -> None:
    # "7 July, 2023" is that day, not also July nor all of 2023
    assert days("on 7 July, 2023") == [("2023-07-07", "2023-07-08")]
    # a day's period keeps turns dated in another time zone: half a day of slack on each side
    start, end = query_periods("on 7 July, 2023")[0]
    noon = datetime(2023, 7, 7, 12, tzinfo=timezone.utc).timestamp()
    assert start == noon - 24 * 3600 and end == noon + 24 * 3600


def _ws(tmp_path: Path) -> ChromaWorkspace:
    ws = ChromaWorkspace(tmp_path / "store", embedder=DeterministicEmbedder())
    may = datetime(2023, 5, 12, 15, tzinfo=timezone.utc).timestamp()
    ws.put([
        MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="Finished a half marathon.", occurred_at=may,
                     provenance={"k": "may"}),
        MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="I run a race by the river, my favourite race by the river.",
                     occurred_at=datetime(2023, 8, 2, tzinfo=timezone.utc).timestamp(), provenance={"k": "aug"}),
        MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="Races by the river: I run them every day.",
                     provenance={"k": "undated"}),
    ])
    return ws


def _kind(c) -> str:
    return c.record.provenance.model_dump()["k"]


def test_date_boost_prefers_the_named_period(tmp_path: Path) -> None:
    with _ws(tmp_path) as ws:
        view = ws.view(Scope.global_memory())
        question = "Which race did I run by the river in May 2023?"
        qvec = ws.embed_query(question)
        plain = {_kind(c): c for c in retrieve_candidates(view, question, qvec, k=3, params=RetrievalParams(date_boost=0))}
        boosted = {_kind(c): c for c in retrieve_candidates(view, question, qvec, k=3)}
        # the May record gains exactly the boost; the August and the undated record nothing
        assert boosted["may"].components["date"] == pytest.approx(DEFAULT_PARAMS.date_boost)
        assert boosted["may"].score == pytest.approx(plain["may"].score + DEFAULT_PARAMS.date_boost, abs=1e-5)
        assert boosted["aug"].components["date"] == boosted["undated"].components["date"] == 0
        assert boosted["may"].rank < plain["may"].rank
        # the words point to the August race; a boost larger than that lead puts May first
        assert plain["aug"].rank == 1
        strong = retrieve_candidates(view, question, qvec, k=3, params=RetrievalParams(date_boost=10))
        assert _kind(strong[0]) == "may"
        # the same period named in Chinese
        zh = "2023年5月我跑了什么？"
        top = retrieve_candidates(view, zh, ws.embed_query(zh), k=3)
        assert {_kind(c): c.components["date"] for c in top}["may"] == pytest.approx(DEFAULT_PARAMS.date_boost)
        # a query naming no period is ranked exactly as without the boost
        other = "Which race did I run by the river?"
        a = retrieve_candidates(view, other, ws.embed_query(other), k=3)
        b = retrieve_candidates(view, other, ws.embed_query(other), k=3, params=RetrievalParams(date_boost=0))
        assert [c.record.id for c in a] == [c.record.id for c in b] and "date" not in a[0].components
        # a record appended later is dated too (the cached column is extended, not stale)
        ws.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="Moved to a new flat.", provenance={"k": "may2"},
                             occurred_at=datetime(2023, 5, 30, tzinfo=timezone.utc).timestamp())])
        grown = retrieve_candidates(ws.view(Scope.global_memory()), question, qvec, k=4)
        assert {_kind(c) for c in grown if c.components["date"] > 0} == {"may", "may2"}


def test_date_boost_is_validated() -> None:
    with pytest.raises(ConfigurationError, match="date_boost"):
        RetrievalParams(date_boost=-1)
