"""A small prompt object with the surface memory plugins use on Agently's ``Prompt``.

It stores top-level keys (``system``, ``chat_history``, ``info``, ``instruct``, ``examples``, ``input``,
``output`` and any custom key such as ``GLOBAL_MEMORY`` or ``CHAT SESSION MEMO``) and renders them the way
Agently 4.1.4.1's prompt generator does::

    user:
    [SYSTEM]:
    ...
    [CHAT HISTORY]:
    [user]:hi
    [assistant]:hello

    [GLOBAL_MEMORY]:
    - content: ...

    [INPUT]:
    What is my id?

    [OUTPUT]:
    assistant:

Custom keys are *data sections*: strings are written raw, anything else as YAML inside the section, never
spliced in as free-standing instructions.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml

from ..errors import ConfigurationError
from .messages import to_messages

__all__ = ["Prompt", "TITLES", "ROLE_MAPPING"]

#: Section titles (Agently's ``prompt.prompt_title_mapping`` defaults).
TITLES: dict[str, str] = {
    "system": "SYSTEM",
    "developer": "DEVELOPER DIRECTIONS",
    "chat_history": "CHAT HISTORY",
    "info": "INFO",
    "instruct": "INSTRUCT",
    "examples": "EXAMPLES",
    "input": "INPUT",
    "output": "OUTPUT",
    "output_requirement": "OUTPUT REQUIREMENT",
}

#: Role names (Agently's ``prompt.role_mapping`` defaults); ``_`` is the fallback for unknown roles.
ROLE_MAPPING: dict[str, str] = {
    "system": "system",
    "developer": "developer",
    "assistant": "assistant",
    "user": "user",
    "_": "assistant",
}

_KNOWN = ("system", "developer", "chat_history", "info", "instruct", "examples", "input", "output")


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(item) for item in value]
    if hasattr(value, "model_dump"):
        return _plain(value.model_dump())
    return value


def _render_value(value: Any) -> str:
    """Scalars with ``str``, structures as YAML (sorted keys, as Agently's generator does)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return str(value)
    return yaml.safe_dump(_plain(value), allow_unicode=True)


def _section(title: str, value: Any) -> list[str]:
    return [f"[{title}]:", _render_value(value), ""]


def _role(role: str) -> str:
    return ROLE_MAPPING.get(role, ROLE_MAPPING["_"])


def _text_parts(content: Any) -> list[str]:
    if isinstance(content, list):
        return [str(part.get("text", "")) for part in content if isinstance(part, Mapping) and part.get("type") == "text"]
    return [str(content)]


class Prompt:
    """Prompt data plus Agently-style rendering.

    Args:
        data: initial top-level keys.

    Example:
        >>> p = Prompt()
        >>> p.set("input", "hello")
        >>> p.to_messages(system="Be brief.")
        [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'hello'}]
    """

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._data: dict[str, Any] = {}
        for key, value in (data or {}).items():
            self.set(key, value)

    def __repr__(self) -> str:
        return f"Prompt({self._data!r})"

    def set(self, key: str, value: Any) -> Prompt:
        """Set a top-level key (replacing its value). ``chat_history`` is normalised to messages."""
        if not isinstance(key, str) or not key:
            raise ConfigurationError(f"A prompt key must be a non-empty string, got {key!r}.")
        if key == "chat_history":
            value = [] if value is None else [dict(message) for message in to_messages(value)]
        self._data[key] = copy.deepcopy(value)
        return self

    def get(self, key: str, default: Any = None) -> Any:
        """Return a copy of the value at ``key`` or ``default``."""
        return copy.deepcopy(self._data[key]) if key in self._data else default

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.set(key, value)

    def __delitem__(self, key: str) -> None:
        del self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def keys(self) -> list[str]:
        return list(self._data)

    def to_serializable_prompt_data(self) -> dict[str, Any]:
        """A deep copy of all keys (Agently's name)."""
        return copy.deepcopy(self._data)

    # -- rendering -------------------------------------------------------------------------------------

    def _extras(self) -> list[tuple[str, Any]]:
        return [(key, value) for key, value in self._data.items() if key not in _KNOWN]

    def _present(self, key: str) -> bool:
        return bool(self._data.get(key))

    def _main_lines(self) -> list[str]:
        """Info, custom sections, instruct, examples, input, output requirement, then ``[OUTPUT]:``."""
        lines: list[str] = []
        info = self._data.get("info")
        if info:
            lines.append(f"[{TITLES['info']}]:")
            if isinstance(info, Mapping):
                lines.extend(f"- {title}: {_plain(content)}" for title, content in info.items())
            elif isinstance(info, Sequence) and not isinstance(info, str):
                lines.extend(f"- {_plain(line)}" for line in info)
            else:
                lines.append(str(info))
            lines.append("")
        for title, value in self._extras():
            lines.extend(_section(title, value))
        for key in ("instruct", "examples", "input"):
            if self._present(key):
                lines.extend(_section(TITLES[key], self._data[key]))
        if self._present("output"):
            lines.extend(_section(TITLES["output_requirement"], self._data["output"]))
        lines.append(f"[{TITLES['output']}]:")
        return lines

    def to_text(self) -> str:
        """Render the whole prompt as one text block, like Agently's ``Prompt.to_text()``.

        Raises:
            ValueError: the prompt is empty.
        """
        if not any(self._present(key) for key in self._data):
            raise ConfigurationError("Cannot render an empty prompt; set at least 'input'.")
        lines = [f"{ROLE_MAPPING['user']}:"]
        for key in ("system", "developer"):
            if self._present(key):
                lines.extend(_section(TITLES[key], self._data[key]))
        history = self._data.get("chat_history") or []
        if history:
            lines.append(f"[{TITLES['chat_history']}]:")
            for message in history:
                role = _role(message["role"])
                lines.extend(f"[{role}]:{text}" for text in _text_parts(message["content"]))
            lines.append("")
        lines.extend(self._main_lines())
        lines.append(f"{ROLE_MAPPING['assistant']}:")
        return "\n".join(lines)

    def to_messages(self, system: str | None = None) -> list[dict[str, str]]:
        """Render OpenAI chat messages, like Agently's ``Prompt.to_messages()`` (plain-text content).

        Args:
            system: a system message; overrides the prompt's ``system`` key when given.

        Returns:
            ``[{"role": ..., "content": str}, ...]``: system/developer messages, the chat history with
            strict role order (consecutive same-role messages merged with a blank line; a leading
            ``[CHAT HISTORY]`` user turn or trailing ``[User continue input]`` assistant turn inserted when
            needed), then one user message.

        Raises:
            ValueError: the prompt is empty.
        """
        if not any(self._present(key) for key in self._data) and not system:
            raise ConfigurationError("Cannot render an empty prompt; set at least 'input'.")
        messages: list[dict[str, str]] = []
        system_value = system if system is not None else self._data.get("system")
        if system_value:
            messages.append({"role": _role("system"), "content": _render_value(system_value)})
        if self._present("developer"):
            messages.append({"role": _role("developer"), "content": _render_value(self._data["developer"])})

        history: list[dict[str, Any]] = []
        for message in self._data.get("chat_history") or []:
            role = _role(message["role"])
            parts = _text_parts(message["content"])
            if history and history[-1]["role"] == role:
                history[-1]["parts"].extend(parts)
            else:
                history.append({"role": role, "parts": list(parts)})
        if history:
            if history[0]["role"] != "user":
                history.insert(0, {"role": "user", "parts": [f"[{TITLES['chat_history']}]"]})
            if history[-1]["role"] != "assistant":
                history.append({"role": "assistant", "parts": ["[User continue input]"]})
        messages.extend({"role": item["role"], "content": "\n\n".join(item["parts"])} for item in history)

        only_input = self._present("input") and not any(
            self._present(key) for key in ("info", "instruct", "examples", "output")
        ) and not self._extras()
        if only_input:
            messages.append({"role": _role("user"), "content": _render_value(self._data["input"]).rstrip("\n")})
        elif any(self._present(key) for key in ("info", "instruct", "examples", "input", "output")) or self._extras():
            messages.append({"role": _role("user"), "content": "\n".join(self._main_lines())})
        return messages
