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
        "allocation-cycle": {
            "task": "allocations.run_cycle",
            "schedule": float(allocation_interval),
            "kwargs": {"trigger": "beat"},
            # A tick that waited in the queue longer than one interval is superseded by the next.
            "options": {"expires": float(allocation_interval)},
        },
        # Does nothing unless the cluster's backend_settings has "demo_workload": true.
        "demo-workload": {
            "task": "allocations.demo_workload",
            "schedule": float(allocation_interval),
            "options": {"expires": float(allocation_interval)},
        },
        "capacity-history": {
            "task": "allocations.record_history",
            "schedule": 60.0,
            "options": {"expires": 60.0},
        },
        # reports/services.py: pending reasons every PENDING_SAMPLE_MINUTES (5); the weekly
        # reports are checked hourly and sent once a week (beat runs in UTC, the cluster not).
        "pending-reasons": {
            "task": "allocations.sample_pending_reasons",
            "schedule": 300.0,
            "options": {"expires": 300.0},
        },
        # whatif/runs.py: a run whose worker stopped becomes "failed" instead of "running".
        "whatif-reaper": {
            "task": "allocations.whatif.reap",
            "schedule": 60.0,
            "options": {"expires": 60.0},
        },
        "weekly-reports": {
            "task": "allocations.send_weekly_reports",
            "schedule": 3600.0,
            "options": {"expires": 3600.0},
        },
    }
