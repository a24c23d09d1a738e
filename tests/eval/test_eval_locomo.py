"""LoCoMo loader (audit correction, conversation index mapping) and the runner end to end."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from agently_vecmem.cli.eval import add_eval_parser, format_report
from agently_vecmem.eval.locomo import (
    conversation_index_map,
    conversation_records,
    load_locomo,
    short_date,
)
from agently_vecmem.eval.runner import SYNTHETIC_DATA_PATH, run_locomo
from agently_vecmem.testing import DeterministicEmbedder


def _sample(sample_id: str, questions: list[tuple[str, list[str], int]]) -> dict:
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice!", "img_url": ["x"], "blip_caption": "a photo of a cat"},
            ],
            "session_2_date_time": "9:00 am on 10 May, 2023",
            "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "The cat is called Tom."}],
        },
        "qa": [{"question": q, "answer": "x", "evidence": ev, "category": cat} for q, ev, cat in questions],
    }


@pytest.fixture()
def tiny(tmp_path: Path) -> tuple[Path, Path]:
    # the file holds locomo10 conversations 7 and 3, in that order: positions must not be used as index
    data = [
        _sample("conv-x", [("What pet did Ann adopt?", ["D1:1"], 4), ("Trick?", [], 5),
                           ("What is the cat called?", ["D1:1; D2:1"], 1)]),
        _sample("conv-y", [("When did Ann adopt a cat?", ["D1:2"], 2), ("Photo?", ["D1:2"], 4)]),
    ]
    audit = [
        {"question_id": "locomo_7_qa0", "question": "What pet did Ann adopt?", "error_type": "HALLUCINATION",
         "correct_evidence": ["D2:1"]},
        {"question_id": "locomo_3_qa0", "question": "When did Ann adopt a cat?", "error_type": "WRONG_CITATION",
         "cited_evidence": ["D1:2"], "correct_evidence": ["D1:1"]},
    ]
    dp, ap = tmp_path / "data.json", tmp_path / "audit.json"
    dp.write_text(json.dumps(data))
    ap.write_text(json.dumps(audit))
    return dp, ap


def test_index_map_is_learned_from_the_audit(tiny: tuple[Path, Path]) -> None:
    dp, ap = tiny
    mapping = conversation_index_map(json.loads(dp.read_text()), json.loads(ap.read_text()))
    assert mapping == {"conv-x": 7, "conv-y": 3}
    # without an audit: known locomo10 ids, else file position
    assert conversation_index_map([{"sample_id": "conv-42"}, {"sample_id": "other"}], []) == {"conv-42": 3, "other": 1}


def test_loader_applies_only_wrong_citation_rows(tiny: tuple[Path, Path]) -> None:
    dp, ap = tiny
    convs = load_locomo(dp, audit_path=ap)
    x, y = convs
    assert [q.question_id for q in x.questions] == ["locomo_7_qa0", "locomo_7_qa2"]  # category 5 dropped
    assert x.questions[0].evidence == ("D1:1",) and not x.questions[0].corrected  # not a citation error
    assert x.questions[1].evidence == ("D1:1", "D2:1")  # "D1:1; D2:1" parsed
    assert y.questions[0].evidence == ("D1:1",) and y.questions[0].corrected
    assert load_locomo(dp)[1].questions[0].evidence == ("D1:2",)
    assert len(load_locomo(dp, limit_conversations=1)) == 1


def test_records_carry_speaker_date_caption_and_provenance(tiny: tuple[Path, Path]) -> None:
    conv = load_locomo(tiny[0])[0]
    recs = conversation_records(conv)
    assert [r.id for r in recs] == ["conv-x:D1:1", "conv-x:D1:2", "conv-x:D2:1"]
    assert recs[1].document() == "[8 May 2023] Bob: Nice! [shares an image: a photo of a cat]"
    prov = recs[2].provenance.model_dump()
    assert prov["dia_id"] == "D2:1" and prov["session"] == 2 and prov["turn_index"] == 0 and prov["position"] == 2
    assert recs[0].memory_scope == "SESSION_MEMORY" and recs[0].session_id == "conv-x"
    assert recs[0].created_at < recs[1].created_at < recs[2].created_at
    assert short_date("1:56 pm on 8 May, 2023") == "8 May 2023"


def test_runner_end_to_end_on_synthetic(tmp_path: Path) -> None:
    result = run_locomo(SYNTHETIC_DATA_PATH, embedder=DeterministicEmbedder(dim=64), progress=False,
                        workspace_path=tmp_path / "ws", include_per_question=True)
    assert result["questions"] == 33 and result["conversations"] == 2
    assert set(result["recall_at_k"]) == {"1", "5", "10", "20"}
    assert set(result["baselines"]) == {"bm25", "dense", "rrf"}
    assert result["recall_at_k"]["10"] >= result["baselines"]["dense"]["recall_at_k"]["10"]
    assert result["recall_at_k"]["10"] > 0.7
    assert set(result["by_category"]) == {"1", "2", "3", "4"}
    assert result["search_ms"]["p50"] > 0 and result["ingest_per_s"] > 0
    assert len(result["per_question"]) == 33
    assert "hybrid" in format_report(result)
    assert "model" not in result  # the plan + rerank mode runs only with a model (tests/eval/test_eval_model_mode.py)


def test_cli_handler(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import agently_vecmem.eval.runner as runner

    real = runner.run_locomo
    monkeypatch.setattr(runner, "run_locomo", lambda *a, **kw: real(*a, **{**kw, "embedder": DeterministicEmbedder(dim=64)}))
    parser = argparse.ArgumentParser()
    add_eval_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "out.json"
    args = parser.parse_args(["eval", "locomo", SYNTHETIC_DATA_PATH, "--k", "1,5", "--json", str(out),
                              "--limit", "1", "--no-progress"])
    assert args.handler(args) == 0
    result = json.loads(out.read_text())
    assert result["conversations"] == 1 and set(result["recall_at_k"]) == {"1", "5"}
    assert "R@5" in capsys.readouterr().out
