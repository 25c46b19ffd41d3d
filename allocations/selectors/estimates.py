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
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
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


@dataclass(frozen=True)
class Forecast:
    """What the forward simulation says about each pending job, by engine id.

    ``starts``: the estimated start (seconds), None where it cannot be known; ``unknown``: why,
    for each None; ``ahead``: why a job starts before a job ahead of it in its team's order on
    the same instance type (a smaller job that fits sooner, a job ahead in its back-off, ...).
    Without that sentence an earlier start than the job ahead would read as a contradiction.
    """

    starts: dict[str, float | None]
    unknown: dict[str, str] = field(default_factory=dict)
    ahead: dict[str, str] = field(default_factory=dict)


def _team_order_key(snapshot: engine.Snapshot) -> Any:
    """POLICY.md section 3 step 1 as a sort key: priority (high first), submit time, id."""
    weights = {pc.name: pc.weight for pc in snapshot.policy.priority_classes}
    by_priority = snapshot.policy.task_ranking is not engine.TaskRanking.FIRST_COME_FIRST_SERVE

    def key(job: engine.Job) -> tuple[int, float, int, str]:
        weight = weights.get(job.priority_class or "", 0) if by_priority else 0
        return (-weight, job.submit_time, job.seq, job.id)

    return key


def _why_before(job: engine.Job, ahead: engine.Job, t: float, plan: engine.Plan) -> str:
    """Why ``job`` starts at ``t`` while ``ahead`` (before it in the team's order) still waits."""
    if job.gpus < ahead.gpus:
        return f"a smaller job ({_gpus(job.gpus)}) that fits sooner than #{ahead.id} ahead of it ({_gpus(ahead.gpus)})"
    if ahead.preemptions and ahead.last_preempted_at is not None:
        until = ahead.last_preempted_at + 2 ** (ahead.preemptions - 1)
        if until > t:
            return (
                f"#{ahead.id} ahead of it was preempted {ahead.preemptions} times and may not "
                "preempt other jobs yet (back-off)"
            )
    reason = plan.pending.get(ahead.id)
    code = f" ({reason.code.value})" if reason is not None else ""
    return f"it fits where #{ahead.id} ahead of it does not{code}"


