"""Release metadata: one version, a changelog entry for it, and lower bounds that `make test-oldest` runs."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

import agently_vecmem

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_version_is_defined_once():
    project = PYPROJECT["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "agently_vecmem.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", agently_vecmem.__version__)


def test_changelog_has_the_version():
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## [{agently_vecmem.__version__}] - " in changelog


def test_classifiers_claim_only_what_is_tested():
    project = PYPROJECT["project"]
    versions = [c.rsplit(" ", 1)[-1] for c in project["classifiers"] if re.search(r"Python :: 3\.\d+$", c)]
    assert versions == ["3.11"] and project["requires-python"] == ">=3.11"


def test_oldest_pins_are_the_declared_lower_bounds():
    """Every direct dependency's lower bound is the release Makefile's test-oldest venv installs."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    pins = dict(re.findall(r'"([a-z0-9-]+)==([\w.$()]+)"', makefile.split("OLDEST_PINS", 1)[1].split("\n\n")[0]))
    pins["chromadb"] = re.search(r"^CHROMADB_OLDEST := (\S+)$", makefile, re.M).group(1)
    for requirement in PYPROJECT["project"]["dependencies"]:
        name, low = re.match(r"([a-z0-9-]+)>=([\d.]+)", requirement).groups()
        assert name in pins, f"{name} has no pin in test-oldest"
        pad = lambda v: tuple(int(x) for x in v.split(".")) + (0,) * (3 - v.count(".") - 1)  # noqa: E731
        assert pad(pins[name]) == pad(low), f"{name}: declared >={low}, test-oldest runs {pins[name]}"
