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

``filler=N`` (or several sizes) is the growth probe (``eval probe --filler 0,1000,10000``): each language's
store also holds N filler sentences of that language (:mod:`.filler`, never an answer), one store per size,
and ``result["growth"]`` gives R@k per size, language and method with the store's size and first query time.

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
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..embedders import default_embedder
from ..embedders.base import Embedder
from ..errors import ConfigurationError, DataFileError
from ..filters import Scope
from ..records import MemoryRecord, Provenance
from ..search.candidates import retrieve_candidates
from ..search.params import DEFAULT_PARAMS, METHODS, RetrievalParams
from ..workspace.transfer import progress_bar
from .filler import FILLER_LANGUAGES, filler_records, is_filler
from .runner import checked_ks

__all__ = [
    "PROBE_DATA_PATH", "PROBE_METHODS", "ProbeItem", "ProbeSet", "load_probe", "probe_records", "run_probe",
    "filler_sizes", "format_probe_report", "format_growth_report",
]

logger = logging.getLogger(__name__)

#: The bilingual probe shipped with the package (English and Chinese, 120 facts).
PROBE_DATA_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "probe_bilingual.json")
#: Methods compared, all through ``retrieve_candidates`` (``hybrid`` is the plugin's default).
PROBE_METHODS: tuple[str, ...] = ("hybrid", "dense", "lexical")
#: Kinds scored apart from the headline figures.
SEPARATE_KINDS = frozenset({"date"})
#: Filler records per put in the growth probe (one embedding call and one Chroma write each).
FILLER_BATCH = 1_000


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
    filler: int | Sequence[int] = 0,
    filler_seed: int = 0,
    progress: bool = False,
    spaces: Sequence[str] | None = None,
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
        include_per_question: add ``per_question`` rows (language, id, kind, rank of the fact per method, the
            top ``max(ks)`` per method as probe ids with ``None`` for filler, and the filler size).
        sample: score ``draws`` random stores of this many non-date facts (of ``split``) instead of one store
            of all facts; the recall is pooled over the draws (``result["sample"]`` says how).
        draws: how many random stores with ``sample``.
        seed: the random seed of the draws.
        filler: the growth probe: each language's store also holds this many filler sentences of the same
            language (:mod:`.filler`, never counted as answers); several sizes run one store each, smallest
            first, and give the ``"growth"`` block. Not with ``sample``.
        filler_seed: the filler generator's seed.
        progress: progress bars while the filler is stored.
        spaces: the named vector spaces of the probe's stores (``ChromaWorkspace(spaces=...)``; default: a new
            store's, ``e5`` where installed), e.g. ``["e5", "use"]`` or ``[]``.

    Returns:
        ``{"probe", "embedder", "spaces", "split", "dated_records", "ks", "filler": {"sizes", "seed"},
        "languages": {lang: {method: {"questions", "recall_at_k": {k: ..}}, "by_kind": {kind: {method: ...}},
        "date": {method: ...}, "records", "first_query_s"}}}``; the per-method blocks exclude date questions,
        which are in ``"date"``. With filler, ``"languages"`` is the largest size's, and ``"growth"`` lists
        ``{"filler": n, "languages": {lang: {"records", "first_query_s", method: {...}}}}`` per size.
        ``first_query_s`` is the time from reading the store's scope to the first hybrid answer in this
        process (``result["filler"]["first_query_note"]`` says what it includes).

    Raises:
        ConfigurationError: unreadable probe, unknown language or method, bad filler sizes.
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
    sizes = filler_sizes(filler)
    if sizes != (0,):
        if sample is not None:
            raise ConfigurationError("filler and sample do not mix: the growth probe stores all facts")
        if unknown_filler := [lang for lang in langs if lang not in FILLER_LANGUAGES]:
            raise ConfigurationError(f"no filler generator for {unknown_filler}; it writes {list(FILLER_LANGUAGES)}")
    embedder = embedder if embedder is not None else default_embedder()  # one model for every store
    if sample is not None:
        return _run_samples(probe, langs, embedder, ks, split, methods, params, include_per_question,
                            sample, draws, seed, None if spaces is None else tuple(spaces))
    growth = _Growth(sizes, filler_seed, progress, None if spaces is None else tuple(spaces))
    if workspace_path is None:
        with tempfile.TemporaryDirectory(prefix="vecmem-probe-") as tmp:
            return _run_sizes(probe, tmp, langs, embedder, ks, split, methods, params, include_per_question, growth)
    return _run_sizes(probe, os.fspath(workspace_path), langs, embedder, ks, split, methods, params,
                      include_per_question, growth)


