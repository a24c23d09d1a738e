"""LoCoMo through agently 4.1.4.2+ AgentExecution runs: what ``agent.input(q).start()`` puts in front of the model.

The conversations are imported as on the plugin path (:func:`agently_vecmem.ingest.import_history`, raw turns,
dated), into one Chroma store. Every question is then asked three ways, each in a fresh agent bound to the
conversation's session on that store, against a scripted OpenAI-compatible model (the package's loopback
server) that records every request:

* ``agent``: ``agent.input(q).start()`` with VecMemory — an AgentExecution run reading memory through
  :class:`~agently_vecmem.integrations.agently.context_source.VecMemoryContextSource`;
* ``plain``: ``agent.create_request().input(q).get_text()`` with VecMemory (``prepare_request`` injects);
* ``agently_memory``: ``agent.input(q).start()`` with Agently's own AgentlyMemory on the same store (a
  ``chroma`` RecordStore backend over it): its context source, Agently's index and selector.

VecMemory runs without the model (plan and rerank off, as on the plugin path); extraction is off everywhere, so
the questions never write. The scripted **selector rule**: keep every offered block whose card shares a content
word (3+ letters, not a stop word) with the question, in the order offered; the agent answers "I don't know.".

Scoring reuses the plugin path's: a record stands for the dialog turns it was imported from, and recall@k counts
the first k dialog turns (:func:`~agently_vecmem.eval.metrics.score_query`). Two rankings per path: *offered*
(the records whose text the selector request or a required block carried, in that order; for ``plain`` what was
injected) and *in request* (the records whose text reached the agent's model request, in order of appearance).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from ..embedders.base import Embedder
from ..errors import ConfigurationError
from ..workspace.transfer import progress_bar
from .locomo import load_locomo
from .metrics import percentiles, score_query
from .plugin_path import _settings as plugin_path_settings
from .runner import aggregate_named, checked_ks

__all__ = ["run_locomo_agent", "format_agent_report", "PATHS", "SELECTOR_RULE"]

PATHS = ("agent", "plain", "agently_memory")
SELECTOR_RULE = ("keep every offered block whose card shares a content word (3+ letters, not a stop word) with "
                 "the question, in the order offered")
_STOP = frozenset("""the and for are was were what when where which who whom whose why how did does do has have
had with that this from into about than then them they their there his her she him its you your our any all
not but can could would should will shall may might been being also just very much many some more most""".split())
_ESCAPES = re.compile(r"\\u[0-9a-fA-F]{4}|\\x[0-9a-fA-F]{2}|\\[nrt'\"\\]")
_KEY_TOKENS = 16


def _norm(text: str) -> str:
    """Lower-case alphanumeric tokens, one space apart, with the escapes a rendered request adds removed."""
    return " " + " ".join(re.findall(r"[a-z0-9]+", _ESCAPES.sub(" ", text).lower())) + " "


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]{3,}", text.lower()) if w not in _STOP}


def _request_text(body: dict) -> str:
    return "\n".join(m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
                     for m in body.get("messages") or [])


class _Model:
    """The scripted model of every path: the selector rule (:data:`SELECTOR_RULE`), the agent's answer."""

    def __init__(self) -> None:
        self.selector: list[str] = []
        self.agent: list[str] = []
        self.question_words: set[str] = set()  # of the question being asked (the selector's input)

    def __call__(self, body: dict) -> Any:
        text = _request_text(body)
        if "offered_context_blocks" not in text:
            self.agent.append(text)
            return "I don't know."
        self.selector.append(text)
        spans = list(re.finditer(r"context-block:[0-9]+", text))
        keep: list[str] = []
        for i, match in enumerate(spans):
            card = text[match.end(): spans[i + 1].start() if i + 1 < len(spans) else len(text)]
            if match.group(0) not in keep and _content_words(card) & self.question_words:
                keep.append(match.group(0))
        return {"selected_keys": keep}


def _ranked(text: str, keys: dict[str, str]) -> list[str]:
    """Record ids whose key text occurs in ``text``, in order of first appearance."""
    norm = _norm(text)
    found = [(norm.find(key), rid) for rid, key in keys.items() if key in norm]
    return [rid for pos, rid in sorted(found)]


