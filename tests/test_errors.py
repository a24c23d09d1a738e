"""The error contract: one root, every error class public, no bare builtin raised on purpose, no silent
swallow, and the one model factory with one set of defaults."""

from __future__ import annotations

import ast
import asyncio
import builtins
import inspect
import logging
from pathlib import Path

import pytest

import agently_vecmem
from agently_vecmem import errors
from agently_vecmem._sync import maybe_await
from agently_vecmem.embedders.hashing import DeterministicEmbedder
from agently_vecmem.eval.locomo import load_locomo
from agently_vecmem.llm.structured import extract_json
from agently_vecmem.search.lexical import BM25Index
from agently_vecmem.search.params import RetrievalParams
from agently_vecmem.session.recording import _prompt_data_of

PACKAGE = Path(agently_vecmem.__file__).resolve().parent
BUILTIN_EXCEPTIONS = {
    name for name, obj in vars(builtins).items() if isinstance(obj, type) and issubclass(obj, BaseException)
}
#: (module path relative to the package, builtin exception): why it must stay a builtin.
ALLOWED_BUILTIN_RAISES = {
    ("__init__.py", "AttributeError"): "module __getattr__ protocol (PEP 562)",
    ("embedders/__init__.py", "AttributeError"): "module __getattr__ protocol (PEP 562)",
    ("eval/__init__.py", "AttributeError"): "module __getattr__ protocol (PEP 562)",
    ("llm/__init__.py", "AttributeError"): "module __getattr__ protocol (PEP 562)",
    ("settings.py", "NotImplementedError"): "abstract method of the mapping mixin",
    ("search/view.py", "IndexError"): "the sequence protocol of a snapshot's rows (Prefix)",
    ("search/encoded.py", "IndexError"): "the sequence protocol of a column decoded when read (EncodedList)",
    ("cli/__main__.py", "SystemExit"): "python -m agently_vecmem.cli",
    ("testing.py", "RuntimeError"): "test fixture used outside its lifetime (tests, not the library)",
    ("testing.py", "UnicodeDecodeError"): "the scripted model's invalid_utf8 fault simulates a transport decode error",
}
#: Argument errors: also ValueError, so callers catching ValueError keep working.
ARGUMENT_ERRORS = {
    errors.ConfigurationError, errors.ConfigurationTypeError, errors.DataFileError, errors.UsageError,
    errors.SessionDataError, errors.ScopeError, errors.RecordValidationError, errors.MemoryModeError,
    errors.ReplyParseError, errors.ScopeAccessError, errors.HistoryImportError,
}


def _error_classes() -> list[type[BaseException]]:
    return [obj for obj in vars(errors).values()
            if isinstance(obj, type) and issubclass(obj, BaseException) and obj.__module__ == errors.__name__]


def test_every_error_class_is_public_and_under_the_root() -> None:
    classes = _error_classes()
    assert len(classes) >= 16
    for cls in classes:
        assert cls.__name__ in errors.__all__, cls
        assert cls.__name__ in agently_vecmem.__all__ and getattr(agently_vecmem, cls.__name__) is cls, cls
        assert issubclass(cls, errors.VecMemError), cls
    assert sorted(errors.__all__) == sorted(c.__name__ for c in classes)
    for cls in ARGUMENT_ERRORS:
        assert issubclass(cls, ValueError), cls
    assert issubclass(errors.ConfigurationTypeError, TypeError) and issubclass(errors.SessionDataError, TypeError)
    assert issubclass(errors.RecordNotFoundError, KeyError)


def test_error_classes_defined_elsewhere_are_the_same_objects() -> None:
    from agently_vecmem import cli, llm, session
    from agently_vecmem.llm import structured
    from agently_vecmem.session import export

    assert cli.UsageError is errors.UsageError
    assert llm.ReplyParseError is structured.ReplyParseError is errors.ReplyParseError
    assert session.SessionDataError is export.SessionDataError is errors.SessionDataError


def _raises_and_classes() -> tuple[list[tuple[str, int, str]], list[tuple[str, int, str]]]:
    raises, classes = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)
                if name in BUILTIN_EXCEPTIONS:
                    raises.append((rel, node.lineno, name))
            elif isinstance(node, ast.ClassDef) and rel != "errors.py":
                bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                if any(b in BUILTIN_EXCEPTIONS or b.endswith(("Error", "Exception")) for b in bases):
                    classes.append((rel, node.lineno, node.name))
    return raises, classes


