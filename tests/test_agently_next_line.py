"""The Agently scenarios (``tests/agently_lines``) again, in a child pytest, with agently 4.1.4.10.

The venv keeps agently 4.1.4.1 (the Workspace line, exercised in-process by the main run); ``make install``
puts 4.1.4.10 (the RecordStore line) into ``$(VENV)/agently-4.1.4.10`` with ``pip install --target``, and this
test runs the same scenarios, plus the RecordStore-only file, with that directory first on ``PYTHONPATH``. Override the directory with
``VECMEM_AGENTLY_NEXT``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "tests" / "agently_lines"
NEXT_VERSION = "4.1.4.10"


def next_line_dir() -> Path:
    """Where ``make install`` put the RecordStore-line agently."""
    env = os.environ.get("VECMEM_AGENTLY_NEXT")
    return Path(env) if env else Path(sys.prefix) / f"agently-{NEXT_VERSION}"


@pytest.mark.slow
def test_agently_scenarios_pass_on_the_record_store_line(tmp_path, capsys):
    target = next_line_dir()
    assert (target / "agently").is_dir(), (
        f"agently {NEXT_VERSION} is not installed in {target}; run `make install` (or `make agently-next`)"
    )
    junit = tmp_path / "child.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(REPO)]),
           "VECMEM_EXPECT_AGENTLY": NEXT_VERSION}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
         str(SCENARIOS.relative_to(REPO))],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
    assert proc.returncode == 0, f"the scenarios failed on agently {NEXT_VERSION}:\n{tail}"
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    with capsys.disabled():
        print(f"\n[agently {NEXT_VERSION}] scenarios: {counts['tests']} run, "
              f"{counts['tests'] - counts['failures'] - counts['errors'] - counts['skipped']} passed, "
              f"{counts['skipped']} skipped")
    defined = sum(len(re.findall(r"^def test_", f.read_text(), flags=re.M)) for f in SCENARIOS.glob("test_*.py"))
    # every scenario runs on this line (nothing is skipped there) and every one passed
    assert counts == {"tests": defined, "failures": 0, "errors": 0, "skipped": 0}, (counts, tail)