def filler_sizes(filler: int | Sequence[int]) -> tuple[int, ...]:
    """The filler sizes to run, smallest first, each once.

    Raises:
        ConfigurationError: a negative size, or none.
    """
    sizes = (filler,) if isinstance(filler, int) else tuple(filler)
    if not sizes or any(not isinstance(n, int) or n < 0 for n in sizes):
        raise ConfigurationError(f"filler sizes must be integers >= 0, got {list(sizes)}")
    return tuple(sorted(set(sizes)))


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
    spaces: tuple[str, ...] | None,
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
            result = _run(subset, tmp, langs, embedder, ks, "all", methods, params, _Growth((0,), 0, False, spaces), 0)
        rows.extend(result.pop("per_question"))
    for lang in langs:
        result["languages"][lang] = _language_block([r for r in rows if r["lang"] == lang], methods, ks)
    result.update(split=split, sample={"size": size, "draws": draws, "seed": seed})
    if include_per_question:
        result["per_question"] = rows
    return result


@dataclass(frozen=True)
class _Growth:
    """The probe's store settings: filler sizes (smallest first), the generator's seed, progress bars, the
    stores' vector spaces (None: the default)."""

    sizes: tuple[int, ...]
    seed: int
    progress: bool
    spaces: tuple[str, ...] | None


#: What ``first_query_s`` measures (recorded in every result with filler).
FIRST_QUERY_NOTE = (
    "seconds from reading the store's GLOBAL scope to the first hybrid answer (one question embedded, the "
    "lexical index and any query-time signal built), in the evaluating process: the first store pays model "
    "loads, and later stores reuse process-wide caches (loaded models, multilingual vectors of texts seen "
    "before, e.g. the facts), so this is not a fresh process's first query"
)


def _run_sizes(
    probe: ProbeSet, path: str, langs: list[str], embedder: Embedder | None, ks: tuple[int, ...], split: str,
    methods: Sequence[str], params: RetrievalParams, include_per_question: bool, growth: _Growth,
) -> dict[str, Any]:
    """One store per language and filler size; the largest size's result with the growth block."""
    steps: list[dict[str, Any]] = []
    per_question: list[dict[str, Any]] = []
    result: dict[str, Any] = {}
    for size in growth.sizes:
        result = _run(probe, path, langs, embedder, ks, split, methods, params, growth, size)
        per_question.extend(result.pop("per_question"))
        steps.append({"filler": size, "languages": {
            lang: {key: block[key] for key in ("records", "first_query_s", *methods)}
            for lang, block in result["languages"].items()
        }})
        logger.info("probe with %d filler records: %s", size, {
            lang: round(b["hybrid"]["recall_at_k"][str(ks[0])], 3)
            for lang, b in result["languages"].items() if "hybrid" in b})
    result["filler"] = {"sizes": list(growth.sizes), "seed": growth.seed}
    if growth.sizes != (0,):
        result["filler"]["first_query_note"] = FIRST_QUERY_NOTE
        result["growth"] = steps
    if include_per_question:
        result["per_question"] = per_question
    return result


def _put_filler(ws: Any, records: list[MemoryRecord], lang: str, progress: bool) -> None:
    """Store filler in batches (one embedding call and one all-or-nothing put each), with a bar."""
    batches = range(0, len(records), FILLER_BATCH)
    for start in progress_bar(batches, len(batches), f"storing {len(records)} {lang} filler", progress):
        ws.put(records[start:start + FILLER_BATCH])


