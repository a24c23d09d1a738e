"""What a finished turn records into chat history: ``session.input_keys`` / ``session.reply_keys``.

This is Agently 4.1.4.1's ``Session.resolve_finally_contents`` as a pure function, reusable by the
agent-free driver, the Agently integration and tests.

``input_keys`` resolution order for each key:

1. ``.execution`` / ``.execution.<path>``: the request prompt data;
2. ``.agent`` / ``.agent.<path>``: the agent prompt data;
3. a plain path in the request prompt data;
4. a fallback inside ``input`` (an ``input.`` prefix is allowed).

Paths use dot style (``a.b[0]``), or slash style (``a/b/0``) when the key contains ``/``. Found values are
rendered as ``"[key]:\\n<value>"`` lines: strings raw, scalars with ``str``, anything else as YAML.
``reply_keys`` are resolved the same way in the parsed result data. ``None`` keys mean the default
recording: the whole prompt text as user content and the result (a string, or YAML for structures) as
assistant content.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import yaml

from ..errors import ConfigurationTypeError

__all__ = [
    "resolve_contents",
    "normalize_keys",
    "locate_path",
    "extract_by_path",
    "extract_input_value",
    "format_value",
    "format_keyed_content",
]

_MISSING: Any = object()


def normalize_keys(keys: Any) -> list[str] | None:
    """``None`` stays ``None``; a string becomes ``[string]``; a sequence drops ``None`` items; else ``[]``."""
    if keys is None:
        return None
    if isinstance(keys, str):
        return [keys]
    if isinstance(keys, Sequence):
        return [str(key) for key in keys if key is not None]
    return []


def _is_sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _locate(value: Any, parts: list[str], style: Literal["dot", "slash"]) -> Any:
    if not parts:
        return value
    part, rest = parts[0], parts[1:]
    if style == "dot" and "[" in part:
        name, _, index = part.partition("[")
        index = index[:-1] if index.endswith("]") else index
        if name:
            if not isinstance(value, Mapping):
                return _MISSING
            value = value.get(name, _MISSING)
        if not _is_sequence(value):
            return _MISSING
        if index in ("*", ""):
            items = [_locate(item, rest, style) for item in value]
            return _MISSING if any(item is _MISSING for item in items) else items
        try:
            return _locate(value[int(index)], rest, style)
        except (ValueError, IndexError):
            return _MISSING
    if style == "slash":
        if part.startswith("[") and part.endswith("]"):
            part = part[1:-1]
        if part in ("*", ""):
            if not _is_sequence(value):
                return _MISSING
            items = [_locate(item, rest, style) for item in value]
            return _MISSING if any(item is _MISSING for item in items) else items
        if _is_sequence(value):
            try:
                return _locate(value[int(part)], rest, style)
            except (ValueError, IndexError):
                return _MISSING
    if isinstance(value, Mapping) and part in value:
        return _locate(value[part], rest, style)
    return _MISSING


def locate_path(data: Any, path: str, *, style: Literal["dot", "slash"] | None = None) -> tuple[bool, Any]:
    """Find ``path`` in nested dicts/lists (Agently ``DataLocator`` semantics).

    Args:
        data: the nested data.
        path: ``"a.b[0].c"`` (dot style) or ``"a/b/0/c"`` (slash style).
        style: forced style; by default slash when the path contains ``/``.

    Returns:
        ``(found, value)``.
    """
    if path == "":
        return True, data
    style = style or ("slash" if "/" in path else "dot")
    parts = path.split(".") if style == "dot" else [part for part in path.split("/") if part]
    value = _locate(data, parts, style)
    return (False, None) if value is _MISSING else (True, value)


def extract_by_path(data: Any, key: str) -> tuple[bool, Any]:
    """Agently's ``_extract_by_path``: a literal key first, then a dot/slash path; only inside dicts."""
    if isinstance(data, Mapping):
        if key in data:
            return True, data[key]
        return locate_path(data, key)
    return False, None


