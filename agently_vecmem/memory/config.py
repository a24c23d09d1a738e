"""Validated settings of the VecMemory plugin (``session.memory.VecMemory.*``).

The keys and defaults mirror AgentlyMemory 4.1.4.1 (``session.memory.AgentlyMemory.*``) plus our own
(``retrieve_plan.mode``, ``consolidate.*``, ``raw_turns.*``, ``diagnostics.*``). Resolution order, per key:
our defaults ← values a user set under ``session.memory.AgentlyMemory`` (those that differ from
AgentlyMemory's own defaults) ← values set under ``session.memory.VecMemory``. A wrong type or an
unknown key under ``VecMemory`` is a :class:`~agently_vecmem.errors.ConfigurationError`.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigurationError
from ..llm.spec import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT
from ..records import format_validation_error
from ..settings import deep_merge, read_path

__all__ = [
    "VecMemorySettings",
    "ModelSettings",
    "AGENTLY_MEMORY_DEFAULTS",
    "resolve_settings",
    "read_setting",
    "PHASES",
]

logger = logging.getLogger(__name__)

PHASES = ("retrieve_plan", "rerank", "extract", "consolidate")

#: AgentlyMemory 4.1.4.1's DEFAULT_SETTINGS, used to tell a user's AgentlyMemory choice from a default.
AGENTLY_MEMORY_DEFAULTS: dict[str, Any] = {
    "retrieve": {
        "enabled": True,
        "budget": {"chars": 4000, "item_chars": 1200},
        "selection": "length",
        "sources": ["records"],
        "method": "keyword",
        "rerank": True,
        "rerank_min_candidates": 2,
        "keep_candidates_on_empty_rerank": True,
        "tags": [],
        "max_candidates": 50,
    },
    "retrieve_plan": {"enabled": True, "fallback_query_chars": 2000},
    "extract": {"enabled": True, "max_memories": 6, "max_context_chars": 12000},
    "body_schema": {
        "summary": "string",
        "details": "object or string",
        "confidence": "number from 0.0 to 1.0",
    },
    "vector_index": {"enabled": False},
}


class _Strict(BaseModel):
    # strict: "yes" is not a bool and "3" not an int; a typo in settings fails loudly instead of coercing.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)


class Execution(BaseModel):
    """Configure-Prompt-shaped overrides of one phase's model request (each key replaces the default)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    system: Any = None
    developer: Any = None
    info: Any = None
    instruct: Any = None
    examples: Any = None
    input: Any = None
    output: Any = None
    #: only JSON replies are parsed (the reply is validated and re-asked); other formats are rejected.
    output_format: Literal["json"] | None = None
    format_: Literal["json"] | None = Field(default=None, alias="$format")
    #: output cap of this phase's requests (default: sized to the phase's reply schema, see
    #: :func:`agently_vecmem.memory.prompts.default_max_tokens`); a reply cut by it is a failed attempt.
    max_tokens: int | None = Field(default=None, ge=16, le=100_000)


class CharBudget(_Strict):
    """How much retrieved memory a request may carry, in characters (``retrieve.budget``)."""

    chars: int = Field(default=4000, ge=0)
    item_chars: int = Field(default=1200, ge=1)
    rerank_candidates: int = Field(default=20, ge=1, le=200)
    top_n: int | None = Field(default=None, ge=1)
    tokens: int | None = Field(default=None, ge=1)


class Retrieve(_Strict):
    enabled: bool = True
    budget: CharBudget = Field(default_factory=CharBudget)
    selection: Literal["length", "top_n"] = "length"
    top_n: int | None = Field(default=None, ge=1)
    sources: list[str] = Field(default_factory=lambda: ["records"])
    #: hybrid (dense + BM25, our default) | dense | lexical; AgentlyMemory's keyword/vector/auto map here.
    method: Literal["hybrid", "dense", "lexical", "rrf", "keyword", "vector", "auto"] = "hybrid"
    rerank: bool = True
    rerank_min_candidates: int = Field(default=2, ge=0)
    keep_candidates_on_empty_rerank: bool = True
    max_rerank_retries: int = Field(default=1, ge=0, le=5)
    tags: list[str] = Field(default_factory=list)
    max_candidates: int = Field(default=50, ge=1, le=500)

    @property
    def search_method(self) -> str:
        """The candidate method after mapping AgentlyMemory's names (keyword→lexical, vector→dense)."""
        return {"keyword": "lexical", "vector": "dense", "auto": "hybrid"}.get(self.method, self.method)


