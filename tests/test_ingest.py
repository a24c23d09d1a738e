"""Importing a chat history (agently_vecmem.ingest): the formats, bad lines, resuming after an interruption
(embedded Chroma and a real server), the model path, and the ``ingest`` CLI as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agently_vecmem.errors import HistoryImportError, WorkspaceError
from agently_vecmem.filters import Scope
from agently_vecmem.ingest import HistoryMessage, import_history, pair_turns, read_history
from agently_vecmem.records import parse_time
from agently_vecmem.session import Session
from agently_vecmem.testing import ScriptedModel

MEMORY = Scope(None, None, "memory")
SYNTHETIC = Path(__file__).resolve().parents[1] / "agently_vecmem" / "data" / "synthetic_conversations.json"


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def chat_rows(n: int, session_id: str = "chat-1", day: int = 1) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        when = f"2023-05-{day + i // 4:02d}T{10 + i % 4}:00:00Z"
        rows.append({"role": "user", "content": f"Turn {i}: I tried recipe number {i} today", "time": when,
                     "session_id": session_id})
        rows.append({"role": "assistant", "content": f"Recipe {i} sounds tasty", "session_id": session_id})
    return rows


# ---------------------------------------------------------------------------------------------- formats
def test_pairing_rules() -> None:
    msgs = [HistoryMessage(role=r, content=c, session_id="s") for r, c in [
        ("system", "be nice"), ("assistant", "hello!"), ("user", "a"), ("user", "b"), ("assistant", "B"),
        ("tool", "x"), ("user", "c")]]
    turns = pair_turns(msgs)["s"]
    assert [(t.user, t.assistant) for t in turns] == [(None, "hello!"), ("a", None), ("b", "B"), ("c", None)]
    assert [t.index for t in turns] == [0, 1, 2, 3]


def test_jsonl_with_bad_lines_imports_the_rest(ws: Any, tmp_path: Path) -> None:
    rows: list[Any] = chat_rows(3)
    rows.insert(2, "{not json")                                                  # line 3
    rows.insert(3, {"role": "user"})                                             # line 4: no content
    rows.insert(4, {"role": "user", "content": "x", "time": "next Tuesday"})     # line 5: bad time
    rows.insert(5, ["role", "user"])                                             # line 6: not an object
    rows.append({"role": "user", "content": [{"type": "text", "text": "parts"}, {"type": "text", "text": "ok"}],
                 "session_id": "chat-2", "time": 1683849600})
    path = write_jsonl(tmp_path / "history.jsonl", rows)
    report = import_history(ws, path)
    assert report.format == "jsonl" and report.sessions == 2 and report.turns == 4 and report.stored == 4
    assert [(p.where, p.error.split(":")[0]) for p in report.problems] == [
        ("line 3", "not JSON"), ("line 4", "invalid message"), ("line 5", "invalid message"), ("line 6", "a message must be an object with role and content, got list")]
    assert "content: Field required" in report.problems[1].error
    assert "not an ISO 8601" in report.problems[2].error
    records = ws.scan(scope=Scope.session_memory("chat-1"))
    assert sorted(r.body["user"] for r in records) == [f"Turn {i}: I tried recipe number {i} today" for i in range(3)]
    assert {r.occurred_at for r in records} == {parse_time(f"2023-05-01T{10 + i}:00:00Z") for i in range(3)}
    assert all(r.extracted is False and r.provenance.raw_reason == "no_model" for r in records)
    [parts] = ws.scan(scope=Scope.session_memory("chat-2"))
    assert parts.body["user"] == "parts\nok" and parts.occurred_at == 1683849600.0


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_agently_session_export(ws: Any, tmp_path: Path, fmt: str) -> None:
    session = Session(id="exported")
    session.add_chat_history([
        {"role": "user", "content": "My sister Clara moved to Lisbon", "time": "2023-04-02T09:00:00Z"},
        {"role": "assistant", "content": "Lisbon is lovely.", "time": "2023-04-02T09:00:05Z"},
        {"role": "user", "content": "I start a new job on Monday"},
        {"role": "assistant", "content": "Good luck!"},
    ])
    path = tmp_path / f"session.{fmt}"
    path.write_text(session.get_json_session() if fmt == "json" else session.get_yaml_session(), encoding="utf-8")
    report = import_history(ws, path)
    assert report.format == f"session-{fmt}" and report.turns == 2 and report.stored == 2 and not report.problems
    records = {r.body["user"]: r for r in ws.scan(scope=Scope.session_memory("exported"))}
    assert records["My sister Clara moved to Lisbon"].occurred_at == parse_time("2023-04-02T09:00:00Z")
    assert records["I start a new job on Monday"].occurred_at is not None  # undated: the import time
    # an explicit session id overrides the export's
    assert import_history(ws, path, session_id="other").stored == 2
    assert len(ws.scan(scope=Scope.session_memory("other"))) == 2


def test_locomo_shaped_file(ws: Any) -> None:
    seen: list[tuple[str, ...]] = []
    report = import_history(ws, SYNTHETIC, on_turn=lambda turn, diag: seen.append(turn.sources))
    data = json.loads(SYNTHETIC.read_text())
    n_turns = sum(len(v) for s in data for k, v in s["conversation"].items()
                  if k.startswith("session_") and isinstance(v, list))
    assert report.format == "locomo" and report.sessions == len(data)
    assert sum(len(s) for s in seen) == n_turns  # every dialog turn is in exactly one imported turn
    first = data[0]
    recs = ws.scan(scope=Scope.session_memory(first["sample_id"]))
    a, b = first["conversation"]["speaker_a"], first["conversation"]["speaker_b"]
    assert recs and all(r.body["user"].startswith(f"{a}: ") for r in recs if r.body["user"])
    assert any(r.body["assistant"].startswith(f"{b}: ") for r in recs)
    assert recs[0].search_text().startswith("date: ") and recs[0].document().startswith("date: ")  # raw turns


def test_whole_file_errors_are_clear(ws: Any, tmp_path: Path) -> None:
    with pytest.raises(HistoryImportError, match="no such file"):
        import_history(ws, tmp_path / "missing.jsonl")
    (tmp_path / "bad.json").write_text("{oops", encoding="utf-8")
    with pytest.raises(HistoryImportError, match="cannot read it as JSON"):
        import_history(ws, tmp_path / "bad.json")
    (tmp_path / "odd.json").write_text('{"hello": 1}', encoding="utf-8")
    with pytest.raises(HistoryImportError, match="not a history this importer knows"):
        import_history(ws, tmp_path / "odd.json")
    assert ws.count(scope=MEMORY) == 0


# ---------------------------------------------------------------------------------------------- resume
class FailingPut:
    """Make the workspace's put fail on its n-th call (an interruption mid-import)."""

    def __init__(self, ws: Any, fail_at: int) -> None:
        self.ws, self.fail_at, self.calls = ws, fail_at, 0
        self.real = ws.put

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == self.fail_at:
            raise WorkspaceError("injected failure: disk full")
        return self.real(*args, **kwargs)


