"""Language-model access: the :class:`ChatModel` interface, structured output, an OpenAI-compatible back end.

The ``openai`` SDK is imported lazily (only when :class:`OpenAIChatModel` is first used).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import MAX_CALL_RECORDS, CallRecord, ChatModel, Usage, UsageSummary, summarize_calls
from .factory import make_chat_model
from .spec import ModelSpec, model_spec
from .structured import (
    ReplyParseError,
    build_reask_messages,
    extract_json,
    format_errors,
    parse_reply,
    strip_code_fences,
)

if TYPE_CHECKING:
    from .openai_compat import OpenAIChatModel

__all__ = [
    "ChatModel",
    "CallRecord",
    "Usage",
    "UsageSummary",
    "summarize_calls",
    "MAX_CALL_RECORDS",
    "OpenAIChatModel",
    "make_chat_model",
    "model_spec",
    "ModelSpec",
    "ReplyParseError",
    "strip_code_fences",
    "extract_json",
    "parse_reply",
    "format_errors",
    "build_reask_messages",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAIChatModel":
        from .openai_compat import OpenAIChatModel

        return OpenAIChatModel
    raise AttributeError(name)
