"""Shared test set-up: services the suite drives for real.

A test that needs a service calls ``require_service(name, why)``: with CI=true a missing
service fails the test (CI must start it); elsewhere the test skips and says why.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
IN_CI = os.environ.get("CI", "").lower() == "true"


def require_service(available: bool, what: str) -> None:
    """Skip (or, in CI, fail) the calling test when ``what`` is not available here."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"{what} is required in CI but is not available", pytrace=False)
    pytest.skip(f"{what} is not available on this machine")


def require_shared(relative: str) -> Path:
    """A path inside ../shared, which CI has but a user's clone does not."""
    path = SHARED / relative
    require_service(path.exists(), f"../shared/{relative} (the steering repository's shared files)")
    return path
