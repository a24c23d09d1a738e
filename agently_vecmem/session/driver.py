"""An agent-free chat turn, for notebooks and the CLI.

``await session.achat(text, model=model)`` does what an Agently agent with an active session does around a
request:

1. build a :class:`~agently_vecmem.session.prompt.Prompt` with ``chat_history`` = the context window, the
   memo under ``"CHAT SESSION MEMO"`` (when not ``None``) and ``input`` = the user text;
2. await the memory plugin's ``prepare_request`` (it may add ``GLOBAL_MEMORY`` / ``SESSION_MEMORY``);
3. call ``model.complete(prompt.to_messages(system), phase="chat")`` (any object with that method, sync
   or async);
4. record the turn: user then assistant, each via ``add_chat_history`` (so auto resize runs as in Agently);
5. await the plugin's ``after_turn`` (with ``occurred_at`` when the caller gave the turn's time);
6. return the reply text.

Deliberate difference: with ``session.input_keys`` unset, the driver records the *user text* as the user
message, not Agently's whole rendered prompt (which nests earlier history and injected memory into every
stored turn). Pass ``input_keys=None`` explicitly to get Agently's whole-prompt recording.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._sync import maybe_await
from ..errors import ConfigurationError
from ..records import parse_time
from ..settings import Settings
from .prompt import Prompt
from .recording import resolve_contents


class ChatSession(Protocol):
    """What a chat turn needs of a :class:`~agently_vecmem.session.Session`."""

    id: str
    settings: Settings

    @staticmethod
    def apply_request_prefix(prompt: Any, activated_session: Any) -> None: ...

    async def async_add_chat_history(self, chat_history: Any) -> Any: ...

    async def async_prepare_memory(self, prompt: Any, settings: Any = None) -> dict[str, Any]: ...

    async def async_after_memory_turn(self, *, user_content: str | None, assistant_content: str | None,
                                      result: Any = None, settings: Any = None,
                                      occurred_at: Any = None) -> dict[str, Any]: ...

__all__ = ["achat", "ChatTurn", "DRIVER_INPUT_KEYS"]

logger = logging.getLogger(__name__)

_UNSET: Any = object()

#: What the driver records for the user turn when ``session.input_keys`` is unset.
DRIVER_INPUT_KEYS = "user_text"


@dataclass
class ChatTurn:
    """The ``result`` object handed to ``after_turn``: the prompt that was sent and the reply text."""

    prompt: Prompt
    reply: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    memory_diagnostics: dict[str, Any] = field(default_factory=dict)

    async def async_get_data(self) -> str:
        """The parsed result (for the driver, the reply text), Agently's spelling."""
        return self.reply

    def get_data(self) -> str:
        return self.reply


async def achat(
    session: ChatSession,
    user_text: str,
    *,
    model: Any,
    system: str | None = None,
    input_keys: Any = _UNSET,
    reply_keys: Any = _UNSET,
    occurred_at: Any = None,
) -> str:
    """Run one chat turn against ``model`` and record it in ``session``.

    Args:
        session: the session to read history from and record into.
        user_text: the user's message.
        model: any object with ``complete(messages, *, phase)`` returning the reply text (sync or async).
        system: an optional system message.
        input_keys: override ``session.input_keys`` for this turn (``None`` = Agently's whole-prompt
            recording; a list = keyed recording, e.g. ``["input"]``). Unset: the setting, or the user text.
        reply_keys: override ``session.reply_keys`` for this turn.
        occurred_at: when the turn happens (epoch seconds, datetime or ISO 8601 string; default now):
            kept on the recorded messages (``time``) and on the memories of the turn.

    Returns:
        The assistant's reply text.

    Raises:
        ConfigurationError: ``user_text`` is not a string or ``model`` has no ``complete`` method.
        RecordValidationError: ``occurred_at`` is not a valid time (checked before the model is called).
        MemoryModeError: the memory plugin needs a Workspace and none is available.
    """
    if not isinstance(user_text, str):
        raise ConfigurationError(f"user_text must be a str, got {type(user_text).__name__}.")
    when = None if occurred_at is None else parse_time(occurred_at, what="occurred_at")
    complete = getattr(model, "complete", None)
    if not callable(complete):
        raise ConfigurationError(
            f"model must have a complete(messages, *, phase) method, got {type(model).__name__}."
        )

    request_settings = Settings(parent=session.settings, name=f"request:{session.id}")
    if input_keys is not _UNSET:
        request_settings.set("session.input_keys", input_keys)
    if reply_keys is not _UNSET:
        request_settings.set("session.reply_keys", reply_keys)

    prompt = Prompt()
    type(session).apply_request_prefix(prompt, session)
    prompt.set("input", user_text)
    diagnostics = await session.async_prepare_memory(prompt, request_settings)

    messages = prompt.to_messages(system)
    reply = await maybe_await(complete, messages, phase="chat")
    if not isinstance(reply, str):
        reply = str(reply)
    turn = ChatTurn(prompt=prompt, reply=reply, messages=messages, memory_diagnostics=dict(diagnostics or {}))

    keys_in = request_settings.get("session.input_keys", None)
    keys_out = request_settings.get("session.reply_keys", None)
    explicit_none = input_keys is None
    if keys_in is None and not explicit_none:
        user_content: str | None = user_text
        _, assistant_content = resolve_contents(prompt, reply, [], keys_out)
    else:
        user_content, assistant_content = resolve_contents(prompt, reply, keys_in, keys_out)

    stamp = {} if when is None else {"time": when}
    if user_content:
        await session.async_add_chat_history({"role": "user", "content": user_content, **stamp})
    if assistant_content:
        await session.async_add_chat_history({"role": "assistant", "content": assistant_content, **stamp})
    await session.async_after_memory_turn(
        user_content=user_content, assistant_content=assistant_content, result=turn, settings=request_settings,
        occurred_at=when,
    )
    logger.debug("Session %s recorded a chat turn (%d chars in, %d out)", session.id, len(user_text), len(reply))
    return reply
