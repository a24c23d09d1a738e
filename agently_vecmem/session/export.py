"""Session import/export in Agently 4.1.4.1's format.

Top-level keys, in this order: ``id, auto_resize, full_context, context_window, memo, session_settings``.
JSON is written with ``indent=2, ensure_ascii=False`` and read with ``json5``; YAML is written with
``sort_keys=False``. Loading accepts a file path or the content itself, an optional ``session_key_path``
(dot path to a nested session dict), and the legacy ``window_context`` key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import json5
import yaml

from ..errors import ConfigurationError, SessionDataError
from .messages import ChatMessage, to_messages
from .recording import locate_path

__all__ = ["SessionDataError", "SessionState", "dump_json", "dump_yaml", "read_session_source", "parse_session_data"]


@dataclass(frozen=True)
class SessionState:
    """What a load applies to a session; ``None`` fields mean "not in the data, keep"."""

    id: str | None
    auto_resize: bool | None
    full_context: list[ChatMessage]
    context_window: list[ChatMessage]
    has_memo: bool
    memo: Any
    session_settings: dict[str, Any] | None


def dump_json(data: Mapping[str, Any]) -> str:
    """JSON text, ``indent=2, ensure_ascii=False``."""
    return json.dumps(data, indent=2, ensure_ascii=False)


def dump_yaml(data: Mapping[str, Any]) -> str:
    """YAML text, key order kept."""
    return yaml.safe_dump(data, indent=2, allow_unicode=True, sort_keys=False)


def _is_file(path_or_content: str | Path) -> bool:
    try:
        path = Path(path_or_content)
        return path.exists() and path.is_file()
    except (OSError, ValueError):
        return False


def read_session_source(
    path_or_content: str | Path,
    *,
    fmt: Literal["json", "yaml"],
    session_key_path: str | None = None,
    encoding: str | None = "utf-8",
) -> dict[str, Any]:
    """Read session data from a file path or from text.

    Args:
        path_or_content: a path to an existing file, or the JSON/YAML text itself.
        fmt: ``"json"`` (parsed with json5, so comments and trailing commas are fine) or ``"yaml"``.
        session_key_path: dot path to the session dict inside a bigger document, e.g. ``"payload.session"``.
        encoding: file encoding.

    Returns:
        The session dict.

    Raises:
        ConfigurationError: the text does not parse (also a ``ValueError``).
        SessionDataError: the parsed data, or the value at ``session_key_path``, is not a dict.
    """
    label = fmt.upper()
    is_file = _is_file(path_or_content)
    try:
        text = Path(path_or_content).read_text(encoding=encoding) if is_file else str(path_or_content)
        data = json5.loads(text) if fmt == "json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        where = f"file '{path_or_content}'" if is_file else "content (and it is not an existing file path)"
        raise ConfigurationError(f"Cannot load {label} {where}.\nError: {exc}") from exc
    if not isinstance(data, dict):
        raise SessionDataError(f"Cannot load {label} Session data, expect dictionary data but got: {data!r:.200}")
    if session_key_path is not None:
        found, data = locate_path(data, session_key_path, style="dot")
        if not found or not isinstance(data, dict):
            raise SessionDataError(
                f"Cannot load {label} Session data, expect Session data from [{session_key_path}] as dictionary "
                f"but got: {data!r:.200}"
            )
    return data


def _messages(data: Any, key: str) -> list[ChatMessage]:
    if isinstance(data, (str, bytes)) or not isinstance(data, Sequence):
        raise SessionDataError(f"Cannot load Session data, expect key '{key}' as a sequence of chat messages.")
    return to_messages(list(data))


def parse_session_data(data: Mapping[str, Any]) -> SessionState:
    """Validate a session dict. ``context_window`` falls back to ``window_context``, then ``full_context``.

    Raises:
        SessionDataError: a field has the wrong type.
    """
    full = data.get("full_context", [])
    full_messages = _messages(full, "full_context")
    window = data.get("context_window", data.get("window_context", full))
    window_messages = _messages(window, "context_window")
    settings = data.get("session_settings")
    if settings is not None and not isinstance(settings, Mapping):
        raise SessionDataError("Cannot load Session data, expect key 'session_settings' as a dictionary.")
    return SessionState(
        id=str(data["id"]) if "id" in data else None,
        auto_resize=bool(data["auto_resize"]) if "auto_resize" in data else None,
        full_context=full_messages,
        context_window=window_messages,
        has_memo="memo" in data,
        memo=data.get("memo"),
        session_settings=dict(settings) if settings is not None else None,
    )
