"""Fixtures of the reliability tests (the ``_reliability_worker`` fork server)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _reliability_worker import ForkServer


@pytest.fixture(scope="module")
def forks() -> Iterator[ForkServer]:
    """One fork server per module: children start in milliseconds instead of re-importing chromadb."""
    server = ForkServer()
    yield server
    server.close()
