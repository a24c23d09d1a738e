"""The LoCoMo harness's ``--model`` mode: the plugin's plan and rerank stages through the loopback OpenAI
server (the real ``openai`` client), on the shipped synthetic conversations with the hashing embedder."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agently_vecmem.eval.locomo import load_locomo
from agently_vecmem.eval.runner import SYNTHETIC_DATA_PATH, run_locomo
from agently_vecmem.search.params import RetrievalParams
from agently_vecmem.testing import DeterministicEmbedder, Fault, phase_input

CONVERSATIONS = load_locomo(SYNTHETIC_DATA_PATH)
#: question text → gold record ids (``sample_id:dia_id``, the ids the rerank model is shown)
GOLD: dict[str, set[str]] = {}
for _conv in CONVERSATIONS:
    for _q in _conv.questions:
        GOLD.setdefault(_q.question, set()).update(f"{_conv.sample_id}:{d}" for d in _q.evidence)


def plan_echo(body: dict[str, Any]) -> dict[str, Any]:
    """A plan keeping the question as the query (so the candidates are the deterministic ones)."""
    return {"query": phase_input(body)["prompt"], "tags": [], "include_global": True, "include_session": True}


def rerank_gold(body: dict[str, Any]) -> dict[str, Any]:
    """An oracle rerank: the gold turns useful, every other candidate dropped."""
    rin = phase_input(body)
    gold = GOLD[rin["query"]]
    return {"decisions": [{"id": c["id"], "useful": c["id"] in gold, "score": 1.0 if c["id"] in gold else 0.0}
                          for c in rin["candidates"]]}


def failing_for(questions: set[str], handler: Callable[[dict[str, Any]], Any], key: str) -> Callable[..., Any]:
    def answer(body: dict[str, Any]) -> Any:
        return Fault.status(500) if phase_input(body)[key] in questions else handler(body)

    return answer


def run(tmp_path: Path, model: Any, **kw: Any) -> dict[str, Any]:
    # The synthetic turns are short (8.8-10.3 index terms on average), where the short-record rule leaves a
    # record's best shared word to the embedder; the hashing embedder reads no meaning, so the rule is off
    # and the candidates are the ones these figures were written for.
    kw.setdefault("params", RetrievalParams(lexical_short_length=0))
    return run_locomo(SYNTHETIC_DATA_PATH, embedder=DeterministicEmbedder(), progress=False,
                      workspace_path=tmp_path / "ws", model=model, include_per_question=True, **kw)


def test_oracle_rerank_raises_recall_at_1_and_reports_usage(tmp_path: Path, srv, model) -> None:
    srv.on("retrieve_plan", plan_echo)
    srv.on("rerank", rerank_gold)
    result = run(tmp_path, model)
    m = result["model"]

    # the deterministic numbers are still computed in the same run
    assert result["questions"] == m["questions"] == 33 and set(result["baselines"]) == {"bm25", "dense", "rrf"}
    det_r1, model_r1 = result["recall_at_k"]["1"], m["recall_at_k"]["1"]
    # (21/33 and 28/33 with the hashing embedder and the default parameters)
    assert det_r1 < 0.7 and model_r1 >= 0.8 and model_r1 - det_r1 >= 0.15
    # same candidates (the plan kept the question), reordered: recall at the candidate depth is unchanged
    assert m["recall_at_k"]["20"] == pytest.approx(result["recall_at_k"]["20"])
    assert m["mrr"] > result["mrr"] and m["ndcg_at_10"] > result["ndcg_at_10"]
    assert set(m["by_category"]) == set(result["by_category"]) and m["by_category"]["1"]["name"]
    for row in result["per_question"]:
        found = [d for d in row["model"]["top10"] if d in row["evidence"]]
        if found:  # a gold turn among the candidates is ranked first
            assert row["model"]["top10"][0] in row["evidence"]

    # accounting: one plan and one rerank call per question, tokens from the server's usage
    assert m["name"] == "test" and m["plan_mode"] == "separate"
    assert m["calls"] == 66 == len(srv.requests) and m["calls_per_question"] == 2.0
    assert m["by_phase"] == {"retrieve_plan": 33, "rerank": 33} and m["failed_calls"] == 0
    assert m["prompt_tokens_per_question"] > 100 and m["completion_tokens_per_question"] > 10
    assert m["prompt_tokens"] == pytest.approx(33 * m["prompt_tokens_per_question"])
    # one question has no gold among its candidates: the oracle drops them all, the plugin keeps them
    assert m["fallbacks"] == {"rerank_empty": 1} and m["degraded_questions"] == 0
    first = result["per_question"][0]["model"]
    assert first["calls"] == 2 and first["usage_reported"] and first["prompt_tokens"] > 0
    assert first["query"] == result["per_question"][0]["question"]
    rerank_in = phase_input(srv.chat_bodies("rerank")[0])
    assert len(rerank_in["candidates"]) == 20  # every candidate of the depth is judged


def test_server_faults_degrade_only_their_questions(tmp_path: Path, srv, model) -> None:
    broken = {q.question for q in CONVERSATIONS[0].questions[:3]}
    srv.on("retrieve_plan", failing_for(broken, plan_echo, "prompt"))
    srv.on("rerank", failing_for(broken, rerank_gold, "query"))
    result = run(tmp_path, model, limit_conversations=1)
    m = result["model"]

    assert m["questions"] == result["questions"] == len(CONVERSATIONS[0].questions)
    assert m["fallbacks"] == {"rerank_failed": 3, "retrieve_plan_failed": 3} and m["degraded_questions"] == 3
    assert m["failed_calls"] == 3 * 4  # two attempts per stage, both failed
    for row in result["per_question"]:
        if row["question"] in broken:
            # the plugin's fallbacks: the question as query, candidates unjudged = the deterministic ranking
            assert row["model"]["fallbacks"] == ["retrieve_plan_failed", "rerank_failed"]
            assert row["model"]["top10"] == row["top10"]
        else:
            assert row["model"]["fallbacks"] == [] and row["model"]["calls"] == 2
    assert m["recall_at_k"]["1"] > result["recall_at_k"]["1"]


def test_designed_fallbacks_and_unexpected_errors_are_counted(tmp_path: Path, srv, model, monkeypatch) -> None:
    from agently_vecmem.eval import model_mode

    questions = CONVERSATIONS[0].questions
    boom, empty = questions[0].question, questions[1].question
    real_judge = model_mode.judge

    def judge(call: Any, plan: Any, *args: Any, **kwargs: Any) -> Any:
        if plan.query == boom:
            raise RuntimeError("unexpected")
        return real_judge(call, plan, *args, **kwargs)

    monkeypatch.setattr(model_mode, "judge", judge)

    def rerank(body: dict[str, Any]) -> dict[str, Any]:
        rin = phase_input(body)
        if rin["query"] == empty:  # drops every candidate: the plugin keeps the deterministic ones
            return {"decisions": [{"id": c["id"], "useful": False} for c in rin["candidates"]]}
        return rerank_gold(body)

    def plan(body: dict[str, Any]) -> dict[str, Any]:
        return {**plan_echo(body), "include_session": False}  # overridden: the conversation is the scope

    srv.on("retrieve_plan", plan)
    srv.on("rerank", rerank)
    result = run(tmp_path, model, limit_conversations=1)
    m = result["model"]
    n = len(questions)
    assert m["fallbacks"] == {"error": 1, "plan_excluded_session": n, "rerank_empty": 1}
    assert m["degraded_questions"] == 1
    rows = {r["question"]: r["model"] for r in result["per_question"]}
    assert rows[boom]["error_type"] == "RuntimeError" and rows[boom]["calls"] == 1
    det = {r["question"]: r["top10"] for r in result["per_question"]}
    assert rows[boom]["top10"] == det[boom] and rows[empty]["top10"] == det[empty]


def test_model_must_be_a_chat_model() -> None:
    with pytest.raises(TypeError, match="ChatModel"):
        run_locomo(SYNTHETIC_DATA_PATH, embedder=DeterministicEmbedder(), progress=False, model=object())


def test_cli_model_flag_end_to_end(tmp_path: Path, srv, monkeypatch, capsys) -> None:
    import agently_vecmem.eval.runner as runner
    from agently_vecmem.cli import main

    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL"):
        monkeypatch.delenv(var, raising=False)
    real = runner.run_locomo
    # the eval command's default embedder is MiniLM; the hashing one keeps this test fast
    monkeypatch.setattr(runner, "run_locomo", lambda *a, **kw: real(*a, **{**kw, "embedder": DeterministicEmbedder()}))
    srv.on("retrieve_plan", plan_echo)
    srv.on("rerank", rerank_gold)
    out = tmp_path / "out.json"
    argv = ["eval", "locomo", SYNTHETIC_DATA_PATH, "--limit", "1", "--k", "1,5", "--json", str(out),
            "--no-progress", "--workspace", str(tmp_path / "ws"), "--model", "cli-model"]
    assert main(argv) == 2  # no endpoint configured: a usage error, before any work
    assert "no model endpoint configured" in capsys.readouterr().err

    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    assert main([*argv, "--base-url", srv.base_url]) == 0
    result = json.loads(out.read_text())
    m = result["model"]
    n = len(CONVERSATIONS[0].questions)
    assert m["name"] == "cli-model" and m["questions"] == n and m["calls"] == 2 * n
    assert set(m["recall_at_k"]) == {"1", "5"} and m["prompt_tokens_per_question"] > 0
    assert srv.requests[0].headers["authorization"] == "Bearer from-env"
    report = capsys.readouterr().out
    assert "model cli-model: 2.00 calls" in report and "\nmodel " in report
