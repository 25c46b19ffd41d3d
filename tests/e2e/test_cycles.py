"""In a real browser: a cluster administrator follows the Cycles link, finds a cycle that had to
repair what a killed worker left behind, and reads what the sync found."""

from __future__ import annotations

from typing import Any

import pytest

from allocations.backends import JobSpec, get_backend
from allocations.services.loop import run_allocation_cycle
from tests import factories as f
from tests.e2e.conftest import login

pytestmark = [pytest.mark.e2e]


def test_administrator_reads_the_corrections_of_a_cycle(
    personas: Any, live_server: Any, page: Any, transactional_db: None
) -> None:
    job = f.make_job(personas.team, personas.instance_type, 8, name="orphan")
    # What a worker killed between backend.start and its commit leaves: the backend runs it.
    get_backend("simulated", {}).start(
        JobSpec(job_id=str(job.pk), team="team-a", name="orphan", instance_type="ml.p5.48xlarge", gpus=8),
        ((personas.nodes[0].name, 8),),
    )
    run = run_allocation_cycle(trigger="test")
    assert run is not None and run.corrections == 1

    login(page, live_server, personas.cluster_admin)
    page.click("nav.nav >> text=Cycles")
    page.wait_for_url("**/console/cycles/")
    row = page.locator("#cycles tbody tr").first
    assert row.locator("td").nth(2).inner_text() == "test"
    assert "1" in row.locator("td").last.inner_text()
    row.locator("td a").first.click()
    page.wait_for_url(f"**/console/cycles/{run.pk}/")
    notes = page.locator("#notes").inner_text()
    assert f"job {job.pk} runs in the backend but was pending: adopted as running" in notes
    assert "sync" in page.locator("#phases").inner_text()
