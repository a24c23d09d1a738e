"""What names a chat model: :class:`ModelSpec`, :func:`model_spec` (arguments, settings and environment in
one order of precedence) and the one set of defaults (model name, timeout, retries, environment variables).
:func:`~agently_vecmem.llm.factory.make_chat_model` builds the model a spec names."""


from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..errors import ConfigurationError

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_TIMEOUT",
    "DEFAULT_MAX_RETRIES",
    "ENV_BASE_URL",
    "ENV_API_KEY",
    "ENV_MODEL",
    "ModelSpec",
    "model_spec",
]

#: Model name used when none is given (argument, settings or ``OPENAI_MODEL``).
DEFAULT_MODEL = "gpt-4o-mini"
#: Seconds per model request.
DEFAULT_TIMEOUT = 60.0
#: Extra attempts after a retryable transport failure (429, 5xx, timeout, connection error).
DEFAULT_MAX_RETRIES = 1
#: Environment variables read when ``from_env=True``.
ENV_BASE_URL, ENV_API_KEY, ENV_MODEL = "OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL"


@dataclass(frozen=True)
class ModelSpec:
    """Everything needed to build an :class:`~agently_vecmem.llm.OpenAIChatModel` (defaults filled in).

    ``configured`` is False when neither an endpoint (``base_url``) nor an ``api_key`` was given.
    """

    model: str = DEFAULT_MODEL
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout: float = DEFAULT_TIMEOUT
    max_retries: int = DEFAULT_MAX_RETRIES
    extra_headers: Mapping[str, str] | None = None

    @property
    def configured(self) -> bool:
        return bool(self.base_url or self.api_key)

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :class:`~agently_vecmem.llm.OpenAIChatModel` (model name included)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if not out["extra_headers"]:
            del out["extra_headers"]
        return out


_FIELDS = {f.name for f in fields(ModelSpec)}


def _as_mapping(spec: Any) -> dict[str, Any]:
    if spec is None:
        return {}
    if isinstance(spec, ModelSpec):
        return spec.kwargs()
    if hasattr(spec, "model_dump"):  # ModelSettings and other pydantic models
        spec = spec.model_dump()
    if not isinstance(spec, Mapping):
        raise ConfigurationError(
            f"a model spec must be a mapping, a ModelSpec or ModelSettings, got {type(spec).__name__}"
        )
    unknown = sorted(set(spec) - _FIELDS)
    if unknown:
        raise ConfigurationError(
            f"unknown model setting(s) {', '.join(map(repr, unknown))}; known: {', '.join(sorted(_FIELDS))}"
        )
    return dict(spec)


def model_spec(
    spec: ModelSpec | Mapping[str, Any] | Any | None = None,
    *,
    from_env: bool = False,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> ModelSpec:
    """Resolve a model spec: ``overrides`` (non-None) over ``spec`` over the environment over the defaults.

    Args:
        spec: ``None``, a :class:`ModelSpec`, a mapping or a pydantic model (``ModelSettings``) with keys
            ``model, base_url, api_key, timeout, max_retries, extra_headers``.
        from_env: fill ``base_url``, ``api_key`` and ``model`` left unset from ``OPENAI_BASE_URL``,
            ``OPENAI_API_KEY`` and ``OPENAI_MODEL``.
        environ: the environment to read (default ``os.environ``).
        **overrides: the same keys; ``None`` values are ignored (so CLI flags can be passed as they are).

    Raises:
        ConfigurationError: an unknown key, or a value of the wrong type/range.
    """
    data = _as_mapping(spec)
    data.update(_as_mapping({k: v for k, v in overrides.items() if v is not None}))
    data = {k: v for k, v in data.items() if v is not None and v != ""}
    if from_env:
        env = os.environ if environ is None else environ
        for key, var in (("base_url", ENV_BASE_URL), ("api_key", ENV_API_KEY), ("model", ENV_MODEL)):
            if key not in data and env.get(var):
                data[key] = env[var]
    try:
        resolved = replace(ModelSpec(), **data)
        resolved = replace(resolved, model=str(resolved.model), timeout=float(resolved.timeout),
                           max_retries=int(resolved.max_retries))
    except (TypeError, ValueError) as e:
        raise ConfigurationError(f"bad model setting: {e}") from e
    if resolved.timeout <= 0 or resolved.max_retries < 0:
        raise ConfigurationError(
            f"model timeout must be > 0 and max_retries >= 0, got {resolved.timeout} and {resolved.max_retries}"
        )
    return resolved