# Long: one simulated timeline whose state (the jobs, the clock, each job's first start and the
# queues that say which job is ahead) lives across its numbered steps; split, it would travel.
def forecast(
    snapshot: engine.Snapshot,
    now: float,
    durations: dict[str, float | None],
    allocate: Any,
    *,
    horizon_s: float = HORIZON_S,
    max_steps: int = MAX_STEPS,
    budget_s: float = BUDGET_S,
) -> Forecast:
    """The start time (seconds) of each pending job of ``snapshot``, and why where it is unknown
    or earlier than a job ahead of it.

    ``durations`` gives each job's requested duration by engine id (None: unknown);
    ``allocate`` is the engine's ``allocate(snapshot, now) -> Plan``. Pure: no database.
    A job's estimate is its first start in the simulation: a later simulated preemption (by a
    job the forecast starts after it) does not make it unknown.
    """
    jobs = {job.id: job for job in snapshot.jobs}
    targets = {job.id for job in snapshot.jobs if not job.running}
    starts: dict[str, float | None] = dict.fromkeys(targets)
    ahead_why: dict[str, str] = {}
    order = _team_order_key(snapshot)
    # Each team's queue on each instance type, in the team's order: where "the job ahead" is.
    queues: dict[tuple[str, str], list[engine.Job]] = {}
    for job in sorted((job for job in snapshot.jobs if job.id in targets), key=order):
        queues.setdefault((job.team, job.instance_type), []).append(job)
    start_seq = max((job.start_seq for job in snapshot.jobs), default=0)
    # docs/preemption.md section 5: a victim within its grace keeps its GPUs until it ends or
    # its grace runs out (``killed_at``), and its preemptor is held out of the cycles meanwhile
    # (``held``: preemptor -> its victims still terminating), as the loop does.
    killed_at = {
        job.id: job.terminating_since + engine.preemption_grace_of(snapshot.policy, job)
        for job in snapshot.jobs
        if job.running and job.terminating_since is not None
    }
    held: dict[str, set[str]] = {}
    t = now
    deadline = time.process_time() + budget_s
    stopped = f"the forecast stopped after {max_steps} allocation cycle{'' if max_steps == 1 else 's'}"
    for _ in range(max_steps):
        if time.process_time() > deadline:
            # The rest stays unknown rather than keep a page waiting.
            stopped = "the forecast ran out of its time budget before this job started"
            break
        current = replace(snapshot, jobs=tuple(job for job in jobs.values() if job.id not in held))
        plan = allocate(current, t)
        # 1. Apply the cycle's decisions: preemptions first, then starts (Plan's contract).
        signalled = False
        for preemption in plan.preemptions:
            victim = jobs[preemption.job_id]
            grace = engine.preemption_grace_of(snapshot.policy, victim)
            counted = replace(victim, preemptions=victim.preemptions + 1, last_preempted_at=t)
            if grace > 0:
                jobs[victim.id] = replace(counted, terminating_since=t)
                killed_at[victim.id] = t + grace
                held.setdefault(preemption.preemptor, set()).add(victim.id)
                signalled = True
            else:
                jobs[victim.id] = replace(counted, nodes=(), started_at=None)
        # With a victim signalled, the plan counted GPUs free that are not yet: its starts wait
        # for the next cycle, which plans again (the loop's rule).
        made = () if signalled else plan.starts
        started = {start.job_id for start in made}
        for start in made:
            start_seq += 1
            job = jobs[start.job_id]
            jobs[start.job_id] = replace(job, nodes=start.nodes, started_at=t, start_seq=start_seq)
            if start.job_id in starts and starts[start.job_id] is None:
                starts[start.job_id] = t
                # 2. A job that starts while one ahead of it (same team and instance type) still
                # waits says why, so that its earlier estimate does not read as a mistake.
                waiting_ahead = []
                for other in queues[(job.team, job.instance_type)]:
                    if other.id == job.id:
                        break
                    if starts[other.id] is None and other.id not in started:
                        waiting_ahead.append(other)
                if waiting_ahead:
                    larger = [other for other in waiting_ahead if other.gpus > job.gpus]
                    ahead = min(larger, key=order) if larger else max(waiting_ahead, key=order)
                    ahead_why[job.id] = _why_before(job, ahead, t, plan)
        if all(starts[job_id] is not None for job_id in targets):
            break
        if made or plan.preemptions:
            continue  # decisions at one instant come to rest before the clock moves (POLICY 3.5)
        # 3. Move the clock to the next moment something changes: a job ends, a back-off expires.
        running = [job for job in jobs.values() if job.running]
        endless = [job.id for job in running if durations.get(job.id) is None]
        if endless:
            # A job that may end at any moment: no later start can be known.
            stopped = f"job #{min(endless, key=_id_key)} runs with no requested duration, so when it ends is unknown"
            break
        ends = [
            (t if job.started_at is None else job.started_at) + float(durations[job.id] or 0)
            for job in running
        ]
        backoffs = [
            end
            for job in jobs.values()
            if not job.running
            and (end := engine.back_off_end(job.preemptions, job.last_preempted_at)) is not None
        ]
        # A running job protected by its minimum runtime becomes a possible victim when it has
        # run it (docs/preemption.md section 4: the ETA of a job that waits on it uses it).
        protections = [
            job.started_at + protected
            for job in running
            if job.started_at is not None and (protected := engine.min_runtime_of(snapshot.policy, job)) > 0
        ]
        kills = [killed_at[job.id] for job in running if job.id in killed_at]
        upcoming = [moment for moment in (*ends, *backoffs, *protections, *kills) if moment > t]
        finished = [job.id for job, end in zip(running, ends, strict=True) if end <= t]
        if finished:
            for job_id in finished:
                _gone(jobs, held, killed_at, job_id)
            continue
        if _kill_due(jobs, held, killed_at, t):
            continue
        if not upcoming:
            stopped = "no job that runs or waits frees room for it"
            break
        if min(upcoming) - now > horizon_s:
            stopped = f"it would not start within {_days(horizon_s)}"
            break
        t = min(upcoming)
        # 4. Jobs whose requested duration is over leave the cluster at the new time; victims
        # whose grace is over are killed and wait again.
        for job, end in zip(running, ends, strict=True):
            if end <= t:
                _gone(jobs, held, killed_at, job.id)
        _kill_due(jobs, held, killed_at, t)
    unknown = {job_id: stopped for job_id, start in starts.items() if start is None}
    return Forecast(starts=starts, unknown=unknown, ahead=ahead_why)


def _release(held: dict[str, set[str]], victim: str) -> None:
    """A victim off its nodes no longer holds its preemptor back (once it holds none)."""
    for preemptor in [p for p, victims in held.items() if victim in victims]:
        held[preemptor].discard(victim)
        if not held[preemptor]:
            del held[preemptor]


def _gone(
    jobs: dict[str, engine.Job], held: dict[str, set[str]], killed_at: dict[str, float], job_id: str
) -> None:
    """A job that ended (its requested duration is over), within its grace or not."""
    del jobs[job_id]
    killed_at.pop(job_id, None)
    _release(held, job_id)