class RetrievePlan(_Strict):
    enabled: bool = True
    fallback_query_chars: int = Field(default=2000, ge=1)
    #: fused: one model call plans and judges the candidates (found with the newest input as query);
    #: separate: AgentlyMemory's pattern, a plan call and then a rerank call.
    mode: Literal["fused", "separate"] = "fused"
    execution: Execution | None = None


class Rerank(_Strict):
    execution: Execution | None = None


class Extract(_Strict):
    enabled: bool = True
    max_memories: int = Field(default=6, ge=0, le=100)
    max_context_chars: int = Field(default=12000, ge=100)
    #: existing memories similar to the turn shown to the extractor, per scope (session, global), so it can
    #: UPDATE/SUPERSEDE them.
    related_memories: int = Field(default=5, ge=0, le=50)
    execution: Execution | None = None


class Consolidate(_Strict):
    enabled: bool = True
    #: cosine similarity above which an existing memory counts as a near-duplicate of a new one.
    similarity_threshold: float = Field(default=0.82, ge=0.0, le=1.0)
    max_neighbors: int = Field(default=3, ge=1, le=20)
    execution: Execution | None = None


class RawTurns(_Strict):
    """Keep the raw turn as a memory when extraction fails or no model is configured."""

    enabled: bool = True
    max_chars: int = Field(default=4000, ge=100)
    #: SESSION_MEMORY (default) keeps raw turns private to their session; GLOBAL_MEMORY shares them
    #: (useful on the no-model path, where raw turns are the only memories).
    scope: Literal["SESSION_MEMORY", "GLOBAL_MEMORY"] = "SESSION_MEMORY"


class VectorIndex(_Strict):
    enabled: bool = True


class Diagnostics(_Strict):
    history: int = Field(default=100, ge=1, le=100_000)


class Retention(_Strict):
    """How long memories are kept (``retention.*``); None keeps them. Applied by ``agently-vecmem gc STORE``
    (:meth:`~agently_vecmem.workspace.ChromaWorkspace.apply_retention`), which erases exactly as ``forget``."""

    #: erase SESSION_MEMORY records written more than this many days ago
    session_memory_days: float | None = Field(default=None, gt=0)
    #: erase raw turns (``extracted=False``, any scope) written more than this many days ago
    raw_turn_days: float | None = Field(default=None, gt=0)


class ContextSourceSettings(_Strict):
    """agently 4.1.4.2+ AgentExecution runs (``integrations/agently/context_source.py``)."""

    #: also offer every visible record as an optional block to Agently's selector (default: only the
    #: required recall block, which holds VecMemory's ranked memories for the run's question).
    offer_records: bool = False


class ModelSettings(_Strict):
    """Connection of the standalone model (:class:`~agently_vecmem.llm.OpenAIChatModel` arguments).

    Built by :func:`~agently_vecmem.llm.factory.make_chat_model` (``OPENAI_*`` fill an unset ``base_url`` /
    ``api_key``); the defaults are the factory's.
    """

    model: str = Field(min_length=1)
    base_url: str | None = None
    api_key: str | None = Field(default=None, repr=False)
    timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0)
    max_retries: int = Field(default=DEFAULT_MAX_RETRIES, ge=0, le=10)


