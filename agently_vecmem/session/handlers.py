"""The built-in window policy: the default analysis handler and ``simple_cut``.

Handler contract (the same as Agently 4.1.4.1):

* analysis handler ``(full_context, context_window, memo, session_settings) -> str | None`` names the resize
  strategy to run, or ``None`` for "nothing to do";
* resize handler, same arguments, returns ``(new_full_context | None, new_context_window | None,
  new_memo | None)`` where ``None`` means "keep" (so a handler cannot reset the memo to ``None``).

Handlers may be sync or async. The pure helpers :func:`needs_cut` and :func:`simple_cut_window` hold the
logic; the async wrappers only read ``max_length`` from the settings namespace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .messages import ChatMessage, context_length, message_length, to_message

__all__ = [
    "needs_cut",
    "simple_cut_window",
    "default_analysis_handler",
    "simple_cut_handler",
    "SIMPLE_CUT",
]

SIMPLE_CUT = "simple_cut"


def _max_length(session_settings: Any) -> int | None:
    value = session_settings.get("max_length", None)
    return value if isinstance(value, int) else None


def needs_cut(context_window: Sequence[Mapping[str, Any]], max_length: int | None) -> bool:
    """True when ``max_length`` is an int and the window's approximate length exceeds it."""
    return isinstance(max_length, int) and context_length(context_window) > max_length


def simple_cut_window(
    context_window: Sequence[Mapping[str, Any]], max_length: int
) -> list[ChatMessage] | None:
    """Keep the newest messages whose summed length fits ``max_length``.

    If not even the newest message fits, return one message with that role holding the last
    ``max_length`` characters of its content (``str(content)``).

    Args:
        context_window: the current window, oldest first.
        max_length: the length budget (see :func:`~agently_vecmem.session.messages.message_length`).

    Returns:
        The new window, or ``None`` when nothing should change.
    """
    kept: list[ChatMessage] = []
    total = 0
    for message in reversed(context_window):
        length = message_length(message)
        if total + length > max_length:
            break
        kept.append(to_message(message))
        total += length
    kept.reverse()

    if not kept and context_window:
        newest = context_window[-1]
        content = str(newest["content"])
        # Agently slices content[len(content) - max_length:], which for short contents keeps a
        # *shorter* tail than the content itself; we keep min(len, max_length) characters.
        tail = content[-max_length:] if max_length > 0 else ""
        return [ChatMessage(newest["role"], tail)]

    if context_length(kept) <= max_length:
        return kept
    return None


async def default_analysis_handler(
    full_context: Sequence[Mapping[str, Any]],
    context_window: Sequence[Mapping[str, Any]],
    memo: Any,
    session_settings: Any,
) -> str | None:
    """Return ``"simple_cut"`` when ``session.max_length`` is set and the window is longer."""
    return SIMPLE_CUT if needs_cut(context_window, _max_length(session_settings)) else None


async def simple_cut_handler(
    full_context: Sequence[Mapping[str, Any]],
    context_window: Sequence[Mapping[str, Any]],
    memo: Any,
    session_settings: Any,
) -> tuple[None, list[ChatMessage] | None, None]:
    """The built-in ``simple_cut`` resize strategy: only the window changes."""
    max_length = _max_length(session_settings)
    if max_length is None:
        return None, None, None
    return None, simple_cut_window(context_window, max_length), None
