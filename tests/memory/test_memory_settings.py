"""VecMemory settings: AgentlyMemory's keys and defaults plus ours, validated; AgentlyMemory values honoured."""

from __future__ import annotations

import pytest

from agently_vecmem.errors import ConfigurationError
from agently_vecmem.memory.config import AGENTLY_MEMORY_DEFAULTS, VecMemorySettings, resolve_settings
from agently_vecmem.memory.plugin import VecMemory, default_model_resolver
from agently_vecmem.memory.prompts import PhaseRequest, apply_execution, render_messages
from agently_vecmem.settings import Settings


def ns(name: str, values: dict) -> dict:
    return {"session": {"memory": {name: values}}}


def test_defaults_mirror_agently_memory_plus_ours() -> None:
    cfg = resolve_settings(None)
    am = AGENTLY_MEMORY_DEFAULTS
    assert cfg.retrieve.budget.chars == am["retrieve"]["budget"]["chars"] == 4000
    assert cfg.retrieve.budget.item_chars == 1200
    assert cfg.retrieve.selection == "length" and cfg.retrieve.rerank is True
    assert cfg.retrieve.rerank_min_candidates == 2 and cfg.retrieve.keep_candidates_on_empty_rerank is True
    assert cfg.retrieve.max_candidates == 50 and cfg.retrieve.tags == [] and cfg.retrieve.sources == ["records"]
    assert cfg.retrieve_plan.enabled is True and cfg.retrieve_plan.fallback_query_chars == 2000
    assert (cfg.extract.enabled, cfg.extract.max_memories, cfg.extract.max_context_chars) == (True, 6, 12000)
    assert cfg.body_schema == am["body_schema"]
    # ours
    assert cfg.retrieve.method == "hybrid" and cfg.retrieve_plan.mode == "fused"
    assert cfg.retrieve.max_rerank_retries == 1 and cfg.diagnostics.history == 100
    assert cfg.consolidate.enabled and cfg.raw_turns.enabled and cfg.model is None
    assert resolve_settings({}) == VecMemorySettings()


def test_agently_memory_settings_are_honoured_when_ours_are_unset() -> None:
    data = ns("AgentlyMemory", {"retrieve": {"budget": {"chars": 900}, "rerank_min_candidates": 5,
                                             "method": "vector", "tags": ["proj"]},
                                "extract": {"max_memories": 3},
                                "retrieve_plan": {"execution": {"instruct": "AM-PLAN"}}})
    cfg = resolve_settings(data)
    assert cfg.retrieve.budget.chars == 900 and cfg.retrieve.budget.item_chars == 1200
    assert cfg.retrieve.rerank_min_candidates == 5 and cfg.retrieve.tags == ["proj"]
    assert cfg.retrieve.search_method == "dense"
    assert cfg.extract.max_memories == 3
    assert cfg.execution("retrieve_plan").instruct == "AM-PLAN"


def test_ours_win_over_agently_memory_key_by_key() -> None:
    data = {"session": {"memory": {
        "AgentlyMemory": {"retrieve": {"budget": {"chars": 900, "item_chars": 100}}},
        "VecMemory": {"retrieve": {"budget": {"chars": 2500}}},
    }}}
    cfg = resolve_settings(data)
    assert (cfg.retrieve.budget.chars, cfg.retrieve.budget.item_chars) == (2500, 100)


def test_agently_memory_defaults_do_not_override_ours() -> None:
    # Agently writes its whole DEFAULT_SETTINGS into the namespace; "keyword" is its default, not a choice.
    cfg = resolve_settings(ns("AgentlyMemory", AGENTLY_MEMORY_DEFAULTS))
    assert cfg.retrieve.method == "hybrid"
    assert cfg == VecMemorySettings()


def test_agently_memory_unknown_keys_are_ignored() -> None:
    cfg = resolve_settings(ns("AgentlyMemory", {"retrieve": {"some_future_key": 1}, "vector_index": {"x": 2},
                                                "brand_new": True}))
    assert cfg == VecMemorySettings()


