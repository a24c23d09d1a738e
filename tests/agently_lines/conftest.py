"""Fixtures of the Agently scenarios; the RecordStore-line file is collected only on that line."""

from __future__ import annotations

import pytest

pytest.importorskip("agently")

from _agently_support import LINE, Line, installed  # noqa: E402, F401 - installed: an autouse fixture

from agently_vecmem.integrations import agently as integration  # noqa: E402

# AgentExecution runs and memory_store= exist from agently 4.1.4.2; test_agently_next_line.py runs that file.
collect_ignore = [] if LINE == integration.RECORD_STORE_LINE else ["test_agently_record_store_line.py"]


@pytest.fixture
def line(srv, tmp_path) -> Line:
    return Line(srv, tmp_path)
