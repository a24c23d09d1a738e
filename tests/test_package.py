"""The public surface: a cheap import and a checked ``__all__``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import agently_vecmem

# The lead updates this list as the public API grows.
EXPECTED = [
    "__version__",
    "ALL_SCOPES",
    "ChatModel",
    "ChromaWorkspace",
    "Embedder",
    "OpenAIChatModel",
    "OpenAIEmbedder",
    "Prompt",
    "SentenceTransformerEmbedder",
    "Session",
    "Settings",
    "VecMemory",
    "VecMemorySettings",
    "register_memory_plugin",
    "ConfigurationError",
    "EmbedderMismatchError",
    "MemoryModeError",
    "MemoryRecord",
    "ModelError",
    "Provenance",
    "RecordNotFoundError",
    "RecordValidationError",
    "Scope",
    "ScopeError",
    "StructuredOutputError",
    "VecMemError",
    "VectorIndexMeta",
    "WorkspaceError",
    "WorkspaceLockedError",
    "ConfigurationTypeError",
    "DataFileError",
    "ReplyParseError",
    "SessionDataError",
    "UsageError",
    "RecordContentNotFoundError",
    "ScopeAccessError",
    "HistoryImportError",
    "HttpError",
]

HEAVY = ["torch", "chromadb", "openai", "sentence_transformers", "transformers", "onnxruntime"]
ROOT = Path(__file__).resolve().parents[1]


def test_all_matches_expected() -> None:
    assert sorted(agently_vecmem.__all__) == sorted(EXPECTED)
    assert len(set(agently_vecmem.__all__)) == len(agently_vecmem.__all__)


def test_every_public_name_resolves() -> None:
    missing = []
    for name in agently_vecmem.__all__:
        try:
            getattr(agently_vecmem, name)
        except (AttributeError, ImportError) as e:
            missing.append(f"{name}: {type(e).__name__}: {e}")
    assert not missing, missing


def test_unknown_attribute_raises() -> None:
    import pytest

    with pytest.raises(AttributeError):
        agently_vecmem.NoSuchThing  # noqa: B018


def test_import_is_cheap() -> None:
    code = (
        "import json, sys; import agently_vecmem; "
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         check=True)
    assert json.loads(out.stdout) == []
