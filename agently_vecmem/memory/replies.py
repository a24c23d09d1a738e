"""Reply models of the memory phases (what the model must answer), validated with pydantic.

Unknown keys in a reply are ignored (models add chatter); wrong types fail validation and trigger a
re-ask. Nothing in a reply can name a scope filter, a session id or a setting: replies only choose
among the candidates and scopes the deterministic code offers.

The reply shapes are defined once, here: the ``[OUTPUT]`` shape shown to the model is derived from
these models by :func:`output_shape` (each field as ``"(type) description"``, Agently's style).
"""

from __future__ import annotations

import types
import typing
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "PlanReply",
    "Decision",
    "RerankReply",
    "FusedRetrieveReply",
    "ExtractedMemory",
    "ExtractReply",
    "ConsolidationDecision",
    "ConsolidateReply",
    "output_shape",
    "Action",
    "ExtractAction",
]

Action = Literal["ADD", "UPDATE", "SUPERSEDE", "NOOP"]
#: What extraction may answer: the consolidation verbs, plus FORGET (erase one of the offered related memories
#: the user asked to forget; nothing of that item is stored).
ExtractAction = Literal["ADD", "UPDATE", "SUPERSEDE", "NOOP", "FORGET"]


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore")


class PlanReply(_Reply):
    query: str = Field(min_length=1, description="Compact retrieval query for Workspace memory.")
    tags: list[str] = Field(default_factory=list, description="Tags that should be used for memory retrieval.")
    include_global: bool = Field(default=True, description="Whether to retrieve Workspace-global memory.")
    include_session: bool = Field(default=True, description="Whether to retrieve active-session memory.")

    @field_validator("tags", mode="before")
    @classmethod
    def _tags(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class Decision(_Reply):
    id: str = Field(description="Candidate id exactly as provided.")
    useful: bool = Field(description="True when this memory should be injected.")
    score: float = Field(default=0.0, ge=0.0, le=1.0, description="Relevance from 0.0 to 1.0.")
    reason: str = Field(default="", description="Brief decision reason.")

    @field_validator("score", mode="before")
    @classmethod
    def _score(cls, v: Any) -> Any:
        # A relevance outside [0, 1] is still a usable judgment: clamp it instead of re-asking.
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v:
            return min(1.0, max(0.0, float(v)))
        return v

    @field_validator("id", mode="before")
    @classmethod
    def _id(cls, v: Any) -> Any:
        # Agently accepts ids with or without the "record:" prefix.
        return v[len("record:"):] if isinstance(v, str) and v.startswith("record:") else v


class RerankReply(_Reply):
    decisions: list[Decision] = Field(min_length=1)


class FusedRetrieveReply(PlanReply):
    decisions: list[Decision] = Field(default_factory=list)


class ExtractedMemory(_Reply):
    scope: str = Field(default="SESSION_MEMORY", description="GLOBAL_MEMORY or SESSION_MEMORY.")
    summary: str = Field(default="", description="Short stable memory summary.")
    # A string body is accepted (and wrapped), but the model is asked for a dict.
    body: dict[str, Any] | str | None = Field(
        default=None, description="Memory body matching the configured body schema.",
        json_schema_extra={"shown_type": "dict"},
    )
    tags: list[str] = Field(default_factory=list, description="Retrieval tags.")
    importance: float = Field(default=0.5, ge=0.0, le=1.0, description="Importance from 0.0 to 1.0.")
    action: ExtractAction = Field(
        default="ADD",
        description="ADD for a new fact; UPDATE or SUPERSEDE with target_id when it refines or contradicts "
        "one of related_memories; NOOP when a related memory already says it; FORGET with target_id when the "
        "user asks to forget what a related memory says.",
    )
    target_id: str | None = Field(default=None,
                                  description="id from related_memories for UPDATE/SUPERSEDE/NOOP/FORGET.")

    @field_validator("tags", mode="before")
    @classmethod
    def _tags(cls, v: Any) -> Any:
        if v is None:
            return []
        return [v] if isinstance(v, str) else [str(t) for t in v] if isinstance(v, list) else v

    @field_validator("action", mode="before")
    @classmethod
    def _action(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v

    @field_validator("importance", mode="before")
    @classmethod
    def _importance(cls, v: Any) -> Any:
        # Models often answer on a 1-10 scale; map it instead of failing the whole extraction.
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 1.0 < v <= 10.0:
            return v / 10.0
        return v


class ExtractReply(_Reply):
    memories: list[ExtractedMemory]


class ConsolidationDecision(_Reply):
    index: int = Field(ge=0, description="Index of the new memory in new_memories.")
    action: Action = Field(
        description="ADD (keep both), UPDATE (new refines the existing one), SUPERSEDE (new contradicts and "
        "replaces it), NOOP (already known; drop the new one)."
    )
    target_id: str | None = Field(default=None, description="The existing memory id for UPDATE/SUPERSEDE/NOOP.")
    summary: str | None = Field(default=None, description="Optional merged summary for UPDATE.")
    body: dict[str, Any] | None = Field(default=None, description="Optional merged body for UPDATE.")

    @field_validator("action", mode="before")
    @classmethod
    def _action(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v


class ConsolidateReply(_Reply):
    decisions: list[ConsolidationDecision] = Field(min_length=1)



@cache
def output_shape(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON shape shown to the model for ``model``: ``{field: "(type) description"}``, a list of
    sub-models as a one-element list of their shape.

    Example:
        >>> output_shape(RerankReply)["decisions"][0]["score"]
        '(float) Relevance from 0.0 to 1.0.'
    """
    shape: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        item = _list_item(annotation)
        if isinstance(item, type) and issubclass(item, BaseModel):
            shape[name] = [output_shape(item)]
            continue
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        label = extra.get("shown_type") or _type_label(annotation)
        shape[name] = f"({label}) {info.description or ''}".rstrip()
    return shape


def _list_item(annotation: Any) -> Any:
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is list else None


def _type_label(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        labels = ["null" if a is type(None) else _type_label(a) for a in typing.get_args(annotation)]
        return "|".join(dict.fromkeys(labels))
    if origin is Literal:
        return type(typing.get_args(annotation)[0]).__name__
    if origin is list:
        return f"[{_type_label(typing.get_args(annotation)[0])}]"
    if origin is dict:
        return "dict"
    return getattr(annotation, "__name__", str(annotation))
