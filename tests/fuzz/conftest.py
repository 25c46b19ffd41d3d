"""Fuzzing: counts of generated requests, printed at the end of the run (the acceptance asks
for the figures, not only a green bar)."""

from __future__ import annotations

from collections import Counter
from typing import Any

# {"requests": n, "2xx": n, "4xx": n, "5xx": n}, filled by the fuzz tests of this package.
FUZZ_COUNTS: Counter[str] = Counter()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FUZZ_COUNTS:
        figures = ", ".join(f"{key}: {value}" for key, value in sorted(FUZZ_COUNTS.items()))
        terminalreporter.write_line(f"fuzz figures (this process): {figures}")
