"""Chat messages as plain dicts that also answer like Agently's ``ChatMessage``.

A :class:`ChatMessage` *is* a ``dict`` with exactly ``role`` and ``content`` (so ``json.dumps``, equality
with plain dicts and ``m["content"]`` work), and it also offers ``m.role``, ``m.content`` and
``m.model_dump()`` so resize handlers written for Agently (which receive pydantic ``ChatMessage`` objects)
keep working.

Length is measured exactly as Agently measures it: ``len(str(message.model_dump()))``. For a
``{role, content}`` message that is ``len(str({"role": role, "content": content}))``.

A message may also carry the time it was said (``time``, epoch seconds, kept beside the dict — equality,
``model_dump()`` and lengths ignore it); the session export writes it as an ISO 8601 ``time`` key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import yaml

from ..errors import ConfigurationError, RecordValidationError
from ..records import parse_time

__all__ = ["ChatMessage", "to_message", "to_messages", "message_length", "context_length", "MessageInput"]


class ChatMessage(dict):
    """A ``{"role": ..., "content": ...}`` dict with attribute access and ``model_dump()``; ``time`` is
    when it was said (epoch seconds) or None."""

    __slots__ = ("_time",)

    def __init__(self, role: str = "user", content: str | list[Any] = "", time: float | None = None) -> None:
        super().__init__(role=role, content=content)
        self._time = time

    @property
    def time(self) -> float | None:
        return self._time

    @property
    def role(self) -> str:
        return self["role"]

    @role.setter
    def role(self, value: str) -> None:
        self["role"] = value

    @property
    def content(self) -> str | list[Any]:
        return self["content"]

    @content.setter
    def content(self, value: str | list[Any]) -> None:
        self["content"] = value

    def model_dump(self) -> dict[str, Any]:
        """A plain ``{"role", "content"}`` dict, like pydantic's ``model_dump``."""
        return {"role": self["role"], "content": self["content"]}

    def export(self) -> dict[str, Any]:
        """:meth:`model_dump` plus ``time`` as an ISO 8601 UTC string when the message has one."""
        data = self.model_dump()
        if self._time is not None:
            data["time"] = datetime.fromtimestamp(self._time, tz=timezone.utc).isoformat()
        return data

    def copy(self) -> ChatMessage:
        return ChatMessage(self["role"], self["content"], self._time)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ChatMessage, (self["role"], self["content"], self._time))


# yaml.safe_dump refuses dict subclasses; teach the safe dumper to write ours as a plain mapping.
yaml.SafeDumper.add_representer(ChatMessage, yaml.representer.SafeRepresenter.represent_dict)

MessageInput = Mapping[str, Any] | ChatMessage | Any


def to_message(message: MessageInput) -> ChatMessage:
    """Normalise one message (a dict, our ChatMessage, or any object with ``role``/``content``).

    Extra keys are dropped, as Agently does when it rebuilds messages, except ``time`` (epoch seconds or ISO
    8601, see :func:`~agently_vecmem.records.parse_time`).

    Raises:
        ConfigurationError: the message has no role or content, content is not a str or list, or ``time``
            is not a valid time.
    """
    if isinstance(message, ChatMessage):
        raw_time: Any = message.time
    else:
        raw_time = message.get("time") if isinstance(message, Mapping) else getattr(message, "time", None)
    try:
        when = None if raw_time is None else parse_time(raw_time, what="message time")
    except RecordValidationError as e:
        raise ConfigurationError(str(e)) from None
    if isinstance(message, Mapping):
        if "role" not in message or "content" not in message:
            raise ConfigurationError(
                f"A chat message needs 'role' and 'content' keys, got keys {sorted(map(str, message))}."
            )
        role, content = message["role"], message["content"]
    elif hasattr(message, "role") and hasattr(message, "content"):
        role, content = message.role, message.content
    else:
        raise ConfigurationError(
            f"A chat message must be a dict like {{'role': 'user', 'content': '...'}}, got {type(message).__name__}."
        )
    if not isinstance(role, str):
        raise ConfigurationError(f"A chat message role must be a str, got {type(role).__name__}.")
    if isinstance(content, tuple):
        content = list(content)
    if not isinstance(content, (str, list)):
        raise ConfigurationError(
            f"A chat message content must be a str or a list of content parts, got {type(content).__name__}. "
            "Convert it with str(...) first."
        )
    return ChatMessage(role, content, when)


def to_messages(messages: MessageInput | Sequence[MessageInput]) -> list[ChatMessage]:
    """Normalise one message or a sequence of messages into a list of :class:`ChatMessage`.

    Raises:
        ConfigurationError: a bare string was given (wrap it as a message dict) or a message is invalid.
    """
    if isinstance(messages, (str, bytes)):
        raise ConfigurationError(
            "Chat history must be a message dict or a list of them, not a string. "
            "Use {'role': 'user', 'content': text}."
        )
    if isinstance(messages, Mapping) or (hasattr(messages, "role") and hasattr(messages, "content")):
        return [to_message(messages)]
    if isinstance(messages, Iterable):
        return [to_message(message) for message in messages]
    raise ConfigurationError(f"Chat history must be a message or a list of messages, got {type(messages).__name__}.")


def message_length(message: Mapping[str, Any]) -> int:
    """Agently's approximate length of one message: ``len(str(message.model_dump()))``."""
    return len(str({"role": message["role"], "content": message["content"]}))


def context_length(messages: Iterable[Mapping[str, Any]]) -> int:
    """Sum of :func:`message_length` over ``messages``."""
    return sum(message_length(message) for message in messages)
