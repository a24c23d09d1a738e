"""Fixtures of the memory browser tests: a store built here, the app served from a thread, one headless
Chromium per module (Debian's ``chromium`` driven by Playwright; never ``playwright install``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agently_vecmem.records import MemoryRecord, Provenance
from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.ui import UIConfig, create_app, start_in_thread
from agently_vecmem.workspace import ChromaWorkspace

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "docs" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
T0 = 1_704_067_200.0  # 2024-01-01T00:00:00Z
FILLER = 120
HOSTILE_SCRIPT = "<script>alert(1)</script>"
HOSTILE_IMG = '"><img src=x onerror=alert(2)>'
HOSTILE_SESSION = 'evil"><svg onload=alert(3)>'


def build_records() -> dict[str, Any]:
    """The test store's records, by role."""
    filler = [MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"note number {i} about garden topic {i % 9}",
                           tags=["filler", f"topic{i % 3}"], created_at=T0 + i * 3600, updated_at=T0 + i * 3600)
              for i in range(FILLER)]
    t = T0 + 10 * 86_400
    c1 = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="User lives in Paris", tags=["home"], status="superseded",
                      created_at=t, updated_at=t + 20)
    c2 = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="User moved to Berlin", tags=["home"], status="superseded",
                      supersedes=c1.id, created_at=t + 10, updated_at=t + 20)
    c3 = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="User moved to Tokyo in spring", tags=["home"],
                      supersedes=c2.id, created_at=t + 20, updated_at=t + 20, occurred_at=t + 20)
    c1.superseded_by, c2.superseded_by = c2.id, c3.id
    alice_turns = [
        MemoryRecord(memory_scope="SESSION_MEMORY", session_id="alice", extracted=False, summary=f"turn {i} of alice",
                     body={"user": u, "assistant": "Noted."}, created_at=t + 100 + i,
                     updated_at=t + 100 + i, provenance=Provenance(session_id="alice", turn_index=i))
        for i, u in enumerate(["I adopted a cat named Miso", "My sister visits in June", "I like oolong tea"])
    ]
    alice_mems = [
        MemoryRecord(memory_scope="SESSION_MEMORY", session_id="alice", summary="User has a cat named Miso",
                     tags=["pets"], created_at=t + 200, updated_at=t + 200,
                     provenance=Provenance(session_id="alice", turn_index=0)),
        MemoryRecord(memory_scope="SESSION_MEMORY", session_id="alice", summary="User's sister visits in June",
                     tags=["family"], created_at=t + 201, updated_at=t + 201,
                     provenance=Provenance(session_id="alice", turn_index=1)),
        MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="User likes oolong tea", tags=["drink"],
                     created_at=t + 202, updated_at=t + 202, provenance=Provenance(session_id="alice", turn_index=2)),
    ]
    bob = [MemoryRecord(memory_scope="SESSION_MEMORY", session_id="bob", summary="Bob plays chess on Sundays",
                        tags=["hobby"], created_at=t + 300, updated_at=t + 300)]
    hostile = [
        MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"hostile {HOSTILE_SCRIPT}", tags=["<b>bold</b>"],
                     body={"x": HOSTILE_SCRIPT}, created_at=t + 400, updated_at=t + 400),
        MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"hostile {HOSTILE_IMG}", tags=[HOSTILE_IMG],
                     body={"y": HOSTILE_IMG}, created_at=t + 401, updated_at=t + 401),
        MemoryRecord(memory_scope="SESSION_MEMORY", session_id=HOSTILE_SESSION, summary=f"hostile session {HOSTILE_IMG}",
                     extracted=False, body={"user": HOSTILE_SCRIPT, "assistant": HOSTILE_IMG},
                     created_at=t + 402, updated_at=t + 402),
    ]
    return {"filler": filler, "chain": [c1, c2, c3], "alice_turns": alice_turns, "alice_mems": alice_mems,
            "bob": bob, "hostile": hostile}


@pytest.fixture(scope="session")
def records() -> dict[str, Any]:
    return build_records()


@pytest.fixture(scope="session")
def store_path(tmp_path_factory: pytest.TempPathFactory, records: dict[str, Any]) -> str:
    """An embedded store with every test record (built once per run, never written by the read-only app)."""
    path = str(tmp_path_factory.mktemp("ui-store") / "store")
    ws = ChromaWorkspace(path, embedder=DeterministicEmbedder())
    ws.put([r for group in records.values() for r in group])
    ws.close()
    return path


def copy_store(src: str, dst: Path) -> str:
    shutil.copytree(src, dst)
    lock = dst / ".vecmem-writer.lock"
    if lock.exists():
        lock.unlink()
    return str(dst)


@pytest.fixture(scope="module")
def served(store_path: str) -> Iterator[Any]:
    """The read-only browser over the test store."""
    app = create_app(store_path, embedder=DeterministicEmbedder())
    server = start_in_thread(app)
    try:
        yield server
    finally:
        server.stop()
        app.close()


@pytest.fixture(scope="module")
def served_writable(store_path: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A writable browser over a copy of the test store (forget changes it)."""
    path = copy_store(store_path, tmp_path_factory.mktemp("ui-writable") / "store")
    app = create_app(path, embedder=DeterministicEmbedder(), config=UIConfig(writable=True))
    server = start_in_thread(app)
    try:
        yield server
    finally:
        server.stop()
        app.close()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One headless Chromium for the module."""
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    """A fresh page (1280×800) that fails the test on any JavaScript dialog or page error."""
    context = chromium.new_context(viewport={"width": 1280, "height": 800})
    pg = context.new_page()
    pg.dialogs = []  # type: ignore[attr-defined]
    pg.errors = []  # type: ignore[attr-defined]
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))  # type: ignore[attr-defined]
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))  # type: ignore[attr-defined]
    try:
        yield pg
        assert pg.dialogs == [], f"a script ran: {pg.dialogs}"  # type: ignore[attr-defined]
        assert pg.errors == [], f"page errors: {pg.errors}"  # type: ignore[attr-defined]
    finally:
        context.close()


def shot(page: Any, name: str) -> None:
    """Save a screenshot of the page into docs/screenshots/."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=False)