def _kill_due(
    jobs: dict[str, engine.Job], held: dict[str, set[str]], killed_at: dict[str, float], t: float
) -> bool:
    """Kill the victims whose grace is over at ``t``: back to pending, their preemption counted
    when they were signalled. True when any was."""
    due = [job_id for job_id, at in killed_at.items() if at <= t and job_id in jobs]
    for job_id in due:
        jobs[job_id] = replace(jobs[job_id], nodes=(), started_at=None, terminating_since=None)
        del killed_at[job_id]
        _release(held, job_id)
    return bool(due)


def _gpus(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def _id_key(job_id: str) -> tuple[int, str]:
    return (int(job_id), job_id) if job_id.isdigit() else (0, job_id)


def _days(seconds: float) -> str:
    days = seconds / 86400
    return f"{days:g} days" if days >= 1 else f"{seconds:g} s"


def forecast_starts(
    snapshot: engine.Snapshot,
    now: float,
    durations: dict[str, float | None],
    allocate: Any,
    **limits: Any,
) -> dict[str, float | None]:
    """Start time (seconds) of each pending job of ``snapshot``; None where it cannot be known
    (``forecast`` without the reasons)."""
    return forecast(snapshot, now, durations, allocate, **limits).starts


def _fingerprint(snapshot: engine.Snapshot, durations: dict[str, float | None]) -> str:
    text = repr(snapshot) + repr(sorted(durations.items()))
    return "gpugov:estimates:v2:" + hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Estimates:
    """``Forecast`` by primary key and as datetimes: what the pages show."""

    starts: dict[int, datetime | None]
    unknown: dict[int, str]
    ahead: dict[int, str]


def job_estimates(snapshot: engine.Snapshot, now: datetime) -> Estimates:
    """Estimated start of every pending job by primary key (None: unknown) with the reasons
    (``Forecast``), cached per state."""
    from allocations.engine import allocate
    from allocations.selectors.snapshot import job_id, job_pk

    # A job resumed from a checkpoint runs only the rest of its duration (docs/preemption.md
    # section 2), as the simulated cluster runs it.
    durations: dict[str, float | None] = {
        job_id(pk): (max(0.0, float(seconds) - kept) if seconds else None)
        for pk, seconds, kept in Job.objects.filter(state__in=(JobState.RUNNING, JobState.PENDING))
        .order_by()
        .values_list("pk", "requested_duration", "progress_kept_s")
    }
    key = _fingerprint(snapshot, durations)
    # The cache only saves work: while it is unreachable (Redis restarting) the page computes
    # the estimates itself rather than failing.
    try:
        cached = cache.get(key)
    except Exception:
        logger.warning("start estimates: the cache is unreachable; computing without it", exc_info=True)
        cached = None
    if not isinstance(cached, Forecast):
        try:
            cached = forecast(snapshot, now.timestamp(), durations, allocate)
        except ValueError as exc:
            # A state the engine refuses (a job on a node that is gone) makes every estimate
            # unknown, with the engine's words, rather than the page fail.
            logger.warning("start estimates: the engine refused the state: %s", exc)
            pending = [job.id for job in snapshot.jobs if not job.running]
            cached = Forecast(
                starts=dict.fromkeys(pending),
                unknown=dict.fromkeys(pending, f"the cluster's state cannot be forecast ({exc})"),
            )
        try:
            cache.set(key, cached, timeout=CACHE_TTL_S)
        except Exception:
            logger.warning("start estimates: the cache is unreachable; not kept", exc_info=True)
    return Estimates(
        starts={
            **{
                job_pk(ident): (datetime.fromtimestamp(seconds, tz=UTC) if seconds is not None else None)
                for ident, seconds in cached.starts.items()
            },
            **_held_starts(),
        },
        unknown={job_pk(ident): text for ident, text in cached.unknown.items()},
        ahead={job_pk(ident): text for ident, text in cached.ahead.items()},
    )


def _held_starts() -> dict[int, datetime]:
    """The preemptors the loop holds out of the snapshot while their victims terminate
    (docs/preemption.md section 5): each is expected when the last of its victims is off its
    nodes, at the end of its grace or its own requested end if sooner (one SELECT)."""
    ends: dict[int, datetime] = {}
    victims = (
        Job.objects.filter(
            state=JobState.RUNNING,
            terminating_since__isnull=False,
            preempted_for__state=JobState.PENDING,
        )
        .order_by()
        .values_list("preempted_for", "grace_ends_at", "started_at", "requested_duration", "progress_kept_s")
    )
    for preemptor, grace_ends_at, started_at, duration, kept in victims:
        end = grace_ends_at
        if started_at is not None and duration:
            end = min(end, started_at + timedelta(seconds=max(0.0, float(duration) - kept)))
        ends[preemptor] = max(end, ends.get(preemptor, end))
    return ends


def estimated_starts(snapshot: engine.Snapshot, now: datetime) -> dict[int, datetime | None]:
    """Estimated start of every pending job by primary key (None: unknown), cached per state."""
    return job_estimates(snapshot, now).starts
