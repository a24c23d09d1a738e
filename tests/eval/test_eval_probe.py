"""The bilingual probe: the shipped file, its runner and ``agently-vecmem eval probe``."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from agently_vecmem.cli import main
from agently_vecmem.errors import ConfigurationError
from agently_vecmem.eval.probe import PROBE_DATA_PATH, load_probe, probe_records, run_probe
from agently_vecmem.search.cjk import has_cjk

SMALL = {
    "name": "small",
    "languages": ["en", "zh"],
    "items": [
        {"id": "a", "kind": "plain", "split": "tune", "fact": {"en": "I am allergic to peanuts.", "zh": "我对花生过敏。"},
         "question": {"en": "Which food makes me sick? peanuts", "zh": "我对什么过敏？"}},
        {"id": "b", "kind": "mixed", "split": "holdout",
         "fact": {"en": "I write Go on a ThinkPad X1.", "zh": "我用ThinkPad X1写Go。"},
         "question": {"en": "What laptop? ThinkPad", "zh": "我用什么ThinkPad电脑？"}},
        {"id": "c", "kind": "date", "split": "holdout", "time": "2023-05-14",
         "fact": {"en": "I ran a half marathon.", "zh": "我跑了半程马拉松。"},
         "question": {"en": "What did I do in May 2023?", "zh": "2023年5月我做了什么？"}},
        {"id": "d", "kind": "distractor", "split": "tune",
         "fact": {"en": "My sister runs a bakery.", "zh": "我姐姐开了一家面包店。"},
         "question": {"en": "What business does my sister have? bakery", "zh": "我姐姐的面包店"}},
    ],
}


def test_shipped_probe_is_complete() -> None:
    probe = load_probe(PROBE_DATA_PATH)
    assert probe.languages == ["en", "zh"]
    assert len(probe.items) >= 100
    kinds = Counter(i.kind for i in probe.items)
    assert kinds["mixed"] >= 10 and kinds["distractor"] >= 10 and kinds["date"] >= 10
    assert Counter(i.split for i in probe.items) == {"tune": 60, "holdout": 60}
    assert all(i.time for i in probe.items if i.kind == "date")
    # mixed items really mix scripts in Chinese; every Chinese text has Chinese in it
    assert all(any(c.isascii() and c.isalpha() for c in i.fact["zh"]) for i in probe.items if i.kind == "mixed")
    assert all(has_cjk(i.fact["zh"]) and has_cjk(i.question["zh"]) for i in probe.items)


def test_dated_facts_become_dated_records() -> None:
    probe = load_probe(PROBE_DATA_PATH)
    records = probe_records(probe.items, "zh")
    dated = [r for r, i in zip(records, probe.items, strict=True) if i.time]
    assert dated and all(r.occurred_at is not None for r in dated)
    assert all(r.memory_scope == "GLOBAL_MEMORY" for r in records)
    # the date is searched lexically (an extracted fact's vector stays date-free: see MemoryRecord.search_text)
    assert "2023-05-14" in dated[0].search_text() and "2023-05-14" not in dated[0].document()


def test_malformed_probes_are_configuration_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="not JSON"):
        load_probe(bad)
    broken = json.loads(json.dumps(SMALL))
    broken["items"][2].pop("time")
    bad.write_text(json.dumps(broken), encoding="utf-8")
    with pytest.raises(ConfigurationError, match="needs a time"):
        load_probe(bad)
    with pytest.raises(ConfigurationError):
        load_probe(tmp_path / "missing.json")
    good = tmp_path / "small.json"
    good.write_text(json.dumps(SMALL), encoding="utf-8")
    with pytest.raises(ConfigurationError, match="no language"):
        run_probe(good, languages=["fr"])


def test_probe_cli_reports_per_language(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "small.json"
    data.write_text(json.dumps(SMALL, ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "result.json"
    assert main(["--embedder", "hash", "eval", "probe", str(data), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "hybrid R@1" in text and "lexical R@3" in text and "\nzh " in text and "\nen " in text
    result = json.loads(out.read_text(encoding="utf-8"))
    zh = result["languages"]["zh"]
    assert set(zh) >= {"hybrid", "dense", "lexical", "by_kind", "date"}
    assert zh["hybrid"]["questions"] == 3 and zh["date"]["hybrid"]["questions"] == 1  # dates apart
    assert zh["lexical"]["recall_at_k"]["1"] == 1.0  # each question shares terms with its fact only
    assert len(result["per_question"]) == 8
    assert main(["--embedder", "hash", "eval", "probe", str(data), "--split", "tune", "--lang", "zh"]) == 0
    assert "(tune questions)" in capsys.readouterr().out
    assert main(["--embedder", "hash", "eval", "probe", str(tmp_path / "missing.json")]) == 2


def test_sampled_stores_pool_their_draws(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "small.json"
    data.write_text(json.dumps(SMALL, ensure_ascii=False), encoding="utf-8")
    result = run_probe(data, languages=["zh"], methods=("lexical",), sample=2, draws=5, seed=3,
                       include_per_question=True, embedder=_hash())
    zh = result["languages"]["zh"]
    # 5 stores of 2 non-date facts: 10 questions pooled, no date item drawn
    assert result["sample"] == {"size": 2, "draws": 5, "seed": 3}
    assert zh["lexical"]["questions"] == 10 and zh["date"]["lexical"]["questions"] == 0
    assert {r["kind"] for r in result["per_question"]} <= {"plain", "mixed", "distractor"}
    assert zh["lexical"]["recall_at_k"]["1"] == 1.0
    # the same seed draws the same stores
    again = run_probe(data, languages=["zh"], methods=("lexical",), sample=2, draws=5, seed=3,
                      include_per_question=True, embedder=_hash())
    assert [r["id"] for r in again["per_question"]] == [r["id"] for r in result["per_question"]]
    with pytest.raises(ConfigurationError, match="sample must be"):
        run_probe(data, sample=4)  # only 3 non-date facts
    assert main(["--embedder", "hash", "eval", "probe", str(data), "--sample", "3", "--draws", "2"]) == 0
    assert "2 random stores of 3 facts" in capsys.readouterr().out


def _hash():
    from agently_vecmem.embedders import resolve_embedder

    return resolve_embedder("hash")


@pytest.mark.slow
def test_shipped_probe_with_the_default_cli_embedder() -> None:
    """The real measurement (ONNX MiniLM, the CLI default): Chinese lexical retrieval works (it was at
    random before CJK analysis: R@1 0.04 on 24 facts), and dated facts are found by their month."""
    from agently_vecmem.embedders import resolve_embedder

    result = run_probe(PROBE_DATA_PATH, embedder=resolve_embedder("auto"))
    zh, en = result["languages"]["zh"], result["languages"]["en"]
    assert zh["hybrid"]["questions"] == en["hybrid"]["questions"] == 104
    assert zh["lexical"]["recall_at_k"]["3"] > 0.5
    assert zh["hybrid"]["recall_at_k"]["3"] > 0.5
    assert en["date"]["hybrid"]["recall_at_k"]["1"] > 0.8
    assert zh["date"]["hybrid"]["recall_at_k"]["1"] > 0.9  # the date boost: 0.75 without it
    # the multilingual dense signal (e5 over this MiniLM store): measured 0.702 / 0.885 on 120 facts
    assert zh["dense"]["recall_at_k"]["1"] > 0.6 and zh["hybrid"]["recall_at_k"]["1"] > 0.65
    assert zh["hybrid"]["recall_at_k"]["3"] > 0.85
