"""Asking the allocation loop for a cycle soon after a write.

Write services call ``request_cycle()`` in ``transaction.on_commit``. The cycle itself is the
Celery task ``allocations.run_cycle`` (``allocations/tasks.py``); it is queued here by its name,
from the app's registry of tasks (``AllocationsConfig.ready`` registers them in every process),
so that core services never import the tasks module, which sits above them.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import current_app
from celery.result import AsyncResult
from django.core.cache import cache

log = logging.getLogger(__name__)

RUN_CYCLE_TASK = "allocations.run_cycle"
# One cycle request per window: a burst of writes (a form saving ten quotas, an API client
# submitting a hundred jobs) gives one cycle, not a hundred.
REQUEST_DEBOUNCE_KEY = "gpugov:loop:cycle-requested"
REQUEST_WINDOW_S = 1


def request_cycle() -> bool:
    """Ask for an allocation cycle soon; call it in ``transaction.on_commit`` after a write.

    Debounced: at most one ``run_cycle`` is queued per ``REQUEST_WINDOW_S`` (the cache's atomic
    ``add`` decides which caller queues it). Returns whether this call queued one. A broker
    or cache that cannot be reached is logged, not raised: the user's change is already committed
    and the next beat tick runs the cycle anyway.
    """
    try:
        if not cache.add(REQUEST_DEBOUNCE_KEY, 1, timeout=REQUEST_WINDOW_S):
            return False
    except Exception:  # the cache (Redis) is down: raising here would answer 500 for a stored job
        log.exception("could not reach the cache to request an allocation cycle; beat will run it")
        return False
    try:
        # A request nobody picked up within a minute is superseded by beat's ticks: drop it
        # rather than run a backlog of cycles when a worker comes back.
        queue_task(RUN_CYCLE_TASK, kwargs={"trigger": "request"}, countdown=REQUEST_WINDOW_S, expires=60)
    except Exception:  # the broker is down: beat will run the cycle when it is back
        log.exception("could not queue an allocation cycle; the next scheduled one will run")
        return False
    return True


def queue_task(name: str, **options: Any) -> AsyncResult:
    """Queue the registered task ``name`` as its own ``apply_async`` would: unlike
    ``send_task``, the app's routing and eager mode apply to it."""
    return current_app.tasks[name].apply_async(**options)
