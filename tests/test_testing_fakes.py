"""The test fakes themselves: DeterministicEmbedder, LoopbackOpenAIServer, ScriptedModel."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import openai
import pytest
from pydantic import BaseModel

from agently_vecmem.errors import ModelError, StructuredOutputError
from agently_vecmem.testing import (
    DeterministicEmbedder,
    Fault,
    LoopbackOpenAIServer,
    ScriptedModel,
    reply_content,
)

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["I live in Lisbon and work as a nurse.", "The cat sat on the mat.", "", "Ünïcödé words 123"]


class Answer(BaseModel):
    answer: str


# -- DeterministicEmbedder ------------------------------------------------------------------------------


def test_deterministic_embedder_shape_and_norm() -> None:
    emb = DeterministicEmbedder(dim=64)
    vectors = emb.embed_documents(TEXTS)
    assert emb.model_id == "deterministic-hash-v1" and emb.dim == 64
    assert vectors.shape == (len(TEXTS), 64) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)  # also the empty text
    np.testing.assert_array_equal(emb.embed_query(TEXTS[0]), vectors[0])


def test_deterministic_embedder_similarity_follows_shared_words() -> None:
    emb = DeterministicEmbedder()
    a, b, c = emb.embed_documents(
        ["Alice lives in Lisbon", "alice LIVES in lisbon!", "quantum chromodynamics"]
    )
    near = emb.embed_query("Where does Alice live? Lisbon")
    assert float(a @ b) == pytest.approx(1.0, abs=1e-6)  # case and punctuation do not matter
    assert float(a @ near) > 0.4
    assert float(a @ near) > float(c @ near) + 0.3


def test_deterministic_embedder_is_stable_across_processes() -> None:
    code = (
        "import json, sys; from agently_vecmem.testing import DeterministicEmbedder; "
        "v = DeterministicEmbedder(dim=96).embed_documents(json.loads(sys.argv[1])); "
        "print(json.dumps(v.tolist()))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(TEXTS)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    other = np.asarray(json.loads(out.stdout), dtype=np.float32)
    np.testing.assert_array_equal(other, DeterministicEmbedder(dim=96).embed_documents(TEXTS))


def test_deterministic_embedder_rejects_tiny_dim() -> None:
    with pytest.raises(ValueError):
        DeterministicEmbedder(dim=2)


# -- reply resolution (shared) ----------------------------------------------------------------------------


def test_reply_content() -> None:
    assert reply_content("x") == "x"
    assert json.loads(reply_content({"a": [1]})) == {"a": [1]}
    assert reply_content(Fault.empty()) == ""
    assert len(reply_content(Fault.oversized(1234))) == 1234
    fault = Fault.status(500)
    assert reply_content(fault) is fault
    with pytest.raises(TypeError):
        reply_content(42)  # type: ignore[arg-type]


# -- LoopbackOpenAIServer -------------------------------------------------------------------------------


def test_server_speaks_openai_chat(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    srv.script("chat", "first", {"k": 1})
    messages = [{"role": "user", "content": "hello"}]
    r1 = sdk_client.chat.completions.create(model="m1", messages=messages)
    r2 = sdk_client.chat.completions.create(model="m1", messages=messages)
    assert r1.choices[0].message.content == "first"
    assert json.loads(r2.choices[0].message.content) == {"k": 1}
    assert r1.model == "m1" and r1.id.startswith("chatcmpl-")
    assert r1.usage.total_tokens == r1.usage.prompt_tokens + r1.usage.completion_tokens
    r3 = sdk_client.chat.completions.create(model="m1", messages=messages)
    assert r3.choices[0].message.content == "ok"  # default handler, text mode
    r4 = sdk_client.chat.completions.create(
        model="m1", messages=messages, response_format={"type": "json_object"}
    )
    assert r4.choices[0].message.content == "{}"  # default handler, JSON mode


def test_server_scripts_per_phase_and_records(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    srv.script("a", "A1", "A2")
    srv.on("b", lambda body: f"B saw {len(body['messages'])}")
    messages = [{"role": "user", "content": "x"}]
    got = [
        sdk_client.chat.completions.create(model="m", messages=messages, extra_headers={"X-VecMem-Phase": p})
        .choices[0]
        .message.content
        for p in ("a", "b", "a", "a")
    ]
    assert got == ["A1", "B saw 1", "A2", "ok"]
    assert [r.phase for r in srv.requests] == ["a", "b", "a", "a"]
    assert len(srv.requests_for("a")) == 3
    assert srv.chat_bodies("b") == [{"model": "m", "messages": messages}]
    first, *_ = srv.requests
    assert first.path == "/v1/chat/completions" and first.headers["x-vecmem-phase"] == "a"
    assert all(x.timestamp <= y.timestamp for x, y in zip(srv.requests, srv.requests[1:], strict=False))
    assert srv.pending() == 0


def test_server_reset(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    srv.script("chat", "queued")
    srv.on("other", lambda body: "handled")
    srv.set_default(lambda body: "custom")
    sdk_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    srv.reset()
    assert srv.requests == [] and srv.pending() == 0
    r = sdk_client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], extra_headers={"X-VecMem-Phase": "other"}
    )
    assert r.choices[0].message.content == "ok"


def test_server_set_default(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    srv.set_default(lambda body: "custom default")
    r = sdk_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert r.choices[0].message.content == "custom default"


def test_server_status_fault_body_and_retry_after(
    srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI
) -> None:
    srv.script("chat", Fault.status(429, retry_after=1.5))
    with pytest.raises(openai.RateLimitError) as info:
        sdk_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert info.value.response.headers["retry-after"] == "1.5"
    assert info.value.body["code"] == "rate_limit_exceeded"  # the SDK unwraps {"error": {...}}


def test_server_handler_exception_becomes_500(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    srv.on("chat", lambda body: 1 / 0)
    with pytest.raises(openai.InternalServerError):
        sdk_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])


def test_server_raw_http(srv: LoopbackOpenAIServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    conn.request("GET", "/v1/models")
    models = json.loads(conn.getresponse().read())
    assert [m["id"] for m in models["data"]] == ["loopback"]
    srv.script("chat", Fault.malformed())
    conn.request("POST", "/v1/chat/completions", body=b"{}", headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(response.read())
    conn.request(
        "POST", "/v1/chat/completions", body=b"not json", headers={"Content-Type": "application/json"}
    )
    response = conn.getresponse()
    assert response.status == 400 and "not JSON" in json.loads(response.read())["error"]["message"]
    conn.request("POST", "/v1/nowhere", body=b"{}")
    response = conn.getresponse()
    assert response.status == 404 and response.read()
    conn.close()


def test_server_models_list_with_sdk(sdk_client: openai.OpenAI) -> None:
    assert [m.id for m in sdk_client.models.list()] == ["loopback"]


def test_server_delay(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    srv.script("chat", Fault.delay(0.15, then={"late": True}))
    start = time.perf_counter()
    r = sdk_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert time.perf_counter() - start >= 0.15
    assert json.loads(r.choices[0].message.content) == {"late": True}


def test_server_drop(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    srv.script("chat", Fault.drop())
    with pytest.raises(openai.APIConnectionError):
        sdk_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    # the server keeps serving after a drop
    assert sdk_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}]).choices


def test_server_concurrent_requests(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    srv.on("chat", lambda body: body["messages"][0]["content"])
    out: dict[int, str] = {}

    def call(i: int) -> None:
        r = sdk_client.chat.completions.create(model="m", messages=[{"role": "user", "content": str(i)}])
        out[i] = r.choices[0].message.content

    threads = [threading.Thread(target=call, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {i: str(i) for i in range(10)}
    assert len(srv.requests) == 10


def test_server_script_rejects_bad_reply_types(srv: LoopbackOpenAIServer) -> None:
    with pytest.raises(TypeError):
        srv.script("chat", 3.14)  # type: ignore[arg-type]


def test_server_start_stop() -> None:
    srv = LoopbackOpenAIServer().start()
    url = srv.base_url
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    srv.stop()
    srv.stop()  # idempotent
    with pytest.raises(RuntimeError):
        _ = srv.base_url


# -- ScriptedModel --------------------------------------------------------------------------------------


def test_scripted_model_fifo_handlers_and_default() -> None:
    model = ScriptedModel()
    model.script("a", "one", {"two": 2})
    model.on("b", lambda body: body["messages"][-1]["content"][::-1])
    msgs = [{"role": "user", "content": "abc"}]
    assert model.complete(msgs, phase="a") == "one"
    assert json.loads(model.complete(msgs, phase="a")) == {"two": 2}
    assert model.complete(msgs, phase="b") == "cba"
    assert model.complete(msgs, phase="a") == "ok"
    assert model.complete(msgs, phase="a", json_mode=True) == "{}"
    assert [r.phase for r in model.requests] == ["a", "a", "b", "a", "a"]
    assert model.chat_bodies("b") == [{"model": "scripted", "messages": msgs}]
    assert model.chat_bodies()[-1]["response_format"] == {"type": "json_object"}
    assert all(r.ok and r.prompt_tokens for r in model.calls)


def test_scripted_model_default_in_constructor() -> None:
    model = ScriptedModel(lambda body: '{"answer": "42"}')
    assert model.structured([{"role": "user", "content": "q"}], Answer, phase="qa") == Answer(answer="42")


def test_scripted_model_structured_reask() -> None:
    model = ScriptedModel()
    model.script("qa", '```json\n{"answer": 1}\n```', {"answer": "yes"})
    assert model.structured([{"role": "user", "content": "q"}], Answer, phase="qa").answer == "yes"
    assert "answer: Input should be a valid string" in model.chat_bodies("qa")[1]["messages"][-1]["content"]
    model.script("qa", "x", "y")
    with pytest.raises(StructuredOutputError) as info:
        model.structured([{"role": "user", "content": "q"}], Answer, phase="qa")
    assert info.value.last_raw == "y" and info.value.attempts == 2


@pytest.mark.parametrize(
    "fault, match",
    [
        (Fault.status(503), "HTTP 503"),
        (Fault.malformed(), "malformed"),
        (Fault.drop(), "drop"),
        (Fault.empty(), "empty reply"),
    ],
)
def test_scripted_model_faults(fault: Fault, match: str) -> None:
    model = ScriptedModel()
    model.script("chat", fault)
    with pytest.raises(ModelError, match=match):
        model.complete([{"role": "user", "content": "x"}])
    assert model.calls[-1].ok is False


def test_scripted_model_delay_and_timeout() -> None:
    model = ScriptedModel(timeout=0.05)
    model.script("chat", Fault.delay(0.01, then="fine"), Fault.delay(5.0))
    assert model.complete([{"role": "user", "content": "x"}]) == "fine"
    start = time.perf_counter()
    with pytest.raises(ModelError, match="timed out"):
        model.complete([{"role": "user", "content": "x"}])
    assert time.perf_counter() - start < 1.0
    assert model.pending() == 0


def test_loopback_streams_when_asked() -> None:
    """Agently streams by default: a ``stream=True`` request gets server-sent events the real client reads."""
    with LoopbackOpenAIServer() as server:
        server.script("chat", "streamed reply")
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        chunks = list(client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "streamed reply"
    assert chunks[-1].choices[0].finish_reason == "stop"
