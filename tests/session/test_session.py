"""Session history, recording (input_keys / reply_keys), prompt rendering, memory plugins, driver."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest

from agently_vecmem.errors import ConfigurationError, MemoryModeError
from agently_vecmem.session import (
    ChatTurn,
    MemoryPlugin,
    Prompt,
    Session,
    get_memory_plugin,
    list_memory_plugins,
    register_memory_plugin,
    resolve_contents,
    unregister_memory_plugin,
)
from agently_vecmem.settings import Settings, global_settings


def msg(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


# -- history -------------------------------------------------------------------------------------------


def test_constructor_defaults() -> None:
    s = Session()
    assert len(s.id) == 32 and s.auto_resize is True
    assert s.full_context == [] and s.context_window == [] and s.memo is None
    assert s.memory is None and s.memory_mode is None
    assert s.session_settings.data == {"max_length": None, "input_keys": None, "reply_keys": None}
    assert Session("abc").id == "abc"


def test_settings_child_of_given_settings() -> None:
    agent = Settings({"session": {"max_length": 500}})
    s = Session(settings=agent)
    assert s.session_settings.get("max_length") == 500
    s.session_settings.set("max_length", 10)
    assert agent.get("session.max_length") == 500


def test_add_set_reset_clean() -> None:
    s = Session()
    s.set_chat_history([msg("user", "Hi"), msg("assistant", "Hello")])
    s.add_chat_history(msg("user", "Continue"))
    assert [m["content"] for m in s.full_context] == ["Hi", "Hello", "Continue"]
    assert s.context_window == s.full_context  # set-then-add does not duplicate
    s.clean_context_window()
    assert s.context_window == [] and len(s.full_context) == 3
    s.add_chat_history(msg("assistant", "x"))
    assert s.context_window == [msg("assistant", "x")]
    s.clean_window_context()
    s.set_chat_history(msg("user", "only"))
    assert s.full_context == [msg("user", "only")]
    s.reset_chat_history()
    assert s.full_context == [] and s.context_window == []


def test_async_twins_return_self() -> None:
    async def main() -> Session:
        s = Session()
        assert await s.async_add_chat_history(msg("user", "a")) is s
        assert await s.async_set_chat_history([msg("user", "b")]) is s
        assert await s.async_clean_context_window() is s
        assert await s.async_clean_window_context() is s
        assert await s.async_reset_chat_history() is s
        return s

    asyncio.run(main())


def test_messages_are_normalised_and_copied() -> None:
    class Obj:
        role = "user"
        content = "from object"

    s = Session()
    s.add_chat_history([{"role": "user", "content": "a", "extra": 1}, Obj()])
    assert s.full_context == [msg("user", "a"), msg("user", "from object")]
    got = s.full_context
    got[0]["content"] = "changed"
    assert s.full_context[0]["content"] == "a"
    assert s.full_context[0].content == "a" and s.full_context[0].model_dump() == msg("user", "a")


@pytest.mark.parametrize("bad", ["text", {"role": "user"}, {"role": "user", "content": 3}, 42])
def test_bad_messages_are_clear_errors(bad: Any) -> None:
    with pytest.raises(ConfigurationError):
        Session().add_chat_history(bad)


# -- recording -----------------------------------------------------------------------------------------


PROMPT = {
    "system": "You are helpful.",
    "info": {"task": "review"},
    "input": {"question": "What is 2+2?", "code": "print(1)", "meta": {"lang": "py", "lines": [1, 2]}},
}
AGENT = {"system": "Agent system", "info": {"team": "blue"}}


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ([".agent.system"], "[.agent.system]:\nAgent system"),
        ([".execution.input.code"], "[.execution.input.code]:\nprint(1)"),
        (["info.task"], "[info.task]:\nreview"),
        (["question"], "[question]:\nWhat is 2+2?"),
        (["input.question"], "[input.question]:\nWhat is 2+2?"),
        (["input/meta/lines/1"], "[input/meta/lines/1]:\n2"),
        (["meta.lines[0]"], "[meta.lines[0]]:\n1"),
        (["meta"], "[meta]:\nlang: py\nlines:\n- 1\n- 2"),
        (["info.task", "question", "missing"], "[info.task]:\nreview\n[question]:\nWhat is 2+2?"),
        ("question", "[question]:\nWhat is 2+2?"),
        ([None, "question"], "[question]:\nWhat is 2+2?"),
        (["missing"], None),
        ([".agent"], "[.agent]:\nsystem: Agent system\ninfo:\n  team: blue"),
    ],
)
def test_input_keys_resolution(keys: Any, expected: str | None) -> None:
    user, _ = resolve_contents(PROMPT, "ok", keys, None, AGENT)
    assert user == expected


def test_input_key_input_gives_keyed_text() -> None:
    assert resolve_contents({"input": "first"}, "x", ["input"], None) == ("[input]:\nfirst", "x")


def test_reply_keys_and_default_assistant_formatting() -> None:
    data = {"answer": "4", "score": 0.9, "why": {"steps": ["add"]}}
    _, assistant = resolve_contents(PROMPT, data, ["question"], ["answer", "score", "why", "nope"])
    assert assistant == "[answer]:\n4\n[score]:\n0.9\n[why]:\nsteps:\n- add"
    assert resolve_contents(PROMPT, data, [], None)[1] == "answer: '4'\nscore: 0.9\nwhy:\n  steps:\n  - add"
    assert resolve_contents(PROMPT, "plain", [], ["answer"])[1] is None
    assert resolve_contents(PROMPT, 3, [], None)[1] == "3"


def test_default_recording_uses_prompt_text() -> None:
    prompt = Prompt({"input": "hello"})
    user, _ = resolve_contents(prompt, "hi", None, None)
    assert user == prompt.to_text() == "user:\n[INPUT]:\nhello\n\n[OUTPUT]:\nassistant:"
    assert resolve_contents({"input": "hello"}, "hi", None, None)[0] == user
    assert resolve_contents({}, "hi", None, None, prompt_text="given")[0] == "given"


def test_resolve_finally_contents_agently_shape() -> None:
    class Result:
        prompt = Prompt({"input": {"q": "x"}})

        async def async_get_data(self) -> dict:
            return {"a": 1}

    settings = Settings({"session": {"input_keys": ["q"], "reply_keys": ["a"]}})
    assert asyncio.run(Session.resolve_finally_contents(Result(), settings)) == ("[q]:\nx", "[a]:\n1")


# -- prompt --------------------------------------------------------------------------------------------


def test_prompt_to_text_sections() -> None:
    p = Prompt()
    p.set("chat_history", [msg("user", "hi"), msg("assistant", "hello")])
    p.set("CHAT SESSION MEMO", {"note": "x"})
    p.set("GLOBAL_MEMORY", [{"summary": "s", "content": "c", "tags": ["a"], "score": 0.5}])
    p.set("input", "What is my id?")
    assert p.to_text() == (
        "user:\n[CHAT HISTORY]:\n[user]:hi\n[assistant]:hello\n\n[CHAT SESSION MEMO]:\nnote: x\n\n\n"
        "[GLOBAL_MEMORY]:\n- content: c\n  score: 0.5\n  summary: s\n  tags:\n  - a\n\n\n"
        "[INPUT]:\nWhat is my id?\n\n[OUTPUT]:\nassistant:"
    )
    messages = p.to_messages(system="sys")
    assert messages[0] == {"role": "system", "content": "sys"}
    assert messages[1:3] == [msg("user", "hi"), msg("assistant", "hello")]
    assert messages[3]["role"] == "user"
    assert messages[3]["content"].startswith("[CHAT SESSION MEMO]:") and messages[3]["content"].endswith("[OUTPUT]:")
    assert "GLOBAL_MEMORY" in p and p.get("missing", 1) == 1


def test_prompt_to_messages_role_order_and_only_input() -> None:
    p = Prompt({"chat_history": [msg("assistant", "a1"), msg("assistant", "a2"), msg("user", "u")], "input": "q"})
    assert p.to_messages() == [
        msg("user", "[CHAT HISTORY]"),
        msg("assistant", "a1\n\na2"),
        msg("user", "u"),
        msg("assistant", "[User continue input]"),
        msg("user", "q"),
    ]
    assert Prompt({"input": {"b": 1}}).to_messages() == [msg("user", "b: 1")]
    with pytest.raises(ValueError):
        Prompt().to_text()


# -- memory plugins ------------------------------------------------------------------------------------


class DummyMemory:
    name: ClassVar[str] = "DummyMemory"
    DEFAULT_SETTINGS: ClassVar[dict[str, Any]] = {"$global": {"session.memory.DummyMemory": {"k": 1, "j": 2}}}
    requires_workspace: ClassVar[bool] = False

    def __init__(self, *, session: Any, workspace: Any, plugin_manager: Any, settings: Any) -> None:
        self.session, self.workspace, self.settings = session, workspace, settings
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def bind_workspace(self, workspace: Any) -> None:
        self.workspace = workspace

    async def prepare_request(self, *, prompt: Any, session: Any, settings: Any) -> dict[str, Any]:
        self.calls.append(("prepare", {"text": prompt.to_text(), "settings": settings}))
        prompt.set("GLOBAL_MEMORY", [{"summary": "User likes tea", "content": "tea"}])
        return {"injected": 1}

    async def after_turn(self, *, session, user_content, assistant_content, result, settings) -> dict[str, Any]:
        self.calls.append(("after", {"user": user_content, "assistant": assistant_content, "result": result,
                                     "history": session.full_context}))
        return {"stored": 1}


class NeedsWorkspace(DummyMemory):
    name: ClassVar[str] = "NeedsWorkspace"
    DEFAULT_SETTINGS: ClassVar[dict[str, Any]] = {}
    requires_workspace: ClassVar[bool] = True


@pytest.fixture
def plugins():
    register_memory_plugin(DummyMemory)
    register_memory_plugin(NeedsWorkspace)
    yield
    unregister_memory_plugin("DummyMemory")
    unregister_memory_plugin("NeedsWorkspace")
    global_settings.delete("session.memory.DummyMemory")


class FakeModel:
    def __init__(self) -> None:
        self.seen: list[list[dict[str, Any]]] = []

    def complete(self, messages: list[dict[str, Any]], *, phase: str = "chat") -> str:
        assert phase == "chat"
        self.seen.append(messages)
        return f"reply {len(self.seen)}"


def test_use_memory_unregistered_mode_raises() -> None:
    with pytest.raises(MemoryModeError, match="SessionMemory mode 'Nope' is not registered."):
        Session().use_memory(mode="Nope")
    with pytest.raises(ValueError):
        get_memory_plugin("Nope")


def test_registry_and_defaults(plugins) -> None:
    assert {"DummyMemory", "NeedsWorkspace"} <= set(list_memory_plugins())
    s = Session(settings={"session": {"memory": {"DummyMemory": {"k": 5}}}})
    assert s.settings.get("session.memory.DummyMemory") == {"k": 5, "j": 2}
    assert global_settings.get("session.memory.DummyMemory.k") == 1
    assert s.use_memory(mode="DummyMemory") is s
    assert isinstance(s.memory, MemoryPlugin) and s.memory_mode == "DummyMemory"
    with pytest.raises(ConfigurationError):
        register_memory_plugin(type("NoName", (), {}))


def test_driver_calls_prepare_and_after(plugins) -> None:
    s = Session("s1").use_memory(mode="DummyMemory", workspace="ws")
    model = FakeModel()
    assert s.chat("My tea?", model=model, system="Be brief.") == "reply 1"
    plugin = s.memory
    assert [c[0] for c in plugin.calls] == ["prepare", "after"]
    assert model.seen[0][0] == {"role": "system", "content": "Be brief."}
    assert "[GLOBAL_MEMORY]:" in model.seen[0][-1]["content"] and "User likes tea" in model.seen[0][-1]["content"]
    after = plugin.calls[1][1]
    assert after["user"] == "My tea?" and after["assistant"] == "reply 1"
    assert isinstance(after["result"], ChatTurn) and after["result"].reply == "reply 1"
    assert after["history"] == [msg("user", "My tea?"), msg("assistant", "reply 1")]
    # second turn: the window is sent as chat history
    s.chat("And now?", model=model)
    assert model.seen[1][:2] == [msg("user", "My tea?"), msg("assistant", "reply 1")]
    assert len(s.full_context) == 4


def test_driver_with_memo_input_keys_and_no_plugin() -> None:
    async def amodel_complete(messages, *, phase):
        return "async reply"

    class AsyncModel:
        complete = staticmethod(amodel_complete)

    s = Session(settings={"session": {"input_keys": ["input"]}})
    s.register_resize_handler("memo", lambda *a: (None, None, {"note": "kept"}))
    s.run_resize_strategy("memo")
    reply = asyncio.run(s.achat("hello", model=AsyncModel()))
    assert reply == "async reply"
    assert s.full_context == [msg("user", "[input]:\nhello"), msg("assistant", "async reply")]
    # input_keys=None explicitly: Agently's whole-prompt recording
    s2 = Session()
    s2.chat("hi", model=FakeModel(), input_keys=None)
    assert s2.full_context[0]["content"] == "user:\n[INPUT]:\nhi\n\n[OUTPUT]:\nassistant:"
    with pytest.raises(ConfigurationError):
        s2.chat("hi", model=object())


def test_memo_reaches_the_prompt() -> None:
    s = Session()
    s.register_resize_handler("memo", lambda *a: (None, None, {"note": "kept"}))
    s.run_resize_strategy("memo")
    model = FakeModel()
    s.chat("hello", model=model)
    assert model.seen[0][-1]["content"].startswith("[CHAT SESSION MEMO]:\nnote: kept")


def test_requires_workspace_error_and_provider_binding(plugins) -> None:
    s = Session().use_memory(mode="NeedsWorkspace")
    with pytest.raises(MemoryModeError, match="'NeedsWorkspace' requires a Workspace. Pass workspace=..."):
        s.chat("x", model=FakeModel())
    provided: list[str] = []

    def provider() -> str:
        provided.append("ws")
        return "provided-ws"

    s2 = Session(workspace_provider=provider).use_memory(mode="NeedsWorkspace")
    assert s2.memory.workspace == "provided-ws"
    s3 = Session().use_memory(mode="NeedsWorkspace")
    s3._workspace_provider = provider
    asyncio.run(s3.async_prepare_memory(Prompt({"input": "x"}), None))
    assert s3.memory.workspace == "provided-ws"
    s3.bind_memory_workspace("other")
    assert s3.memory.workspace == "other"


def test_memory_hooks_without_plugin_return_empty() -> None:
    s = Session()
    assert asyncio.run(s.async_prepare_memory(Prompt({"input": "x"}), None)) == {}
    assert asyncio.run(s.async_after_memory_turn(user_content="a", assistant_content="b", result=None,
                                                 settings=None)) == {}


def test_apply_request_prefix() -> None:
    s = Session()
    s.add_chat_history(msg("user", "a"))
    p = Prompt({"chat_history": [msg("user", "old")]})
    Session.apply_request_prefix(p, s)
    assert p.get("chat_history") == [msg("user", "a")] and "CHAT SESSION MEMO" not in p
    Session.apply_request_prefix(p, None)
