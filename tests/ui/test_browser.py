"""The memory browser in a real browser (headless Debian Chromium via Playwright): every view loads,
filters and pages, a record's chain, the Ask trace against prepare_request's diagnostics, forget, keyboard
use, hostile text rendered as text, and readable errors. Screenshots go to docs/screenshots/."""

from __future__ import annotations

import json
import re
import urllib.request
from typing import Any

import pytest
from conftest import FILLER, HOSTILE_IMG, HOSTILE_SCRIPT, HOSTILE_SESSION, shot

from agently_vecmem.memory.plugin import VecMemory
from agently_vecmem.session import Prompt, Session
from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.ui import create_app, start_in_thread
from agently_vecmem.workspace import ChromaWorkspace


def api(url: str) -> Any:
    with urllib.request.urlopen(url) as res:
        return json.loads(res.read())


def test_records_first_page_reads_without_javascript(chromium: Any, served: Any) -> None:
    context = chromium.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(served.url + "/")
    rows = page.locator("#records tbody tr")
    assert rows.count() == 50
    total = api(served.url + "/api/records?limit=1")["total"]
    assert page.locator("#count").inner_text() == f"1–50 of {total} records, newest first"
    # the filter form works without JavaScript too (a plain GET form)
    page.select_option("#f-kind", "raw")
    page.click("#apply")
    assert "kind=raw" in page.url
    assert all(t == "raw turn" for t in page.locator("#records tbody td:nth-child(7)").all_inner_texts())
    context.close()


def test_filter_and_page(page: Any, served: Any) -> None:
    page.goto(served.url + "/")
    shot(page, "records")
    page.select_option("#f-scope", "GLOBAL_MEMORY")
    page.fill("#f-tag", "filler")
    page.select_option("#f-limit", "50")
    page.click("#apply")
    assert page.locator("#count").inner_text() == f"1–50 of {FILLER} records, newest first"
    summaries = page.locator("#records td.summary").all_inner_texts()
    assert summaries[0].startswith(f"note number {FILLER - 1} ") and summaries[49].startswith(f"note number {FILLER - 50} ")
    page.click("#next")
    assert page.locator("#count").inner_text() == f"51–100 of {FILLER} records, newest first"
    page.click("#next")
    assert page.locator("#count").inner_text() == f"101–{FILLER} of {FILLER} records, newest first"
    assert page.locator("#next").count() == 0
    assert page.locator("#records td.summary").last.inner_text().startswith("note number 0 ")
    page.click("#prev")
    assert page.locator("#count").inner_text().startswith("51–100 ")
    # status, date range and several tags narrow further
    page.goto(served.url + "/?status=superseded")
    assert sorted(page.locator("#records td.summary").all_inner_texts()) == ["User lives in Paris", "User moved to Berlin"]
    page.goto(served.url + "/?tag=filler,topic1&from=2024-01-02&to=2024-01-02")
    texts = page.locator("#records td.summary").all_inner_texts()
    numbers = sorted(int(re.search(r"number (\d+)", t).group(1)) for t in texts)  # type: ignore[union-attr]
    assert numbers == [i for i in range(24, 48) if i % 3 == 1]
    page.goto(served.url + "/?session=alice&kind=extracted")
    assert sorted(page.locator("#records td.summary").all_inner_texts()) == [
        "User has a cat named Miso", "User's sister visits in June"]


def test_search_shows_dense_lexical_and_fused_scores(page: Any, served: Any) -> None:
    page.goto(served.url + "/")
    page.fill("#q", "where does the user live Tokyo")
    page.press("#q", "Enter")
    page.wait_for_selector("#hits")
    shot(page, "search")
    headers = page.locator("#hits th").all_inner_texts()
    assert headers[:5] == ["#", "Score", "Dense", "Lexical", "Fused"]
    first = page.locator("#hits tbody tr").first
    assert "Tokyo" in first.locator("td.summary").inner_text()
    expected = api(served.url + "/api/search?q=where+does+the+user+live+Tokyo")["hits"][0]
    cells = first.locator("td.num").all_inner_texts()
    assert cells == [str(expected["rank"]), f"{expected['score']:.3f}", f"{expected['dense']:.3f}",
                     f"{expected['lexical']:.3f}", f"{expected['fused']:.3f}"]
    assert expected["record"]["summary"] == "User moved to Tokyo in spring"


