"""Pure retrieval decisions: query fallback, previews, rerank decisions, budgets and packaging."""

from __future__ import annotations

from agently_vecmem.memory.config import Retrieve
from agently_vecmem.memory.packaging import (
    Scored,
    apply_decisions,
    fallback_query,
    limit_text,
    memory_item,
    package,
    preview,
    prompt_text,
)
from agently_vecmem.memory.replies import Decision, FusedRetrieveReply, PlanReply, RerankReply
from agently_vecmem.records import MemoryRecord
from agently_vecmem.session import Prompt


def rec(summary: str, body: dict | None = None, **kw) -> MemoryRecord:
    return MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=summary, body=body or {"summary": summary}, **kw)


def scored(*pairs: tuple[str, float]) -> list[Scored]:
    return [Scored(rec(s), score) for s, score in pairs]


def test_limit_text() -> None:
    assert limit_text("short", 10) == "short"
    assert limit_text("x" * 100, 0) == "x" * 100
    cut = limit_text("word " * 40, 50)
    assert len(cut) <= 50 and cut.endswith("\n[truncated]")
    assert limit_text("abcdefghijklmnopqrstuvwxyz", 5) == "abcde"  # no room for the marker


def test_fallback_query_prefers_newest_input_then_tail() -> None:
    p = Prompt()
    p.set("chat_history", [{"role": "user", "content": "old " * 1000}, {"role": "assistant", "content": "a"}])
    p.set("input", "what breed is my dog?")
    assert fallback_query(p, 2000) == "what breed is my dog?"
    assert fallback_query(p, 5) == " dog?"  # the tail of the newest input
    p2 = Prompt({"info": "x " * 2000})
    q = fallback_query(p2, 100)
    assert len(q) == 100 and q == prompt_text(p2)[-100:]
    p3 = Prompt({"input": {"question": "pet breed"}})
    assert fallback_query(p3, 100) == '{"question": "pet breed"}'
    assert fallback_query("plain string", 100) == "plain string"


def test_preview_shape() -> None:
    r = rec("User likes tea", {"details": "y" * 2000}, tags=["drink"])
    p = preview(r)
    assert set(p) == {"id", "collection", "kind", "summary", "content", "tags", "scope"}
    assert p["scope"] == {"memory_scope": "GLOBAL_MEMORY"} and len(p["content"]) <= 600


def test_apply_decisions_drop_keep_unknown_and_prefix() -> None:
    cands = scored(("a", 0.1), ("b", 0.2), ("c", 0.3))
    a, b, c = (x.record.id for x in cands)
    decisions = [
        Decision(id=f"record:{a}", useful=True, score=0.9, reason="on topic"),
        Decision(id=b, useful=False, score=0.0),
        Decision(id="mem_unknown", useful=True, score=1.0),
    ]
    kept, dropped = apply_decisions(cands, decisions)
    assert dropped == 1
    assert [(k.record.id, k.score) for k in kept] == [(a, 0.9), (c, 0.3)]  # c had no decision: kept as is
    assert kept[0].reason == "on topic"
    kept, dropped = apply_decisions(cands, [Decision(id=x, useful=False) for x in (a, b, c)])
    assert (kept, dropped) == ([], 3)


def test_memory_item_shape() -> None:
    item = memory_item(Scored(rec("User likes tea", {"details": "z" * 50}, tags=["t"]), 0.123456), 30)
    assert set(item) == {"summary", "content", "tags", "score", "source_ref"}
    assert item["score"] == 0.1235 and len(item["content"]) <= 30
    assert item["source_ref"] == {"collection": "memory", "kind": "global_memory", "id": item["source_ref"]["id"]}


def test_package_length_selection_skips_what_overflows() -> None:
    cands = [Scored(rec(f"m{i}", {"d": "x" * size}), 1.0 - i / 10) for i, size in enumerate([300, 900, 100])]
    r = Retrieve.model_validate({"budget": {"chars": 600, "item_chars": 1200}})
    items, diag = package(cands, r)
    assert [i["summary"] for i in items] == ["m0", "m2"]  # m1 does not fit; m2 still does
    assert diag["used_chars"] == sum(len(i["summary"]) + len(i["content"]) for i in items) <= 600
    assert diag["omitted"] == [{"reason": "budget", "count": 1}]
    assert (diag["candidate_count"], diag["selected_count"], diag["char_budget"]) == (3, 2, 600)


def test_package_first_item_is_excerpted_to_fit() -> None:
    items, diag = package([Scored(rec("big", {"d": "y" * 5000}), 1.0)],
                          Retrieve.model_validate({"budget": {"chars": 200, "item_chars": 1200}}))
    assert len(items) == 1 and items[0]["content"].endswith("[truncated]")
    assert diag["used_chars"] <= 200


def test_package_item_chars_and_top_n() -> None:
    cands = [Scored(rec(f"m{i}", {"d": "x" * 500}), 1.0) for i in range(5)]
    r = Retrieve.model_validate({"selection": "top_n", "top_n": 2, "budget": {"item_chars": 100}})
    items, diag = package(cands, r, candidate_count=9)
    assert len(items) == 2 and all(len(i["content"]) <= 100 for i in items)
    assert diag["omitted"] == [{"reason": "top_n", "count": 3}] and diag["candidate_count"] == 9
    # budget.top_n is honoured too; tokens turn into a char budget (4 chars per token)
    r = Retrieve.model_validate({"selection": "top_n", "budget": {"top_n": 1, "tokens": 50}})
    items, diag = package(cands, r)
    assert len(items) == 1 and diag["char_budget"] == 200 and diag["used_chars"] <= 200


def test_package_of_nothing() -> None:
    items, diag = package([], Retrieve())
    assert items == [] and diag["selected_count"] == 0 and diag["omitted"] == []


def test_reply_models() -> None:
    assert PlanReply.model_validate({"query": "q", "tags": "one"}).tags == ["one"]
    assert RerankReply.model_validate({"decisions": [{"id": "record:x", "useful": True}]}).decisions[0].id == "x"
    assert FusedRetrieveReply.model_validate({"query": "q"}).decisions == []
