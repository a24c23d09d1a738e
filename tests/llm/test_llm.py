"""The model layer: structured-output helpers, ChatModel base behaviour, OpenAIChatModel over the real
``openai`` client against the loopback server."""

from __future__ import annotations

import json
import threading

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, ValidationError

from agently_vecmem.errors import ModelError, StructuredOutputError
from agently_vecmem.llm import (
    MAX_CALL_RECORDS,
    CallRecord,
    OpenAIChatModel,
    ReplyParseError,
    build_reask_messages,
    extract_json,
    format_errors,
    strip_code_fences,
    summarize_calls,
)
from agently_vecmem.llm.openai_compat import parse_retry_after
from agently_vecmem.testing import Fault, LoopbackOpenAIServer, ScriptedModel, approx_tokens


class Fact(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str
    importance: float = 0.5


class Facts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    facts: list[Fact]


ASK = [
    {"role": "system", "content": 'Extract facts. Reply as JSON: {"facts": [{"text": str}]}'},
    {"role": "user", "content": "I live in Lisbon."},
]
GOOD = {"facts": [{"text": "lives in Lisbon", "importance": 0.8}]}


def make_model(
    srv: LoopbackOpenAIServer, *, client: openai.OpenAI | None = None, **kwargs
) -> OpenAIChatModel:
    options = {"max_retries": 0, "backoff": 0.01, "timeout": 5.0}
    options.update(kwargs)
    if client is None:
        return OpenAIChatModel("loopback-model", base_url=srv.base_url, api_key="test", **options)
    return OpenAIChatModel("loopback-model", client=client, **options)


# -- pure helpers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected",
    [
        ('{"a": 1}', '{"a": 1}'),
        ('```json\n{"a": 1}\n```', '{"a": 1}'),
        ('```\n{"a": 1}\n```', '{"a": 1}'),
        ('Sure! Here it is:\n```JSON\n{"a": 1}\n```\nAnything else?', '{"a": 1}'),
        ('```python\nx = 1\n```\n```json\n{"a": 1}\n```', '{"a": 1}'),
        ('```json\n{"a": 1}', '{"a": 1}'),  # truncated: no closing fence
        ("  plain  ", "plain"),
    ],
)
def test_strip_code_fences(raw: str, expected: str) -> None:
    assert strip_code_fences(raw) == expected


def test_extract_json_finds_first_object_in_prose() -> None:
    assert extract_json('The answer is {"a": {"b": [1, 2]}} and also {"c": 3}.') == {"a": {"b": [1, 2]}}
    assert extract_json("noise [1, 2] tail") == [1, 2]
    assert extract_json('{not json} then {"ok": true}') == {"ok": True}


@pytest.mark.parametrize("raw", ["", "   ", "no json here", "{'single': 'quotes'}", "```json\n```"])
def test_extract_json_rejects_non_json(raw: str) -> None:
    with pytest.raises(ReplyParseError):
        extract_json(raw)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=40, deadline=None)
@given(
    st.dictionaries(st.text(max_size=10), json_values, max_size=5),
    st.sampled_from(["", "Here:\n", "```json\n"]),
)
def test_extract_json_round_trips_objects(obj: dict, prefix: str) -> None:
    suffix = "\n```" if prefix.startswith("```") else ""
    assert extract_json(prefix + json.dumps(obj) + suffix) == obj


def test_format_errors_lists_locations() -> None:
    with pytest.raises(ValidationError) as info:
        Facts.model_validate({"facts": [{"importance": "high"}]})
    text = format_errors(info.value)
    assert "facts.0.text: Field required" in text
    assert "facts.0.importance" in text and "'high'" in text
    assert format_errors(ReplyParseError("the reply is empty")) == "- the reply is empty"


def test_build_reask_messages_appends_without_mutating() -> None:
    original = list(ASK)
    out = build_reask_messages(ASK, "bad", "- x: broken")
    assert ASK == original
    assert out[:2] == ASK
    assert out[2] == {"role": "assistant", "content": "bad"}
    assert out[3]["role"] == "user" and "- x: broken" in out[3]["content"]


def test_parse_retry_after() -> None:
    assert parse_retry_after({"Retry-After": "0.2"}) == pytest.approx(0.2)
    assert parse_retry_after({"retry-after-ms": "150"}) == pytest.approx(0.15)
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # in the past
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


# -- ChatModel base (via ScriptedModel: no HTTP) ------------------------------------------------------------


def test_structured_rejects_zero_attempts() -> None:
    with pytest.raises(ValueError):
        ScriptedModel().structured(ASK, Facts, phase="extract", max_attempts=0)