def test_record_detail_and_supersede_chain(page: Any, served: Any, records: dict[str, Any]) -> None:
    c1, c2, c3 = records["chain"]
    page.goto(served.url + "/?status=superseded")
    page.get_by_role("link", name="User moved to Berlin").click()
    assert page.locator("#summary").inner_text() == "User moved to Berlin"
    steps = page.locator("#chain li")
    assert steps.count() == 3
    assert [steps.nth(i).get_attribute("data-id") for i in range(3)] == [c1.id, c2.id, c3.id]
    assert "current" in (steps.nth(1).get_attribute("class") or "")
    assert page.locator("main pre.json").first.inner_text().strip() == "{}"
    shot(page, "record")
    steps.nth(2).get_by_role("link").click()
    assert page.locator("#summary").inner_text() == "User moved to Tokyo in spring"
    assert "Occurred" in page.locator("dl").inner_text()


def test_ask_trace_matches_prepare_request(page: Any, served: Any, store_path: str) -> None:
    question = "Does the user have a cat?"
    page.goto(served.url + "/ask")
    page.fill("#ask-q", question)
    page.fill("#ask-session", "alice")
    page.click("#ask-go")
    page.wait_for_selector("#trace-query")
    shot(page, "ask")
    assert page.locator("#trace-query").inner_text() == question
    # the same call made directly on the store
    ws = ChromaWorkspace(store_path, embedder=DeterministicEmbedder(), read_only=True)
    prompt = Prompt()
    prompt.set("input", question)
    diag = VecMemory(workspace=ws).prepare_request_sync(prompt=prompt, session=Session(id="alice"))
    for name, pkg in diag["packages"].items():
        section = page.locator(f'section[data-scope="{name}"]')
        assert section.locator(".used-chars").inner_text() == str(pkg["used_chars"])
        assert f"of {pkg['char_budget']} characters" in section.locator(".budget").inner_text()
        injected = [li.get_attribute("data-id") for li in section.locator("ol.injected li").all()]
        assert injected == [item["source_ref"]["id"] for item in prompt.get(name)]
        assert section.locator("table.candidates tbody tr").count() == pkg["candidate_count"]
    fallbacks = page.locator("#fallbacks li").all_inner_texts()
    assert fallbacks[0] == "plan: deterministic_fallback — no_model"  # no model: the deterministic plan
    omitted = [f"package {name}: omitted: {o['reason']} — {o['count']} memories"
               for name, pkg in diag["packages"].items() for o in pkg["omitted"]]
    assert fallbacks[1:] == omitted
    session_sec = page.locator('section[data-scope="SESSION_MEMORY"]')
    assert "User has a cat named Miso" in session_sec.locator("ol.injected").inner_text()
    # an unknown session is a readable error, not a trace
    page.fill("#ask-session", "nobody")
    page.click("#ask-go")
    assert page.locator("#ask-error").inner_text() == "unknown session 'nobody'"


def test_sessions_show_turns_beside_extracted_memories(page: Any, served: Any) -> None:
    page.goto(served.url + "/sessions")
    assert "alice" in page.locator("#sessions").inner_text()
    page.get_by_role("link", name="alice", exact=True).click()
    turns = page.locator("#turns li").all_inner_texts()
    assert len(turns) == 3 and "I adopted a cat named Miso" in turns[0]
    memories = page.locator("#memories").inner_text()
    assert "User has a cat named Miso" in memories and "User likes oolong tea" in memories  # GLOBAL, from alice
    shot(page, "sessions")
    page.goto(served.url + "/sessions/nobody")
    assert page.locator("#error-message").inner_text() == "unknown session 'nobody'"


def test_map_projects_the_scope_and_shows_summaries_on_hover(page: Any, served: Any) -> None:
    page.goto(served.url + "/map?color=tag")
    page.wait_for_selector("#map svg circle")
    total = api(served.url + "/api/map")["total"]
    assert page.locator("#map circle").count() == total
    dot = page.locator("#map circle").first
    dot.hover()
    summary = dot.locator("title").text_content()
    assert page.locator("#map-tip").inner_text().startswith(summary)
    assert "explain" in page.locator("#map-info").inner_text()
    shot(page, "map")
    page.select_option("#f-scope", "SESSION_MEMORY")
    page.fill("#f-session", "alice")
    page.click("#map-go")
    page.wait_for_function("() => document.querySelectorAll('#map circle').length === 5")


