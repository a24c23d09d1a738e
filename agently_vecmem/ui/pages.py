"""Server-rendered HTML of the memory browser. Every value from the store goes through :func:`esc`.

Pages carry no inline script or style (the Content-Security-Policy forbids both); interaction lives in
``static/app.js``, which builds its DOM with ``textContent`` only.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from ..records import MEMORY_SCOPES, MemoryRecord, iso_time
from .store import STATUSES, Page

__all__ = ["esc", "layout", "records_page", "record_page", "sessions_page", "session_page", "ask_page",
           "map_page", "error_page"]

NAV = (("/", "Records"), ("/ask", "Ask"), ("/sessions", "Sessions"), ("/map", "Map"))


def esc(value: Any) -> str:
    """HTML-escape any value (quotes too, so it is safe in attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


def _url(path: str, params: Mapping[str, Any]) -> str:
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return path + ("?" + urlencode(kept) if kept else "")


def layout(title: str, body: str, *, active: str, info: Mapping[str, Any], csrf: str, writable: bool) -> str:
    """The page shell: navigation, store banner, main content."""
    nav = "".join(
        f'<a href="{href}"{" aria-current=page" if href == active else ""}>{esc(label)}</a>' for href, label in NAV
    )
    where = info.get("where", "")
    mode = "writable" if writable else "read-only"
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f'<meta name="csrf-token" content="{esc(csrf)}">'
        f"<title>{esc(title)} · agently-vecmem</title>"
        '<link rel=stylesheet href="/static/app.css"><script src="/static/app.js" defer></script></head><body>'
        '<a class=skip href="#main">Skip to content</a>'
        f'<header><span class=brand>agently-vecmem</span><nav aria-label="Views">{nav}</nav>'
        f'<span class=store title="{esc(where)}">{esc(where)} · {esc(info.get("count", "?"))} records · '
        f'<span class="badge {mode}">{mode}</span></span></header>'
        f'<main id=main tabindex=-1><h1>{esc(title)}</h1>{body}</main>'
        '<div id=confirm class=dialog role=alertdialog aria-modal=true aria-labelledby=confirm-title hidden>'
        '<div class=dialog-box><h2 id=confirm-title>Forget this memory?</h2><p id=confirm-text></p>'
        '<p class=muted>It is removed from the store for good.</p>'
        '<button type=button id=confirm-yes class=danger>Forget</button> '
        '<button type=button id=confirm-no>Cancel</button></div></div>'
        "</body></html>"
    )


def _select(name: str, label: str, options: Iterable[tuple[str, str]], value: str | None) -> str:
    opts = "".join(f'<option value="{esc(v)}"{" selected" if (value or "") == v else ""}>{esc(t)}</option>'
                   for v, t in options)
    return f'<label>{esc(label)} <select name="{esc(name)}" id="f-{esc(name)}">{opts}</select></label>'


def _input(name: str, label: str, value: str | None, *, kind: str = "text", extra: str = "") -> str:
    return (f'<label>{esc(label)} <input type={kind} name="{esc(name)}" id="f-{esc(name)}" '
            f'value="{esc(value or "")}" {extra}></label>')


def _tags(tags: Sequence[str]) -> str:
    return "".join(f"<span class=tag>{esc(t)}</span>" for t in tags)


def _kind(record: MemoryRecord) -> str:
    return "extracted" if record.extracted else "raw turn"


def _forget_button(record: MemoryRecord, writable: bool) -> str:
    if not writable:
        return ""
    return (f'<button type=button class="forget danger" data-forget="{esc(record.id)}" '
            f'data-summary="{esc(record.summary)}" aria-label="Forget {esc(record.summary[:60])}">Forget</button>')


def _record_row(record: MemoryRecord, writable: bool, extra: str = "") -> str:
    return (
        f'<tr data-id="{esc(record.id)}">{extra}<td class=date>{esc(iso_time(record.created_at)[:19])}</td>'
        f"<td>{esc(record.memory_scope)}</td><td>{esc(record.session_id or '')}</td>"
        f'<td class=summary><a href="/record/{quote(record.id, safe="")}">{esc(record.summary or "(empty)")}</a></td>'
        f"<td>{_tags(record.tags)}</td><td><span class='status {esc(record.status)}'>{esc(record.status)}</span></td>"
        f"<td>{esc(_kind(record))}</td><td>{_forget_button(record, writable)}</td></tr>"
    )


