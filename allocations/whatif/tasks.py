"""The what-if lab's Celery task (imported by ``allocations.tasks`` so that the worker's
autodiscovery registers it)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="allocations.whatif.run", ignore_result=True)
def run_whatif(run_id: int) -> str:
    """Execute what-if run ``run_id``. Idempotent: a run that is no longer queued (another copy
    took it, or it was cancelled) is left alone."""
    from allocations.whatif.runs import execute

    return execute(run_id)
