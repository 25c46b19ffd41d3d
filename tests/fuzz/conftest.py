"""Fuzzing: counts of generated requests, printed at the end of the run (the acceptance asks
for the figures, not only a green bar)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

# {"requests": n, "2xx": n, "4xx": n, "5xx": n}, filled by the fuzz tests of this package.
FUZZ_COUNTS: Counter[str] = Counter()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FUZZ_COUNTS:
        figures = ", ".join(f"{key}: {value}" for key, value in sorted(FUZZ_COUNTS.items()))
        terminalreporter.write_line(f"fuzz figures (this process): {figures}")


@pytest.fixture(autouse=True)
def keep_the_test_transaction_open() -> Iterator[None]:
    """Requests sent through the WSGI application in this process fire Django's request
    signals, whose ``close_old_connections`` would close the test's connection mid-transaction
    (it sees autocommit off) on PostgreSQL. Django's own test client unhooks it the same way."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)
