"""The request fuzzers run in CI bounded and derandomized: each hypothesis-driven fuzzer of
this package sends a fixed number of examples, the same ones on every run, so a red CI run is
repeated by running it again, and its cost does not grow by chance."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest
from hypothesis import settings

import tests.fuzz

# More examples per test than this would make CI's fuzzing a matter of luck in time.
MOST_EXAMPLES = 100

FUZZ_MODULES = sorted(
    info.name
    for info in pkgutil.iter_modules(tests.fuzz.__path__, "tests.fuzz.")
    if info.name.rsplit(".", 1)[1].startswith("test_")
)


def _fuzz_settings() -> list[tuple[str, settings]]:
    found = []
    for name in FUZZ_MODULES:
        module = importlib.import_module(name)
        for attribute, value in vars(module).items():
            if isinstance(value, settings):
                found.append((f"{name}.{attribute}", value))
    return found


def test_every_hypothesis_fuzzer_is_derandomized_and_bounded():
    found = _fuzz_settings()
    assert {name for name, _ in found} >= {
        "tests.fuzz.test_api_schema.FUZZ_SETTINGS",
        "tests.fuzz.test_forms.FUZZ_SETTINGS",
    }
    for name, fuzz in found:
        assert fuzz.derandomize, f"{name} draws different examples on each run"
        assert fuzz.database is None, f"{name} replays examples from a local database"
        assert 0 < fuzz.max_examples <= MOST_EXAMPLES, f"{name}: {fuzz.max_examples} examples"


@pytest.mark.parametrize("name", FUZZ_MODULES)
def test_no_fuzzer_draws_from_an_unbounded_source(name):
    """Every @given in the package runs under one of the bounded settings above."""
    module = importlib.import_module(name)
    text = Path(str(module.__file__)).read_text(encoding="utf-8")
    givens, bounded = text.count("@given("), text.count("@FUZZ_SETTINGS")
    assert givens <= bounded, f"{name}: {givens} @given, {bounded} under FUZZ_SETTINGS"