def run_locomo_agent(
    data_path: str | os.PathLike[str],
    *,
    audit_path: str | os.PathLike[str] | None = None,
    ks: Sequence[int] = (1, 5, 10, 20),
    workspace_path: str | os.PathLike[str] | None = None,
    embedder: Embedder | None = None,
    limit_conversations: int | None = None,
    limit_questions: int | None = None,
    dated: bool = True,
    progress: bool = True,
    paths: Sequence[str] = PATHS,
) -> dict[str, Any]:
    """Evaluate the AgentExecution path beside plain requests and AgentlyMemory's source (module docstring).

    Args:
        data_path, audit_path, ks, workspace_path, embedder, limit_conversations, limit_questions, dated,
            progress: as :func:`~agently_vecmem.eval.plugin_path.run_locomo_plugin`.
        paths: which of :data:`PATHS` to ask.

    Returns:
        ``{"path": "agent", "selector_rule", "embedder", "spaces", "questions", "conversations", "turns", "records", "import_s",
        "paths": {name: {"offered": {recall_at_k, mrr, ...}, "in_request": {...}, "start_ms": {p50, p95},
        "failed_runs": n}}}``.

    Raises:
        ConfigurationError: the installed agently has no AgentExecution runs (before 4.1.4.2), or an unknown path.
    """
    from ..integrations import agently as integration

    if integration.host_line() != integration.RECORD_STORE_LINE:
        from importlib.metadata import version

        raise ConfigurationError(
            f"--path agent needs agently 4.1.4.2+ (AgentExecution runs); the installed agently is "
            f"{version('agently')} (run it on the 4.1.4.10 line: PYTHONPATH=.venv/agently-4.1.4.10 agently-vecmem "
            "eval locomo DATA --path agent)")
    unknown = set(paths) - set(PATHS)
    if unknown:
        raise ConfigurationError(f"unknown paths {sorted(unknown)}; choose from {list(PATHS)}")
    ks = checked_ks(ks)
    conversations = load_locomo(data_path, audit_path=audit_path, limit_conversations=limit_conversations)
    with tempfile.TemporaryDirectory(prefix="vecmem-eval-agent-") as tmp:
        source = str(data_path)
        if limit_conversations is not None:
            with open(data_path, encoding="utf-8") as fh:
                samples = json.load(fh)[:limit_conversations]
            source = os.path.join(tmp, "conversations.json")
            with open(source, "w", encoding="utf-8") as fh:
                json.dump(samples, fh)
        path = str(workspace_path) if workspace_path is not None else os.path.join(tmp, "store")
        return _run(conversations, source, path, ks, embedder, limit_questions, dated, progress, tuple(paths))


