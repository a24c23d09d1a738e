"""The bilingual probe: user facts stored as GLOBAL memories, one paraphrased question per fact, per language.

A probe file (``agently_vecmem/data/probe_bilingual.json`` ships one, written for this project) holds items
``{"id", "kind", "split", "time"?, "fact": {lang: text}, "question": {lang: text}}``: the same facts in every
language. For each language the facts are stored in their own Chroma collection as GLOBAL memories (a fact
with a ``time`` gets it as ``occurred_at`` when the record model has that field), and every question is
answered with :func:`~agently_vecmem.search.candidates.retrieve_candidates` over the GLOBAL scope, once per
method (``hybrid``, the plugin's default, and the ``dense`` / ``lexical`` baselines). A question is a hit at
``k`` when its own fact is among the top ``k``.

Date questions (kind ``date``: "what did I do in May 2023?") need the fact's date in its retrieval text;
they are reported in their own block and left out of the headline figures, which are over the other kinds.

``sample=N`` scores smaller stores instead: ``draws`` random sets of ``N`` non-date facts (seeded), each
stored and asked on its own, the recall pooled over all draws (``eval probe --sample 24``: the size of a new
user's memory, and of the probe in issue #13's first measurement).

Example:
    >>> from agently_vecmem.eval.probe import run_probe, PROBE_DATA_PATH
    >>> result = run_probe(PROBE_DATA_PATH)                        # doctest: +SKIP
    >>> result["languages"]["zh"]["hybrid"]["recall_at_k"]["1"]     # doctest: +SKIP
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import random
import tempfile
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..embedders import default_embedder
from ..embedders.base import Embedder
from ..errors import ConfigurationError, DataFileError
from ..filters import Scope
from ..records import MemoryRecord, Provenance
from ..search.candidates import retrieve_candidates
from ..search.params import DEFAULT_PARAMS, METHODS, RetrievalParams
from .runner import checked_ks

__all__ = [
    "PROBE_DATA_PATH", "PROBE_METHODS", "ProbeItem", "ProbeSet", "load_probe", "probe_records", "run_probe",
    "format_probe_report",
]

logger = logging.getLogger(__name__)

#: The bilingual probe shipped with the package (English and Chinese, 120 facts).
PROBE_DATA_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "probe_bilingual.json")
#: Methods compared, all through ``retrieve_candidates`` (``hybrid`` is the plugin's default).
PROBE_METHODS: tuple[str, ...] = ("hybrid", "dense", "lexical")
#: Kinds scored apart from the headline figures.
SEPARATE_KINDS = frozenset({"date"})


class ProbeItem(BaseModel):
    """One fact with its question, in every language of the probe."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    kind: Literal["plain", "mixed", "distractor", "date"] = "plain"
    split: Literal["tune", "holdout"] = "holdout"
    time: str | None = None
    fact: dict[str, str]
    question: dict[str, str]

    @field_validator("time")
    @classmethod
    def _iso_date(cls, value: str | None) -> str | None:
        if value is not None:
            _dt.date.fromisoformat(value[:10])
        return value

    @model_validator(mode="after")
    def _same_languages(self) -> ProbeItem:
        if set(self.fact) != set(self.question):
            raise DataFileError(f"item {self.id}: fact and question languages differ")
        if any(not t.strip() for t in [*self.fact.values(), *self.question.values()]):
            raise DataFileError(f"item {self.id}: empty text")
        if self.kind == "date" and self.time is None:
            raise DataFileError(f"item {self.id}: a date item needs a time")
        return self

    def timestamp(self) -> float | None:
        """``time`` as a UTC epoch (noon of the day when only a date is given)."""
        if self.time is None:
            return None
        when = _dt.datetime.fromisoformat(self.time if "T" in self.time else f"{self.time}T12:00:00")
        if when.tzinfo is None:
            when = when.replace(tzinfo=_dt.timezone.utc)
        return when.timestamp()


class ProbeSet(BaseModel):
    """A probe file."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = "probe"
    languages: list[str]
    items: list[ProbeItem] = Field(min_length=1)

    @model_validator(mode="after")
    def _complete(self) -> ProbeSet:
        ids = [i.id for i in self.items]
        if len(set(ids)) != len(ids):
            raise DataFileError("item ids must be unique")
        for item in self.items:
            missing = set(self.languages) - set(item.fact)
            if missing:
                raise DataFileError(f"item {item.id} lacks {sorted(missing)}")
        return self


def load_probe(path: str | os.PathLike[str]) -> ProbeSet:
    """Read and validate a probe file.

    Raises:
        ConfigurationError: missing file, bad JSON or a malformed probe.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except OSError as e:
        raise ConfigurationError(f"cannot read probe file {os.fspath(path)!r}: {e}") from e
    except ValueError as e:
        raise ConfigurationError(f"probe file {os.fspath(path)!r} is not JSON: {e}") from e
    try:
        return ProbeSet.model_validate(raw)
    except ValidationError as e:
        raise ConfigurationError(f"probe file {os.fspath(path)!r} is malformed: {e}") from e


