"""``agently-vecmem forget`` and ``agently-vecmem gc`` (issue 23): counts before erasing, confirmation (never
without a terminal unless ``--yes``), the exit-2 contract, the audit export, retention, and the server's files
cleaned with ``gc --server-path`` on the server's directory."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from agently_vecmem.cli import main
from agently_vecmem.records import MemoryRecord
from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.workspace import ChromaWorkspace

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env.update(HF_HUB_OFFLINE="1", ANONYMIZED_TELEMETRY="False", COLUMNS="160")
    return env


def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agently_vecmem.cli", "--embedder", "hash", *args], input=stdin,
                          capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=300)


def secret() -> str:
    return f"zqcli{uuid.uuid4().hex[:16]}"


def in_files(root: Path, texts: list[str]) -> set[str]:
    hits: set[str] = set()
    if root.is_file():
        return {t for t in texts if t.encode() in root.read_bytes()}
    for dirpath, _, names in os.walk(root):
        for name in names:
            data = Path(dirpath, name).read_bytes()
            hits |= {t for t in texts if t.encode() in data}
    return hits


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, dict[str, MemoryRecord]]:
    path = tmp_path / "store"
    now = time.time()
    recs = {
        "s1a": MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s1", summary=secret()),
        "s1b": MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s1", summary=secret(), extracted=False),
        "s2": MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s2", summary=secret(),
                           created_at=now - 90 * 86_400),
        "g": MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=secret()),
    }
    with ChromaWorkspace(path, embedder=DeterministicEmbedder()) as ws:
        ws.put(list(recs.values()))
        ws.for_user("bob").put(MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s1", summary="bob's"))
    return path, recs


def _left(path: Path, user: str | None = None) -> set[str]:
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()  # the subprocess wrote it: read it from disk
    with ChromaWorkspace(path, embedder=DeterministicEmbedder(), read_only=True) as ws:
        bound = ws.for_user(user) if user else ws
        return {r.summary for r in bound.scan(scope=__import__("agently_vecmem").ALL_SCOPES)}


def test_forget_session_with_yes_erases_it_from_every_file(store: Any) -> None:
    path, recs = store
    out = cli("forget", str(path), "--session", "s1", "--yes", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["erased"] == 2 and report["counts"] == {"session_memory": 1, "raw_turn": 1}
    assert report["vacuumed"] and report["log_rows_purged"] >= 2
    assert in_files(path, [recs["s1a"].summary, recs["s1b"].summary]) == set()
    assert _left(path) == {recs["s2"].summary, recs["g"].summary}
    assert _left(path, "bob") == {"bob's"}


def test_without_a_terminal_it_acts_only_with_yes(store: Any) -> None:
    path, recs = store
    out = cli("forget", str(path), "--all", stdin="y\n")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().count("\n") == 0 and "--yes" in out.stderr and "Traceback" not in out.stderr
    assert len(_left(path)) == 4


@pytest.mark.parametrize("argv, fragment", [
    (["forget", "STORE"], "say what to forget"),
    (["forget", "STORE", "--session", "s1", "--all", "--yes"], "not allowed with argument"),
    (["forget", "{missing}", "--all", "--yes"], "no memory store at"),
    (["forget", "STORE", "--host", "127.0.0.1", "--all", "--yes"], "pass '-' as STORE"),
    (["gc"], "pass STORE"),
    (["gc", "--server-path", "{missing}"], "no directory"),
    (["gc", "STORE", "--raw-turn-days", "0"], "retention days must be a positive number"),
    (["gc", "STORE", "--settings", "{missing}"], "cannot read the settings file"),
])
def test_bad_input_is_one_line_and_exit_2(store: Any, tmp_path: Path, argv: list[str], fragment: str) -> None:
    path, _ = store
    argv = [a.replace("STORE", str(path)).replace("{missing}", str(tmp_path / "nope")) for a in argv]
    out = cli(*argv)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr.startswith("agently-vecmem: error: ") and fragment in out.stderr
    assert out.stderr.strip().count("\n") == 0


def test_an_unreachable_server_is_one_line_and_exit_2() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = cli("forget", "-", "--host", "127.0.0.1", "--port", str(port), "--session", "s1", "--yes")
    assert out.returncode == 2 and "cannot reach the Chroma server" in out.stderr
    assert out.stderr.strip().count("\n") == 0


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("answer, erased", [("n\n", False), ("y\n", True)])
def test_on_a_terminal_it_shows_the_counts_and_asks(store: Any, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str], answer: str,
                                                   erased: bool) -> None:
    path, recs = store
    monkeypatch.setattr(sys, "stdin", _Tty(answer))
    assert main(["--embedder", "hash", "forget", str(path), "--id", recs["g"].id, "--id", recs["s2"].id]) == 0
    out = capsys.readouterr().out
    assert "will erase 2 records of user 'default'" in out and "1 global memory, 1 session memory" in out
    assert ("erased 2 records" in out) is erased and ("nothing erased" in out) is not erased
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()
    with ChromaWorkspace(path, embedder=DeterministicEmbedder(), read_only=True) as ws:
        assert len(ws.get_many([recs["g"].id, recs["s2"].id])) == (0 if erased else 2)


def test_audit_export_and_gc_retention(store: Any, tmp_path: Path) -> None:
    path, recs = store
    assert cli("forget", str(path), "--user", "bob", "--session", "s1", "--yes").returncode == 0
    settings = tmp_path / "settings.yaml"
    settings.write_text("retention:\n  session_memory_days: 30\n", encoding="utf-8")
    out = cli("gc", str(path), "--settings", str(settings), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["retention"] == {"default": 1}
    assert recs["s2"].summary not in _left(path)
    assert in_files(path, [recs["s2"].summary]) == set()
    audit = tmp_path / "audit.jsonl"
    out = cli("forget", str(path), "--audit-export", str(audit), "--all-users")
    assert out.returncode == 0, out.stderr
    entries = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(e["user_id"], e["by"], e["erased"], e["state"]) for e in entries] == [
        ("bob", "session", 1, "done"), ("default", "retention", 1, "done")]
    assert recs["s2"].id in entries[1]["ids"] and recs["s2"].summary not in audit.read_text()


def test_server_forget_then_gc_on_the_server_path(own_chroma_server: Any) -> None:
    host, port = own_chroma_server.address
    ws = ChromaWorkspace(host=host, port=port, embedder=DeterministicEmbedder())
    gone = [MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s1", summary=secret()) for _ in range(3)]
    kept = MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s2", summary=secret())
    ws.put([*gone, kept])
    out = cli("forget", "-", "--host", host, "--port", str(port), "--session", "s1", "--yes")
    assert out.returncode == 0, out.stderr
    assert "erased 3 records" in out.stdout and "gc --server-path" in out.stdout
    texts = [r.summary for r in gone]
    data = own_chroma_server.data
    assert in_files(data, texts)
    out = cli("gc", "--server-path", str(data), "--json")          # while it runs: the SQLite file
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["server_path"]["log_rows_purged"] >= 3
    assert in_files(data / "chroma.sqlite3", texts) == set()
    assert in_files(data, [kept.summary]) == {kept.summary}
    assert [r.id for r in ws.scan(scope=__import__("agently_vecmem").ALL_SCOPES)] == [kept.id]
    own_chroma_server.stop()
    out = cli("gc", "--server-path", str(data), "--server-stopped")  # stopped: the index files too
    assert out.returncode == 0 and "zeroed" in out.stdout, out.stderr
    assert in_files(data, texts) == set()
    own_chroma_server.start()
    assert [r.id for r in ws.scan(scope=__import__("agently_vecmem").ALL_SCOPES)] == [kept.id]
    ws.close()
