"""Celery tasks of the allocation loop.

``run_cycle`` runs one allocation cycle (``services.loop.run_allocation_cycle``); beat runs it
every ``ALLOCATION_INTERVAL`` seconds (``allocations/schedule.py``) and every write service asks
for one soon after its change with ``services.cycle_requests.request_cycle()`` in
``transaction.on_commit``. The what-if lab's tasks live in ``allocations/whatif/tasks.py``; the
Celery app's ``include`` registers them.
Tasks take no ORM objects, only plain values, and are safe to run twice: a cycle that finds
another one running simply does nothing.
"""

from __future__ import annotations

import logging
import time

from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from allocations.services.cycle_requests import RUN_CYCLE_TASK

log = logging.getLogger(__name__)

# After a backend outage, cycles wait this long (doubling per failure, up to the cap) before
# they talk to the backend again; the state lives in the cache so every worker honours it.
BACKOFF_KEY = "gpugov:loop:backoff"
BACKOFF_MAX_S = 300


def backoff_remaining(now: float | None = None) -> float:
    """Seconds until the loop may talk to the backend again after an outage (0: now)."""
    state = cache.get(BACKOFF_KEY)
    if not state:
        return 0.0
    now = time.time() if now is None else now
    return max(0.0, float(state["until"]) - now)


def record_backend_outcome(healthy: bool, now: float | None = None) -> None:
    """Grow the back-off after an outage (interval x 2^(failures-1), capped); clear it on success."""
    if healthy:
        cache.delete(BACKOFF_KEY)
        return
    now = time.time() if now is None else now
    failures = int((cache.get(BACKOFF_KEY) or {}).get("failures", 0)) + 1
    delay = min(BACKOFF_MAX_S, settings.ALLOCATION_INTERVAL * 2 ** (failures - 1))
    cache.set(BACKOFF_KEY, {"failures": failures, "until": now + delay}, timeout=BACKOFF_MAX_S * 2)


@shared_task(name=RUN_CYCLE_TASK, ignore_result=True)
def run_cycle(trigger: str = "beat") -> int | None:
    """Run one allocation cycle unless the backend is in back-off; returns the CycleRun's id.

    Idempotent: the cycle takes a lock, so a second copy of this task running at the same time
    returns None without touching anything.
    """
    from allocations.services.loop import run_allocation_cycle

    waiting = backoff_remaining()
    if waiting > 0:
        log.info("allocation cycle (%s) skipped: backend back-off, %.0f s left", trigger, waiting)
        return None
    run = run_allocation_cycle(trigger=trigger)
    if run is None:
        return None
    record_backend_outcome(healthy=not run.backend_outage)
    return run.pk


@shared_task(name="allocations.demo_workload", ignore_result=True)
def demo_workload() -> int:
    """Submit the demo teams' jobs (services/demo.py); does nothing unless the cluster's
    ``demo_workload`` setting is on. Safe to run twice: it tops backlogs up to a target."""
    from django.utils import timezone

    from allocations.services.demo import demo_workload_tick

    return demo_workload_tick(timezone.now())


@shared_task(name="allocations.record_history", ignore_result=True)
def record_history() -> str:
    """Sample this minute's capacity history, roll it up and prune it (services/history.py).

    Beat runs it every minute. Idempotent: a minute sampled twice is written once, and a
    rollup recomputes its hours and days from their minutes.
    """
    from django.utils import timezone

    from allocations.services.history import history_tick

    return history_tick(now=timezone.now()).isoformat()


@shared_task(name="allocations.sample_pending_reasons", ignore_result=True)
def sample_pending_reasons() -> int:
    """Count pending jobs by reason for the weekly reports (reports/services.py). Idempotent:
    a slot sampled twice is written once."""
    from django.utils import timezone

    from allocations.reports.services import pending_reasons_sample

    return pending_reasons_sample(now=timezone.now())


@shared_task(name="allocations.send_weekly_reports", ignore_result=True)
def send_weekly_reports() -> str:
    """Beat runs it hourly: sends last week's reports once they are due (reports/services.py).
    Safe to run twice or at once: each report to each recipient is claimed before it is sent."""
    from django.utils import timezone

    from allocations.reports.services import weekly_reports_tick

    result = weekly_reports_tick(now=timezone.now())
    return "not due" if result is None else str(result)
