"""The growth probe: the seeded filler generator, ``run_probe(filler=...)`` and ``eval probe --filler``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_eval_probe import SMALL as PROBE_SMALL

from agently_vecmem.cli import main
from agently_vecmem.embedders import resolve_embedder
from agently_vecmem.errors import ConfigurationError
from agently_vecmem.eval.filler import filler_records, filler_sentences, is_filler
from agently_vecmem.eval.probe import PROBE_DATA_PATH, filler_sizes, load_probe, probe_records, run_probe
from agently_vecmem.filters import Scope
from agently_vecmem.search.cjk import has_cjk
from agently_vecmem.search.lexical import tokenize
from agently_vecmem.workspace import ChromaWorkspace

PROBE = load_probe(PROBE_DATA_PATH)
FACTS = {lang: [i.fact[lang] for i in PROBE.items] for lang in ("en", "zh")}
LATIN = re.compile(r"[A-Za-z]+")
SMALL = {**PROBE_SMALL, "items": PROBE_SMALL["items"][:3]}  # one plain, one mixed, one dated fact


def _small(tmp_path: Path) -> Path:
    path = tmp_path / "small.json"
    path.write_text(json.dumps(SMALL, ensure_ascii=False), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------- the generator
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_filler_is_deterministic_and_nested(lang: str) -> None:
    big = filler_sentences(lang, 500, seed=7, facts=FACTS[lang])
    assert big == filler_sentences(lang, 500, seed=7, facts=FACTS[lang])
    assert filler_sentences(lang, 200, seed=7, facts=FACTS[lang]) == big[:200]  # growth stores are nested
    assert filler_sentences(lang, 500, seed=8, facts=FACTS[lang]) != big
    assert len(set(big)) == len(big)
    assert filler_sentences(lang, 0) == []


def test_chinese_filler_is_chinese() -> None:
    fact_latin = {w for f in FACTS["zh"] for w in LATIN.findall(f)}
    with_facts = filler_sentences("zh", 3000, facts=FACTS["zh"])
    for sentence in with_facts:
        assert has_cjk(sentence) and sentence.endswith("。")
        assert set(LATIN.findall(sentence)) <= fact_latin, sentence  # Latin letters only from the facts' names
        assert not re.search(r"(?<![A-Za-z0-9]) | (?![A-Za-z0-9])", sentence), sentence  # spaces only in names
    assert any(LATIN.search(s) for s in with_facts)  # the facts' product names are talked about
    assert not any(LATIN.search(s) for s in filler_sentences("zh", 3000))  # no facts: no Latin at all
    # habits are 每…都 without 了, completed actions take 了
    habits = [s for s in with_facts if "都" in s and "每" in s]
    assert habits and all("了" not in s for s in habits)


def test_english_filler_is_english() -> None:
    for sentence in filler_sentences("en", 3000, facts=FACTS["en"]):
        assert sentence.isascii() and not has_cjk(sentence)
        assert sentence[0].isupper() and sentence.endswith(".") and "  " not in sentence
        assert len(sentence.split()) >= 3


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_filler_shares_the_facts_vocabulary(lang: str) -> None:
    def content(text: str) -> set[str]:  # English stems; Chinese bigrams (single characters match anything)
        return {t for t in tokenize(text) if lang == "en" or len(t) == 2}

    fact_terms = set().union(*(content(f) for f in FACTS[lang]))

    def sharing(sentences: list[str]) -> float:
        return sum(bool(content(s) & fact_terms) for s in sentences) / len(sentences)

    def shared_terms(sentences: list[str]) -> float:
        return sum(len(content(s) & fact_terms) for s in sentences) / len(sentences)

    given = filler_sentences(lang, 2000, facts=FACTS[lang])
    assert sharing(given) > 0.8  # most filler shares words with the facts ...
    assert shared_terms(given) > shared_terms(filler_sentences(lang, 2000))  # ... more when given them
    # ... and none repeats a fact
    assert not set(filler_sentences(lang, 2000, facts=FACTS[lang])) & set(FACTS[lang])


def test_a_hundred_thousand_sentences() -> None:
    """The growth probe's full size (speed is measured by timing the generator, not asserted here)."""
    sentences = filler_sentences("zh", 100_000, seed=3, facts=FACTS["zh"])
    assert len(sentences) == len(set(sentences)) == 100_000


def test_filler_records_are_marked_global_facts() -> None:
    records = filler_records("zh", 20, seed=2, facts=FACTS["zh"])
    assert [r.id for r in records] == [f"filler-zh-2-{i:06d}" for i in range(20)]
    assert all(r.memory_scope == "GLOBAL_MEMORY" and r.extracted and r.occurred_at is None for r in records)
    assert all(is_filler(r) for r in records)
    assert not any(is_filler(r) for r in probe_records(PROBE.items, "zh"))
    assert [r.summary for r in records] == filler_sentences("zh", 20, seed=2, facts=FACTS["zh"])


def test_bad_filler_arguments() -> None:
    with pytest.raises(ConfigurationError, match="no filler generator"):
        filler_sentences("fr", 3)
    with pytest.raises(ConfigurationError, match="0 or more"):
        filler_sentences("en", -1)
    assert filler_sizes([1000, 0, 1000]) == (0, 1000)
    assert filler_sizes(5) == (5,)
    with pytest.raises(ConfigurationError, match=">= 0"):
        filler_sizes([0, -3])
    with pytest.raises(ConfigurationError, match=">= 0"):
        filler_sizes([])


