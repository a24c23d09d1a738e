"""Dated memories: the turn's time (``occurred_at``) from ``after_turn`` / ``Session.chat`` onto records, through
Chroma (embedded and server), JSONL export/import and the Session export, into the searchable text and the
injected items."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from agently_vecmem.errors import ConfigurationError, RecordValidationError
from agently_vecmem.filters import Scope
from agently_vecmem.records import MemoryRecord, date_label, parse_record, parse_time
from agently_vecmem.session import Prompt, Session
from agently_vecmem.testing import ScriptedModel
from agently_vecmem.workspace import ChromaWorkspace

MAY_12 = 1683849600.0  # 2023-05-12T00:00:00Z


# ---------------------------------------------------------------------------------------------- parse_time
@pytest.mark.parametrize(("value", "expected"), [
    (MAY_12, MAY_12),
    (int(MAY_12), MAY_12),
    ("2023-05-12", MAY_12),
    ("2023-05-12T00:00:00Z", MAY_12),
    ("2023-05-12T08:00:00+08:00", MAY_12),
    (dt.datetime(2023, 5, 12), MAY_12),
    (dt.datetime(2023, 5, 12, 8, tzinfo=dt.timezone(dt.timedelta(hours=8))), MAY_12),
    (dt.date(2023, 5, 12), MAY_12),
])
def test_parse_time_accepts_epoch_datetime_and_iso(value: Any, expected: float) -> None:
    assert parse_time(value) == expected


@pytest.mark.parametrize(("value", "message"), [
    ("12/05/2023", "not an ISO 8601"),
    ("yesterday", "not an ISO 8601"),
    (MAY_12 * 1000, "outside the years 1900-2200"),
    (float("nan"), "finite"),
    (True, "got bool"),
    ([2023, 5, 12], "got list"),
])
def test_parse_time_rejects_with_a_clear_error(value: Any, message: str) -> None:
    with pytest.raises(RecordValidationError, match=message):
        parse_time(value)
    with pytest.raises(RecordValidationError, match=f"occurred_at: .*{message}"):
        parse_record({"memory_scope": "GLOBAL_MEMORY", "summary": "x", "occurred_at": value})


def test_date_label_and_document() -> None:
    assert date_label(MAY_12 + 3600 * 15) == "2023-05-12 (Friday, 12 May 2023)"
    r = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="Went hiking", occurred_at="2023-05-12")
    assert r.search_text() == "date: 2023-05-12 (Friday, 12 May 2023)\nWent hiking"
    assert r.document() == "Went hiking"  # an extracted memory's embedded text carries no date
    raw = r.model_copy(update={"extracted": False})
    assert raw.document() == raw.search_text() == "date: 2023-05-12 (Friday, 12 May 2023)\nWent hiking"
    undated = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="Went hiking")
    assert undated.search_text() == undated.document() == "Went hiking"


def test_chroma_metadata_round_trip_and_old_metadata() -> None:
    r = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="s", occurred_at=MAY_12 + 0.123456789)
    meta = r.to_chroma()
    assert meta["occurred_at"] == r.occurred_at
    assert MemoryRecord.from_chroma(r.id, meta) == r
    # metadata written before occurred_at existed: three floats, no key
    old = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="s").to_chroma()
    assert len(json.loads(old["floats_json"])) == 3 and "occurred_at" not in old
    assert MemoryRecord.from_chroma("x", old).occurred_at is None


# ---------------------------------------------------------------------------------------------- storage
def test_dated_records_round_trip_chroma_and_jsonl(workspace_factory: Any, tmp_path: Any) -> None:
    ws = workspace_factory()
    dated = MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s1", summary="Visited Lisbon",
                         occurred_at="2023-05-12T14:30:00+02:00")
    undated = MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s1", summary="Likes tea")
    ws.put([dated, undated])
    workspace_factory.restart()
    ws = workspace_factory()
    got = {r.id: r for r in ws.scan(scope=Scope.session_memory("s1"))}
    assert got[dated.id].occurred_at == dated.occurred_at == MAY_12 + 12.5 * 3600
    assert got[undated.id].occurred_at is None
    # filterable as a number
    hits = ws.scan(scope=Scope.session_memory("s1"), where={"occurred_at": {"$gte": MAY_12}})
    assert [h.id for h in hits] == [dated.id]
    # the stored document carries the date
    assert ws.view(Scope.session_memory("s1")).documents[
        [r.id for r in ws.view(Scope.session_memory("s1")).records].index(dated.id)
    ].startswith("date: 2023-05-12 (Friday, 12 May 2023)")
    # ...but its vector is the undated text's
    assert ws.get_vectors([dated.id])[0] == pytest.approx(ws.embedder.embed_documents([dated.document()])[0], abs=1e-5)
    # an update that drops the date removes it
    ws.put(got[dated.id].model_copy(update={"occurred_at": None}))
    assert ws.get(dated.id).occurred_at is None
    assert ws.scan(scope=Scope.session_memory("s1"), where={"occurred_at": {"$gte": MAY_12}}) == []
    ws.put(got[dated.id])
    out = tmp_path / "export.jsonl"
    ws.export_jsonl(out)
    rows = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    assert {row["record"]["id"]: row["record"].get("occurred_at") for row in rows} == {
        dated.id: dated.occurred_at, undated.id: None}
    target = workspace_factory.fresh()
    assert target.import_jsonl(out) == 2
    back = {r.id: r for r in target.scan(scope=Scope.session_memory("s1"))}
    assert back[dated.id].occurred_at == dated.occurred_at and back[undated.id].occurred_at is None


# ---------------------------------------------------------------------------------------------- plugin
def _session(ws: Any, model: Any = None, sid: str = "s1") -> Session:
    settings = {"session": {"memory": {"VecMemory": {"retrieve_plan": {"enabled": False}, "retrieve": {"rerank": False}}}}}
    return Session(id=sid, settings=settings).use_memory(mode="VecMemory", workspace=ws, model=model)


MONTHS = {"2023-03-14": "We planted tomatoes in the garden.",
          "2023-05-12": "We went to a pottery class downtown.",
          "2023-05-27": "We watched the marathon by the river.",
          "2023-08-02": "We repaired the old bicycle.",
          "2023-11-20": "We baked bread for the neighbours.",
          "2024-05-03": "We visited the science museum."}


def test_may_2023_finds_may_with_minilm(minilm: Any, tmp_path: Any) -> None:
    """The real embedder in the default hybrid retrieval: the date words pick May 2023 out of six months."""
    with ChromaWorkspace(str(tmp_path / "m"), embedder=minilm) as w:
        session = _session(w)
        for when, text in MONTHS.items():
            session.memory.after_turn_sync(session=session, user_content=text, assistant_content="Nice.",
                                           occurred_at=when)
        prompt = Prompt()
        prompt.set("input", "What did we do in May 2023?")
        session.memory.prepare_request_sync(prompt=prompt, session=session)
        top2 = [json.loads(i["content"])["user"] for i in prompt.get("SESSION_MEMORY")[:2]]
    assert set(top2) == {MONTHS["2023-05-12"], MONTHS["2023-05-27"]}


def test_after_turn_keeps_the_turn_time_and_may_finds_may(ws: Any) -> None:
    session = _session(ws)
    plugin = session.memory
    months = {"2023-03-14": "We planted tomatoes in the garden.",
              "2023-05-12": "We went to a pottery class downtown.",
              "2023-05-27": "We watched the marathon by the river.",
              "2023-08-02": "We repaired the old bicycle."}
    for when, text in months.items():
        plugin.after_turn_sync(session=session, user_content=text, assistant_content="Nice.",
                               occurred_at=when)
    before = dt.datetime.now(dt.timezone.utc).timestamp()
    plugin.after_turn_sync(session=session, user_content="Undated turn about soup.", assistant_content="ok")
    records = ws.scan(scope=Scope.session_memory("s1"))
    by_text = {r.body["user"]: r for r in records}
    assert by_text["We planted tomatoes in the garden."].occurred_at == parse_time("2023-03-14")
    assert by_text["Undated turn about soup."].occurred_at >= before - 1  # default: now
    with pytest.raises(RecordValidationError, match="not an ISO 8601"):
        plugin.after_turn_sync(session=session, user_content="x", assistant_content="y", occurred_at="May 5th")
    prompt = Prompt()
    prompt.set("input", "What did we do in May 2023?")
    plugin.prepare_request_sync(prompt=prompt, session=_session(ws, sid="s1"))
    items = prompt.get("SESSION_MEMORY")
    top2 = {json.loads(i["content"])["user"] for i in items[:2]}
    assert top2 == {"We went to a pottery class downtown.", "We watched the marathon by the river."}
    assert items[0]["date"].startswith("2023-05-")
    # a raw turn is an episode: the same words on the same day are a duplicate, on another day a new turn
    diag = plugin.after_turn_sync(session=session, user_content="We repaired the old bicycle.",
                                  assistant_content="Nice.", occurred_at="2023-08-02T18:00:00Z")
    assert diag["stored"] == 0 and diag["consolidation"][0]["reason"] == "exact_duplicate"
    diag = plugin.after_turn_sync(session=session, user_content="We repaired the old bicycle.",
                                  assistant_content="Nice.", occurred_at="2024-01-01")
    assert diag["stored"] == 1


def test_extracted_memories_and_reextraction_carry_the_turn_time(ws: Any) -> None:
    model = ScriptedModel()
    session = _session(ws, model)
    model.script("extract", {"memories": [{"scope": "SESSION_MEMORY", "summary": "User adopted a cat named Miso",
                                           "importance": 0.8}]})
    diag = session.memory.after_turn_sync(session=session, user_content="I adopted a cat, Miso!",
                                          assistant_content="Congrats", occurred_at="2023-05-12T10:00:00Z")
    rec = ws.scan(scope=Scope.session_memory("s1"))[0]
    assert diag["stored"] == 1 and rec.summary == "User adopted a cat named Miso"
    assert rec.occurred_at == MAY_12 + 36000
    # a fact is not a new memory because it is said on another day
    model.script("extract", {"memories": [{"scope": "SESSION_MEMORY", "summary": "User adopted a cat named Miso",
                                           "importance": 0.8}]})
    again = session.memory.after_turn_sync(session=session, user_content="Miso is my cat",
                                           assistant_content="Cute", occurred_at="2024-02-01")
    assert again["stored"] == 0 and again["consolidation"][0]["reason"] == "exact_duplicate"
    # a failed extraction keeps the raw turn dated; its re-extraction inherits the date
    from agently_vecmem.testing import Fault

    model.script("extract", Fault.status(500), Fault.status(500))
    session.memory.after_turn_sync(session=session, user_content="I moved to Porto", assistant_content="ok",
                                   occurred_at="2023-06-01")
    model.script("extract", {"memories": [{"scope": "SESSION_MEMORY", "summary": "User moved to Porto"}]})
    result = session.memory.reextract_pending(session_id="s1")
    assert result["done"] == 1
    moved = [r for r in ws.scan(scope=Scope.session_memory("s1")) if r.summary == "User moved to Porto"]
    assert moved and moved[0].occurred_at == parse_time("2023-06-01")


# ---------------------------------------------------------------------------------------------- Session
def test_session_chat_time_on_messages_records_and_export(ws: Any, tmp_path: Any) -> None:
    model = ScriptedModel()
    session = _session(ws, model)
    assert session.chat("I ran a 10k today", model=model, occurred_at="2023-05-12T09:00:00") == "ok"
    session.chat("hello again", model=model)  # no time: messages carry none, memories get now
    full = session.full_context
    assert full[0] == {"role": "user", "content": "I ran a 10k today"}  # still plain dicts for equality
    assert full[0].time == full[1].time == MAY_12 + 9 * 3600 and full[2].time is None
    rec = next(r for r in ws.scan(scope=Scope.session_memory("s1")) if "10k" in r.summary)
    assert rec.occurred_at == MAY_12 + 9 * 3600
    data = json.loads(session.get_json_session())
    assert data["full_context"][0] == {"role": "user", "content": "I ran a 10k today",
                                       "time": "2023-05-12T09:00:00+00:00"}
    assert "time" not in data["full_context"][2]
    for text, loader in ((session.get_json_session(), "load_json_session"),
                         (session.get_yaml_session(), "load_yaml_session")):
        loaded = getattr(Session(), loader)(text)
        assert [m.time for m in loaded.full_context] == [m.time for m in full]
    # an invalid time fails before the model is called
    calls = len(model.requests)
    with pytest.raises(RecordValidationError, match="occurred_at"):
        session.chat("x", model=model, occurred_at="last week")
    assert len(model.requests) == calls
    with pytest.raises(ConfigurationError, match="message time"):
        Session().add_chat_history({"role": "user", "content": "x", "time": "soon"})