def _filters_form(q: Mapping[str, str]) -> str:
    scope_opts = [("", "all scopes"), *((s, s) for s in MEMORY_SCOPES)]
    status_opts = [("", "any status"), *((s, s) for s in STATUSES)]
    kind_opts = [("", "raw and extracted"), ("extracted", "extracted"), ("raw", "raw turns")]
    date_opts = [("created_at", "created"), ("occurred_at", "occurred")]
    size_opts = [(str(n), f"{n} per page") for n in (25, 50, 100, 200)]
    return (
        '<form class=filters method=get action="/" role=search aria-label="Filter records">'
        + _select("scope", "Scope", scope_opts, q.get("scope"))
        + _input("session", "Session", q.get("session"), extra="list=sessions-list autocomplete=off")
        + _input("tag", "Tags", q.get("tag"), extra="list=tags-list placeholder=a,b autocomplete=off")
        + _select("status", "Status", status_opts, q.get("status"))
        + _select("kind", "Kind", kind_opts, q.get("kind"))
        + _select("date_field", "Date", date_opts, q.get("date_field"))
        + _input("from", "From", q.get("from"), kind="date")
        + _input("to", "To", q.get("to"), kind="date")
        + _select("limit", "Page", size_opts, q.get("limit") or "50")
        + '<button type=submit id=apply>Apply</button> <a href="/" class=reset>Reset</a>'
        + '<datalist id=sessions-list></datalist><datalist id=tags-list></datalist></form>'
    )


def _search_form(q: Mapping[str, str]) -> str:
    scope_opts = [("GLOBAL_MEMORY", "GLOBAL_MEMORY"), ("SESSION_MEMORY", "SESSION_MEMORY of the session")]
    return (
        '<form class=search method=get action="/" role=search aria-label="Search memories">'
        f'<label>Search <input type=search name=q id=q value="{esc(q.get("q", ""))}" '
        'placeholder="hybrid retrieval (press / to focus)"></label>'
        + _select("scope", "in", scope_opts, q.get("scope") or "GLOBAL_MEMORY").replace('id="f-scope"', 'id="q-scope"')
        + _input("session", "session", q.get("session"), extra="list=sessions-list autocomplete=off").replace(
            'id="f-session"', 'id="q-session"')
        + '<button type=submit id=search-go>Search</button></form>'
    )


def records_page(page: Page, q: Mapping[str, str], *, writable: bool) -> str:
    """The records view body: filters, search box, one page of the table and the pager."""
    rows = "".join(_record_row(r, writable) for r in page.records) or "<tr><td colspan=8>No records match.</td></tr>"
    first = page.offset + 1 if page.records else 0
    last = page.offset + len(page.records)
    params = {k: v for k, v in q.items() if k != "offset"}
    prev_link = next_link = ""
    if page.offset > 0:
        prev_link = f'<a rel=prev id=prev href="{esc(_url("/", {**params, "offset": max(0, page.offset - page.limit)}))}">← Newer</a>'
    if last < page.total:
        next_link = f'<a rel=next id=next href="{esc(_url("/", {**params, "offset": last}))}">Older →</a>'
    return (
        _search_form({}) + _filters_form(q)
        + f'<p class=count id=count>{first:,}–{last:,} of {page.total:,} records, newest first</p>'
        + '<table id=records><thead><tr><th>Created (UTC)</th><th>Scope</th><th>Session</th><th>Summary</th>'
        + f"<th>Tags</th><th>Status</th><th>Kind</th><th></th></tr></thead><tbody>{rows}</tbody></table>"
        + f'<nav class=pager aria-label=Pages>{prev_link} {next_link}</nav>'
    )


