"""Slow tier: the real all-MiniLM-L6-v2 model answers a question a bag-of-words embedder cannot."""

from __future__ import annotations

import pytest

from agently_vecmem.filters import Scope
from agently_vecmem.records import MemoryRecord
from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.workspace import ChromaWorkspace

pytestmark = pytest.mark.slow

QUESTION = "What pet does the user own?"
ANSWER = "My dog Biscuit loves the park"
# Distractors share words with the question ("what", "does", "user", "own", "pet"), the answer shares none.
DISTRACTORS = [
    "The user prefers their own company at lunch",
    "The user owns a small apartment downtown",
    "The user does their own taxes every April",
    "Does the user own a passport? Unknown",
    "What the user does for work: accounting",
    "User asked what time the store opens",
    "What does the user do on weekends? The user does yoga",
]


def _records(session: str) -> list[MemoryRecord]:
    return [
        MemoryRecord(memory_scope="SESSION_MEMORY", session_id=session, summary=text)
        for text in [*DISTRACTORS, ANSWER]
    ] + [MemoryRecord(memory_scope="SESSION_MEMORY", session_id="other", summary="My cat Tom sleeps all day")]


def test_hashing_embedder_cannot_answer(tmp_path) -> None:  # noqa: ANN001
    """Guards the test itself: the question is only answerable by meaning, not by shared words."""
    with ChromaWorkspace(tmp_path / "h", embedder=DeterministicEmbedder()) as ws:
        ws.put(_records("s1"))
        assert ws.search(QUESTION, scope=Scope.session_memory("s1"), k=1)[0].record.summary != ANSWER


@pytest.mark.parametrize("backend", ["embedded", "server"])
def test_semantic_search_with_minilm(backend: str, minilm, request, tmp_path) -> None:  # noqa: ANN001
    if backend == "server":
        host, port = request.getfixturevalue("chroma_server")
        ws = ChromaWorkspace(embedder=minilm, host=host, port=port, collection=f"minilm-{tmp_path.name[-20:]}")
    else:
        ws = ChromaWorkspace(tmp_path / "m", embedder=minilm)
    with ws:
        ws.put(_records("s1"))
        hits = ws.search(QUESTION, scope=Scope.session_memory("s1"), k=3)
        assert hits[0].record.summary == ANSWER, [(h.record.summary, round(h.score, 3)) for h in hits]
        assert hits[0].score > hits[1].score
        assert all(h.record.session_id == "s1" for h in hits)  # the cat of another session stays out
        drink = ws.search("Which beverage does the user like?", scope=Scope.session_memory("s1"), k=1)
        assert drink[0].record.summary != "My cat Tom sleeps all day"
        assert ws.get(hits[0].record.id).vector_index.model == minilm.model_id
