"""Plug agently-vecmem into Agently 4.1.4.1: the ``chroma`` Workspace provider and the ``VecMemory`` mode.

The only module of the package that imports ``agently``. Nothing happens on import; call
:func:`install` (or ``import agently_vecmem.agently``, which calls it)::

    from agently import Agently
    import agently_vecmem.agently  # noqa: F401  (registers "chroma" and "VecMemory")

    agent = Agently.create_agent()
    agent.set_settings("OpenAICompatible", {"base_url": "http://127.0.0.1:8000/v1", "model": "qwen2.5",
                                            "api_key": "x"})
    agent.use_workspace("./.agently/memory", provider="chroma")
    agent.activate_session(session_id="support-demo")
    agent.activated_session.use_memory(mode="VecMemory")     # or the built-in mode="AgentlyMemory"

``provider_options`` of the ``chroma`` provider: ``embedder`` (``"minilm"`` default, ``"onnx"``, ``"hash"`` or
an Embedder), ``workspace`` (an existing ChromaWorkspace), ``host``/``port`` (Chroma server), ``collection``.

VecMemory under Agently calls the agent's configured model: the ``OpenAICompatible`` settings (``base_url``,
``model``, ``api_key`` or ``auth``, ``full_url``, ``headers``) read through the session's settings chain.
Without a usable model (Agently's default ``api.openai.com`` without a key, another requester) it runs the
deterministic path and records a ``model_unavailable`` diagnostic; it never fails the user's request for that.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..memory.plugin import VecMemory
from ..memory.settings import VecMemorySettings, read_setting
from .agently_backend import ChromaVectorIndex, ChromaWorkspaceBackend, create_backend

__all__ = [
    "PROVIDER_NAME",
    "MODE_NAME",
    "AgentlyVecMemory",
    "ChromaWorkspaceBackend",
    "ChromaVectorIndex",
    "agently_model_resolver",
    "model_settings_from_agently",
    "install",
    "uninstall",
    "is_installed",
]

logger = logging.getLogger(__name__)

PROVIDER_NAME = "chroma"
MODE_NAME = "VecMemory"
_OPENAI_REQUESTERS = {"OpenAICompatible", "OpenAIResponsesCompatible"}
_install_lock = threading.Lock()


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
    from ..llm.factory import make_chat_model

    if resolved.model is not None:
        return make_chat_model(resolved.model, from_env=True)
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


def _agently() -> Any:
    try:
        from agently import Agently
    except ImportError as e:  # pragma: no cover - depends on the environment
        from ..errors import ConfigurationError

        raise ConfigurationError(
            "agently is not installed: pip install 'agently-vecmem[agently]' (agently>=4.1.3.9,<4.1.4.2)"
        ) from e
    if not hasattr(Agently, "workspace") or not hasattr(Agently.workspace, "register_backend_provider"):
        from ..errors import ConfigurationError

        raise ConfigurationError(
            "this agently version has no Workspace provider registry; agently-vecmem needs "
            "agently>=4.1.3.9,<4.1.4.2 (4.1.4.1 recommended)"
        )
    return Agently


def is_installed() -> bool:
    """Whether both registrations are in place."""
    Agently = _agently()
    providers = Agently.workspace.list_backend_providers()
    return PROVIDER_NAME in providers and _has_mode(Agently.plugin_manager)


def install() -> None:
    """Register the ``chroma`` Workspace provider and the ``VecMemory`` SessionMemory mode (idempotent).

    Raises:
        ConfigurationError: agently is missing or has an incompatible version.
    """
    Agently = _agently()
    with _install_lock:
        Agently.workspace.register_backend_provider(PROVIDER_NAME, create_backend)
        manager = Agently.plugin_manager
        current = manager.get_plugin("SessionMemory", MODE_NAME) if _has_mode(manager) else None
        if current is not AgentlyVecMemory:
            # activate=False: the SessionMemory activate setting is left alone (modes are chosen by name).
            Agently.plugin_manager.register("SessionMemory", AgentlyVecMemory, activate=False)


def uninstall() -> None:
    """Remove both registrations (idempotent). Workspaces and sessions already built keep working."""
    Agently = _agently()
    with _install_lock:
        if PROVIDER_NAME in Agently.workspace.list_backend_providers():
            Agently.workspace.unregister_backend_provider(PROVIDER_NAME)
        if _has_mode(Agently.plugin_manager):
            Agently.plugin_manager.unregister("SessionMemory", MODE_NAME)


def _has_mode(manager: Any) -> bool:
    try:
        return MODE_NAME in manager.get_plugin_list("SessionMemory")
    except (KeyError, ValueError, TypeError):
        return False