def probe_records(items: Sequence[ProbeItem], lang: str, *, dated: bool | None = None) -> list[MemoryRecord]:
    """The GLOBAL memories of one language (``provenance.probe_id`` = item id).

    Args:
        items: the probe items.
        lang: the language code.
        dated: give facts with a ``time`` that time as ``occurred_at`` (default ``True``).
    """
    use_dates = True if dated is None else dated
    out = []
    for item in items:
        extra: dict[str, Any] = {}
        if use_dates and item.time is not None:
            extra["occurred_at"] = item.timestamp()
        out.append(MemoryRecord(
            memory_scope="GLOBAL_MEMORY", summary=item.fact[lang], provenance=Provenance.model_validate({"probe_id": item.id}), **extra,
        ))
    return out


def _block(hits: list[dict[str, Any]], ks: Sequence[int]) -> dict[str, Any]:
    n = len(hits)
    return {"questions": n,
            "recall_at_k": {str(k): (sum(h[str(k)] for h in hits) / n if n else 0.0) for k in ks}}


def run_probe(
    path: str | os.PathLike[str] = PROBE_DATA_PATH,
    *,
    embedder: Embedder | None = None,
    languages: Sequence[str] | None = None,
    ks: Sequence[int] = (1, 3),
    split: Literal["all", "tune", "holdout"] = "all",
    methods: Sequence[str] = PROBE_METHODS,
    params: RetrievalParams = DEFAULT_PARAMS,
    workspace_path: str | os.PathLike[str] | None = None,
    include_per_question: bool = False,
    sample: int | None = None,
    draws: int = 20,
    seed: int = 0,
) -> dict[str, Any]:
    """Evaluate retrieval on a probe file, per language and method.

    Every language stores all facts (of every split); ``split`` selects which questions are scored.

    Args:
        path: the probe file.
        embedder: the embedder (default: the workspace default, MiniLM).
        languages: languages to run (default: all of the file's).
        ks: recall cut-offs.
        split: score the ``tune`` half, the ``holdout`` half or ``all`` questions.
        methods: retrieval methods (see :data:`PROBE_METHODS`).
        params: retrieval parameters.
        workspace_path: Chroma directory (default: a temporary one, removed after).
        include_per_question: add ``per_question`` rows (language, id, kind, rank of the fact per method).
        sample: score ``draws`` random stores of this many non-date facts (of ``split``) instead of one store
            of all facts; the recall is pooled over the draws (``result["sample"]`` says how).
        draws: how many random stores with ``sample``.
        seed: the random seed of the draws.

    Returns:
        ``{"probe", "embedder", "split", "dated_records", "ks", "languages": {lang: {method:
        {"questions", "recall_at_k": {k: ..}}, "by_kind": {kind: {method: ...}}, "date": {method: ...}}}}``;
        the per-method blocks exclude date questions, which are in ``"date"``.

    Raises:
        ConfigurationError: unreadable probe, unknown language or method.
    """
    probe = load_probe(path)
    langs = list(languages or probe.languages)
    unknown = [lang for lang in langs if lang not in probe.languages]
    if unknown:
        raise ConfigurationError(f"the probe has no language {unknown}; it has {probe.languages}")
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ConfigurationError(f"unknown retrieval method(s) {bad}")
    ks = checked_ks(ks)
    embedder = embedder if embedder is not None else default_embedder()  # one model for every store
    if sample is not None:
        return _run_samples(probe, langs, embedder, ks, split, methods, params, include_per_question,
                            sample, draws, seed)
    if workspace_path is None:
        with tempfile.TemporaryDirectory(prefix="vecmem-probe-") as tmp:
            return _run(probe, tmp, langs, embedder, ks, split, methods, params, include_per_question)
    return _run(probe, os.fspath(workspace_path), langs, embedder, ks, split, methods, params, include_per_question)


def _language_block(rows: list[dict[str, Any]], methods: Sequence[str], ks: tuple[int, ...]) -> dict[str, Any]:
    """One language's blocks from its per-question rows: per method over the headline kinds, per kind, and the
    date questions apart."""
    hits = [{m: {str(k): float(r["rank"][m] is not None and r["rank"][m] <= k) for k in ks} for m in methods}
            for r in rows]
    block: dict[str, Any] = {
        m: _block([h[m] for r, h in zip(rows, hits, strict=True) if r["kind"] not in SEPARATE_KINDS], ks)
        for m in methods
    }
    block["by_kind"] = {
        kind: {m: _block([h[m] for r, h in zip(rows, hits, strict=True) if r["kind"] == kind], ks) for m in methods}
        for kind in sorted({r["kind"] for r in rows})
    }
    block["date"] = block["by_kind"].get("date", {m: _block([], ks) for m in methods})
    return block


