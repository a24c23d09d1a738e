"""The model budget of one plugin call (issue 15): at most ``1 + max_retries`` requests per phase, whatever
the model answers or raises, counted locally by the call (never read from the model's shared call log)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from agently_vecmem.llm.openai_compat import OpenAIChatModel
from agently_vecmem.session import Session
from agently_vecmem.testing import DeterministicEmbedder, LoopbackOpenAIServer
from agently_vecmem.workspace import ChromaWorkspace


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("budget"))


@pytest.fixture
def ws(store_path: str) -> Iterator[ChromaWorkspace]:
    w = ChromaWorkspace(store_path, collection=f"b-{uuid.uuid4().hex[:12]}", embedder=DeterministicEmbedder())
    yield w
    w.close()


def test_deeply_nested_extract_reply_is_bounded(srv: LoopbackOpenAIServer, model: OpenAIChatModel, ws: Any) -> None:
    """The issue's reproduction: 40 replies of ``"[" * 1000`` (json raises RecursionError) made 41 extract
    requests for one turn and reported ``model_calls.calls == 1``."""
    srv.script("extract", *(["[" * 1000] * 40))
    session = Session(id="s1").use_memory(mode="VecMemory", workspace=ws, model=model)
    diag = session.memory.after_turn_sync(session=session, user_content="I live in Oslo", assistant_content="ok")
    assert len(srv.requests_for("extract")) == 2
    assert diag["model_calls"]["calls"] == 2 and diag["model_calls"]["by_phase"] == {"extract": 2}
    assert diag["reason"] == "extract_failed" and diag["raw_turn_kept"] is True
    assert diag["degraded"] is True and diag["stored"] == 1
