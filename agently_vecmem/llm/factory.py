"""The one way to build a chat model: :func:`make_chat_model`, with one set of defaults.

The CLI (``--base-url/--model/--api-key``), the plugin settings (``session.memory.VecMemory.model``),
:meth:`OpenAIChatModel.from_env <agently_vecmem.llm.OpenAIChatModel.from_env>`, the demo and the Agently
integration all resolve their model here, so a default (model name, timeout, retries, environment
variable names) is written once::

    from agently_vecmem.llm.factory import make_chat_model

    model = make_chat_model({"model": "qwen2.5", "base_url": "http://127.0.0.1:8000/v1"})
    model = make_chat_model(from_env=True)           # OPENAI_BASE_URL / OPENAI_API_KEY / OPENAI_MODEL, or None

The ``openai`` SDK is imported only when a model is actually built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .spec import ModelSpec, model_spec

if TYPE_CHECKING:
    from .openai_compat import OpenAIChatModel

__all__ = ["make_chat_model"]


def make_chat_model(
    spec: ModelSpec | Mapping[str, Any] | Any | None = None,
    *,
    from_env: bool = False,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> OpenAIChatModel | None:
    """Build the chat model for a spec (see :func:`model_spec` for the arguments and their precedence).

    Returns:
        An :class:`~agently_vecmem.llm.OpenAIChatModel`; ``None`` when no ``spec`` was given and neither the
        overrides nor the environment name an endpoint or key (the deterministic, model-free path). A
        ``spec`` given explicitly is always built (the SDK's defaults fill in a missing endpoint).

    Raises:
        ConfigurationError: the spec is invalid.
    """
    resolved = model_spec(spec, from_env=from_env, environ=environ, **overrides)
    if spec is None and not resolved.configured:
        return None
    from .openai_compat import OpenAIChatModel

    return OpenAIChatModel(**resolved.kwargs())