def _run(
    probe: ProbeSet, path: str, langs: list[str], embedder: Embedder | None, ks: tuple[int, ...], split: str,
    methods: Sequence[str], params: RetrievalParams, growth: _Growth, size: int,
) -> dict[str, Any]:
    from ..workspace.chroma import ChromaWorkspace
    from ..workspace.embedding_models import embedding_models

    depth = max(max(ks), 10)
    top_n = max(ks)
    scored = [i for i in probe.items if split == "all" or i.split == split]
    result: dict[str, Any] = {"probe": probe.name, "split": split, "ks": list(ks), "languages": {},
                              "dated_records": True}
    per_question: list[dict[str, Any]] = []
    for lang in langs:
        collection = f"vecmem_probe_{lang}" + (f"_filler{size}" if size else "")
        with ChromaWorkspace(path, embedder=embedder, collection=collection, spaces=growth.spaces) as ws:
            result.update(embedding_models(ws))
            ws.put(probe_records(probe.items, lang))
            if size:
                facts = [i.fact[lang] for i in probe.items]
                _put_filler(ws, filler_records(lang, size, growth.seed, facts=facts), lang, growth.progress)
            start = time.perf_counter()
            view = ws.view(Scope.global_memory())
            first = ws.embedder.embed_documents([scored[0].question[lang]])
            retrieve_candidates(view, scored[0].question[lang], first[0], k=depth, params=params, method="hybrid")
            first_query_s = time.perf_counter() - start
            id_of = {r.id: None if is_filler(r) else r.provenance.model_dump()["probe_id"] for r in view.records}
            qvecs = ws.embedder.embed_documents([i.question[lang] for i in scored])
            rows: list[dict[str, Any]] = []
            for item, qvec in zip(scored, qvecs, strict=True):
                ranks: dict[str, int | None] = {}
                top: dict[str, list[str | None]] = {}
                for method in methods:
                    cands = retrieve_candidates(view, item.question[lang], qvec, k=depth, params=params,
                                                method=method)  # type: ignore[arg-type]
                    ranked = [id_of[c.record.id] for c in cands]
                    ranks[method] = ranked.index(item.id) + 1 if item.id in ranked else None
                    top[method] = ranked[:top_n]
                rows.append({"lang": lang, "id": item.id, "kind": item.kind, "split": item.split,
                             "question": item.question[lang], "rank": ranks, "top": top, "filler": size})
        result["languages"][lang] = _language_block(rows, methods, ks)
        result["languages"][lang].update(records=len(view.records), first_query_s=round(first_query_s, 3))
        per_question.extend(rows)
    result["per_question"] = per_question
    return result


def _methods(block: dict[str, Any]) -> list[str]:
    """The method names of a language block (its other keys are ``by_kind``, ``date``, ``records``, ...)."""
    return [m for m, v in block.items() if m not in ("by_kind", "date") and isinstance(v, dict) and "recall_at_k" in v]


def format_probe_report(result: dict[str, Any]) -> str:
    """A plain-text table: one row per language, ``R@k`` per method; then date questions apart; with filler,
    the growth table (:func:`format_growth_report`)."""
    ks = [str(k) for k in result["ks"]]
    langs = result["languages"]
    methods = _methods(next(iter(langs.values())))
    head = f"{'lang':<6}{'n':>5}" + "".join(f"{m + ' R@' + k:>14}" for m in methods for k in ks)
    sample = result.get("sample")
    drawn = f", {sample['draws']} random stores of {sample['size']} facts" if sample else ""
    sizes = result.get("filler", {}).get("sizes", [0])
    filled = f", {sizes[-1]} filler records per language" if sizes[-1] else ""
    lines = [f"probe {result['probe']} ({result['split']} questions{drawn}{filled}), embedder "
             f"{result.get('embedder')}" + _spaces(result), head]
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
    if "growth" in result:
        lines.append("")
        lines.append(format_growth_report(result))
    return "\n".join(lines)


def _spaces(result: dict[str, Any]) -> str:
    spaces = result.get("spaces") or {}
    return (" (spaces: " + ", ".join(f"{k} {v}" for k, v in spaces.items()) + ")") if spaces else ""


def format_growth_report(result: dict[str, Any], method: str = "hybrid") -> str:
    """The growth table: one row per filler size, ``R@k`` of ``method`` and the first query's seconds per
    language."""
    ks = [str(k) for k in result["ks"]]
    steps = result["growth"]
    langs = list(steps[0]["languages"])
    first = steps[0]["languages"][langs[0]]
    method = method if method in first else _methods(first)[0]
    head = f"{'filler':>7}{'records':>9}" + "".join(
        "".join(f"{lang + ' R@' + k:>9}" for k in ks) + f"{lang + ' 1st q':>11}" for lang in langs)
    lines = [f"growth: {method} recall as the store grows (filler seed {result['filler']['seed']})", head]
    for step in steps:
        blocks = step["languages"]
        lines.append(f"{step['filler']:>7}{blocks[langs[0]]['records']:>9}" + "".join(
            "".join(f"{blocks[lang][method]['recall_at_k'][k]:>9.3f}" for k in ks)
            + f"{blocks[lang]['first_query_s']:>9.2f} s" for lang in langs))
    lines.append("1st q: the store's first query in this process (later stores reuse process-wide caches; "
                 "see filler.first_query_note in the JSON)")
    return "\n".join(lines)
