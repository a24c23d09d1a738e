"""The browser's JSON API and its guards, without a browser: bind/token/CSRF refusals, the Host check,
bad input and unreachable stores as JSON errors, paging through Chroma, a Chroma server, and the Ask trace
with a model (rerank decisions and fallbacks)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any

import pytest
from conftest import FILLER

from agently_vecmem.cli import main
from agently_vecmem.testing import DeterministicEmbedder, Fault, ScriptedModel, phase_input
from agently_vecmem.ui import UIConfig, create_app, start_in_thread
from agently_vecmem.ui.store import Browser, RecordFilter
from agently_vecmem.workspace import ChromaWorkspace


def call(url: str, *, method: str = "GET", data: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    body = json.dumps(data).encode() if data is not None else None
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req) as res:
            raw = res.read()
            return res.status, res.headers, json.loads(raw) if "json" in res.headers["content-type"] else raw.decode()
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, e.headers, json.loads(raw) if "json" in (e.headers["content-type"] or "") else raw.decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------- CLI
@pytest.mark.parametrize("argv, says", [
    (["--bind", "0.0.0.0:8765"], "refusing to serve on '0.0.0.0'"),
    (["--bind", "192.168.1.5:80", "--allow-remote"], "--allow-remote needs an access token"),
    (["--bind", "nonsense:port"], "invalid --bind"),
])
def test_cli_refuses_remote_binds(store_path: str, capsys: Any, monkeypatch: Any, argv: list[str], says: str) -> None:
    monkeypatch.delenv("AGENTLY_VECMEM_UI_TOKEN", raising=False)
    assert main(["--embedder", "hash", "ui", store_path, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agently-vecmem: error: ") and says in err and "\n" not in err


def test_cli_missing_store_and_down_server(tmp_path: Any, capsys: Any) -> None:
    assert main(["--embedder", "hash", "ui", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert "no memory store at" in err and "\n" not in err
    assert not (tmp_path / "nope").exists()
    assert main(["--embedder", "hash", "ui", "--host", "127.0.0.1", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agently-vecmem: error: ") and "\n" not in err
    assert main(["--embedder", "hash", "ui"]) == 2
    assert "pass STORE" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- guards
def test_host_header_must_be_loopback(served: Any) -> None:
    status, _, body = call(served.url + "/api/info", headers={"Host": "evil.example:8765"})
    assert status == 403 and "loopback" in body["error"]
    assert call(served.url + "/api/info")[0] == 200


def test_access_token(store_path: str) -> None:
    token = "t" * 24
    app = create_app(store_path, embedder=DeterministicEmbedder(), config=UIConfig(token=token, allow_remote=True))
    server = start_in_thread(app)
    try:
        status, _, body = call(server.url + "/api/info")
        assert status == 401 and "access token" in body["error"]
        assert call(server.url + "/api/info", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert call(server.url + "/api/info", headers={"Authorization": f"Bearer {token}"})[0] == 200
        assert call(server.url + "/", headers={"Cookie": f"vecmem_ui_token={token}"})[0] == 200

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: Any) -> None:
                return None

        opener = urllib.request.build_opener(NoRedirect)
        with pytest.raises(urllib.error.HTTPError) as e:
            opener.open(server.url + f"/?token={token}&scope=GLOBAL_MEMORY")
        assert e.value.code == 303 and e.value.headers["location"] == "/?scope=GLOBAL_MEMORY"
        assert f"vecmem_ui_token={token}; HttpOnly; SameSite=Strict" in e.value.headers["set-cookie"]
    finally:
        server.stop()
        app.close()


def test_forget_needs_a_post_with_the_csrf_token(served_writable: Any, served: Any, records: dict[str, Any]) -> None:
    target = records["filler"][0].id
    url = served_writable.url + "/api/forget"
    csrf = call(served_writable.url + "/")[2].split('name="csrf-token" content="')[1].split('"')[0]
    assert call(url, method="POST", data={"ids": [target]})[0] == 403
    status, _, body = call(url, method="POST", data={"ids": [target]}, headers={"X-CSRF-Token": "wrong"})
    assert status == 403 and "CSRF" in body["error"]
    status, _, body = call(url, method="POST", data={"ids": [target]},
                           headers={"X-CSRF-Token": csrf, "Origin": "http://evil.example"})
    assert status == 403 and "cross-origin" in body["error"]
    assert call(url, method="GET")[0] == 404  # no GET that changes anything
    assert call(url, method="DELETE", headers={"X-CSRF-Token": csrf})[0] == 405
    status, _, body = call(url, method="POST", data={"ids": "x"}, headers={"X-CSRF-Token": csrf})
    assert status == 400
    assert call(served_writable.url + f"/api/record/{target}")[0] == 200  # nothing was forgotten so far
    status, _, body = call(url, method="POST", data={"ids": [target]}, headers={"X-CSRF-Token": csrf})
    assert (status, body["forgotten"]) == (200, 1)
    assert call(served_writable.url + f"/api/record/{target}")[0] == 404
    # read-only: refused even with the right token
    ro_csrf = call(served.url + "/")[2].split('name="csrf-token" content="')[1].split('"')[0]
    status, _, body = call(served.url + "/api/forget", method="POST", data={"ids": [target]},
                           headers={"X-CSRF-Token": ro_csrf})
    assert status == 403 and "read-only" in body["error"]


@pytest.mark.parametrize("path, status, says", [
    ("/api/records?limit=abc", 400, "limit must be an integer"),
    ("/api/records?limit=100000", 400, "limit must be 1..500"),
    ("/api/records?from=yesterday", 400, "invalid date 'yesterday'"),
    ("/api/records?status=weird", 400, "unknown status"),
    ("/api/search?q=tea&scope=SESSION_MEMORY", 400, "pick a session"),
    ("/api/search?q=tea&session=nobody", 404, "unknown session 'nobody'"),
    ("/api/ask?q=tea&session=nobody", 404, "unknown session 'nobody'"),
    ("/api/sessions/nobody", 404, "unknown session 'nobody'"),
    ("/api/record/nope", 404, "no memory record with id 'nope'"),
    ("/api/nothing", 404, "no API endpoint"),
])
def test_bad_input_is_a_json_error(served: Any, path: str, status: int, says: str) -> None:
    got, headers, body = call(served.url + path)
    assert got == status and headers["content-type"] == "application/json"
    assert says in body["error"] and "Traceback" not in body["error"]


def test_down_server_and_missing_store_are_json_errors(tmp_path: Any) -> None:
    for app in (create_app(host="127.0.0.1", port=free_port(), embedder=DeterministicEmbedder()),
                create_app(str(tmp_path / "none"), embedder=DeterministicEmbedder())):
        server = start_in_thread(app)
        try:
            status, _, body = call(server.url + "/api/records")
            assert status == 503 and "check that the store exists" in body["error"]
        finally:
            server.stop()


# ---------------------------------------------------------------------------------------------- paging
def test_pages_are_read_with_limit_and_offset(store_path: str, records: dict[str, Any]) -> None:
    ws = ChromaWorkspace(store_path, embedder=DeterministicEmbedder(), read_only=True)
    browser = Browser(ws)
    seen: list[dict[str, Any]] = []
    real = ws.page
    ws.page = lambda **kw: (seen.append(kw), real(**kw))[1]  # type: ignore[method-assign]
    flt = RecordFilter(tags=("filler",))
    pages = [browser.page(flt, offset=o, limit=50) for o in (0, 50, 100)]
    ids = [r.id for p in pages for r in p.records]
    assert ids == [r.id for r in reversed(records["filler"])]  # newest first, no gaps or repeats
    assert [p.total for p in pages] == [FILLER] * 3
    reads = [kw for kw in seen if kw.get("limit", 1) > 1]
    assert [kw["limit"] for kw in reads] == [50, 50, 20]  # one page per read, never the whole scope
    assert browser.page(flt, offset=FILLER + 10, limit=50).records == []
    # every record of the store is one "memory" record: no redundant collection clause
    assert RecordFilter().where(only_memory=True) is None
    assert browser.where(RecordFilter(scope="SESSION_MEMORY", session="alice")) == {"session_id": {"$eq": "alice"}}


def test_works_against_a_chroma_server(chroma_server: tuple[str, int], records: dict[str, Any]) -> None:
    host, port = chroma_server
    ws = ChromaWorkspace(host=host, port=port, collection="ui-test", embedder=DeterministicEmbedder())
    ws.put(records["chain"] + records["alice_mems"])
    ws.close()
    app = create_app(host=host, port=port, collection="ui-test", embedder=DeterministicEmbedder())
    server = start_in_thread(app)
    try:
        assert call(server.url + "/api/records")[2]["total"] == 6
        hits = call(server.url + "/api/search?q=Tokyo")[2]["hits"]
        assert hits[0]["record"]["summary"] == "User moved to Tokyo in spring"
        assert {"dense", "lexical", "fused"} <= set(hits[0])
        status, _, page = call(server.url + f"/record/{records['chain'][1].id}")
        assert status == 200 and page.count('class="step') == 3
        assert call(server.url + "/api/ask?q=cat&session=alice")[0] == 200
    finally:
        server.stop()
        app.close()


# ---------------------------------------------------------------------------------------------- ask with a model
def test_ask_with_a_model_shows_rerank_decisions_and_fallbacks(store_path: str) -> None:
    model = ScriptedModel()

    def fused(body: dict[str, Any]) -> dict[str, Any]:
        cands = phase_input(body)["candidates"]
        return {"query": "cat", "tags": [], "include_global": True, "include_session": True,
                "decisions": [{"id": c["id"], "useful": "cat" in c["summary"], "score": 0.9, "reason": "r"}
                              for c in cands]}

    model.on("retrieve_plan", fused)
    app = create_app(store_path, embedder=DeterministicEmbedder(), config=UIConfig(model=model))
    server = start_in_thread(app)
    try:
        trace = call(server.url + "/api/ask?q=Does+the+user+have+a+cat%3F&session=alice")[2]
        assert trace["plan"]["query"] == "cat" and trace["plan"]["diagnostics"]["mode"] == "fused"
        (reply,) = trace["model_replies"]
        assert reply["phase"] == "retrieve_plan" and reply["reply"]["decisions"]
        session = trace["scopes"]["SESSION_MEMORY"]
        assert session["rerank"]["enabled"] is True and session["rerank"]["dropped"] >= 1
        assert [i["summary"] for i in session["injected"]] == ["User has a cat named Miso"]
        # a failing model: the fallback is visible
        model.reset()
        model.on("retrieve_plan", lambda body: Fault.status(500))
        trace = call(server.url + "/api/ask?q=cat&session=alice")[2]
        assert trace["diagnostics"]["degraded"] is True
        reasons = {f["reason"] for f in trace["fallbacks"]}
        assert "rerank_failed" in reasons and "retrieve_plan_failed" in reasons
        assert trace["scopes"]["SESSION_MEMORY"]["injected"]  # the deterministic package is kept
    finally:
        server.stop()
        app.close()
