"""Celery beat's schedule: every periodic task of gpugov, in one place.

Plain Python (no Django import) so that settings can build ``CELERY_BEAT_SCHEDULE`` from it.
Run exactly one beat per installation (docs/deploy.md); the tasks themselves are safe to run
twice, so a second beat wastes work but breaks nothing.
"""

from __future__ import annotations

from typing import Any


def beat_schedule(allocation_interval: int) -> dict[str, dict[str, Any]]:
    """The schedule, given ``ALLOCATION_INTERVAL`` (seconds between allocation cycles)."""
    return {
        "allocation-cycle": _every(allocation_interval, "allocations.run_cycle", kwargs={"trigger": "beat"}),
        # Does nothing unless the cluster's backend_settings has "demo_workload": true.
        "demo-workload": _every(allocation_interval, "allocations.demo_workload"),
        "capacity-history": _every(60, "allocations.record_history"),
        # reports/services.py: pending reasons every PENDING_SAMPLE_MINUTES (5); the weekly
        # reports are checked hourly and sent once a week (beat runs in UTC, the cluster not).
        "pending-reasons": _every(300, "allocations.sample_pending_reasons"),
        # whatif/runs.py: a run whose worker stopped becomes "failed" instead of "running".
        "whatif-reaper": _every(60, "allocations.whatif.reap"),
        "weekly-reports": _every(3600, "allocations.send_weekly_reports"),
    }


def _every(seconds: float, task: str, **entry: Any) -> dict[str, Any]:
    """``task`` every ``seconds``. A tick that waited in the queue longer than one period
    expires: the next one supersedes it."""
    return {"task": task, "schedule": float(seconds), **entry, "options": {"expires": float(seconds)}}
