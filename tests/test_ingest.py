"""Importing a chat history (agently_vecmem.ingest): the formats, bad lines, resuming after an interruption
(embedded Chroma and a real server), the model path, and the ``ingest`` CLI as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
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
    """The turn-by-turn path (``batched=False``; the model path's): turns re-run after the last checkpoint
    are exact duplicates, dropped."""
    path = write_jsonl(tmp_path / "h.jsonl", chat_rows(30, "a") + chat_rows(12, "b"))
    ws = workspace_factory()
    ws.put = FailingPut(ws, fail_at=25)  # mid-session "a", after a checkpoint (every 10 turns here)
    with pytest.raises(WorkspaceError, match="injected failure"):
        import_history(ws, path, checkpoint_every=10, batched=False)
    del ws.put
    partial = ws.count(scope=MEMORY)
    assert 0 < partial < 42
    report = import_history(ws, path, checkpoint_every=10, batched=False)
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
    """Undated turns are dated at import time, so a later re-run would not repeat them exactly: turn by turn
    (``batched=False``), progress is saved after every turn for them."""
    rows = [{k: v for k, v in row.items() if k != "time"} for row in chat_rows(8, "u")]
    path = write_jsonl(tmp_path / "h.jsonl", rows)
    ws.put = FailingPut(ws, fail_at=11)  # puts: (turn, progress) x 5, then turn 6 fails
    with pytest.raises(WorkspaceError):
        import_history(ws, path, batched=False)
    del ws.put
    assert ws.count(scope=MEMORY) == 5
    report = import_history(ws, path, batched=False)
    assert (report.resumed, report.processed, report.duplicates) == (5, 3, 0)
    assert ws.count(scope=MEMORY) == 8


# ---------------------------------------------------------------------------------------------- batched
def test_batched_resume_after_an_interruption_repeats_and_loses_nothing(workspace_factory: Any,
                                                                         tmp_path: Path) -> None:
    """Without a model turns are written checkpoint_every at a time, each put with its progress: a failed put
    leaves exactly the earlier batches, and the re-run does exactly the rest (no duplicate to drop)."""
    path = write_jsonl(tmp_path / "h.jsonl", chat_rows(30, "a") + chat_rows(12, "b"))
    ws = workspace_factory()
    ws.put = FailingPut(ws, fail_at=3)  # puts of 10 turns: a0-9, a10-19, then a20-29 fails
    with pytest.raises(WorkspaceError, match="injected failure"):
        import_history(ws, path, checkpoint_every=10)
    del ws.put
    assert ws.count(scope=MEMORY) == 20
    report = import_history(ws, path, checkpoint_every=10)
    assert (report.resumed, report.processed, report.stored, report.duplicates) == (20, 22, 22, 0)
    assert ws.count(scope=MEMORY) == 42
    again = import_history(ws, path, checkpoint_every=10)
    assert (again.processed, again.resumed, again.stored) == (0, 42, 0)
    assert {r.collection for r in ws.scan(scope=MEMORY)} == {"memory"}


def test_batched_undated_history_resumes_exactly(ws: Any, tmp_path: Path) -> None:
    """Undated turns are dated at import time; their progress is written with them, so a re-run after an
    interruption neither repeats nor loses one."""
    rows = [{k: v for k, v in row.items() if k != "time"} for row in chat_rows(8, "u")]
    path = write_jsonl(tmp_path / "h.jsonl", rows)
    ws.put = FailingPut(ws, fail_at=2)  # puts of 3 turns: the second fails
    with pytest.raises(WorkspaceError):
        import_history(ws, path, checkpoint_every=3)
    del ws.put
    assert ws.count(scope=MEMORY) == 3
    report = import_history(ws, path, checkpoint_every=3)
    assert (report.resumed, report.processed, report.stored, report.duplicates) == (3, 5, 5, 0)
    assert sorted(r.body["user"] for r in ws.scan(scope=MEMORY)) == sorted(r["content"] for r in rows[::2])


def _stored(ws: Any) -> list[tuple[Any, ...]]:
    """Every record of the workspace without what differs between two writes of it (id, write times, the
    import progress's own digest is kept): memories and progress records."""
    out = []
    for r in ws.scan(scope=Scope(None, None, None), limit=100_000):
        d = r.model_dump(mode="json", exclude={"id", "created_at", "updated_at", "vector_index"})
        out.append(json.dumps(d, sort_keys=True))
    return sorted(out)


def _diag(diag: dict[str, Any]) -> dict[str, Any]:
    """A turn's diagnostics without ids and timings."""
    out = {k: v for k, v in diag.items() if k not in ("timings_ms", "cache", "refs")}
    out["refs"] = [{k: v for k, v in ref.items() if k not in ("id", "path", "created_at")}
                   for ref in diag.get("refs", ())]
    out["consolidation"] = [{k: v for k, v in c.items() if k != "id"} for c in diag.get("consolidation", ())]
    return out


def _duplicate_rows() -> list[Any]:
    """Two sessions with exact duplicate turns within a batch, across batches and across sessions, an empty
    turn, and a message with parts."""
    rows: list[Any] = chat_rows(9, "d1") + chat_rows(5, "d2")
    rows += chat_rows(3, "d1", day=1)  # d1's first 3 turns again, same dates: exact duplicates
    rows += [{"role": "user", "content": "Turn 0: I tried recipe number 0 today", "session_id": "d1",
              "time": "2023-05-01T10:00:00Z"},
             {"role": "assistant", "content": "Recipe 0 sounds tasty", "session_id": "d1"}]  # within a batch
    rows += [{"role": "assistant", "content": "   ", "session_id": "d2", "time": "2023-06-01"}]
    return rows


@pytest.mark.parametrize("settings,turns_per_call,every", [
    (None, 1, 4),
    (None, 1, 50),
    ({"raw_turns": {"scope": "GLOBAL_MEMORY"}}, 1, 5),  # duplicates across sessions too
    (None, 2, 3),
    ({"raw_turns": {"max_chars": 120}}, 3, 7),
])
def test_batched_path_stores_what_the_turn_by_turn_path_stores(
        store_path: str, tmp_path: Path, settings: Any, turns_per_call: int, every: int) -> None:
    from agently_vecmem.testing import DeterministicEmbedder
    from agently_vecmem.workspace import ChromaWorkspace

    path = write_jsonl(tmp_path / "h.jsonl", _duplicate_rows())
    results = {}
    for batched in (False, True):
        seen: list[tuple[Any, dict[str, Any]]] = []
        with ChromaWorkspace(tmp_path / f"store-{batched}", embedder=DeterministicEmbedder()) as ws:
            report = import_history(ws, path, settings=settings, turns_per_call=turns_per_call,
                                    checkpoint_every=every, batched=batched,
                                    on_turn=lambda turn, diag, out=seen: out.append((turn, _diag(diag))))
            counts = (report.sessions, report.turns, report.processed, report.resumed, report.stored,
                      report.duplicates, report.degraded)
            again = import_history(ws, path, settings=settings, turns_per_call=turns_per_call,
                                   checkpoint_every=every, batched=batched)
            # progress records differ only in how often they were written: compare the final ones
            results[batched] = (counts, seen, _stored(ws), (again.processed, again.resumed, again.stored))
    assert results[True][0][5] > 0 or turns_per_call > 1  # the history has exact duplicates (of single turns)
    assert results[True] == results[False]


def test_batched_path_dates_undated_turns_and_needs_no_model(ws: Any, tmp_path: Path) -> None:
    from agently_vecmem.errors import ConfigurationError
    from agently_vecmem.memory.plugin import VecMemory

    rows = [{k: v for k, v in row.items() if k != "time"} for row in chat_rows(4, "n")]
    before = time.time()
    report = import_history(ws, write_jsonl(tmp_path / "h.jsonl", rows))
    assert report.stored == 4
    assert all(before <= r.occurred_at <= time.time() for r in ws.scan(scope=MEMORY))
    plugin = VecMemory(workspace=ws, model=ScriptedModel())
    with pytest.raises(ConfigurationError, match="after_turn_sync"):
        plugin.after_turns_sync([{"session": Session(id="x"), "user_content": "hi"}])


_KILLED_IMPORT = """
import os, signal, sys, threading, time
from agently_vecmem.ingest import import_history
from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.workspace import ChromaWorkspace

store, history, after_puts, delay = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])


class SlowEmbedder(DeterministicEmbedder):  # a put takes a while, so a timed kill lands inside one
    def embed_documents(self, texts):
        time.sleep(0.002 * len(texts))
        return super().embed_documents(texts)


ws = ChromaWorkspace(store, embedder=SlowEmbedder())
real, calls = ws.put, [0]


def put(*args, **kwargs):
    out = real(*args, **kwargs)
    calls[0] += 1
    if calls[0] == after_puts:
        os.kill(os.getpid(), signal.SIGKILL)
    return out


ws.put = put
if delay > 0:
    threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
import_history(ws, history, checkpoint_every=7)
print("FINISHED", flush=True)
"""


@pytest.mark.parametrize("after_puts,delay", [(1, 0.0), (4, 0.0), (0, 0.15), (0, 0.4)])
def test_sigkill_mid_import_then_rerun_has_every_turn_once(tmp_path: Path, after_puts: int, delay: float) -> None:
    """An import SIGKILLed after a put or at a moment inside one (records, progress or both being written),
    then run again: every turn is stored exactly once."""
    from agently_vecmem.testing import DeterministicEmbedder
    from agently_vecmem.workspace import ChromaWorkspace

    rows = chat_rows(40, "k1") + chat_rows(25, "k2") + chat_rows(20, "k3")
    history = write_jsonl(tmp_path / "h.jsonl", rows)
    store = tmp_path / "store"
    script = tmp_path / "killed_import.py"
    script.write_text(_KILLED_IMPORT, encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1]) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    killed = subprocess.run([sys.executable, str(script), str(store), str(history), str(after_puts), str(delay)],
                            capture_output=True, text=True, env=env, timeout=300)
    assert killed.returncode == -9, killed.stderr[-2000:]  # it was killed, not finished or failed
    with ChromaWorkspace(store, embedder=DeterministicEmbedder()) as ws:
        partial = ws.count(scope=MEMORY)
        if after_puts:
            assert partial == 7 * after_puts  # exactly the acknowledged batches
        report = import_history(ws, history, checkpoint_every=7)
        assert report.resumed == partial and report.resumed + report.processed == 85
        assert report.duplicates == 0 and report.stored == report.processed
        users = [r.body["user"] for r in ws.scan(scope=MEMORY, limit=1000)]
    assert sorted(users) == sorted(r["content"] for r in rows if r["role"] == "user")  # each once