def test_resume_after_an_interruption_adds_nothing_twice(workspace_factory: Any, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "h.jsonl", chat_rows(30, "a") + chat_rows(12, "b"))
    ws = workspace_factory()
    ws.put = FailingPut(ws, fail_at=25)  # mid-session "a", after a checkpoint (every 10 turns here)
    with pytest.raises(WorkspaceError, match="injected failure"):
        import_history(ws, path, checkpoint_every=10)
    del ws.put
    partial = ws.count(scope=MEMORY)
    assert 0 < partial < 42
    report = import_history(ws, path, checkpoint_every=10)
    assert report.resumed > 0 and report.resumed + report.processed == 42
    assert report.duplicates == report.processed - report.stored  # re-run turns after the checkpoint dropped
    assert ws.count(scope=MEMORY) == 42
    again = import_history(ws, path, checkpoint_every=10)
    assert (again.processed, again.resumed, again.stored) == (0, 42, 0)
    # progress records never show up as memories
    assert {r.collection for r in ws.scan(scope=MEMORY)} == {"memory"}
    # the history grows: only the new turns are imported
    write_jsonl(path, chat_rows(30, "a") + chat_rows(12, "b") + [
        {"role": "user", "content": "A new message", "session_id": "b", "time": "2023-06-01"}])
    grown = import_history(ws, path)
    assert (grown.processed, grown.stored) == (1, 1) and ws.count(scope=MEMORY) == 43


def test_model_path_checkpoints_every_turn_and_resumes(ws: Any, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "h.jsonl", chat_rows(6, "m"))

    def extract(body: dict[str, Any]) -> dict[str, Any]:
        text = next(m["content"] for m in body["messages"] if m["role"] == "user")
        n = text.split("recipe number ")[1].split(" ")[0]
        return {"memories": [{"scope": "SESSION_MEMORY", "summary": f"User tried recipe {n}", "importance": 0.6}]}

    model = ScriptedModel()
    model.on("extract", extract)
    ws.put = FailingPut(ws, fail_at=5)  # puts: turn 1, its progress, turn 2, its progress, turn 3 fails
    with pytest.raises(WorkspaceError):
        import_history(ws, path, model=model)
    del ws.put
    calls = len(model.requests_for("extract"))
    assert calls == 3
    report = import_history(ws, path, model=model)
    assert (report.resumed, report.processed) == (2, 4)
    assert len(model.requests_for("extract")) == calls + 4  # no done turn is extracted again
    summaries = sorted(r.summary for r in ws.scan(scope=Scope.session_memory("m")))
    assert summaries == [f"User tried recipe {i}" for i in range(6)]
    assert all(r.extracted and r.occurred_at is not None for r in ws.scan(scope=Scope.session_memory("m")))


