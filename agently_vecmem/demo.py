"""The ``agently-vecmem demo``: two short scripted sessions, what was remembered, then a new session asking.

With ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` (+ ``OPENAI_MODEL``) set, the model answers and runs every memory
phase (plan + rerank, extract, consolidate). Without, the demo runs the deterministic path: each turn is kept
raw (no extraction), and because raw turns are session memories, the demo promotes them to GLOBAL_MEMORY
after each session (what an extraction model would decide for facts about the user) so the new session can
find them; retrieval is hybrid (dense MiniLM + BM25), without rerank.

Everything the demo shows comes from the plugin's diagnostics and the Workspace; nothing is printed that the
library did not return.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SESSIONS", "QUESTIONS", "DemoResult", "run_demo", "CannedAssistant"]

SESSIONS: list[tuple[str, list[str]]] = [
    ("demo-onboarding", [
        "Hi, I'm Maya. I'm a backend engineer at Northwind and I mostly write Go.",
        "I'm allergic to peanuts, so keep that in mind whenever you suggest food.",
        "For this chat only: I'm comparing two laptops, a ThinkPad X1 and a MacBook Air.",
    ]),
    ("demo-travel", [
        "I'm planning a trip to Lisbon in May with my partner Sam.",
        "On flights I always want a window seat and a vegetarian meal.",
    ]),
]
QUESTIONS: tuple[str, list[str]] = ("demo-followup", [
    "Can you suggest a snack for my flight?",
    "Which programming language should your code examples use?",
    "Who am I travelling with, and where to?",
])


class CannedAssistant:
    """The assistant of the offline demo: acknowledges statements, admits it has no model for questions."""

    model_name = "offline (no model)"

    def complete(self, messages: list[dict[str, Any]], *, phase: str = "chat", **_: Any) -> str:
        text = str(messages[-1].get("content", "")) if messages else ""
        newest = text.rsplit("[INPUT]", 1)[-1].strip()  # the rendered prompt ends with the user's input
        if newest.endswith("?"):
            return "(offline demo: no model is configured; the memories above are what a model would be given)"
        return "Noted."


@dataclass
class DemoResult:
    """What the demo did, also printed as ``--json``."""

    path: str
    embedder: str
    model: str | None
    #: The store's extra vector spaces (name -> model id).
    spaces: dict[str, str] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    questions: list[dict[str, Any]] = field(default_factory=list)
    embedder_load_s: float = 0.0
    first_retrieval_s: float | None = None
    total_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _record_row(record: Any) -> dict[str, Any]:
    return {
        "id": record.id, "scope": record.memory_scope, "session_id": record.session_id,
        "origin_session": record.provenance.session_id, "tags": list(record.tags), "summary": record.summary,
        "extracted": record.extracted, "status": record.status,
    }


def _records_table(rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="What was remembered", show_lines=False, expand=True)
    table.add_column("scope", style="cyan", no_wrap=True)
    table.add_column("session", style="magenta", no_wrap=True)
    table.add_column("tags", style="green")
    table.add_column("summary", ratio=3)
    for row in rows:
        table.add_row(row["scope"], row["session_id"] or f"(from {row['origin_session']})",
                      ", ".join(row["tags"]), row["summary"])
    return table


def _injected_table(question: str, items: dict[str, list[dict[str, Any]]]) -> Any:
    from rich.table import Table

    table = Table(title=f"Injected memory for: {question}", expand=True)
    table.add_column("scope", style="cyan", no_wrap=True)
    table.add_column("score", justify="right", no_wrap=True)
    table.add_column("summary", ratio=3)
    for scope, scoped in items.items():
        for item in scoped:
            table.add_row(scope, f"{item['score']:.3f}", item["summary"])
    if not any(items.values()):
        table.add_row("-", "-", "(nothing injected)")
    return table


def _phase_line(diag: dict[str, Any]) -> str:
    """One readable line of a prepare_request / after_turn diagnostic."""
    calls = diag.get("model_calls", {})
    timings = diag.get("timings_ms", {})
    if diag.get("phase") == "prepare_request":
        plan = diag.get("plan", {}).get("diagnostics", {})
        parts = [f"plan: {plan.get('mode') or plan.get('reason')}"]
        for scope, pkg in diag.get("packages", {}).items():
            rerank = pkg.get("rerank", {})
            note = "skipped" if "memory_rerank_skipped" in pkg else (
                "degraded" if rerank.get("degraded") else rerank.get("reason") or (
                    "on" if rerank.get("enabled") else "off"))
            parts.append(f"{scope}: {pkg.get('selected_count')}/{pkg.get('candidate_count')} selected, rerank {note}")
    else:
        parts = [f"stored {diag.get('stored')}", f"extracted {diag.get('extracted')}"]
        if diag.get("reason"):
            parts.append(f"reason {diag['reason']}")
    parts.append(f"model calls {calls.get('calls', 0)}")
    parts.append(f"{timings.get('total_excluding_model', 0):.1f} ms without model")
    return f"[dim]{diag.get('phase')}[/dim]: " + "; ".join(parts)


def run_demo(
    *,
    path: str | Path = ".vecmem/demo",
    embedder: Any = "auto",
    model: Any = "env",
    console: Any = None,
    quiet: bool = False,
) -> DemoResult:
    """Run the demo and print it to ``console`` (a rich Console; None → stdout, ``quiet`` → nothing).

    Args:
        path: the Chroma directory, recreated on every run.
        embedder: ``auto`` (ONNX MiniLM when installed, else torch), ``minilm``, ``onnx``, ``hash`` or an Embedder.
        model: ``"env"`` (``make_chat_model(from_env=True)``), None for the deterministic path, or a ChatModel.

    Returns:
        A :class:`DemoResult` with the remembered records, the injected memory per question and timings.
    """
    from rich.console import Console
    from rich.panel import Panel

    from .embedders import resolve_embedder
    from .filters import ALL_SCOPES
    from .session import Session
    from .workspace import ChromaWorkspace
    from .workspace.embedding_models import embedding_models

    start = time.perf_counter()
    out = Console(quiet=quiet) if console is None else console
    if model == "env":
        from .llm.factory import make_chat_model

        model = make_chat_model(from_env=True)
    emb = resolve_embedder(embedder)
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
    ws = ChromaWorkspace(path, embedder=emb)
    assistant = model if model is not None else CannedAssistant()
    result = DemoResult(str(path), emb.model_id, getattr(model, "model_name", None) if model else None,
                        spaces=embedding_models(ws)["spaces"])
    mode = (f"model [bold]{result.model}[/bold] runs plan/rerank, extract and consolidate"
            if model else "no model configured (set OPENAI_API_KEY or OPENAI_BASE_URL [+ OPENAI_MODEL] to use "
            "one): deterministic path — raw-turn memories, hybrid retrieval, no rerank")
    out.print(Panel.fit(f"Chroma store: {path}\nembedder: {emb.model_id}\n{mode}", title="agently-vecmem demo"))

    loaded = time.perf_counter()
    with out.status(f"loading the embedding model {emb.model_id} ..."):
        emb.embed_query("warm up")  # the model loads lazily; load it here so the turns below time fairly
    result.embedder_load_s = round(time.perf_counter() - loaded, 3)
    out.print(f"[dim]embedding model ready in {result.embedder_load_s:.2f} s[/dim]")

    def session(sid: str) -> Session:
        s = Session(id=sid)
        # Show the best three memories per scope (the default packs everything that fits 4,000 chars).
        s.settings.set("session.memory.VecMemory.retrieve.selection", "top_n")
        s.settings.set("session.memory.VecMemory.retrieve.top_n", 3)
        if model is None:  # no model decides which facts are global: share the raw turns
            s.settings.set("session.memory.VecMemory.raw_turns.scope", "GLOBAL_MEMORY")
        return s.use_memory(mode="VecMemory", workspace=ws, model=model)

    try:
        for sid, turns in SESSIONS:
            out.rule(f"session {sid}")
            s = session(sid)
            for text in turns:
                out.print(f"[bold]user[/bold]: {text}")
                reply = s.chat(text, model=assistant)
                out.print(f"[bold]assistant[/bold]: {reply}")
                out.print("  " + _phase_line(s.memory.diagnostics[-1]))
        rows = [_record_row(r) for r in ws.scan(scope=ALL_SCOPES) if r.status == "active"]
        result.records = rows
        out.print(_records_table(rows))

        sid, questions = QUESTIONS
        out.rule(f"new session {sid}")
        s = session(sid)
        captured: dict[str, Any] = {}
        original = s.memory.prepare_request

        async def capture(*, prompt: Any, session: Any = None, settings: Any = None) -> dict[str, Any]:
            diag = await original(prompt=prompt, session=session, settings=settings)
            captured["items"] = {k: list(prompt.get(k) or []) for k in ("GLOBAL_MEMORY", "SESSION_MEMORY")
                                 if prompt.get(k) is not None}
            if result.first_retrieval_s is None:
                result.first_retrieval_s = round(time.perf_counter() - start, 3)
            return diag

        s.memory.prepare_request = capture  # the demo shows exactly what the request was given
        for question in questions:
            reply = s.chat(question, model=assistant)
            prep = [d for d in s.memory.diagnostics if d["phase"] == "prepare_request"][-1]
            items = captured.get("items", {})
            out.print(_injected_table(question, items))
            out.print("  " + _phase_line(prep))
            out.print("  " + _phase_line(s.memory.diagnostics[-1]))
            out.print(f"[bold]assistant[/bold]: {reply}\n")
            result.questions.append({
                "question": question, "reply": reply,
                "injected": {k: [{"summary": i["summary"], "score": i["score"]} for i in v] for k, v in items.items()},
                "diagnostics": {"plan": prep.get("plan", {}).get("diagnostics"),
                                "packages": prep.get("packages"), "timings_ms": prep.get("timings_ms"),
                                "model_calls": prep.get("model_calls")},
            })
    finally:
        ws.close()
    result.total_s = round(time.perf_counter() - start, 3)
    out.print(f"time to first retrieval: [bold]{result.first_retrieval_s:.2f} s[/bold] after start "
              f"(embedding model load {result.embedder_load_s:.2f} s and {sum(len(t) for _, t in SESSIONS)} "
              f"stored turns included); total: [bold]{result.total_s:.2f} s[/bold]")
    return result
