"""When will a pending job start? Simulate forward with the engine from the current state.

From the snapshot the loop would take now, the same ``allocate`` is run at ``now``, then at each
moment a running job ends (its start plus its requested duration), until every pending job has
started or the answer is unknowable:

* a running job has no requested duration (it could end at any moment), or
* the next change lies beyond ``HORIZON_S``, or ``MAX_STEPS`` cycles were simulated, or the
  simulation has used ``BUDGET_S`` seconds of CPU (a page must stay fast: with a thousand
  pending jobs one cycle of the engine takes tens of milliseconds, see
  ``benchmarks/queue_estimates.py``).

Jobs not started by then are "unknown" (None). The estimate assumes nothing else is submitted
and every job runs for exactly its requested duration: it is a forecast, shown as one.

The result is cached under a fingerprint of the snapshot, so a page polled every few seconds
simulates once per change of state (once per allocation cycle that changed something).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from django.core.cache import cache

from allocations import engine
from allocations.choices import JobState
from allocations.models import Job

logger = logging.getLogger(__name__)

HORIZON_S = 14 * 24 * 3600
MAX_STEPS = 200
BUDGET_S = 1.0
CACHE_TTL_S = 300


def forecast_starts(
    snapshot: engine.Snapshot,
    now: float,
    durations: dict[str, float | None],
    allocate: Any,
    *,
    horizon_s: float = HORIZON_S,
    max_steps: int = MAX_STEPS,
    budget_s: float = BUDGET_S,
) -> dict[str, float | None]:
    """Start time (seconds) of each pending job of ``snapshot``; None where it cannot be known.

    ``durations`` gives each job's requested duration by engine id (None: unknown);
    ``allocate`` is the engine's ``allocate(snapshot, now) -> Plan``. Pure: no database.
    """
    jobs = {job.id: job for job in snapshot.jobs}
    targets = {job.id for job in snapshot.jobs if not job.running}
    starts: dict[str, float | None] = dict.fromkeys(targets)
    start_seq = max((job.start_seq for job in snapshot.jobs), default=0)
    t = now
    deadline = time.process_time() + budget_s
    for _ in range(max_steps):
        if time.process_time() > deadline:
            break  # the rest stays unknown rather than keep a page waiting
        current = replace(snapshot, jobs=tuple(jobs.values()))
        plan = allocate(current, t)
        # 1. Apply the cycle's decisions: preemptions first, then starts (Plan's contract).
        for preemption in plan.preemptions:
            victim = jobs[preemption.job_id]
            jobs[victim.id] = replace(
                victim, nodes=(), started_at=None, preemptions=victim.preemptions + 1, last_preempted_at=t
            )
            if victim.id in starts:
                starts[victim.id] = None
        for start in plan.starts:
            start_seq += 1
            jobs[start.job_id] = replace(
                jobs[start.job_id], nodes=start.nodes, started_at=t, start_seq=start_seq
            )
            if start.job_id in starts:
                starts[start.job_id] = t
        if all(starts[job_id] is not None for job_id in targets):
            break
        if plan.starts or plan.preemptions:
            continue  # decisions at one instant come to rest before the clock moves (POLICY 3.5)
        # 2. Move the clock to the next moment something changes: a job ends, a back-off expires.
        running = [job for job in jobs.values() if job.running]
        if any(durations.get(job.id) is None for job in running):
            break  # a job that may end at any moment: no later start can be known
        ends = [
            (t if job.started_at is None else job.started_at) + float(durations[job.id] or 0)
            for job in running
        ]
        backoffs = [
            job.last_preempted_at + 2 ** (job.preemptions - 1)
            for job in jobs.values()
            if not job.running and job.last_preempted_at is not None and job.preemptions
        ]
        upcoming = [moment for moment in (*ends, *backoffs) if moment > t]
        finished = [job.id for job, end in zip(running, ends, strict=True) if end <= t]
        if finished:
            for job_id in finished:
                del jobs[job_id]
            continue
        if not upcoming or min(upcoming) - now > horizon_s:
            break
        t = min(upcoming)
        # 3. Jobs whose requested duration is over leave the cluster at the new time.
        for job, end in zip(running, ends, strict=True):
            if end <= t:
                del jobs[job.id]
    return starts


def _fingerprint(snapshot: engine.Snapshot, durations: dict[str, float | None]) -> str:
    text = repr(snapshot) + repr(sorted(durations.items()))
    return "gpugov:estimates:" + hashlib.sha256(text.encode()).hexdigest()


def estimated_starts(snapshot: engine.Snapshot, now: datetime) -> dict[int, datetime | None]:
    """Estimated start of every pending job by primary key (None: unknown), cached per state."""
    from allocations.engine import allocate
    from allocations.selectors.snapshot import job_id, job_pk

    durations: dict[str, float | None] = {
        job_id(pk): (float(seconds) if seconds else None)
        for pk, seconds in Job.objects.filter(state__in=(JobState.RUNNING, JobState.PENDING))
        .order_by()
        .values_list("pk", "requested_duration")
    }
    key = _fingerprint(snapshot, durations)
    # The cache only saves work: while it is unreachable (Redis restarting) the page computes
    # the estimates itself rather than failing.
    try:
        cached = cache.get(key)
    except Exception:
        logger.warning("start estimates: the cache is unreachable; computing without it", exc_info=True)
        cached = None
    if cached is None:
        cached = forecast_starts(snapshot, now.timestamp(), durations, allocate)
        try:
            cache.set(key, cached, timeout=CACHE_TTL_S)
        except Exception:
            logger.warning("start estimates: the cache is unreachable; not kept", exc_info=True)
    return {
        job_pk(ident): (datetime.fromtimestamp(seconds, tz=UTC) if seconds is not None else None)
        for ident, seconds in cached.items()
    }