def test_forget_with_confirmation(page: Any, served_writable: Any, records: dict[str, Any]) -> None:
    target = records["bob"][0]
    url = served_writable.url
    page.goto(url + "/?session=bob")
    row = page.locator(f'tr[data-id="{target.id}"]')
    row.get_by_role("button", name=re.compile("Forget")).click()
    assert page.locator("#confirm").is_visible()
    assert "Bob plays chess" in page.locator("#confirm-text").inner_text()
    page.click("#confirm-no")  # cancel keeps it
    assert page.locator("#confirm").is_hidden() and row.count() == 1
    page.goto(url + f"/record/{target.id}")
    page.get_by_role("button", name=re.compile("Forget")).click()
    shot(page, "forget")
    page.click("#confirm-yes")
    page.wait_for_selector("#forgotten")
    with pytest.raises(urllib.error.HTTPError) as err:
        api(url + f"/api/record/{target.id}")
    assert err.value.code == 404
    page.goto(url + "/?session=bob")
    assert page.locator("#records tbody").inner_text() == "No records match."


def test_forget_is_not_offered_read_only(page: Any, served: Any) -> None:
    page.goto(served.url + "/")
    assert page.locator("[data-forget]").count() == 0
    assert page.locator(".badge").inner_text() == "read-only"


def test_keyboard_navigation(page: Any, served_writable: Any) -> None:
    url = served_writable.url
    page.goto(url + "/")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Records"
    for _ in range(3):
        page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Map"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "q"  # the search box comes first in the content
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "q-scope"
    # "/" jumps to search from anywhere; Enter searches
    page.locator("#count").click()
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "q"
    page.keyboard.type("oolong tea")
    page.keyboard.press("Enter")
    page.wait_for_selector("#hits")
    # j focuses the first result; Enter opens it
    page.locator("#count").click()
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.textContent") == "User likes oolong tea"
    page.keyboard.press("Enter")
    page.wait_for_selector("#summary")
    # the forget confirmation: focus goes to Cancel, Tab stays in the dialog, Escape closes it
    page.locator("[data-forget]").focus()
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "confirm-no"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "confirm-yes"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "confirm-no"
    page.keyboard.press("Escape")
    assert page.locator("#confirm").is_hidden()
    assert page.evaluate("document.activeElement.hasAttribute('data-forget')")
    # the filter form is reachable and usable with the keyboard alone
    page.goto(url + "/")
    page.focus("#f-scope")
    page.keyboard.press("ArrowDown")  # all scopes -> GLOBAL_MEMORY
    page.focus("#apply")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"scope=GLOBAL_MEMORY"))


def test_hostile_text_renders_as_text(page: Any, served: Any, records: dict[str, Any]) -> None:
    url = served.url
    script, img, sess = records["hostile"]
    page.goto(url + "/")
    body = page.locator("#records").inner_text()
    assert f"hostile {HOSTILE_SCRIPT}" in body and f"hostile {HOSTILE_IMG}" in body and HOSTILE_SESSION in body
    page.goto(url + f"/record/{img.id}")
    assert page.locator("#summary").inner_text() == f"hostile {HOSTILE_IMG}"
    assert HOSTILE_IMG in page.locator(".tag").inner_text()
    page.goto(url + f"/record/{script.id}")
    assert HOSTILE_SCRIPT in page.locator("main pre.json").first.inner_text()
    page.goto(url + "/?q=hostile")
    page.goto(url + "/sessions")
    page.get_by_role("link", name=HOSTILE_SESSION).click()
    assert HOSTILE_SCRIPT in page.locator("#turns").inner_text()
    page.goto(url + "/ask?q=hostile+script")
    page.wait_for_selector("#trace-query")
    assert HOSTILE_SCRIPT in page.locator("#ask-result").inner_text()
    page.goto(url + "/map")
    page.wait_for_selector("#map circle")
    for path in ("/", f"/record/{img.id}", "/?q=hostile", "/map"):
        page.goto(url + path)
        assert page.locator("main img, main svg[onload], script:not([src])").count() == 0
    # the page's CSP forbids inline scripts, so even a missed escape could not run one
    response = page.goto(url + "/")
    assert "script-src 'self'" in response.headers["content-security-policy"]


def test_missing_store_and_down_server_are_readable(page: Any, tmp_path: Any) -> None:
    missing = create_app(str(tmp_path / "nope"), embedder=DeterministicEmbedder())
    down = create_app(host="127.0.0.1", port=9, embedder=DeterministicEmbedder())
    servers = [start_in_thread(missing), start_in_thread(down)]
    try:
        for server in servers:
            response = page.goto(server.url + "/")
            assert response.status == 503
            assert page.locator("h1").inner_text() == "The memory store is unavailable"
            assert "Traceback" not in page.content()
        page.goto(servers[0].url + "/")
        assert page.locator("#error-message").inner_text().startswith(f"no memory store at {str(tmp_path / 'nope')!r}")
        shot(page, "error")
    finally:
        for server in servers:
            server.stop()
    assert not (tmp_path / "nope").exists()  # browsing never creates a store
