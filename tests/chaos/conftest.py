"""The chaos run restarts PostgreSQL, Redis and slurmctld that the rest of the suite shares: it
runs after every other test of the session, so that no other test sees its outages."""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the tests marked ``chaos`` to the end of the session, keeping their order."""
    chaos = [item for item in items if item.get_closest_marker("chaos")]
    if chaos:
        others = [item for item in items if not item.get_closest_marker("chaos")]
        items[:] = others + chaos