def extract_input_value(
    prompt_data: Mapping[str, Any], key: str, agent_prompt_data: Mapping[str, Any] | None = None
) -> tuple[bool, Any]:
    """Resolve one ``input_keys`` entry (see the module docstring for the order)."""
    agent_prompt_data = agent_prompt_data or {}
    key = key.strip()
    if key == "":
        return False, None
    if key == ".execution":
        return True, dict(prompt_data)
    if key.startswith(".execution."):
        return extract_by_path(prompt_data, key[len(".execution.") :])
    if key == ".agent":
        return True, dict(agent_prompt_data)
    if key.startswith(".agent."):
        return extract_by_path(agent_prompt_data, key[len(".agent.") :])
    found, value = extract_by_path(prompt_data, key)
    if found:
        return found, value
    input_data = prompt_data.get("input")
    if isinstance(input_data, Mapping):
        if key.startswith("input."):
            return extract_by_path(input_data, key[len("input.") :])
        return extract_by_path(input_data, key)
    return False, None


def format_value(value: Any) -> str:
    """Strings raw, ``int``/``float``/``bool``/``None`` with ``str``, anything else as YAML (insertion order)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float, bool)) or value is None:
        return str(value)
    try:
        return yaml.safe_dump(_plain(value), allow_unicode=True, sort_keys=False).rstrip("\n")
    except yaml.YAMLError:
        return str(value)


def _plain(value: Any) -> Any:
    """Plain containers for ``yaml.safe_dump`` (tuples, mapping subclasses, pydantic models)."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(item) for item in value]
    if hasattr(value, "model_dump"):
        return _plain(value.model_dump())
    return value


def format_keyed_content(items: Sequence[tuple[str, Any]]) -> str:
    """``"[key]:\\n<value>"`` lines joined with newlines, stripped."""
    lines: list[str] = []
    for key, value in items:
        lines.append(f"[{key}]:")
        lines.append(format_value(value))
    return "\n".join(lines).strip()


def _prompt_data_of(prompt: Any) -> dict[str, Any]:
    if prompt is None:
        return {}
    if isinstance(prompt, Mapping):
        return dict(prompt)
    to_data = getattr(prompt, "to_serializable_prompt_data", None)
    if callable(to_data):
        return dict(to_data())
    raise ConfigurationTypeError(f"Expected prompt data (a dict or a Prompt), got {type(prompt).__name__}.")


def resolve_contents(
    prompt_data: Mapping[str, Any] | Any,
    result_data: Any,
    input_keys: Any,
    reply_keys: Any,
    agent_prompt_data: Mapping[str, Any] | Any | None = None,
    *,
    prompt_text: str | None = None,
) -> tuple[str | None, str | None]:
    """Compute the ``(user_content, assistant_content)`` a finished turn appends to chat history.

    Args:
        prompt_data: the request prompt, as a dict or as a Prompt (anything with
            ``to_serializable_prompt_data()`` and ``to_text()``).
        result_data: the parsed reply (a string or structured data).
        input_keys: ``session.input_keys`` (``None``, a string or a list).
        reply_keys: ``session.reply_keys`` (``None``, a string or a list).
        agent_prompt_data: the agent-level prompt for ``.agent`` keys.
        prompt_text: the rendered prompt for default recording; when omitted it is rendered from
            ``prompt_data``.

    Returns:
        ``(user, assistant)``; an entry is ``None`` when keys were given but none of them was found.

    Example:
        >>> resolve_contents({"input": {"question": "hi"}}, {"answer": "yo"}, ["question"], ["answer"])
        ('[question]:\\nhi', '[answer]:\\nyo')
    """
    keys_in = normalize_keys(input_keys)
    keys_out = normalize_keys(reply_keys)

    user: str | None = None
    if keys_in is None:
        if prompt_text is None:
            to_text = getattr(prompt_data, "to_text", None)
            if callable(to_text):
                prompt_text = to_text()
            else:
                from .prompt import Prompt

                prompt_text = Prompt(_prompt_data_of(prompt_data)).to_text()
        user = str(prompt_text)
    else:
        request = _prompt_data_of(prompt_data)
        agent = _prompt_data_of(agent_prompt_data)
        found_items = []
        for key in keys_in:
            found, value = extract_input_value(request, key, agent)
            if found:
                found_items.append((key, value))
        if found_items:
            user = format_keyed_content(found_items)

    assistant: str | None = None
    if keys_out is None:
        assistant = format_value(result_data)
    else:
        found_items = []
        for key in keys_out:
            found, value = extract_by_path(result_data, key)
            if found:
                found_items.append((key, value))
        if found_items:
            assistant = format_keyed_content(found_items)
    return user, assistant
