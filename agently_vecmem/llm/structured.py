"""Pure helpers for structured model output: the only JSON-parsing logic of the model layer.

These functions do no I/O. :meth:`agently_vecmem.llm.ChatModel.structured` strings them together:
strip code fences → extract the first JSON value → validate with pydantic → on failure format the
errors and build the re-ask conversation.

Nothing here fills in silent defaults: a reply that is not valid JSON, or that does not match the reply
model, is an error the caller sees (and the model is asked again).
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..errors import ReplyParseError

__all__ = [
    "ReplyParseError",
    "strip_code_fences",
    "extract_json",
    "parse_reply",
    "format_errors",
    "build_reask_messages",
    "mentions_json",
    "REASK_TEMPLATE",
]

M = TypeVar("M", bound=BaseModel)

#: Raw text longer than this is shortened in error messages (the full text stays in ``last_raw``).
_MAX_ERROR_SNIPPET = 200

_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n?(.*?)```", re.DOTALL)
_OPEN_FENCE_RE = re.compile(r"^```[ \t]*[A-Za-z0-9_+-]*[ \t]*\r?\n?", re.DOTALL)

#: The user message appended after an invalid reply. ``{errors}`` is the output of :func:`format_errors`.
REASK_TEMPLATE = (
    "Your previous reply could not be used:\n{errors}\n\n"
    "Reply again with exactly one JSON object that fixes these errors, and nothing else."
)


def strip_code_fences(text: str) -> str:
    """Return the content of the first Markdown code fence, or the stripped text when there is none.

    A fence tagged ``json`` is preferred over other fences. An opening fence that is never closed (a
    truncated reply) is removed as well.

    Args:
        text: Raw model output.

    Returns:
        The text inside the fence (stripped), else ``text.strip()``.

    Example:
        >>> strip_code_fences('Here:\\n```json\\n{"a": 1}\\n```')
        '{"a": 1}'
    """
    matches = list(_FENCE_RE.finditer(text))
    if matches:
        tagged = [m for m in matches if m.group(1).lower() == "json"]
        return (tagged or matches)[0].group(2).strip()
    stripped = text.strip()
    if stripped.startswith("```"):
        return _OPEN_FENCE_RE.sub("", stripped, count=1).strip()
    return stripped


def extract_json(text: str) -> Any:
    """Parse the first JSON object (or array) in ``text``.

    Code fences are stripped first. If the whole remainder is not JSON, the first ``{`` (or ``[``) that
    starts a complete JSON value is decoded and trailing prose is ignored.

    Args:
        text: Raw model output.

    Returns:
        The decoded JSON value (usually a dict).

    Raises:
        ReplyParseError: no JSON object or array could be decoded (also for JSON nested past the
            recursion limit).
    """
    body = strip_code_fences(text)
    if not body:
        raise ReplyParseError("the reply is empty")
    try:
        return json.loads(body)
    except json.JSONDecodeError as e:
        first_error = e
    except RecursionError:  # the C scanner recurses per nesting level: "[" * 10_000 ends here
        raise ReplyParseError(f"the reply is nested too deeply to parse: {_snippet(body)!r}") from None
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[{\[]", body):
        try:
            value, _ = decoder.raw_decode(body, match.start())
        except json.JSONDecodeError:
            continue
        except RecursionError:
            break
        return value
    raise ReplyParseError(
        f"the reply is not valid JSON ({first_error.msg} at line {first_error.lineno} column "
        f"{first_error.colno}): {_snippet(body)!r}"
    )


def parse_reply(raw: str, reply_model: type[M]) -> M:
    """Extract the JSON value from ``raw`` and validate it against ``reply_model``.

    Args:
        raw: Raw model output.
        reply_model: The pydantic model the reply must satisfy.

    Returns:
        The validated model instance.

    Raises:
        ReplyParseError: no JSON value found.
        pydantic.ValidationError: the JSON does not match ``reply_model``.
    """
    return reply_model.model_validate(extract_json(raw))


def format_errors(error: Exception) -> str:
    """Render a parse or validation error as short text a model can act on.

    Args:
        error: A :class:`ReplyParseError`, a :class:`pydantic.ValidationError` or any exception.

    Returns:
        One line per problem, e.g. ``- facts.0.text: Field required``.
    """
    if isinstance(error, ValidationError):
        lines = []
        for item in error.errors(include_url=False):
            loc = ".".join(str(part) for part in item.get("loc", ())) or "(root)"
            line = f"- {loc}: {item.get('msg', 'invalid')}"
            if item.get("type") not in ("missing",) and "input" in item:
                line += f" (got {_snippet(repr(item['input']), 80)})"
            lines.append(line)
        return "\n".join(lines) or "- the reply does not match the schema"
    return f"- {error}"


def build_reask_messages(
    messages: list[dict[str, Any]], raw: str, errors: str, *, template: str = REASK_TEMPLATE
) -> list[dict[str, Any]]:
    """Return a new conversation: ``messages`` + the invalid assistant reply + a user message with errors.

    Args:
        messages: The conversation that produced ``raw`` (not modified).
        raw: The assistant's invalid reply, sent back verbatim so the model sees what it wrote.
        errors: Error text from :func:`format_errors`.
        template: The user message; ``{errors}`` is replaced.

    Returns:
        A new list of message dicts.
    """
    return [
        *messages,
        {"role": "assistant", "content": raw},
        {"role": "user", "content": template.format(errors=errors)},
    ]


def mentions_json(messages: list[dict[str, Any]]) -> bool:
    """True when some message content contains the word "json" (OpenAI requires it for JSON mode)."""
    for message in messages:
        content = message.get("content")
        if isinstance(content, str) and "json" in content.lower():
            return True
        if isinstance(content, list):  # multi-part content
            for part in content:
                if isinstance(part, dict) and "json" in str(part.get("text", "")).lower():
                    return True
    return False


def _snippet(text: str, limit: int = _MAX_ERROR_SNIPPET) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
