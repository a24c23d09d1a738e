"""The shared part of the Agently integration: names, model resolution from Agently's settings and the
``VecMemory`` mode class both host lines register (nothing here imports ``agently``)."""

from __future__ import annotations

from typing import Any

from ...memory.config import VecMemorySettings, read_setting
from ...memory.plugin import VecMemory, default_model_resolver

__all__ = ["PROVIDER_NAME", "MODE_NAME", "SUPPORTED", "WORKSPACE_LINE", "RECORD_STORE_LINE", "AgentlyVecMemory",
           "agently_model_resolver", "model_settings_from_agently"]

PROVIDER_NAME = "chroma"
MODE_NAME = "VecMemory"
_OPENAI_REQUESTERS = {"OpenAICompatible", "OpenAIResponsesCompatible"}
#: The supported releases, as the ``[agently]`` extra pins them.
SUPPORTED = "agently>=4.1.3.9,<4.2"
WORKSPACE_LINE = "workspace"  # 4.1.3.9 .. 4.1.4.1
RECORD_STORE_LINE = "record_store"  # 4.1.4.2 .. 4.1.4.x


def model_settings_from_agently(settings: Any) -> tuple[dict[str, Any] | None, str | None]:
    """OpenAIChatModel arguments from Agently's active model settings.

    Returns:
        (kwargs for :class:`~agently_vecmem.llm.OpenAIChatModel`, None), or (None, reason) when the settings
        carry no usable OpenAI-compatible model.
    """
    if settings is None:
        return None, "no_settings"
    active = str(read_setting(settings, "plugins.ModelRequester.activate") or "")
    if active not in _OPENAI_REQUESTERS:
        return None, f"model_requester_{active or 'none'}_not_openai_compatible"
    prefix = f"plugins.ModelRequester.{active}"
    base_url = str(read_setting(settings, f"{prefix}.base_url") or "")
    full_url = read_setting(settings, f"{prefix}.full_url")
    api_key = read_setting(settings, f"{prefix}.api_key")
    auth = read_setting(settings, f"{prefix}.auth")
    headers = dict(read_setting(settings, f"{prefix}.headers") or {})
    if isinstance(auth, dict):
        headers.update(auth.get("headers") or {})
        api_key = api_key or auth.get("api_key")
    elif isinstance(auth, str) and auth and auth != "None":
        api_key = api_key or auth
    if isinstance(full_url, str) and full_url:
        # full_url names the endpoint itself; the SDK wants the base it appends /chat/completions to.
        base_url = full_url.removesuffix("/").removesuffix("/chat/completions")
    # Agently's own "no auth" guard (Retrieval._default_model_unavailable_reason), same condition.
    if "api.openai.com" in base_url and not full_url and not api_key and not auth:
        return None, "default_openai_endpoint_without_auth"
    if not base_url:
        return None, "no_base_url"
    model = read_setting(settings, f"{prefix}.model")
    if not model:
        model_type = str(read_setting(settings, f"{prefix}.model_type") or "chat")
        model = read_setting(settings, f"{prefix}.default_model.{model_type}")
    if not model:
        return None, "no_model_name"
    kwargs: dict[str, Any] = {"model": str(model), "base_url": base_url, "api_key": str(api_key) if api_key else "x"}
    if headers:
        kwargs["extra_headers"] = {str(k): str(v) for k, v in headers.items()}
    return kwargs, None


def agently_model_resolver(settings: Any, resolved: VecMemorySettings) -> Any:
    """VecMemory's model under Agently: ``session.memory.VecMemory.model`` if set, else the agent's model.

    Returns None (the deterministic path) when no usable model is configured.
    """
    from ...llm.factory import make_chat_model

    if resolved.model is not None:
        return default_model_resolver(settings, resolved)
    kwargs, _reason = model_settings_from_agently(settings)
    return make_chat_model(kwargs) if kwargs else None


class AgentlyVecMemory(VecMemory):
    """VecMemory registered in Agently (mode ``"VecMemory"``), calling the agent's configured model.

    Identical to :class:`~agently_vecmem.memory.plugin.VecMemory` except for the model resolution, which
    reads Agently's ``OpenAICompatible`` settings, and a ``model_unavailable`` diagnostic (phase
    ``model``) each time the deterministic path is taken for lack of a model.
    """

    name = MODE_NAME
    DEFAULT_SETTINGS: dict[str, Any] = {}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("model_resolver", self._resolve_model)
        super().__init__(**kwargs)

    def _resolve_model(self, settings: Any, resolved: VecMemorySettings) -> Any:
        try:
            model = agently_model_resolver(settings, resolved)
            reason = None if model is not None else model_settings_from_agently(settings)[1]
        except Exception as e:  # noqa: BLE001 - a bad model config must not fail the user's request
            model, reason = None, f"model_config_error: {type(e).__name__}: {e}"
        if model is None:
            diag = {"phase": "model", "enabled": False, "degraded": True, "reason": "model_unavailable",
                    "detail": reason}
            history = getattr(self, "diagnostics", None)
            if history is not None and (not history or history[-1] != diag):
                history.append(diag)
        return model