def test_no_bare_builtin_raised_on_purpose_and_no_error_class_outside_errors_py() -> None:
    raises, classes = _raises_and_classes()
    assert len(raises) >= len(ALLOWED_BUILTIN_RAISES)  # the scan sees the allowed ones: it works
    bare = [f"{rel}:{line}: raise {name}" for rel, line, name in raises if (rel, name) not in ALLOWED_BUILTIN_RAISES]
    assert bare == [], "raise a VecMemError subclass (agently_vecmem/errors.py) instead:\n" + "\n".join(bare)
    unused = set(ALLOWED_BUILTIN_RAISES) - {(rel, name) for rel, _, name in raises}
    assert not unused, f"stale allow-list entries: {unused}"
    assert classes == [], f"define error classes in errors.py: {classes}"


def _empty_prompt() -> None:
    agently_vecmem.Prompt().to_messages()


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda: DeterministicEmbedder(dim=2), errors.ConfigurationError),
        (lambda: load_locomo("/nonexistent/locomo.json"), errors.DataFileError),
        (lambda: RetrievalParams(dense_weight=2.0), errors.ConfigurationError),
        (lambda: BM25Index.build([], k1=-1.0), errors.ConfigurationError),
        (lambda: extract_json(""), errors.ReplyParseError),
        (lambda: asyncio.run(maybe_await(42)), errors.ConfigurationTypeError),
        (_empty_prompt, errors.ConfigurationError),
        (lambda: _prompt_data_of(42), errors.ConfigurationTypeError),
    ],
    ids=["hash-dim", "locomo-missing", "retrieval-params", "bm25-params", "reply-parse", "maybe-await",
         "empty-prompt", "prompt-data-type"],
)
def test_former_bare_raise_sites_raise_the_contract(call, expected) -> None:
    with pytest.raises(expected) as info:
        call()
    assert isinstance(info.value, errors.VecMemError) and isinstance(info.value, ValueError)


def test_locomo_file_errors_name_the_file(tmp_path: Path) -> None:
    cases = {"dict.json": '{"a": 1}', "bad.json": "{bad", "empty.json": "[]", "shape.json": '[{"x": 1}]',
             "ints.json": "[1, 2]"}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(errors.DataFileError, match=name):
            load_locomo(tmp_path / name)
    with pytest.raises(errors.DataFileError, match="cannot read"):
        load_locomo(tmp_path)  # a directory
    (tmp_path / "audit.json").write_text('{"rows": []}')
    (tmp_path / "ok.json").write_text('[{"sample_id": "s", "conversation": {}, "qa": []}]')
    with pytest.raises(errors.DataFileError, match="audit"):
        load_locomo(tmp_path / "ok.json", audit_path=tmp_path / "audit.json")


# ---------------------------------------------------------------------------------------------- no silent swallow
class _BrokenSettings:
    def get(self, key, default=None):
        raise RuntimeError("backend down")


def test_a_settings_object_that_raises_is_logged_not_swallowed(caplog) -> None:
    from agently_vecmem.memory.config import VecMemorySettings, read_setting, resolve_settings

    with caplog.at_level(logging.WARNING, logger="agently_vecmem.memory.config"):
        assert read_setting(_BrokenSettings(), "session.memory.VecMemory") is None
        assert resolve_settings(_BrokenSettings()) == VecMemorySettings()
    messages = [r.getMessage() for r in caplog.records]
    assert any("'session.memory.VecMemory'" in m and "RuntimeError: backend down" in m for m in messages), messages