def _run(conversations: list[Any], source: str, path: str, ks: tuple[int, ...], embedder: Embedder | None,
         limit_questions: int | None, dated: bool, progress: bool, paths: tuple[str, ...]) -> dict[str, Any]:
    from agently import Agently
    from agently.base import record_store_registry  # type: ignore[attr-defined,unused-ignore]  # agently 4.1.4.2+ only

    from ..filters import Scope
    from ..ingest import import_history
    from ..integrations import agently as integration
    from ..integrations.agently.record_store_line import ChromaRecordStoreBackend

    # the scripted OpenAI-compatible endpoint this measurement needs (imported only when it runs)
    from ..testing import LoopbackOpenAIServer
    from ..workspace.embedding_models import embedding_models

    integration.install()
    dias_of: dict[str, tuple[str, ...]] = {}

    def remember(turn: Any, diag: dict[str, Any]) -> None:
        for ref in diag.get("refs", ()):
            dias_of[ref["id"]] = turn.sources

    ws = integration.chroma_store(path, embedder=embedder, collection="vecmem_eval_agent")
    ws.embedder.embed_query("warm up")
    report = import_history(ws, source, fmt="locomo", dated=dated, progress=progress, on_turn=remember)
    records = ws.scan(scope=Scope(None, None, "memory"), limit=1_000_000)
    keys: dict[str, dict[str, str]] = {}  # session -> record id -> the normalized opening of its summary
    for record in records:
        session = record.session_id or ""
        keys.setdefault(session, {})[record.id] = " " + " ".join(_norm(record.summary).split()[:_KEY_TOKENS]) + " "
    depth = max(max(ks), 10)
    vec_settings = plugin_path_settings(depth)["session"]["memory"]["VecMemory"]
    vec_settings = {**vec_settings, "retrieve_plan": {"enabled": False},
                    "retrieve": {**vec_settings["retrieve"], "rerank": False}, "extract": {"enabled": False}}
    # no default scope: Agently's default one (``script_scope``: the running script's name) would hide records
    # another program imported from AgentlyMemory's searches
    record_store = record_store_registry.create(ChromaRecordStoreBackend(workspace=ws, mode="read_write"),  # type: ignore[arg-type,unused-ignore]
                                                mode="read_write", default_scope={}, default_search_scope={})
    questions = [(c, q) for c in conversations for q in c.questions[:limit_questions]]
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {p: {"offered": [], "in_request": []} for p in paths}
    start_ms: dict[str, list[float]] = {p: [] for p in paths}
    failed: dict[str, int] = dict.fromkeys(paths, 0)
    model = _Model()
    with LoopbackOpenAIServer() as server:
        server.on("chat", model)
        server.set_default(lambda body: {"memories": []})
        for conv, q in progress_bar(questions, len(questions), "asking", progress, unit="it"):
            session_keys = {**keys.get(conv.sample_id, {}), **keys.get("", {})}
            model.question_words = _content_words(q.question)
            for name in paths:
                agent = Agently.create_agent()
                agent.set_settings("OpenAICompatible", {"base_url": server.base_url, "model": "eval", "api_key": "x",
                                                        "stream": False})
                agent.set_settings("session.input_keys", ["input"])
                agent.set_settings("session.memory.VecMemory", vec_settings)
                agent.set_settings("session.memory.AgentlyMemory.extract.enabled", False)
                if name == "agently_memory":
                    agent.use_record_store(record_store)
                agent.activate_session(session_id=conv.sample_id)
                if name == "agently_memory":
                    agent.activated_session.use_memory(mode="AgentlyMemory")
                else:
                    agent.activated_session.use_memory(mode="VecMemory", memory_store=ws)
                model.selector.clear()
                model.agent.clear()
                began = time.perf_counter()
                try:
                    if name == "plain":
                        agent.create_request().input(q.question).get_text()
                    else:
                        agent.input(q.question).start()
                except Exception:  # noqa: BLE001 - a failed run scores as nothing delivered, and is counted
                    failed[name] += 1
                start_ms[name].append((time.perf_counter() - began) * 1000.0)
                in_request = _ranked(model.agent[-1], session_keys) if model.agent else []
                offered = in_request
                if name != "plain":
                    offered = _ranked("\n".join(model.selector), session_keys) if model.selector else []
                    offered = list(dict.fromkeys(in_request + offered)) if name == "agent" else offered
                for kind, ids in (("offered", offered), ("in_request", in_request)):
                    ranked: list[str] = []
                    for rid in ids:
                        ranked.extend(d for d in dias_of.get(rid, ()) if d not in ranked)
                    rows[name][kind].append(score_query(ranked, q.evidence, ks, q.category))
    result: dict[str, Any] = {
        "path": "agent", "selector_rule": SELECTOR_RULE, "dated": dated, **embedding_models(ws), "questions": len(questions),
        "conversations": len(conversations), "turns": report.turns, "records": len(records),
        "import_s": round(report.seconds, 2), "paths": {},
    }
    for name in paths:
        result["paths"][name] = {kind: aggregate_named(rows[name][kind], ks) for kind in ("offered", "in_request")}
        result["paths"][name].update(start_ms=percentiles(start_ms[name]), failed_runs=failed[name])
    return result


def format_agent_report(result: dict[str, Any]) -> str:
    """The plain-text table of :func:`run_locomo_agent`."""
    first = next(iter(result["paths"].values()))
    ks = list(first["in_request"]["recall_at_k"])
    lines = [
        f"AgentExecution path: {result['questions']} questions in {result['conversations']} conversations; "
        f"{result['turns']} turns imported as {result['records']} records in {result['import_s']:.1f} s; embedder "
        f"{result.get('embedder')}",
        f"selector rule: {result['selector_rule']}",
        f"{'path':<16}{'ranking':<12}" + "".join(f"{'R@' + k:>8}" for k in ks) + f"{'MRR':>8}{'start p50':>11}"
        + f"{'failed':>8}",
    ]
    labels = {"agent": "agent (VecMem)", "plain": "plain request", "agently_memory": "AgentlyMemory"}
    for name, block in result["paths"].items():
        for kind in ("offered", "in_request"):
            scored = block[kind]
            tail = f"{block['start_ms']['p50']:>9.0f}ms{block['failed_runs']:>8}" if kind == "in_request" else ""
            lines.append(f"{labels.get(name, name):<16}{kind:<12}"
                         + "".join(f"{scored['recall_at_k'][k]:>8.3f}" for k in ks) + f"{scored['mrr']:>8.3f}" + tail)
    return "\n".join(lines)
