"""Options several commands share: the chat model named by ``--model/--base-url/--api-key/--timeout``."""

from __future__ import annotations

import argparse

from ..errors import UsageError
from ..llm.base import ChatModel

__all__ = ["model_from_args"]


def model_from_args(args: argparse.Namespace) -> ChatModel:
    """The chat model the arguments (or ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` / ``OPENAI_MODEL``) name.

    Raises:
        UsageError: no endpoint is configured.
    """
    from ..llm.factory import make_chat_model
    from ..llm.spec import model_spec

    spec = model_spec(from_env=True, base_url=args.base_url, api_key=args.api_key, model=args.model,
                      timeout=args.timeout)
    if not spec.configured:
        raise UsageError(
            "no model endpoint configured: pass --base-url URL --model NAME [--api-key KEY], or set "
            "OPENAI_BASE_URL / OPENAI_API_KEY / OPENAI_MODEL"
        )
    model = make_chat_model(spec)
    assert model is not None  # a configured spec always builds one
    return model
