"""The README and the docs site: every ```python block runs, links resolve, notebook copies are current.

Each distinct ```python block of ``README.md`` and ``docs/*.md`` runs on its own, in a child process and a
fresh working directory, against the loopback OpenAI-compatible server (``OPENAI_BASE_URL`` /
``OPENAI_API_KEY`` / ``OPENAI_MODEL`` point at it) with the deterministic embedder standing in for MiniLM
(a block's own ``embedder=`` is kept). An HTML comment on the line before a block sets its environment:

* ``<!-- docs-test: agently-next -->`` — agently 4.1.4.10 (the RecordStore line) first on ``PYTHONPATH``;
* ``<!-- docs-test: chroma-server -->`` — a real ``chroma run``; ``port=8000`` in the block becomes its port;
* ``<!-- docs-test: skip <why> -->`` — not run (say why).

The working directory holds ``chat.jsonl`` (three messages) for blocks that import a history.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from agently_vecmem.testing import LoopbackOpenAIServer

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
MARKER = re.compile(r"<!--\s*docs-test:\s*([\w-]+)(.*?)-->")
FENCE = re.compile(r"^```(\w*)\s*$")
NEXT_LINE = Path(sys.prefix) / "agently-4.1.4.10"

# Runs in the child: the deterministic embedder is the default, then the block as __main__.
RUNNER = """
import sys
import agently_vecmem.embedders as embedders
from agently_vecmem.testing import DeterministicEmbedder
embedders.default_embedder = DeterministicEmbedder
source = open(sys.argv[1], encoding="utf-8").read()
exec(compile(source, sys.argv[2], "exec"), {"__name__": "__main__"})
"""


@dataclass(frozen=True)
class Block:
    where: str  # "docs/agently.md:12"
    source: str
    marker: str  # "" | "agently-next" | "chroma-server" | "skip"
    note: str


def code_blocks(page: Path) -> list[tuple[int, str, str, str, str]]:
    """``(line, language, source, marker, note)`` of every fenced block of a page."""
    out, lines, i = [], page.read_text(encoding="utf-8").splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, body, i = i, [], i + 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        before = lines[start - 1] if start else ""
        mk = MARKER.search(before)
        out.append((start + 1, m.group(1), "\n".join(body) + "\n", mk.group(1) if mk else "",
                    mk.group(2).strip() if mk else ""))
        i += 1
    return out


def python_blocks() -> list[Block]:
    seen: dict[str, Block] = {}
    for page in PAGES:
        for line, lang, source, marker, note in code_blocks(page):
            if lang == "python" and source not in seen:  # the README repeats some docs blocks
                seen[source] = Block(f"{page.relative_to(REPO)}:{line}", source, marker, note)
    return list(seen.values())


BLOCKS = python_blocks()


@pytest.fixture(scope="module")
def loopback():
    with LoopbackOpenAIServer() as server:
        yield server


def test_blocks_are_found():
    assert len(BLOCKS) >= 6, [b.where for b in BLOCKS]
    assert {b.marker for b in BLOCKS} <= {"", "agently-next", "chroma-server", "skip"}


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_python_block_runs(block: Block, loopback, tmp_path, request):
    if block.marker == "skip":
        assert block.note, f"{block.where}: say why the block is skipped"
        pytest.skip(block.note)
    source = block.source
    env = {**os.environ, "OPENAI_BASE_URL": loopback.base_url, "OPENAI_API_KEY": "sk-test",
           "OPENAI_MODEL": "gpt-4o-mini", "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False",
           "PYTHONPATH": str(REPO)}
    if block.marker == "agently-next":
        assert (NEXT_LINE / "agently").is_dir(), f"agently 4.1.4.10 is not in {NEXT_LINE}; run `make install`"
        env["PYTHONPATH"] = os.pathsep.join([str(NEXT_LINE), str(REPO)])
    if block.marker == "chroma-server":
        _host, port = request.getfixturevalue("chroma_server")
        assert "port=8000" in source, f"{block.where}: a chroma-server block connects with port=8000"
        source = source.replace("port=8000", f"port={port}")
    (tmp_path / "chat.jsonl").write_text("\n".join(json.dumps(m) for m in [
        {"role": "user", "content": "I moved to Porto last spring.", "time": "2024-04-02T10:00:00Z"},
        {"role": "assistant", "content": "Noted: you live in Porto."},
        {"role": "user", "content": "My sister Ana visits in June."},
    ]) + "\n", encoding="utf-8")
    script = tmp_path / "block.py"
    script.write_text(source, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(script), block.where], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"{block.where} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"


# -- links -----------------------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub/MkDocs-style heading slugs of a page."""
    out, fence = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and (m := re.match(r"^#{1,6} (.*)$", line)):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_relative_links_resolve(page: Path):
    broken = []
    for m in LINK.finditer(page.read_text(encoding="utf-8")):
        target = m.group(1) or m.group(2)
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)}: broken links {broken}"


def test_readme_links_every_docs_page():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    guides = [p for p in (REPO / "docs").glob("*.md") if p.name not in ("index.md", "changelog.md")]
    missing = [p.name for p in guides if f"docs/{p.name}" not in readme]
    assert not missing, f"README.md does not link {missing}"


# -- notebooks -------------------------------------------------------------------------------------------

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("source", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_docs_notebook_copy_is_current_and_executed(source: Path):
    """docs/notebooks/ holds executed copies (`make docs-notebooks`): same code, every code cell run."""
    copy = REPO / "docs" / "notebooks" / source.name
    assert copy.exists(), f"{copy} is missing: run `make docs-notebooks`"

    def cells(path: Path) -> list[dict]:
        return json.loads(path.read_text(encoding="utf-8"))["cells"]

    def text(cell: dict) -> str:
        return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]

    src, out = cells(source), cells(copy)
    assert [(c["cell_type"], text(c)) for c in src] == [(c["cell_type"], text(c)) for c in out], (
        f"{copy} is stale: run `make docs-notebooks`"
    )
    code = [c for c in out if c["cell_type"] == "code"]
    assert all(c.get("execution_count") for c in code), f"{copy} has cells that were not run"
    assert not [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
