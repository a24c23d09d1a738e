"""Reply models of the memory phases (what the model must answer), validated with pydantic.

Unknown keys in a reply are ignored (models add chatter); wrong types fail validation and trigger a
re-ask. Nothing in a reply can name a scope filter, a session id or a setting: replies only choose
among the candidates and scopes the deterministic code offers.
"""

from __future__ import annotations

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
    "PLAN_OUTPUT",
    "RERANK_OUTPUT",
    "FUSED_OUTPUT",
    "EXTRACT_OUTPUT",
    "CONSOLIDATE_OUTPUT",
]

Action = Literal["ADD", "UPDATE", "SUPERSEDE", "NOOP"]


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore")


class PlanReply(_Reply):
    query: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    include_global: bool = True
    include_session: bool = True

    @field_validator("tags", mode="before")
    @classmethod
    def _tags(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class Decision(_Reply):
    id: str
    useful: bool
    score: float = Field(default=0.0, ge=0.0, le=1.0)
    reason: str = ""

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
    scope: str = "SESSION_MEMORY"
    summary: str = ""
    body: dict[str, Any] | str | None = None
    tags: list[str] = Field(default_factory=list)
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    action: Action = "ADD"
    target_id: str | None = None

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
    index: int = Field(ge=0)
    action: Action
    target_id: str | None = None
    summary: str | None = None
    body: dict[str, Any] | None = None

    @field_validator("action", mode="before")
    @classmethod
    def _action(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v


class ConsolidateReply(_Reply):
    decisions: list[ConsolidationDecision] = Field(min_length=1)


# Output descriptions shown to the model (Agently's (type, description) style, as JSON).
PLAN_OUTPUT = {
    "query": "(str) Compact retrieval query for Workspace memory.",
    "tags": "([str]) Tags that should be used for memory retrieval.",
    "include_global": "(bool) Whether to retrieve Workspace-global memory.",
    "include_session": "(bool) Whether to retrieve active-session memory.",
}
_DECISION = {
    "id": "(str) Candidate id exactly as provided.",
    "useful": "(bool) True when this memory should be injected.",
    "score": "(float) Relevance from 0.0 to 1.0.",
    "reason": "(str) Brief decision reason.",
}
RERANK_OUTPUT = {"decisions": [_DECISION]}
FUSED_OUTPUT = {**PLAN_OUTPUT, "decisions": [_DECISION]}
EXTRACT_OUTPUT = {
    "memories": [
        {
            "scope": "(str) GLOBAL_MEMORY or SESSION_MEMORY.",
            "summary": "(str) Short stable memory summary.",
            "body": "(dict) Memory body matching the configured body schema.",
            "tags": "([str]) Retrieval tags.",
            "importance": "(float) Importance from 0.0 to 1.0.",
            "action": "(str) ADD for a new fact; UPDATE or SUPERSEDE with target_id when it refines or "
            "contradicts one of related_memories; NOOP when a related memory already says it.",
            "target_id": "(str|null) id from related_memories for UPDATE/SUPERSEDE/NOOP.",
        }
    ]
}
CONSOLIDATE_OUTPUT = {
    "decisions": [
        {
            "index": "(int) Index of the new memory in new_memories.",
            "action": "(str) ADD (keep both), UPDATE (new refines the existing one), SUPERSEDE (new "
            "contradicts and replaces it), NOOP (already known; drop the new one).",
            "target_id": "(str|null) The existing memory id for UPDATE/SUPERSEDE/NOOP.",
            "summary": "(str|null) Optional merged summary for UPDATE.",
            "body": "(dict|null) Optional merged body for UPDATE.",
        }
    ]
}