def test_through_settings_objects_and_inheritance() -> None:
    parent = Settings(ns("AgentlyMemory", {"retrieve": {"top_n": 4}}))
    session = Settings(parent=parent)
    session.set("session.memory.VecMemory.retrieve.selection", "top_n")
    session.set("session.memory.VecMemory.diagnostics.history", 7)
    cfg = resolve_settings(session)
    assert (cfg.retrieve.selection, cfg.retrieve.top_n, cfg.diagnostics.history) == ("top_n", 4, 7)
    plugin = VecMemory(settings=session)
    assert plugin.diagnostics.maxlen == 7


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"retrieve": {"budget": {"chars": "lots"}}}, "retrieve.budget.chars"),
        ({"retrieve": {"enabled": "yes"}}, "retrieve.enabled"),  # strict: no silent coercion
        ({"retrieve": {"rerank_min_candidates": "3"}}, "retrieve.rerank_min_candidates"),
        ({"retrieve": {"selection": "best"}}, "retrieve.selection"),
        ({"retrieve_plan": {"mode": "both"}}, "retrieve_plan.mode"),
        ({"retrieve": {"budget": {"chars": -1}}}, "retrieve.budget.chars"),
        ({"retrieve": {"topn": 3}}, "retrieve.topn"),
        ({"unknown_section": {}}, "unknown_section"),
        ({"extract": {"execution": {"instruction": "typo"}}}, "extract.execution.instruction"),
        ({"rerank": {"execution": {"output_format": "yaml"}}}, "rerank.execution.output_format"),
        ({"model": {"model": "m", "apikey": "x"}}, "model.apikey"),
        ({"diagnostics": {"history": 0}}, "diagnostics.history"),
    ],
)
def test_wrong_type_or_unknown_key_is_a_clear_configuration_error(values: dict, where: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        resolve_settings(ns("VecMemory", values))
    message = str(info.value)
    assert "session.memory.VecMemory" in message and where in message
    assert isinstance(info.value, ValueError)


def test_bad_agently_memory_value_names_its_namespace() -> None:
    with pytest.raises(ConfigurationError, match=r"session\.memory\.AgentlyMemory.*retrieve\.budget\.chars"):
        resolve_settings(ns("AgentlyMemory", {"retrieve": {"budget": {"chars": "many"}}}))


def test_namespace_must_be_a_mapping() -> None:
    with pytest.raises(ConfigurationError, match="must be a mapping"):
        resolve_settings(ns("VecMemory", ["not", "a", "dict"]))  # type: ignore[arg-type]


def test_execution_overrides_replace_defaults() -> None:
    cfg = resolve_settings(ns("VecMemory", {"extract": {"execution": {
        "instruct": "X", "system": "SYS", "examples": [{"a": 1}], "$format": "json"}}}))
    req = apply_execution(PhaseRequest("extract", instruct="default", input={"k": "v"}, output={"o": "(str)"}),
                          cfg.execution("extract"))
    system, user = render_messages(req)
    assert system == {"role": "system", "content": "SYS"}
    assert "[INSTRUCT]:\nX" in user["content"] and "default" not in user["content"]
    assert '[EXAMPLES]:\n[\n  {\n    "a": 1' in user["content"]
    assert '[INPUT]:\n{\n  "k": "v"\n}' in user["content"]
    assert cfg.execution("retrieve") is None and cfg.execution("nope") is None


def test_model_settings_build_an_openai_model() -> None:
    cfg = resolve_settings(ns("VecMemory", {"model": {"model": "m1", "base_url": "http://127.0.0.1:9/v1",
                                                      "api_key": "k", "timeout": 3}}))
    model = default_model_resolver(None, cfg)
    assert model.model == "m1" and model.timeout == 3.0
    assert default_model_resolver(None, resolve_settings(None)) is None