def test_a_non_copyable_memo_is_logged(caplog) -> None:
    import threading

    from agently_vecmem.session import Session

    session = Session(id="memo-test")
    lock = threading.Lock()  # deepcopy raises TypeError
    session._memo = {"lock": lock}
    with caplog.at_level(logging.DEBUG, logger="agently_vecmem.session.session"):
        assert session.memo["lock"] is lock
    assert any("not deep-copyable" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------------------------- one merge helper
def test_one_merge_helper_serves_both_settings_layers() -> None:
    from agently_vecmem.memory.config import resolve_settings
    from agently_vecmem.settings import deep_merge, read_path

    base = {"a": {"x": 1, "y": 2}, "body_schema": {"summary": "string", "details": "object"}}
    over = {"a": {"y": 3}, "body_schema": {"text": "string"}}
    assert deep_merge(base, over) == {"a": {"x": 1, "y": 3},
                                      "body_schema": {"summary": "string", "details": "object", "text": "string"}}
    assert deep_merge(base, over, replace=("body_schema",)) == {"a": {"x": 1, "y": 3}, "body_schema": {"text": "string"}}
    assert base["a"] == {"x": 1, "y": 2}  # not modified
    assert read_path(base, "a.x") == 1 and read_path(base, "a.z", "d") == "d" and read_path(base, "a.x.q") is None
    settings = {"session": {"memory": {
        "AgentlyMemory": {"retrieve": {"top_n": 3}, "body_schema": {"summary": "string", "mood": "string"}},
        "VecMemory": {"retrieve": {"max_candidates": 40}, "body_schema": {"note": "string"}}}}}
    cfg = resolve_settings(settings)
    assert cfg.retrieve.top_n == 3 and cfg.retrieve.max_candidates == 40
    assert cfg.body_schema == {"note": "string"}  # a user's schema replaces, it is not merged


# ---------------------------------------------------------------------------------------------- one model factory
def test_one_set_of_model_defaults() -> None:
    from agently_vecmem.llm import OpenAIChatModel
    from agently_vecmem.llm import openai_compat as oc
    from agently_vecmem.llm.spec import DEFAULT_MAX_RETRIES, DEFAULT_MODEL, DEFAULT_TIMEOUT, ModelSpec
    from agently_vecmem.memory.config import ModelSettings

    params = inspect.signature(OpenAIChatModel.__init__).parameters
    assert params["timeout"].default == DEFAULT_TIMEOUT and params["max_retries"].default == DEFAULT_MAX_RETRIES
    settings = ModelSettings(model="m")
    assert (settings.timeout, settings.max_retries) == (DEFAULT_TIMEOUT, DEFAULT_MAX_RETRIES)
    assert ModelSpec().model == oc.DEFAULT_MODEL == DEFAULT_MODEL


def test_make_chat_model_resolves_spec_env_and_overrides(monkeypatch) -> None:
    from agently_vecmem.llm import OpenAIChatModel
    from agently_vecmem.llm.factory import make_chat_model
    from agently_vecmem.llm.spec import DEFAULT_MAX_RETRIES, DEFAULT_MODEL, model_spec
    from agently_vecmem.memory.config import ModelSettings

    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL"):
        monkeypatch.delenv(var, raising=False)
    assert make_chat_model(from_env=True) is None and OpenAIChatModel.from_env() is None
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    env_model = make_chat_model(from_env=True)
    assert isinstance(env_model, OpenAIChatModel) and env_model.model == DEFAULT_MODEL
    assert env_model.max_retries == DEFAULT_MAX_RETRIES
    assert str(env_model._client.base_url).startswith("http://127.0.0.1:9/v1")
    from_env = OpenAIChatModel.from_env(timeout=5.0)
    assert from_env.model == DEFAULT_MODEL and from_env.timeout == 5.0
    monkeypatch.setenv("OPENAI_MODEL", "env-model")
    # explicit values win over the environment; None overrides (unset CLI flags) are ignored
    spec = model_spec({"model": "settings-model", "timeout": 7}, from_env=True, model=None, max_retries=3)
    assert (spec.model, spec.timeout, spec.max_retries, spec.base_url) == ("settings-model", 7.0, 3,
                                                                           "http://127.0.0.1:9/v1")
    built = make_chat_model(ModelSettings(model="m2", base_url="http://127.0.0.1:8/v1", timeout=2))
    assert (built.model, built.timeout, built.max_retries) == ("m2", 2.0, DEFAULT_MAX_RETRIES)
    with pytest.raises(errors.ConfigurationError, match="unknown model setting"):
        model_spec({"modle": "typo"})
    with pytest.raises(errors.ConfigurationError):
        model_spec({"model": "m", "timeout": 0})
