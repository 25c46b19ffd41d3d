"""The loop's Celery tasks called in this process: schedule, back-off after an outage."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.core.cache import cache

from allocations import tasks
from allocations.models import Cluster, CycleRun
from allocations.services import cycle_requests
from tests.conftest import Personas


@pytest.fixture(autouse=True)
def clean_cache() -> Iterator[None]:
    cache.delete_many([tasks.BACKOFF_KEY, cycle_requests.REQUEST_DEBOUNCE_KEY])
    yield
    cache.delete_many([tasks.BACKOFF_KEY, cycle_requests.REQUEST_DEBOUNCE_KEY])


def test_beat_runs_the_cycle_every_allocation_interval() -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["allocation-cycle"]
    assert entry["task"] == tasks.run_cycle.name == "allocations.run_cycle"
    assert entry["schedule"] == settings.ALLOCATION_INTERVAL
    assert entry["kwargs"] == {"trigger": "beat"}


def test_backoff_doubles_per_failure_up_to_the_cap_and_clears_on_success() -> None:
    interval = settings.ALLOCATION_INTERVAL
    tasks.record_backend_outcome(False, now=1000.0)
    assert tasks.backoff_remaining(now=1000.0) == interval
    tasks.record_backend_outcome(False, now=1000.0)
    assert tasks.backoff_remaining(now=1000.0) == 2 * interval
    for _ in range(20):
        tasks.record_backend_outcome(False, now=1000.0)
    assert tasks.backoff_remaining(now=1000.0) == tasks.BACKOFF_MAX_S
    assert tasks.backoff_remaining(now=1000.0 + tasks.BACKOFF_MAX_S) == 0
    tasks.record_backend_outcome(True)
    assert tasks.backoff_remaining(now=1000.0) == 0


def test_run_cycle_backs_off_after_an_outage_and_resumes_after_recovery(personas: Personas) -> None:
    Cluster.objects.filter(pk=1).update(backend_settings={"available": False})
    first = tasks.run_cycle(trigger="beat")
    assert first is not None and CycleRun.objects.get(pk=first).backend_outage
    assert tasks.backoff_remaining() > 0

    # During the back-off the task does not touch the backend or record a run.
    assert tasks.run_cycle(trigger="beat") is None
    assert CycleRun.objects.count() == 1

    Cluster.objects.filter(pk=1).update(backend_settings={})
    cache.delete(tasks.BACKOFF_KEY)  # the back-off has run out
    recovered = tasks.run_cycle(trigger="beat")
    assert recovered is not None and CycleRun.objects.get(pk=recovered).ok
    assert tasks.backoff_remaining() == 0
    assert Cluster.objects.get().backend_healthy
