"""The same end-to-end scenarios on every Agently host line, with the real agently and the loopback server.

The main run executes ``tests/agently_lines`` with the venv's agently 4.1.4.1 (Workspace line);
``test_agently_next_line`` runs it again in a child process with agently 4.1.4.10 (RecordStore line) first on
``PYTHONPATH``. :class:`_agently_support.Line` (``tests/_agently_support.py``) holds the only differences: how a store is bound, and what a
plain request is. Scenarios of the RecordStore line only are in ``test_agently_record_store_line.py``.
"""

from __future__ import annotations

import asyncio
import os
from importlib.metadata import version
from pathlib import Path

import pytest
from _agently_support import EXTRACTED, FACT, LINE, SESSION_FACT, Script, back_in_s1, mem, server_models, text
from agently import Agently

from agently_vecmem.errors import ConfigurationError
from agently_vecmem.filters import ALL_SCOPES
from agently_vecmem.integrations import agently as integration


# ------------------------------------------------------------------------------------------ registration
def test_import_registers_what_this_release_understands():
    import agently_vecmem.agently  # noqa: F401

    expected = os.environ.get("VECMEM_EXPECT_AGENTLY")
    if expected:  # the child run pins the release it was launched with
        assert version("agently") == expected
    assert LINE == (integration.WORKSPACE_LINE if version("agently") in {"4.1.3.9", "4.1.4", "4.1.4.1"}
                    else integration.RECORD_STORE_LINE)
    assert integration.is_installed()
    assert Agently.plugin_manager.get_plugin("SessionMemory", "VecMemory").name == "VecMemory"
    if LINE == integration.RECORD_STORE_LINE:
        from agently.base import record_store_registry
        assert "chroma" in record_store_registry.list_backend_providers()
        assert not hasattr(Agently, "workspace")
    else:
        assert "chroma" in Agently.workspace.list_backend_providers()
    integration.uninstall()
    assert not integration.is_installed()
    integration.install()
    integration.install()
    assert integration.is_installed()


# ------------------------------------------------------------------------------------------ plain requests
def test_vecmemory_global_fact_reaches_the_next_session_and_session_fact_stays(line):
    script, agent, plugin = line.start_vecmemory()
    assert line.ask(agent, f"Hi! {FACT} {SESSION_FACT}") == "Noted."
    stored = [d for d in plugin.diagnostics if d["phase"] == "after_turn"][-1]
    assert stored["stored"] == 2, stored

    agent.activate_session(session_id="s2")
    plugin2 = line.use_vecmemory(agent)
    line.ask(agent, "Where do I live?")
    s2 = text(script.agent_bodies[-1])
    assert "GLOBAL_MEMORY" in s2 and "Ada Lovelace" in s2
    assert "Zorblax" not in s2  # s1's session memory stays in s1
    prep = [d for d in plugin2.diagnostics if d["phase"] == "prepare_request"][-1]
    assert prep["packages"]["GLOBAL_MEMORY"]["selected_count"] == 1
    assert server_models(line.server, "extract") == {"test"}  # memory phases use the agent's model

    s1 = back_in_s1(agent, script, line.ask)  # re-activation keeps s1's plugin on the same Chroma store
    assert "Zorblax" in s1 and "Ada Lovelace" in s1
    records = line.store().scan(scope=ALL_SCOPES)
    assert {(r.memory_scope, r.session_id) for r in records} == {("GLOBAL_MEMORY", None), ("SESSION_MEMORY", "s1")}


def test_builtin_agently_memory_keeps_its_records_in_chroma(line):
    script = Script(extract_memories=EXTRACTED)
    line.server.on("chat", script)
    agent = line.agent()
    line.bind_agently_memory_store(agent)
    agent.activate_session(session_id="s1")
    agent.activated_session.use_memory(mode="AgentlyMemory")
    line.ask(agent, f"Hi! {FACT} {SESSION_FACT}")
    assert "extract" in script.phases
    records = line.store().scan(scope=ALL_SCOPES)
    assert {(r.memory_scope, r.session_id) for r in records} == {("GLOBAL_MEMORY", None), ("SESSION_MEMORY", "s1")}
    assert all(r.provenance.plugin == "AgentlyMemory" for r in records)

    agent.activate_session(session_id="s2")
    agent.activated_session.use_memory(mode="AgentlyMemory")
    line.ask(agent, "Where do I live?")
    s2 = text(script.agent_bodies[-1])
    assert "Ada Lovelace" in s2 and "Zorblax" not in s2

    # VecMemory reads AgentlyMemory's records (one store, one record contract)
    agent.activate_session(session_id="s3")
    line.use_vecmemory(agent)
    line.ask(agent, "Where do I live?")
    assert "Ada Lovelace" in text(script.agent_bodies[-1])


def test_chroma_store_helper_and_the_agently_extra(chroma_server, tmp_path):
    from packaging.requirements import Requirement

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    [spec] = pyproject["project"]["optional-dependencies"]["agently"]
    req = Requirement(spec)
    for release in ("4.1.3.9", "4.1.4.1", "4.1.4.2", "4.1.4.10", version("agently")):
        assert req.specifier.contains(release), (spec, release)  # no downgrade of an installed release
    assert not req.specifier.contains("4.2.0")

    host, port = chroma_server
    server_ws = integration.chroma_store(f"http://{host}:{port}", embedder="hash", collection="helper_test")
    assert server_ws.mode == "server" and integration.chroma_store(f"{host}:{port}", embedder="hash",
                                                                   collection="helper_test") is server_ws
    embedded = integration.chroma_store(str(tmp_path / "mem"), embedder="hash")
    assert embedded.mode == "embedded" and integration.chroma_store(tmp_path / "mem", embedder="hash") is embedded
    with pytest.raises(ConfigurationError, match="HOST:PORT"):
        integration.chroma_store("localhost:http", embedder="hash")
    if LINE == integration.RECORD_STORE_LINE:  # the context source on a server store (no local snapshots)
        from agently.core import Session as AgentlySession

        session = AgentlySession("srv", settings={})
        session.use_memory(mode="VecMemory", memory_store=server_ws)
        session.settings.set("session.memory.VecMemory.context_source.offer_records", True)
        source = session.create_memory_context_source()
        before = source.source_revision
        record = server_ws.put(mem("GLOBAL_MEMORY", "User prefers window seats"))[0]
        assert source.source_revision == before  # pinned for its run; the next run's source sees the write
        later = session.create_memory_context_source()
        assert later.source_revision != before
        page = asyncio.run(later.async_enumerate_descriptors(profile={}, cursor=None, limit=5))
        assert record.id in [d.source_ref for d in page.descriptors]
        recall = asyncio.run(later.async_read_scoped("vecmem-recall", query="seat preference", max_chars=500))
        assert "window seats" in recall.content and recall.refs == (record.id,)
