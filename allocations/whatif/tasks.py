"""The what-if lab's Celery tasks (the Celery app's ``include`` registers them)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="allocations.whatif.run", ignore_result=True)
def run_whatif(run_id: int) -> str:
    """Execute what-if run ``run_id``. Idempotent: a run that is no longer queued (another copy
    took it, or it was cancelled) is left alone."""
    from allocations.whatif.runs import execute

    return execute(run_id)


@shared_task(name="allocations.whatif.reap", ignore_result=True)
def reap_whatif_runs() -> int:
    """Beat, every minute: end the runs whose worker stopped (``WHATIF_STALE_AFTER_S``)."""
    from datetime import timedelta

    from django.conf import settings

    from allocations.whatif.services import whatif_runs_reap_stalled

    return whatif_runs_reap_stalled(stale_after=timedelta(seconds=settings.WHATIF_STALE_AFTER_S))
