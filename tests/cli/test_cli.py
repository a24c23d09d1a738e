"""The ``agently-vecmem`` CLI, run as subprocesses (``python -m agently_vecmem.cli``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agently_vecmem.records import MemoryRecord
from agently_vecmem.testing import DeterministicEmbedder, LoopbackOpenAIServer
from agently_vecmem.workspace import ChromaWorkspace


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", ANONYMIZED_TELEMETRY="False", COLUMNS="160")
    return env


def cli(*args: str, stdin: str | None = None, cwd: Path | None = None, timeout: float = 300):
    return subprocess.run(
        [sys.executable, "-m", "agently_vecmem.cli", *args], input=stdin, capture_output=True, text=True,
        env=_env(), cwd=cwd, timeout=timeout,
    )


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "store"
    with ChromaWorkspace(path, embedder=DeterministicEmbedder()) as ws:
        old = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="User drank coffee", tags=["drink"])
        ws.put([
            MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="User drinks green tea", tags=["drink"],
                         supersedes=old.id),
            old.model_copy(update={"status": "superseded"}),
            MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="User lives in Lisbon", tags=["home"]),
            MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s1", summary="Comparing two laptops",
                         tags=["task"]),
        ])
    return path


def test_help_is_fast_and_lists_commands():
    out = cli("--help")
    assert out.returncode == 0
    for command in ("demo", "chat", "inspect", "export", "import", "eval"):
        assert command in out.stdout
    code = "import sys, agently_vecmem.cli as c; c.build_parser(); print(sorted(m for m in ('chromadb', 'torch', 'rich', 'openai', 'agently') if m in sys.modules))"
    mods = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), check=True)
    assert mods.stdout.strip() == "[]"


def test_no_command_is_usage_error():
    assert cli().returncode == 2


def test_demo_with_hash_embedder(tmp_path):
    out = cli("--embedder", "hash", "demo", "--json", "--path", str(tmp_path / "demo"))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["model"] is None and result["embedder"] == "deterministic-hash-v1"
    assert len(result["records"]) == 5
    assert all(r["scope"] == "GLOBAL_MEMORY" and not r["extracted"] for r in result["records"])
    assert len(result["questions"]) == 3 and result["first_retrieval_s"] > 0
    snack = result["questions"][0]
    assert snack["injected"]["GLOBAL_MEMORY"]
    assert snack["diagnostics"]["plan"]["reason"] == "deterministic_fallback"
    # the table output of the same run
    table = cli("--embedder", "hash", "demo", "--path", str(tmp_path / "demo2"))
    assert table.returncode == 0, table.stderr
    assert "What was remembered" in table.stdout and "no model configured" in table.stdout
    assert "time to first retrieval" in table.stdout


@pytest.mark.slow
@pytest.mark.parametrize("embedder", [None, "minilm"], ids=["default-auto-onnx", "minilm-torch"])
def test_demo_real_minilm(tmp_path, embedder):
    """The default (``auto``: the torch-free ONNX MiniLM here) and the torch MiniLM remember the same things."""
    args = ("demo", "--json") if embedder is None else ("--embedder", embedder, "demo", "--json")
    out = cli(*args, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["embedder"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert (tmp_path / ".vecmem" / "demo").is_dir()
    by_question = {q["question"]: q["injected"]["GLOBAL_MEMORY"] for q in result["questions"]}
    snack = " ".join(i["summary"] for i in by_question["Can you suggest a snack for my flight?"])
    assert "peanuts" in snack
    code = by_question["Which programming language should your code examples use?"][0]["summary"]
    assert "Go" in code
    travel = by_question["Who am I travelling with, and where to?"][0]["summary"]
    assert "Lisbon" in travel


def test_inspect_table_and_json(store):
    base = ("--embedder", "hash", "inspect", "--path", str(store))
    table = cli(*base)
    assert table.returncode == 0, table.stderr
    assert "User drinks green tea" in table.stdout and "User drank coffee" not in table.stdout
    data = json.loads(cli(*base, "--json").stdout)
    assert data["count"] == 3 and data["total"] == 4
    assert {r["summary"] for r in data["records"]} == {"User drinks green tea", "User lives in Lisbon",
                                                        "Comparing two laptops"}
    everything = json.loads(cli(*base, "--json", "--all").stdout)
    assert everything["count"] == 4
    assert {r["status"] for r in everything["records"]} == {"active", "superseded"}
    session = json.loads(cli(*base, "--json", "--scope", "SESSION_MEMORY", "--session", "s1").stdout)
    assert [r["summary"] for r in session["records"]] == ["Comparing two laptops"]
    tagged = json.loads(cli(*base, "--json", "--tag", "home").stdout)
    assert [r["summary"] for r in tagged["records"]] == ["User lives in Lisbon"]
    found = json.loads(cli(*base, "--json", "--scope", "GLOBAL_MEMORY", "--query", "green tea", "--limit", "1").stdout)
    assert [r["summary"] for r in found["records"]] == ["User drinks green tea"] and "score" in found["records"][0]


def test_inspect_missing_store_is_usage_error(tmp_path):
    out = cli("--embedder", "hash", "inspect", "--path", str(tmp_path / "nope"))
    assert out.returncode == 2 and "no memory store" in out.stderr and "Traceback" not in out.stderr


def test_export_import_round_trip(store, tmp_path):
    dump = tmp_path / "dump.jsonl"
    out = cli("--embedder", "hash", "export", str(store), str(dump), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["exported"] == 4
    header = json.loads(dump.read_text().splitlines()[0])
    assert header["embedder_model"] == "deterministic-hash-v1"
    target = tmp_path / "copy"
    imp = cli("--embedder", "hash", "import", str(target), str(dump), "--json")
    assert imp.returncode == 0, imp.stderr
    assert json.loads(imp.stdout)["imported"] == 4
    with ChromaWorkspace(target, embedder=DeterministicEmbedder(), read_only=True) as ws, \
            ChromaWorkspace(store, embedder=DeterministicEmbedder(), read_only=True) as src:
        from agently_vecmem.filters import ALL_SCOPES

        assert {r.id: r for r in ws.scan(scope=ALL_SCOPES)} == {r.id: r for r in src.scan(scope=ALL_SCOPES)}
        ids = [r.id for r in src.scan(scope=ALL_SCOPES)]
        assert np.allclose(ws.get_vectors(ids), src.get_vectors(ids), atol=1e-6)


def test_import_refuses_other_model_without_reembed(store, tmp_path):
    dump = tmp_path / "dump.jsonl"
    assert cli("--embedder", "hash", "export", str(store), str(dump)).returncode == 0
    out = cli("--embedder", "onnx", "import", str(tmp_path / "other"), str(dump))
    assert out.returncode == 2
    assert "--reembed" in out.stderr and "deterministic-hash-v1" in out.stderr
    assert "Traceback" not in out.stderr
    ok = cli("--embedder", "onnx", "import", str(tmp_path / "other"), str(dump), "--reembed", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["imported"] == 4


def test_chat_without_endpoint_is_usage_error(tmp_path):
    out = cli("--embedder", "hash", "chat", "--path", str(tmp_path / "c"), stdin="hello\n")
    assert out.returncode == 2
    assert "--base-url" in out.stderr and "OPENAI_BASE_URL" in out.stderr and "Traceback" not in out.stderr


def test_chat_against_loopback_server(tmp_path):
    with LoopbackOpenAIServer() as server:
        server.on("chat", lambda body: "Hello Ada!" if "Ada" in json.dumps(body) else "Paris, as you told me.")
        server.script("extract", {"memories": [
            {"scope": "GLOBAL_MEMORY", "summary": "The user is Ada and lives in Paris", "tags": ["profile"],
             "importance": 0.9}]})
        server.on("extract", lambda body: {"memories": []})
        path = tmp_path / "chatstore"
        out = cli("--embedder", "hash", "chat", "--base-url", server.base_url, "--model", "test", "--api-key", "x",
                  "--path", str(path), "--session", "c1", "--show-memory",
                  stdin="I'm Ada and I live in Paris.\nWhere do I live?\n/quit\nnot sent\n")
        assert out.returncode == 0, out.stderr
        assert "Hello Ada!" in out.stdout and "memory:" in out.stdout
        chats = server.chat_bodies("chat")
        assert len(chats) == 2  # "/quit" stopped the loop
        assert "The user is Ada and lives in Paris" in json.dumps(chats[1])
    data = json.loads(cli("--embedder", "hash", "inspect", "--path", str(path), "--json").stdout)
    assert [r["summary"] for r in data["records"]] == ["The user is Ada and lives in Paris"]