# ------------------------------------------------------------------------------------------- run_probe
def test_run_probe_with_filler(tmp_path: Path) -> None:
    store = tmp_path / "store"
    result = run_probe(_small(tmp_path), embedder=resolve_embedder("hash"), filler=[30, 0], filler_seed=4,
                       include_per_question=True, workspace_path=store)
    assert result["filler"]["sizes"] == [0, 30] and result["filler"]["seed"] == 4
    assert "process" in result["filler"]["first_query_note"]
    assert result["embedder"] == "deterministic-hash-v1" and result["spaces"] == {}
    # one store per language and size; the filler is in it, of the same language
    for lang in ("en", "zh"):
        with ChromaWorkspace(store, embedder=resolve_embedder("hash"), collection=f"vecmem_probe_{lang}_filler30",
                             read_only=True) as ws:
            records = ws.scan(scope=Scope.global_memory())
        filler = [r for r in records if is_filler(r)]
        assert len(records) == 33 and len(filler) == 30
        assert all(has_cjk(r.summary) == (lang == "zh") for r in filler)
    # the growth block: per size, per language, per method, with the store size and the first query's time
    assert [step["filler"] for step in result["growth"]] == [0, 30]
    for step in result["growth"]:
        for block in step["languages"].values():
            assert block["records"] == 3 + step["filler"] and block["first_query_s"] >= 0
            assert set(block) >= {"hybrid", "dense", "lexical"}
            assert block["hybrid"]["questions"] == 2  # the date question apart, as without filler
    assert result["languages"]["zh"]["records"] == 33  # the headline blocks are the largest store's
    # filler competes for the ranks but is never an answer
    rows = result["per_question"]
    assert {r["filler"] for r in rows} == {0, 30} and len(rows) == 2 * 2 * 3
    probe_ids = {i["id"] for i in SMALL["items"]}
    for row in rows:
        for method, top in row["top"].items():
            assert set(top) <= probe_ids | {None}
            if row["rank"][method] is not None and row["rank"][method] <= len(top):
                assert top[row["rank"][method] - 1] == row["id"]
    assert any(None in row["top"]["hybrid"] for row in rows if row["filler"] == 30)


def test_single_filler_size_and_bad_mixes(tmp_path: Path) -> None:
    data = _small(tmp_path)
    result = run_probe(data, embedder=resolve_embedder("hash"), languages=["zh"], methods=("lexical",), filler=10)
    assert [step["filler"] for step in result["growth"]] == [10]
    assert result["languages"]["zh"]["records"] == 13
    plain = run_probe(data, embedder=resolve_embedder("hash"), languages=["zh"], methods=("lexical",))
    assert "growth" not in plain and plain["filler"] == {"sizes": [0], "seed": 0}
    with pytest.raises(ConfigurationError, match="do not mix"):
        run_probe(data, embedder=resolve_embedder("hash"), filler=10, sample=2)


def test_cli_eval_probe_filler(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "growth.json"
    assert main(["--embedder", "hash", "eval", "probe", str(_small(tmp_path)), "--filler", "0,20", "--filler-seed",
                 "3", "--no-progress", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "growth: hybrid recall" in text and "20 filler records per language" in text
    table = text[text.index("growth:"):].splitlines()
    assert table[1].split() == ["filler", "records", "en", "R@1", "en", "R@3", "en", "1st", "q", "zh", "R@1", "zh",
                                "R@3", "zh", "1st", "q"]
    assert table[2].split()[:2] == ["0", "3"] and table[3].split()[:2] == ["20", "23"]
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["filler"]["sizes"] == [0, 20] and result["filler"]["seed"] == 3
    assert [s["filler"] for s in result["growth"]] == [0, 20]
    assert result["embedder"] == "deterministic-hash-v1" and result["spaces"] == {}
    assert main(["--embedder", "hash", "eval", "probe", "--filler", "0,-5"]) == 2
    assert "--filler" in capsys.readouterr().err
    assert main(["--embedder", "hash", "eval", "probe", "--filler", "5", "--sample", "2"]) == 2


def test_probe_stores_keep_the_spaces_asked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--spaces`` chooses the probe stores' vector spaces (the e5 + USE blend is measured this way)."""
    from agently_vecmem.search import spaces as vs
    from agently_vecmem.testing import DeterministicEmbedder

    vs.register_space("probe_hash", DeterministicEmbedder(dim=8))
    data = _small(tmp_path)
    result = run_probe(data, embedder=resolve_embedder("hash"), languages=["zh"], spaces=["probe_hash"])
    assert result["spaces"] == {"probe_hash": "deterministic-hash-v1"}
    out = tmp_path / "r.json"
    assert main(["--embedder", "hash", "eval", "probe", str(data), "--spaces", "", "--no-progress", "--json",
                 str(out)]) == 0
    assert json.loads(out.read_text(encoding="utf-8"))["spaces"] == {}
    capsys.readouterr()
    assert main(["--embedder", "hash", "eval", "probe", str(data), "--spaces", "e5,bogus"]) == 2
    assert "unknown vector space(s) ['bogus']" in capsys.readouterr().err