def _run_samples(
    probe: ProbeSet, langs: list[str], embedder: Embedder | None, ks: tuple[int, ...], split: str,
    methods: Sequence[str], params: RetrievalParams, include_per_question: bool, size: int, draws: int, seed: int,
) -> dict[str, Any]:
    pool = [i for i in probe.items if i.kind not in SEPARATE_KINDS and (split == "all" or i.split == split)]
    if not 1 <= size <= len(pool) or draws < 1:
        raise ConfigurationError(f"sample must be 1..{len(pool)} (the probe's non-date facts) and draws >= 1")
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    result: dict[str, Any] = {}
    for _ in range(draws):
        subset = probe.model_copy(update={"items": rng.sample(pool, size)})
        with tempfile.TemporaryDirectory(prefix="vecmem-probe-") as tmp:
            result = _run(subset, tmp, langs, embedder, ks, "all", methods, params, True)
        rows.extend(result.pop("per_question"))
    for lang in langs:
        result["languages"][lang] = _language_block([r for r in rows if r["lang"] == lang], methods, ks)
    result.update(split=split, sample={"size": size, "draws": draws, "seed": seed})
    if include_per_question:
        result["per_question"] = rows
    return result


def _run(
    probe: ProbeSet, path: str, langs: list[str], embedder: Embedder | None, ks: tuple[int, ...], split: str,
    methods: Sequence[str], params: RetrievalParams, include_per_question: bool,
) -> dict[str, Any]:
    from ..workspace.chroma import ChromaWorkspace

    depth = max(max(ks), 10)
    scored = [i for i in probe.items if split == "all" or i.split == split]
    result: dict[str, Any] = {"probe": probe.name, "split": split, "ks": list(ks), "languages": {},
                              "dated_records": True}
    per_question: list[dict[str, Any]] = []
    for lang in langs:
        with ChromaWorkspace(path, embedder=embedder, collection=f"vecmem_probe_{lang}") as ws:
            result["embedder"] = ws.embedder.model_id
            ws.put(probe_records(probe.items, lang))
            view = ws.view(Scope.global_memory())
            id_of = {r.id: r.provenance.model_dump()["probe_id"] for r in view.records}
            qvecs = ws.embedder.embed_documents([i.question[lang] for i in scored])
            rows: list[dict[str, Any]] = []
            for item, qvec in zip(scored, qvecs, strict=True):
                ranks: dict[str, int | None] = {}
                for method in methods:
                    cands = retrieve_candidates(view, item.question[lang], qvec, k=depth, params=params,
                                                method=method)  # type: ignore[arg-type]
                    ranked = [id_of[c.record.id] for c in cands]
                    ranks[method] = ranked.index(item.id) + 1 if item.id in ranked else None
                rows.append({"lang": lang, "id": item.id, "kind": item.kind, "split": item.split,
                             "question": item.question[lang], "rank": ranks})
        result["languages"][lang] = _language_block(rows, methods, ks)
        per_question.extend(rows)
    if include_per_question:
        result["per_question"] = per_question
    return result


def format_probe_report(result: dict[str, Any]) -> str:
    """A plain-text table: one row per language, ``R@k`` per method; then date questions apart."""
    ks = [str(k) for k in result["ks"]]
    langs = result["languages"]
    methods = [m for m in next(iter(langs.values())) if m not in ("by_kind", "date")]
    head = f"{'lang':<6}{'n':>5}" + "".join(f"{m + ' R@' + k:>14}" for m in methods for k in ks)
    sample = result.get("sample")
    drawn = f", {sample['draws']} random stores of {sample['size']} facts" if sample else ""
    lines = [f"probe {result['probe']} ({result['split']} questions{drawn}), embedder {result.get('embedder')}", head]
    for lang, block in langs.items():
        n = block[methods[0]]["questions"]
        lines.append(f"{lang:<6}{n:>5}" + "".join(f"{block[m]['recall_at_k'][k]:>14.3f}" for m in methods for k in ks))
    for lang, block in langs.items():
        kinds = ", ".join(
            f"{kind} n={b[methods[0]]['questions']} R@1 {b[methods[0]]['recall_at_k'][ks[0]]:.2f}"
            for kind, b in block["by_kind"].items()
        )
        lines.append(f"  {lang} {methods[0]} by kind: {kinds}")
    lines.append("date questions are left out of the sampled stores." if sample
                 else "date questions are scored apart (with occurred_at).")
    return "\n".join(lines)
