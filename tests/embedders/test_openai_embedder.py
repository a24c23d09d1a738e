"""OpenAIEmbedder over the real ``openai`` client against the loopback server."""

from __future__ import annotations

import numpy as np
import openai
import pytest

from agently_vecmem.embedders import Embedder, OpenAIEmbedder
from agently_vecmem.errors import ModelError
from agently_vecmem.testing import DeterministicEmbedder, Fault, LoopbackOpenAIServer

TEXTS = ["alpha beta", "gamma delta", "alpha gamma", "epsilon", "zeta eta theta"]


@pytest.fixture(scope="module")
def shared_server():
    """conftest's loopback server, with 48-dimensional embeddings (``srv`` and ``sdk_client`` use it)."""
    with LoopbackOpenAIServer(DeterministicEmbedder(dim=48)) as s:
        yield s


@pytest.fixture
def make(sdk_client: openai.OpenAI):
    def build(srv: LoopbackOpenAIServer, *, max_retries: int = 0, **kwargs) -> OpenAIEmbedder:
        return OpenAIEmbedder(
            "embed-small", client=sdk_client.with_options(max_retries=max_retries), **kwargs
        )

    return build


def test_dim_is_probed_once_lazily(srv: LoopbackOpenAIServer) -> None:
    emb = OpenAIEmbedder("embed-small", base_url=srv.base_url, api_key="test", max_retries=0, timeout=5.0)
    assert isinstance(emb, Embedder)
    assert emb.model_id == "openai:embed-small"
    assert srv.requests == []  # construction does not call the endpoint
    assert emb.dim == 48 and emb.dim == 48
    assert len(srv.requests) == 1
    assert "OpenAIEmbedder(model_id='openai:embed-small', dim=48)" == repr(emb)


def test_given_dim_skips_probe(make, srv: LoopbackOpenAIServer) -> None:
    emb = make(srv, dim=48)
    assert emb.embed_documents(TEXTS).shape == (len(TEXTS), 48)
    assert len(srv.requests) == 1


def test_vectors_match_server_embedder_and_are_normalized(make, srv: LoopbackOpenAIServer) -> None:
    emb = make(srv, dim=48)
    vectors = emb.embed_documents(TEXTS)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(vectors, DeterministicEmbedder(dim=48).embed_documents(TEXTS), atol=1e-6)
    assert emb.embed_query("alpha beta").shape == (48,)
    (body, *_) = [r.body for r in srv.requests]
    assert body["encoding_format"] == "float" and body["model"] == "embed-small" and body["input"] == TEXTS
    assert srv.requests[0].path == "/v1/embeddings" and srv.requests[0].phase == "embeddings"


def test_batching_preserves_order(make, srv: LoopbackOpenAIServer) -> None:
    emb = make(srv, dim=48, batch_size=2)
    vectors = emb.embed_documents(TEXTS)
    assert [len(r.body["input"]) for r in srv.requests] == [2, 2, 1]
    np.testing.assert_allclose(vectors, DeterministicEmbedder(dim=48).embed_documents(TEXTS), atol=1e-6)


def test_empty_inputs(make, srv: LoopbackOpenAIServer) -> None:
    emb = make(srv, dim=48)
    assert emb.embed_documents([]).shape == (0, 48)
    assert srv.requests == []
    vectors = emb.embed_documents(["", "text"])  # the API rejects "", so it is sent as " "
    assert vectors.shape == (2, 48)
    assert srv.requests[0].body["input"] == [" ", "text"]


@pytest.mark.parametrize(
    "fault, match, status",
    [
        (Fault.status(500), "failed", 500),
        (Fault.status(401), "failed", 401),
        (Fault.malformed(), "malformed", None),
        (Fault.drop(), "failed", None),
    ],
)
def test_errors_become_model_error(
    make, srv: LoopbackOpenAIServer, fault: Fault, match: str, status: int | None
) -> None:
    emb = make(srv, dim=48)
    srv.script("embeddings", fault)
    with pytest.raises(ModelError, match=match) as info:
        emb.embed_documents(TEXTS)
    assert info.value.status == status
    assert info.value.__cause__ is not None


def test_sdk_retries_apply(make, srv: LoopbackOpenAIServer) -> None:
    emb = make(srv, dim=48, max_retries=1)
    srv.script("embeddings", Fault.status(429, retry_after=0.01))
    assert emb.embed_documents(TEXTS).shape == (len(TEXTS), 48)
    assert len(srv.requests) == 2


def test_wrong_dim_is_rejected(make, srv: LoopbackOpenAIServer) -> None:
    emb = make(srv, dim=32)
    with pytest.raises(Exception, match="shape"):
        emb.embed_documents(TEXTS)


def test_bad_configuration() -> None:
    with pytest.raises(ValueError):
        OpenAIEmbedder("m", base_url="http://127.0.0.1:9/v1", api_key="x", batch_size=0)
    with pytest.raises(ValueError):
        OpenAIEmbedder("m", base_url="http://127.0.0.1:9/v1", api_key="x", dim=0)