def search_page(result: Mapping[str, Any], q: Mapping[str, str], *, writable: bool) -> str:
    """Search results with each hit's dense, lexical and fused scores."""
    rows = []
    for hit in result["hits"]:
        rec = MemoryRecord.model_validate({k: v for k, v in hit["record"].items() if k not in ("created", "occurred")})
        scores = (f"<td class=num>{hit['rank']}</td><td class=num>{hit['score']:.3f}</td>"
                  f"<td class=num>{hit['dense']:.3f}</td><td class=num>{hit['lexical']:.3f}</td>"
                  f"<td class=num>{hit['fused']:.3f}</td>")
        rows.append(_record_row(rec, writable, scores))
    scope = result["scope"]
    where = esc(scope["memory_scope"]) + (f" of {esc(scope['session_id'])}" if scope.get("session_id") else "")
    return (
        _search_form(q)
        + f'<p class=count id=count>{len(result["hits"])} hits for “{esc(result["query"])}” in {where} '
        + f'({result["scope_size"]:,} active records; dense signal: {esc(result["dense_signal"])}). '
        + '<a href="/">Back to all records</a></p>'
        + '<table id=hits><thead><tr><th>#</th><th>Score</th><th>Dense</th><th>Lexical</th><th>Fused</th>'
        + "<th>Created (UTC)</th><th>Scope</th><th>Session</th><th>Summary</th><th>Tags</th><th>Status</th>"
        + f"<th>Kind</th><th></th></tr></thead><tbody>{''.join(rows) or '<tr><td colspan=13>No hits.</td></tr>'}"
        + "</tbody></table>"
    )


def _json_block(value: Any) -> str:
    return f"<pre class=json>{esc(json.dumps(value, ensure_ascii=False, indent=2, default=str))}</pre>"


def record_page(record: MemoryRecord, chain: Sequence[MemoryRecord], *, writable: bool) -> str:
    """A record's fields, body, provenance and its supersede chain as a timeline."""
    dates = [("created", iso_time(record.created_at)), ("updated", iso_time(record.updated_at))]
    if record.occurred_at is not None:
        dates.insert(0, ("occurred", iso_time(record.occurred_at)))
    fields = [
        ("Summary", f"<span id=summary>{esc(record.summary)}</span>"),
        ("Id", f"<code>{esc(record.id)}</code>"),
        ("Scope", esc(record.memory_scope) + (f" · session {esc(record.session_id)}" if record.session_id else "")),
        ("Status", f"<span class='status {esc(record.status)}'>{esc(record.status)}</span> · {esc(_kind(record))}"),
        ("Tags", _tags(record.tags) or "<span class=muted>none</span>"),
        ("Importance", esc(record.importance)),
        *((label.capitalize(), esc(value)) for label, value in dates),
    ]
    dl = "".join(f"<dt>{label}</dt><dd>{value}</dd>" for label, value in fields)
    steps = []
    for r in chain:
        current = " current" if r.id == record.id else ""
        steps.append(
            f'<li class="step{current}" data-id="{esc(r.id)}"><span class=date>{esc(iso_time(r.created_at)[:19])}</span> '
            f"<span class='status {esc(r.status)}'>{esc(r.status)}</span> "
            + (f'<a href="/record/{quote(r.id, safe="")}">{esc(r.summary)}</a>' if not current else
               f"<strong>{esc(r.summary)}</strong> <span class=muted>(this record)</span>")
            + "</li>"
        )
    timeline = (f'<ol class=timeline id=chain aria-label="Supersede chain, oldest first">{"".join(steps)}</ol>'
                if len(chain) > 1 else "<p class=muted id=chain>Not part of a supersede chain.</p>")
    return (
        f'<section class=detail data-id="{esc(record.id)}"><dl>{dl}</dl>{_forget_button(record, writable)}</section>'
        f"<h2>Supersede chain</h2>{timeline}"
        f"<h2>Body</h2>{_json_block(record.body)}<h2>Provenance</h2>{_json_block(record.provenance.model_dump(mode='json'))}"
    )