def test_call_log_is_bounded() -> None:
    model = ScriptedModel()
    for _ in range(MAX_CALL_RECORDS + 5):
        model.complete([{"role": "user", "content": "hi"}])
    assert len(model.calls) == MAX_CALL_RECORDS
    model.complete([{"role": "user", "content": "hi"}], phase="after")
    assert len(model.calls) == MAX_CALL_RECORDS and model.calls[-1].phase == "after"


def test_usage_summary_by_phase() -> None:
    model = ScriptedModel()
    model.script("extract", "not json", GOOD)
    model.complete([{"role": "user", "content": "hello there"}])
    model.structured(ASK, Facts, phase="extract")
    summary = summarize_calls(model.calls)
    assert summary.calls == 3 and summary.failed == 1
    assert summary.by_phase == {"chat": 1, "extract": 2}
    assert summary.total_tokens == summary.prompt_tokens + summary.completion_tokens > 0
    assert summary.to_dict()["total_tokens"] == summary.total_tokens


def test_call_log_is_thread_safe() -> None:
    model = ScriptedModel()
    threads = [
        threading.Thread(
            target=lambda: [model.complete([{"role": "user", "content": "x"}]) for _ in range(50)]
        )
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(model.calls) == 400


# -- OpenAIChatModel against the loopback server --------------------------------------------------------


def test_complete_sends_phase_header_and_records_usage(
    srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI
) -> None:
    model = make_model(srv, client=sdk_client, extra_headers={"X-Trace": "t1"})
    srv.script("chat", "hello back")
    assert model.complete([{"role": "user", "content": "hello"}]) == "hello back"
    (request,) = srv.requests
    assert request.phase == "chat"
    assert request.headers["x-vecmem-phase"] == "chat"
    assert request.headers["x-trace"] == "t1"
    assert request.body["model"] == "loopback-model"
    assert "response_format" not in request.body
    (record,) = model.calls
    assert isinstance(record, CallRecord)
    assert record.ok and record.error_type is None and record.attempt == 1 and record.phase == "chat"
    assert record.prompt_tokens == approx_tokens("hello")
    assert record.completion_tokens == approx_tokens("hello back")
    assert record.latency_ms > 0


def test_structured_success(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    model = make_model(srv, client=sdk_client)
    srv.script("extract", GOOD)
    result = model.structured(ASK, Facts, phase="extract")
    assert result == Facts.model_validate(GOOD)
    (body,) = srv.chat_bodies("extract")
    assert body["response_format"] == {"type": "json_object"}
    assert body["messages"] == ASK  # ASK mentions JSON: no hint added
    assert srv.requests[0].headers["x-vecmem-phase"] == "extract"


def test_json_hint_added_when_prompt_never_mentions_json(
    srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI
) -> None:
    model = make_model(srv, client=sdk_client)
    srv.script("x", GOOD)
    model.structured([{"role": "user", "content": "Extract facts."}], Facts, phase="x")
    (body,) = srv.chat_bodies("x")
    assert "json" in body["messages"][-1]["content"].lower()


def test_structured_code_fenced_json(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    model = make_model(srv, client=sdk_client)
    srv.script("extract", "Here you go:\n```json\n" + json.dumps(GOOD) + "\n```")
    assert model.structured(ASK, Facts, phase="extract").facts[0].text == "lives in Lisbon"
    assert len(srv.requests) == 1


def test_structured_reasks_with_validation_errors(
    srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI
) -> None:
    model = make_model(srv, client=sdk_client)
    invalid = '{"facts": [{"txt": "lives in Lisbon"}]}'
    srv.script("extract", invalid, GOOD)
    result = model.structured(ASK, Facts, phase="extract")
    assert result.facts[0].text == "lives in Lisbon"
    first, second = srv.chat_bodies("extract")
    assert first["messages"] == ASK
    assert second["messages"][: len(ASK)] == ASK
    assert second["messages"][len(ASK)] == {"role": "assistant", "content": invalid}
    reask = second["messages"][len(ASK) + 1]
    assert reask["role"] == "user"
    assert "facts.0.text: Field required" in reask["content"]
    assert "facts.0.txt: Extra inputs are not permitted" in reask["content"]
    assert second["response_format"] == {"type": "json_object"}
    bad, good = model.calls
    assert (bad.ok, bad.error_type, bad.attempt) == (False, "ValidationError", 1)
    assert (good.ok, good.error_type, good.attempt) == (True, None, 2)
    assert bad.prompt_tokens is not None and good.prompt_tokens > bad.prompt_tokens


def test_structured_reasks_after_prose(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    model = make_model(srv, client=sdk_client)
    srv.script("extract", "I could not find any facts, sorry.", {"facts": []})
    assert model.structured(ASK, Facts, phase="extract") == Facts(facts=[])
    assert "not valid JSON" in srv.chat_bodies("extract")[1]["messages"][-1]["content"]
    assert model.calls[0].error_type == "ReplyParseError"


def test_structured_budget_exhausted(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    model = make_model(srv, client=sdk_client)
    srv.script("extract", "nope", '{"facts": "many"}', GOOD)
    with pytest.raises(StructuredOutputError) as info:
        model.structured(ASK, Facts, phase="extract", max_attempts=2)
    err = info.value
    assert isinstance(err, ModelError)
    assert err.attempts == 2 and err.phase == "extract"
    assert err.last_raw == '{"facts": "many"}'
    assert len(err.errors) == 2 and "not valid JSON" in err.errors[0] and "facts" in err.errors[1]
    assert err.to_dict()["attempts"] == 2
    assert len(srv.requests) == 2 and srv.pending("extract") == 1


def test_structured_single_attempt(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    model = make_model(srv, client=sdk_client)
    srv.script("extract", "{}")
    with pytest.raises(StructuredOutputError) as info:
        model.structured(ASK, Facts, phase="extract", max_attempts=1)
    assert info.value.attempts == 1 and len(srv.requests) == 1


def test_server_error_then_success_is_retried(
    srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI
) -> None:
    model = make_model(srv, client=sdk_client, max_retries=2)
    srv.script("extract", Fault.status(500), Fault.status(503), GOOD)
    assert model.structured(ASK, Facts, phase="extract") == Facts.model_validate(GOOD)
    assert len(srv.requests) == 3
    (record,) = model.calls  # transport retries are inside one call
    assert record.ok and record.attempt == 1


def test_server_error_exhausts_retries(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    model = make_model(srv, client=sdk_client, max_retries=1)
    srv.script("chat", Fault.status(500), Fault.status(500), "late")
    with pytest.raises(ModelError) as info:
        model.complete([{"role": "user", "content": "hi"}])
    assert info.value.status == 500 and not isinstance(info.value, StructuredOutputError)
    assert isinstance(info.value.__cause__, Exception)
    assert len(srv.requests) == 2
    assert model.calls[-1].ok is False and model.calls[-1].error_type == "ModelError"


def test_rate_limit_honours_retry_after(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    model = make_model(srv, client=sdk_client, max_retries=1, backoff=0.001)
    srv.script("chat", Fault.status(429, retry_after=0.2), "ok after wait")
    assert model.complete([{"role": "user", "content": "hi"}]) == "ok after wait"
    first, second = srv.requests
    assert 0.2 <= second.timestamp - first.timestamp < 1.0


def test_retry_after_is_capped(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    model = make_model(srv, client=sdk_client, max_retries=1, max_backoff=0.05)
    srv.script("chat", Fault.status(429, retry_after=30), "ok")
    assert model.complete([{"role": "user", "content": "hi"}]) == "ok"
    first, second = srv.requests
    assert second.timestamp - first.timestamp < 1.0


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_client_errors_are_not_retried(
    srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI, status: int
) -> None:
    model = make_model(srv, client=sdk_client, max_retries=3)
    srv.script("chat", Fault.status(status), "never")
    with pytest.raises(ModelError) as info:
        model.complete([{"role": "user", "content": "hi"}])
    assert info.value.status == status
    assert len(srv.requests) == 1


def test_response_format_rejected_falls_back_and_remembers(
    srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI
) -> None:
    model = make_model(srv, client=sdk_client)

    def picky(body: dict):
        if "response_format" in body:
            return Fault.status(400, body={"error": {"message": "response_format is not supported"}})
        return GOOD

    srv.on("extract", picky)
    assert model.structured(ASK, Facts, phase="extract") == Facts.model_validate(GOOD)
    first, second = srv.chat_bodies("extract")
    assert "response_format" in first and "response_format" not in second
    assert model.response_format_supported is False
    model.structured(ASK, Facts, phase="extract")
    assert len(srv.chat_bodies("extract")) == 3  # remembered: no second 400
    assert all(r.ok for r in model.calls)


def test_unrelated_bad_request_does_not_disable_json_mode(
    srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI
) -> None:
    model = make_model(srv, client=sdk_client)
    srv.script("extract", Fault.status(400), Fault.status(400), GOOD)
    with pytest.raises(ModelError) as info:
        model.structured(ASK, Facts, phase="extract")
    assert info.value.status == 400
    assert ["response_format" in b for b in srv.chat_bodies("extract")] == [True, False]
    assert model.response_format_supported is True
    model.structured(ASK, Facts, phase="extract")
    assert "response_format" in srv.chat_bodies("extract")[-1]


def test_json_mode_on_does_not_fall_back(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    model = make_model(srv, client=sdk_client, json_mode="on")
    srv.script("extract", Fault.status(400))
    with pytest.raises(ModelError) as info:
        model.structured(ASK, Facts, phase="extract")
    assert info.value.status == 400 and len(srv.requests) == 1


def test_json_mode_off_never_sends_response_format(
    srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI
) -> None:
    model = make_model(srv, client=sdk_client, json_mode="off")
    srv.script("extract", GOOD)
    model.structured(ASK, Facts, phase="extract")
    assert "response_format" not in srv.chat_bodies("extract")[0]


def test_timeout_raises_model_error(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    model = make_model(srv, client=sdk_client, timeout=0.2)
    srv.script("chat", Fault.delay(1.0, then="too late"))
    with pytest.raises(ModelError, match="timed out") as info:
        model.complete([{"role": "user", "content": "hi"}])
    assert info.value.status is None and info.value.phase == "chat"


def test_timeout_is_retried(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    model = make_model(srv, client=sdk_client, timeout=0.2, max_retries=1)
    srv.script("chat", Fault.delay(1.0), "second try")
    assert model.complete([{"role": "user", "content": "hi"}]) == "second try"


def test_dropped_connection(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    model = make_model(srv, client=sdk_client)
    srv.script("chat", Fault.drop())
    with pytest.raises(ModelError, match="connection error"):
        model.complete([{"role": "user", "content": "hi"}])
    retrying = make_model(srv, client=sdk_client, max_retries=1)
    srv.script("chat", Fault.drop(), "recovered")
    assert retrying.complete([{"role": "user", "content": "hi"}]) == "recovered"


def test_malformed_body_is_model_error_without_retry(
    srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI
) -> None:
    model = make_model(srv, client=sdk_client, max_retries=2)
    srv.script("chat", Fault.malformed(), "never")
    with pytest.raises(ModelError, match="malformed"):
        model.complete([{"role": "user", "content": "hi"}])
    assert len(srv.requests) == 1


def test_empty_reply(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    model = make_model(srv, client=sdk_client)
    srv.script("chat", Fault.empty())
    with pytest.raises(ModelError, match="empty reply"):
        model.complete([{"role": "user", "content": "hi"}])
    srv.script("extract", Fault.empty(), GOOD)
    with pytest.raises(ModelError, match="empty reply") as info:
        model.structured(ASK, Facts, phase="extract")
    assert not isinstance(info.value, StructuredOutputError)  # transport-level: no re-ask
    assert len(srv.chat_bodies("extract")) == 1
    assert [r.ok for r in model.calls] == [False, False]


def test_oversized_reply_passes_through(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    model = make_model(srv, client=sdk_client)
    srv.script("chat", Fault.oversized(200_000))
    text = model.complete([{"role": "user", "content": "hi"}])
    assert len(text) == 200_000
    assert model.calls[0].completion_tokens == approx_tokens(text)


def test_concurrent_calls(srv: LoopbackOpenAIServer, sdk_client: openai.OpenAI) -> None:
    model = make_model(srv, client=sdk_client)
    srv.on("chat", lambda body: body["messages"][0]["content"].upper())
    results: dict[int, str] = {}

    def call(i: int) -> None:
        results[i] = model.complete([{"role": "user", "content": f"msg {i}"}])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: f"MSG {i}" for i in range(8)}
    assert len(model.calls) == 8 and len(srv.requests) == 8


def test_from_env(monkeypatch: pytest.MonkeyPatch, srv: LoopbackOpenAIServer) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    assert OpenAIChatModel.from_env() is None
    monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
    model = OpenAIChatModel.from_env(max_retries=0)
    assert model is not None and model.model == "gpt-4o-mini"
    monkeypatch.setenv("OPENAI_MODEL", "local-llm")
    model = OpenAIChatModel.from_env(max_retries=0)
    assert model.model == "local-llm"
    assert model.complete([{"role": "user", "content": "hi"}]) == "ok"
    assert srv.requests[-1].body["model"] == "local-llm"


def test_bad_configuration() -> None:
    with pytest.raises(ValueError):
        OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key="x", json_mode="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key="x", max_retries=-1)