class VecMemorySettings(_Strict):
    """Every setting of the VecMemory plugin, validated."""

    retrieve: Retrieve = Field(default_factory=Retrieve)
    retrieve_plan: RetrievePlan = Field(default_factory=RetrievePlan)
    rerank: Rerank = Field(default_factory=Rerank)
    extract: Extract = Field(default_factory=Extract)
    consolidate: Consolidate = Field(default_factory=Consolidate)
    raw_turns: RawTurns = Field(default_factory=RawTurns)
    body_schema: dict[str, Any] = Field(default_factory=lambda: dict(AGENTLY_MEMORY_DEFAULTS["body_schema"]))
    vector_index: VectorIndex = Field(default_factory=VectorIndex)
    diagnostics: Diagnostics = Field(default_factory=Diagnostics)
    context_source: ContextSourceSettings = Field(default_factory=ContextSourceSettings)
    retention: Retention = Field(default_factory=Retention)
    #: model connection for standalone use: {model, base_url, api_key, timeout, max_retries}.
    model: ModelSettings | None = None

    def execution(self, phase: str) -> Execution | None:
        """The ``<phase>.execution`` overrides, if any."""
        section = getattr(self, phase, None)
        return getattr(section, "execution", None)


def read_setting(settings: Any, key: str) -> Any:
    """Read a dotted key from a Settings-like object (ours, Agently's) or a plain nested dict.

    A settings object whose ``get`` raises is read as "unset" (the defaults apply), and a warning log
    record names the key and the error, so the fallback is never silent.
    """
    if settings is None:
        return None
    if isinstance(settings, Mapping):
        return read_path(settings, key)
    getter = getattr(settings, "get", None)
    if getter is None:
        return None
    try:
        return getter(key, None)
    except Exception as e:  # noqa: BLE001 - a foreign settings object; its failure means "unset", logged
        logger.warning(
            "settings object %s failed to read %r (%s: %s); using the defaults for it",
            type(settings).__name__, key, type(e).__name__, e,
        )
        return None


def _to_plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value if v is not None]  # Agently merges lists with None
    return value


def _diff(user: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``user`` that differs from ``defaults`` (nested)."""
    out: dict[str, Any] = {}
    for key, value in user.items():
        base = defaults.get(key)
        if isinstance(value, Mapping) and isinstance(base, Mapping):
            sub = _diff(value, base)
            if sub:
                out[key] = sub
        elif value != base:
            out[key] = copy.deepcopy(value)
    return out


def _known_subset(data: Mapping[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """Keep only the keys our model knows (AgentlyMemory's namespace may carry others)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None:
            logger.debug("ignoring AgentlyMemory setting %r: VecMemory has no such key", key)
            continue
        sub = field.annotation
        if isinstance(value, Mapping) and isinstance(sub, type) and issubclass(sub, _Strict):
            out[key] = _known_subset(value, sub)
        else:
            out[key] = value
    return out


def resolve_settings(settings: Any, *, name: str = "VecMemory") -> VecMemorySettings:
    """Build the plugin's validated settings from a Settings object (or dict).

    Raises:
        ConfigurationError: a ``session.memory.<name>`` value has a wrong type or an unknown key.
    """
    ours = _to_plain(read_setting(settings, f"session.memory.{name}") or {})
    theirs = _to_plain(read_setting(settings, "session.memory.AgentlyMemory") or {})
    if not isinstance(ours, dict) or not isinstance(theirs, dict):
        raise ConfigurationError(f"session.memory.{name} must be a mapping of settings")
    inherited = _known_subset(_diff(theirs, AGENTLY_MEMORY_DEFAULTS), VecMemorySettings)
    if inherited:
        try:  # validated alone first, so an error names the namespace the bad value came from
            VecMemorySettings.model_validate(inherited)
        except ValidationError as e:
            raise ConfigurationError(
                format_validation_error(e, "session.memory.AgentlyMemory settings (inherited by VecMemory)")
            ) from None
    merged = deep_merge(inherited, ours, replace=("body_schema",))
    try:
        return VecMemorySettings.model_validate(merged)
    except ValidationError as e:
        raise ConfigurationError(
            format_validation_error(e, f"session.memory.{name} settings")
        ) from None