def sessions_page(facets: Mapping[str, Any]) -> str:
    """Every session with its record and raw-turn counts."""
    rows = "".join(
        f'<tr><td><a href="/sessions/{quote(s["id"], safe="")}">{esc(s["id"])}</a></td>'
        f'<td class=num>{s["records"]:,}</td><td class=num>{s["raw_turns"]:,}</td></tr>'
        for s in facets["sessions"]
    ) or "<tr><td colspan=3>No sessions.</td></tr>"
    return (f'<table id=sessions><thead><tr><th>Session</th><th>Records</th><th>Raw turns</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>")


def _turn(rec: Mapping[str, Any]) -> str:
    body = rec.get("body") or {}
    parts = []
    for role in ("user", "assistant"):
        if body.get(role):
            parts.append(f"<p class=turn-{role}><b>{role}</b> {esc(body[role])}</p>")
    if not parts:
        parts.append(f"<p>{esc(rec.get('summary'))}</p>")
    return (f'<li data-id="{esc(rec["id"])}"><span class=date>{esc((rec.get("occurred") or rec["created"])[:19])}</span>'
            f'{"".join(parts)}<a class=muted href="/record/{quote(rec["id"], safe="")}">details</a></li>')


def _memory(rec: Mapping[str, Any]) -> str:
    return (f'<li data-id="{esc(rec["id"])}"><span class=date>{esc(rec["created"][:19])}</span> '
            f'<span class="status {esc(rec["status"])}">{esc(rec["status"])}</span> {esc(rec["memory_scope"])} '
            f'<a href="/record/{quote(rec["id"], safe="")}">{esc(rec["summary"])}</a> {_tags(rec.get("tags") or [])}</li>')


def session_page(data: Mapping[str, Any]) -> str:
    """A session's raw turns beside the memories extracted from it."""
    turns = "".join(_turn(r) for r in data["turns"]) or "<li class=muted>No raw turns.</li>"
    mems = "".join(_memory(r) for r in data["memories"]) or "<li class=muted>No extracted memories.</li>"
    return (
        f'<p><a href="{esc(_url("/ask", {"session": data["session_id"]}))}">Ask in this session</a> · '
        f'<a href="{esc(_url("/", {"session": data["session_id"]}))}">Its records</a></p>'
        f'<div class=columns><section aria-labelledby=turns-h><h2 id=turns-h>Recorded turns ({len(data["turns"])})</h2>'
        f'<ol id=turns class=turns>{turns}</ol></section>'
        f'<section aria-labelledby=mem-h><h2 id=mem-h>Extracted memories ({len(data["memories"])})</h2>'
        f'<ol id=memories class=memories>{mems}</ol></section></div>'
    )


def ask_page(q: Mapping[str, str], *, has_model: bool) -> str:
    """The Ask form; the trace is fetched from ``/api/ask`` and rendered by app.js."""
    mode = "with the configured model (plan and rerank)" if has_model else "without a model (deterministic path)"
    return (
        f"<p class=muted>Runs <code>prepare_request</code> {esc(mode)} and shows what it would inject.</p>"
        '<form id=ask-form class=ask method=get action="/ask">'
        f'<label>Question <input type=text name=q id=ask-q value="{esc(q.get("q", ""))}" required size=60></label>'
        + _input("session", "Session", q.get("session"), extra="list=sessions-list autocomplete=off").replace(
            'id="f-session"', 'id="ask-session"')
        + '<button type=submit id=ask-go>Ask</button><datalist id=sessions-list></datalist></form>'
        '<div id=ask-result aria-live=polite></div>'
    )


def map_page(q: Mapping[str, str]) -> str:
    """The map controls; the projection is fetched from ``/api/map`` and drawn by app.js as SVG."""
    return (
        '<form id=map-form class=filters method=get action="/map">'
        + _select("scope", "Scope", [("GLOBAL_MEMORY", "GLOBAL_MEMORY"), ("SESSION_MEMORY", "SESSION_MEMORY")],
                  q.get("scope"))
        + _input("session", "Session", q.get("session"), extra="list=sessions-list autocomplete=off")
        + _select("color", "Colour by", [("session", "session"), ("tag", "tag")], q.get("color"))
        + '<button type=submit id=map-go>Draw</button><datalist id=sessions-list></datalist></form>'
        '<p id=map-info class=muted aria-live=polite></p><div id=map class=map></div>'
        '<div id=map-tip class=tip role=status hidden></div><ul id=map-legend class=legend></ul>'
    )


def error_page(status: int, message: str) -> str:
    """A readable error body (the layout is added by the caller when the store is readable)."""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>Error · agently-vecmem</title>"
        '<link rel=stylesheet href="/static/app.css"></head><body><main id=main class=error>'
        f'<h1>{esc(_TITLES.get(status, "Error"))}</h1><p id=error-message>{esc(message)}</p>'
        '<p><a href="/">Back to the records</a></p></main></body></html>'
    )


_TITLES = {400: "Bad request", 401: "Access token required", 403: "Forbidden", 404: "Not found",
           405: "Method not allowed", 500: "Something went wrong", 503: "The memory store is unavailable"}