def test_read_history_keeps_dates_unless_told() -> None:
    kind, messages, problems = read_history(SYNTHETIC)
    assert kind == "locomo" and not problems and all(m.time is not None for m in messages)
    _, undated, _ = read_history(SYNTHETIC, dated=False)
    assert all(m.time is None for m in undated)


# ---------------------------------------------------------------------------------------------- CLI
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env.update(HF_HUB_OFFLINE="1", ANONYMIZED_TELEMETRY="False")
    return subprocess.run([sys.executable, "-m", "agently_vecmem.cli", "--embedder", "hash", *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_cli_ingest(tmp_path: Path) -> None:
    rows: list[Any] = chat_rows(4)
    rows.insert(1, "garbage")
    path = write_jsonl(tmp_path / "h.jsonl", rows)
    store = tmp_path / "store"
    out = _cli("ingest", str(store), str(path), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert (report["processed"], report["stored"]) == (4, 4)
    assert report["problems"] == [{"where": "line 2", "error": report["problems"][0]["error"]}]
    assert report["problems"][0]["error"].startswith("not JSON")
    again = _cli("ingest", str(store), str(path))
    assert again.returncode == 0 and "0 records" in again.stdout and "4 turns already done" in again.stdout
    assert "skipped line 2: not JSON" in again.stdout
    bad = _cli("ingest", str(store), str(tmp_path / "missing.jsonl"))
    assert bad.returncode == 2 and "no such file" in bad.stderr
    (tmp_path / "odd.json").write_text("[1, 2]")
    odd = _cli("ingest", str(store), str(tmp_path / "odd.json"))
    assert odd.returncode == 2 and "not a history this importer knows" in odd.stderr
    server = _cli("ingest", str(store), str(path), "--host", "127.0.0.1")
    assert server.returncode == 2 and "pass '-' as DIR" in server.stderr


def test_turns_per_call_batches_extraction(ws: Any, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "h.jsonl", chat_rows(7, "b"))
    model = ScriptedModel()
    model.on("extract", lambda body: {"memories": [
        {"scope": "SESSION_MEMORY", "summary": f"User tried recipes ({len(model.requests_for('extract'))})"}]})
    report = import_history(ws, path, model=model, turns_per_call=3)
    bodies = model.chat_bodies("extract")
    assert len(bodies) == 3 and report.processed == 7  # 3 + 3 + 1 turns
    first = next(m["content"] for m in bodies[0]["messages"] if m["role"] == "user")
    assert all(f"user: Turn {i}: I tried recipe number {i}" in first for i in range(3))
    assert "assistant: Recipe 2 sounds tasty" in first and "Turn 3" not in first
    stored = sorted(ws.scan(scope=Scope.session_memory("b")), key=lambda r: r.occurred_at)
    assert [r.occurred_at for r in stored] == [parse_time(t) for t in
                                               ("2023-05-01T10:00:00Z", "2023-05-01T13:00:00Z", "2023-05-02T12:00:00Z")]
    again = import_history(ws, path, model=model, turns_per_call=3)
    assert (again.resumed, again.processed) == (7, 0) and len(model.chat_bodies("extract")) == 3


def test_undated_history_resumes_without_duplicates(ws: Any, tmp_path: Path) -> None:
    """Undated turns are dated at import time, so a later re-run would not repeat them exactly: progress is
    saved after every turn for them."""
    rows = [{k: v for k, v in row.items() if k != "time"} for row in chat_rows(8, "u")]
    path = write_jsonl(tmp_path / "h.jsonl", rows)
    ws.put = FailingPut(ws, fail_at=11)  # puts: (turn, progress) x 5, then turn 6 fails
    with pytest.raises(WorkspaceError):
        import_history(ws, path)
    del ws.put
    assert ws.count(scope=MEMORY) == 5
    report = import_history(ws, path)
    assert (report.resumed, report.processed, report.duplicates) == (5, 3, 0)
    assert ws.count(scope=MEMORY) == 8
