"""Bad input to the ``agently-vecmem`` CLI, run as subprocesses: exit status 2, exactly one line on stderr
saying what is wrong (and what to do), never a traceback. Only light commands (no embedding model loads)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.workspace import ChromaWorkspace


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AGENTLY_VECMEM_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", ANONYMIZED_TELEMETRY="False", COLUMNS="160", **extra)
    return env


def cli(*args: str, cwd: Path, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agently_vecmem.cli", *args], input=stdin, capture_output=True,
                          text=True, env=_env(**env), cwd=cwd, timeout=120)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad-input")
    (root / "dict.json").write_text('{"conversations": []}')
    (root / "bad.json").write_text("[{not json")
    (root / "shape.json").write_text('[{"speaker": "Ann"}]')
    (root / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    (root / "bad.jsonl").write_text("not a header\n")
    (root / "a_dir").mkdir()
    (root / "a_file").write_text("x")
    with ChromaWorkspace(root / "store", embedder=DeterministicEmbedder()):
        pass
    return root


PORT = _closed_port()
#: (id, argv, a fragment the one line must contain)
CASES = [
    ("eval-missing-file", ["eval", "locomo", "missing.json"], "missing.json"),
    ("eval-directory", ["eval", "locomo", "a_dir"], "a_dir"),
    ("eval-bad-json", ["eval", "locomo", "bad.json"], "not valid JSON"),
    ("eval-not-utf8", ["eval", "locomo", "binary.json"], "binary.json"),
    ("eval-dict", ["eval", "locomo", "dict.json"], "expected a JSON list"),
    ("eval-wrong-shape", ["eval", "locomo", "shape.json"], "locomo10.json"),
    ("eval-missing-audit", ["eval", "locomo", "shape.json", "--audit", "nope.json"], "nope.json"),
    ("eval-bad-k", ["eval", "locomo", "dict.json", "--k", "0,5"], "--k"),
    ("eval-k-not-int", ["eval", "locomo", "dict.json", "--k", "a,b"], "--k"),
    ("eval-no-subcommand", ["eval"], "eval_command"),
    ("unknown-subcommand", ["bogus"], "invalid choice: 'bogus'"),
    ("unknown-option", ["inspect", "--nope"], "unrecognized arguments"),
    ("bad-embedder", ["--embedder", "nope", "inspect"], "invalid choice: 'nope'"),
    ("unknown-scope", ["--embedder", "hash", "inspect", "--path", "store", "--scope", "WORLD"], "WORLD"),
    ("bad-limit", ["--embedder", "hash", "inspect", "--path", "store", "--limit", "0"], "--limit"),
    ("missing-store", ["--embedder", "hash", "inspect", "--path", "nothing-here"], "no memory store"),
    ("store-is-a-file", ["--embedder", "hash", "import", "a_file", "bad.jsonl"], "a_file"),
    ("store-under-a-file", ["--embedder", "hash", "import", "a_file/store", "bad.jsonl"], "a_file/store"),
    ("import-missing-file", ["--embedder", "hash", "import", "new", "missing.jsonl"], "missing.jsonl"),
    ("import-bad-jsonl", ["--embedder", "hash", "import", "new2", "bad.jsonl"], "bad.jsonl"),
    ("export-unwritable-out", ["--embedder", "hash", "export", "store", "a_file/out.jsonl"], "a_file/out.jsonl"),
    ("unreachable-server", ["--embedder", "hash", "inspect", "--host", "127.0.0.1", "--port", str(PORT)],
     f"127.0.0.1:{PORT}"),
    ("chat-without-model", ["--embedder", "hash", "chat", "--path", "chat1"], "--base-url"),
    ("unreachable-model", ["--embedder", "hash", "chat", "--path", "chat2", "--base-url",
                           f"http://127.0.0.1:{PORT}/v1", "--model", "m", "--timeout", "2"], "connection error"),
]


@pytest.mark.parametrize(("argv", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(files: Path, argv: list[str], fragment: str) -> None:
    out = cli(*argv, cwd=files, stdin="hello\n")
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2, out.stderr
    assert len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert lines[0].startswith("agently-vecmem: error: ") and fragment in lines[0], lines[0]


def test_debug_shows_the_traceback(files: Path) -> None:
    for out in (cli("eval", "locomo", "missing.json", "--debug", cwd=files),
                cli("eval", "locomo", "missing.json", cwd=files, AGENTLY_VECMEM_DEBUG="1")):
        assert out.returncode == 2
        assert "Traceback" in out.stderr and "FileNotFoundError" in out.stderr
        assert out.stderr.strip().splitlines()[-1].startswith("agently-vecmem: error: ")


def test_error_line_for_each_kind() -> None:
    from agently_vecmem.cli import error_line
    from agently_vecmem.errors import ModelError, RecordValidationError, WorkspaceError

    assert error_line(FileNotFoundError(2, "No such file or directory", "x.json")) == (
        "agently-vecmem: error: No such file or directory: 'x.json' (check the path and its permissions)")
    assert "endpoint is up" in error_line(ModelError("HTTP 500: boom"))
    assert error_line(WorkspaceError("cannot open\nthe store")).count("\n") == 0
    assert "check the input data" in error_line(RecordValidationError("bad record"))
    assert "not valid JSON" in error_line(json.JSONDecodeError("Expecting value", "x", 0))
