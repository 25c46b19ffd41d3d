"""The allocation loop: ONE service, ``run_allocation_cycle(*, trigger)`` (POLICY.md section 3).

A cycle: (1) take the cycle lock, (2) sync the database with what the backend really runs,
(3) take a snapshot, (4) ask the engine for a plan, (5) apply it through the backend, (6) record
pending reasons and a CycleRun row.

Crash safety rests on one rule: the backend is told first, the database second, and every
cycle starts by comparing the two. A worker killed between ``backend.start`` and the database
commit leaves a job the backend runs and the database has as pending; the next cycle's sync
adopts it (and records a correction). A worker killed after ``backend.preempt`` leaves a job
the database has as running and the backend holds as pending; the next sync requeues it.
``start``, ``preempt``, ``signal`` and ``cancel`` are idempotent (base.py), so repeating one is
harmless.

Grace (docs/preemption.md section 5): a victim whose grace is above 0 is signalled
(``backend.signal``), not stopped. It stays running on its nodes, counted, with
``terminating_since``, ``grace_ends_at`` and ``preempted_for``; its preemptor stays pending and
out of the snapshots (``build_snapshot``) with the reason ``preempting``. A victim that ends by
itself is ended by the sync as any job; one still running when its grace is over is killed and
requeued (``backend.preempt``) before the snapshot, and its preemptor is back in the cycle.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from allocations import engine
from allocations.backends import (
    BackendError,
    BackendJob,
    BackendJobState,
    BackendNode,
    ClusterBackend,
    JobSpec,
    PermanentBackendError,
    TransientBackendError,
    get_backend,
)
from allocations.choices import JobEventKind, JobState, NodeStateSource
from allocations.engine.resources import GPUS, MEMORY, VCPUS, job_resources
from allocations.models import Cluster, CycleRun, InstanceType, Job, JobEvent, Node, NodeStateChange
from allocations.selectors.snapshot import build_snapshot, job_id, job_pk

# The fields of a job within its grace (docs/preemption.md section 5), cleared whenever it
# leaves its nodes.
GRACE_FIELDS = ("terminating_since", "grace_ends_at", "preempted_for", "preempted_reason")

log = logging.getLogger(__name__)

# Arbitrary but fixed: the PostgreSQL advisory lock key of the allocation cycle ("gpugov" in hex).
ADVISORY_LOCK_KEY = 0x6770_7567_6F76
# Test hook for the crash-safety test: sleep this many seconds after the backend calls of
# phase 5 and before the database commit, so that a test can SIGKILL the worker right there.
PAUSE_BEFORE_APPLY_COMMIT_ENV = "GPUGOV_LOOP_PAUSE_BEFORE_APPLY_COMMIT"
ENDED = {
    BackendJobState.FINISHED: (JobState.FINISHED, JobEventKind.FINISHED),
    BackendJobState.FAILED: (JobState.FAILED, JobEventKind.FAILED),
    BackendJobState.CANCELLED: (JobState.CANCELLED, JobEventKind.CANCELLED),
}


# --- (1) the cycle lock --------------------------------------------------------------------------


@contextlib.contextmanager
def cycle_lock() -> Iterator[bool]:
    """Yield whether this worker holds the cycle lock; never waits for it.

    PostgreSQL: a session advisory lock, so one cycle runs at a time across every worker on every
    machine, and a killed worker's lock goes with its connection. SQLite (one machine by nature):
    an exclusive ``flock`` on a file beside the database, which the kernel releases when the
    process dies; separate ``open()`` calls conflict even between threads of one process.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [ADVISORY_LOCK_KEY])
            acquired = bool(cursor.fetchone()[0])
        try:
            yield acquired
        finally:
            if acquired:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [ADVISORY_LOCK_KEY])
        return
    database = str(connection.settings_dict["NAME"])
    digest = hashlib.sha256(database.encode()).hexdigest()[:16]
    path = settings.VAR_DIR / f"allocation-cycle-{digest}.lock"
    with open(path, "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --- the cycle's bookkeeping ---------------------------------------------------------------------


@dataclass
class _Changes:
    """Job rows touched by this cycle and the events to append, written in one transaction."""

    jobs: dict[int, Job] = field(default_factory=dict)
    fields: set[str] = field(default_factory=set)
    events: list[JobEvent] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    corrections: int = 0
    ended: int = 0
    # The state of each job as this cycle read it, to detect a change made meanwhile.
    loaded: dict[int, str] = field(default_factory=dict)

    def load(self, jobs: dict[int, Job]) -> dict[int, Job]:
        for pk, job in jobs.items():
            self.loaded[pk] = job.state
        return jobs

    def touch(self, job: Job, *names: str) -> None:
        self.jobs[job.pk] = job
        self.fields.update(names)

    def event(self, job: Job, kind: str, at: datetime, **fields: object) -> None:
        self.events.append(JobEvent(job=job, kind=kind, at=at, **fields))

    def correct(self, note: str) -> None:
        self.corrections += 1
        self.notes.append(note)
        log.warning("allocation cycle correction: %s", note)

    def save(self) -> None:
        """Write every touched job and every event (a constant number of statements); call it
        inside a transaction.

        A job whose state changed since this cycle read it (a user cancelled it meanwhile) is
        left as the user made it: the rows are locked and compared first. What the backend did
        to such a job is repaired by the next cycle's sync (a cancelled job still running there
        is cancelled).
        """
        if self.jobs:
            now_states = dict(
                Job.objects.select_for_update().filter(pk__in=list(self.jobs)).values_list("pk", "state")
            )
            stale = {pk for pk in self.jobs if now_states.get(pk) != self.loaded.get(pk, now_states.get(pk))}
            for pk in stale:
                self.notes.append(f"job {pk} changed to {now_states.get(pk)} during the cycle: left as it is")
            rows = [job for pk, job in self.jobs.items() if pk not in stale]
            if rows:
                Job.objects.bulk_update(rows, sorted(self.fields), batch_size=1000)
            self.events = [event for event in self.events if event.job_id not in stale]
            for pk, job in self.jobs.items():
                if pk not in stale:
                    self.loaded[pk] = job.state
        if self.events:
            JobEvent.objects.bulk_create(self.events, batch_size=1000)
        self.jobs, self.fields, self.events = {}, set(), []


def _moment(seconds: float | None, default: datetime) -> datetime:
    return default if seconds is None else datetime.fromtimestamp(seconds, tz=UTC)


def _clear_grace(job: Job) -> list[str]:
    """Off its nodes, a job no longer terminates: the fields to write."""
    job.terminating_since = job.grace_ends_at = job.preempted_for = None
    job.preempted_reason = ""
    return list(GRACE_FIELDS)


def _requeue(changes: _Changes, job: Job, now: datetime, reason: str, message: str) -> None:
    """Back to pending, keeping its submit time (POLICY.md section 4), with a requeued event."""
    job.state, job.nodes, job.started_at = JobState.PENDING, [], None
    changes.touch(job, "state", "nodes", "started_at", *_clear_grace(job))
    changes.event(job, JobEventKind.REQUEUED, now, reason=reason, message=message[:500])


def _run(
    job: Job, changes: _Changes, nodes: list[list[object]], started_at: datetime, start_seq: int
) -> None:
    job.state, job.nodes, job.started_at, job.start_seq = JobState.RUNNING, nodes, started_at, start_seq
    job.pending_reason_code = job.pending_reason_message = ""
    changes.touch(
        job, "state", "nodes", "started_at", "start_seq", "pending_reason_code", "pending_reason_message"
    )


def end_job(
    job: Job, *, state: str, at: datetime, nodes: list[list[object]] | None = None, message: str = ""
) -> tuple[list[str], JobEvent]:
    """End ``job`` in ``state`` (finished, failed or cancelled) at ``at``: its end time, and its
    nodes cleared, since they are free from now on. Returns the fields changed and the unsaved
    event that records the end with the nodes the job ran on (``nodes``: those the backend
    reports, when the row has none); the caller writes both in its transaction. The one way a
    job ends, for the loop (an end the backend reports) and for ``services.jobs.job_cancel``."""
    if job.started_at is not None and at < job.started_at:
        # Clocks of the backend and of this host may differ: never end before the start.
        at = job.started_at
    ran_on = job.nodes or nodes or []
    job.state, job.finished_at, job.nodes = state, at, []
    event = JobEvent(job=job, kind=JobEventKind(state), at=at, nodes=ran_on, message=message[:500])
    return ["state", "finished_at", "nodes", *_clear_grace(job)], event


def _end(job: Job, changes: _Changes, seen: BackendJob, now: datetime) -> None:
    state, _ = ENDED[seen.state]
    message = (
        seen.reason if seen.exit_code in (None, 0) else f"exit code {seen.exit_code}; {seen.reason}".strip()
    )
    nodes = [list(pair) for pair in seen.nodes]
    if job.terminating_since is not None:
        message = f"{message.strip('; ')}; ended within its preemption grace".strip("; ")
    fields, event = end_job(
        job, state=state, at=_moment(seen.finished_at, now), nodes=nodes, message=message.strip("; ")
    )
    changes.touch(job, *fields)
    changes.events.append(event)
    changes.ended += 1


# --- (2) sync ------------------------------------------------------------------------------------


def _sync_nodes(backend: ClusterBackend, now: datetime, changes: _Changes) -> None:
    """Make the Node rows what the backend reports: new nodes added, vanished ones removed,
    states and sizes updated. Capacity follows, since the snapshot counts ready Node rows."""
    reported = {node.name: node for node in backend.list_nodes()}
    types = {row.name: row for row in InstanceType.objects.all()}
    rows = {row.name: row for row in Node.objects.select_related("instance_type")}
    for name in rows.keys() - reported.keys():
        changes.notes.append(f"node {name} is no longer reported by the backend: removed")
    Node.objects.filter(name__in=rows.keys() - reported.keys()).delete()
    updated, created = [], []
    moved: list[tuple[Node, str]] = []  # (node, its state before): the node pages' history
    for name, seen in reported.items():
        instance_type = types.get(seen.instance_type)
        if instance_type is None:
            # GPUs alone, whatever else the backend reads: the administrator declares the other
            # resources (docs/resources.md 1); until then the note and node reason say what was read.
            instance_type = InstanceType.objects.create(name=seen.instance_type, gpus_per_node=seen.gpus)
            types[seen.instance_type] = instance_type
            changes.notes.append(f"instance type {seen.instance_type} added ({seen.gpus} GPUs a node)")
        mismatch = resource_mismatch(seen, instance_type)
        if mismatch:
            seen = dataclasses.replace(seen, reason="; ".join(r for r in (seen.reason, mismatch) if r))
        row = rows.get(name)
        if mismatch and (row is None or row.reason != seen.reason[:200]):
            changes.notes.append(f"node {name}: {mismatch}")
        if row is None:
            created.append(
                Node(
                    name=name,
                    instance_type=instance_type,
                    gpus=seen.gpus,
                    state=seen.state,
                    state_since=now,
                    reason=seen.reason[:200],
                )
            )
            changes.notes.append(f"node {name} added ({seen.gpus} GPUs, {seen.state})")
            continue
        if (row.state, row.gpus, row.reason, row.instance_type_id) != (
            seen.state,
            seen.gpus,
            seen.reason[:200],
            instance_type.pk,
        ):
            if row.state != seen.state:
                moved.append((row, row.state))
                row.state_since = now
                changes.notes.append(f"node {name}: {row.state} -> {seen.state} {seen.reason}".strip())
            row.state, row.gpus, row.reason, row.instance_type = (
                seen.state,
                seen.gpus,
                seen.reason[:200],
                instance_type,
            )
            updated.append(row)
    if created:
        Node.objects.bulk_create(created)
    if updated:
        Node.objects.bulk_update(updated, ["state", "state_since", "gpus", "reason", "instance_type"])
    if created or moved:
        NodeStateChange.objects.bulk_create(
            NodeStateChange(
                node=node,
                at=now,
                old_state=old_state,
                state=node.state,
                reason=node.reason,
                source=NodeStateSource.CLUSTER,
            )
            for node, old_state in [*((node, "") for node in created), *moved]
        )


def _sync_jobs(backend: ClusterBackend, now: datetime, changes: _Changes, start_seq: Iterator[int]) -> None:
    """Make the Job rows agree with what the backend runs (see the module docstring)."""
    reported: dict[int, BackendJob] = {}
    for seen in backend.list_jobs():
        try:
            reported[job_pk(seen.job_id)] = seen
        except ValueError:  # not one of ours: a backend reports only jobs gpugov started
            changes.notes.append(f"backend job {seen.job_id!r} ({seen.external_id}) is not a gpugov job id")
    # Only rows that can disagree with the backend: a reported end of a job ended here too
    # changes nothing, so ended rows stay unread. No ordering: Job's default one (by submission)
    # has the database walk every job instead of using the state and id indexes.
    live_ids = [pk for pk, seen in reported.items() if seen.state not in ENDED]
    ended_ids = [pk for pk, seen in reported.items() if seen.state in ENDED]
    wanted = Q(state=JobState.RUNNING) | Q(pk__in=live_ids) | Q(pk__in=ended_ids, state=JobState.PENDING)
    jobs = changes.load({job.pk: job for job in Job.objects.filter(wanted).order_by()})
    for pk, seen in reported.items():
        job = jobs.get(pk)
        alive = seen.state in (BackendJobState.RUNNING, BackendJobState.PENDING)
        if job is None:
            if alive:
                backend.cancel(seen.job_id)
                changes.correct(f"backend job {seen.job_id} has no job in the database: cancelled it")
            continue
        if job.state == JobState.RUNNING:
            if seen.state == BackendJobState.RUNNING:
                nodes = [list(pair) for pair in seen.nodes]
                if seen.nodes and [tuple(pair) for pair in job.nodes] != list(seen.nodes):
                    changes.correct(f"job {pk} runs on {nodes}, not on {job.nodes}: nodes updated")
                    job.nodes = nodes
                    changes.touch(job, "nodes")
                if seen.external_id and job.external_id != seen.external_id:
                    job.external_id = seen.external_id
                    changes.touch(job, "external_id")
            elif seen.state == BackendJobState.PENDING:
                why = (
                    f"the backend holds it as pending ({seen.reason})"
                    if seen.reason
                    else "the backend holds it as pending"
                )
                _requeue(changes, job, now, "lost", why)
                changes.correct(f"job {pk} is held as pending by the backend: requeued")
                _hold(backend, seen, changes)
            else:
                _end(job, changes, seen, now)
        elif job.state == JobState.PENDING:
            if seen.state == BackendJobState.RUNNING:
                # Started by a cycle that died before its database commit: adopt it.
                started = _moment(seen.started_at, now)
                nodes = [list(pair) for pair in seen.nodes]
                _run(job, changes, nodes, started, next(start_seq))
                job.external_id = seen.external_id
                changes.touch(job, "external_id")
                changes.event(
                    job, JobEventKind.STARTED, started, nodes=nodes, message="adopted: the backend runs it"
                )
                changes.correct(f"job {pk} runs in the backend but was pending: adopted as running")
            elif seen.state == BackendJobState.PENDING:
                _hold(backend, seen, changes)
            elif seen.state in ENDED:
                # It ran and ended between a lost commit and this sync: account for both.
                started = _moment(seen.started_at, now)
                changes.event(job, JobEventKind.STARTED, started, nodes=[list(p) for p in seen.nodes])
                _end(job, changes, seen, now)
                changes.correct(f"job {pk} ran and {seen.state} in the backend while pending here")
        elif alive:
            # Cancelled (or otherwise ended) here but still alive there: stop it for good.
            backend.cancel(seen.job_id)
            if job.state != JobState.CANCELLED:
                changes.correct(f"job {pk} is {job.state} but the backend still had it: cancelled there")
            else:
                changes.notes.append(f"job {pk} was cancelled: stopped in the backend")
    for pk, job in jobs.items():
        if job.state == JobState.RUNNING and pk not in reported:
            _requeue(changes, job, now, "lost", "the backend does not know it")
            changes.correct(f"job {pk} was running but the backend does not know it: requeued")


def _hold(backend: ClusterBackend, seen: BackendJob, changes: _Changes) -> None:
    """A job pending here must not be runnable there. A copy the backend may start by itself
    (a Slurm job released on nodes that drained before it could start, so waiting for a reason
    other than its scheduler) would start on its old nodes whenever they come back, beside the
    jobs gpugov has placed there since (found by the chaos run: a node holding 12 GPUs of its
    8). ``preempt`` holds it; gpugov starts it again where it decides."""
    if seen.held:
        return
    try:
        backend.preempt(seen.job_id)
    except PermanentBackendError as exc:
        changes.notes.append(f"job {seen.job_id} could not be held in the backend: {exc}")
        return
    changes.correct(f"job {seen.job_id} waited in the backend, which could start it by itself: held there")


# --- (2b) graces that ran out ------------------------------------------------------------------


def _grace_due(backend: ClusterBackend, now: datetime, changes: _Changes) -> int:
    """Kill and requeue each victim still running when its grace is over (docs/preemption.md
    section 5), as a victim with no grace is at once: it loses the work since its last
    checkpoint, up to now. One the backend finds ending by itself is left to the next sync.
    Returns how many were killed."""
    due = changes.load(
        {
            job.pk: job
            for job in Job.objects.filter(
                state=JobState.RUNNING, terminating_since__isnull=False, grace_ends_at__lte=now
            )
            .select_related("team", "instance_type")
            .order_by()
        }
    )
    killed = 0
    for job in due.values():
        try:
            stopped = backend.preempt(job_id(job.pk))
        except PermanentBackendError as exc:
            changes.notes.append(f"job {job.pk}: its grace is over but it could not be stopped: {exc}")
            continue
        if not stopped:
            changes.notes.append(f"job {job.pk}: its grace is over and it is ending by itself")
            continue
        assert job.terminating_since is not None
        ran, lost_gpu_seconds, kept = _preemption_cost(job, now)
        job.progress_kept_s += kept
        job.lost_gpu_seconds += lost_gpu_seconds
        changes.touch(job, "progress_kept_s", "lost_gpu_seconds")
        grace = (now - job.terminating_since).total_seconds()
        message = (
            f"preempted by job {job.preempted_for_id} ({job.preempted_reason}): killed when its grace "
            f"ran out, {grace:.0f} s after it was signalled"
        )
        changes.event(
            job,
            JobEventKind.PREEMPTED,
            now,
            nodes=job.nodes,
            reason=job.preempted_reason,
            preemptor_id=job.preempted_for_id,
            message=message,
            ran_s=ran,
            lost_gpu_seconds=lost_gpu_seconds,
        )
        _requeue(changes, job, now, job.preempted_reason, message)
        changes.notes.append(f"job {job.pk}: its grace ran out: killed and requeued")
        killed += 1
    return killed


def _signal(
    backend: ClusterBackend,
    job: Job,
    preemption: engine.Preemption,
    grace: float,
    now: datetime,
    changes: _Changes,
) -> bool:
    """Signal the victim ``job`` for its preemptor, within ``grace`` seconds (docs/preemption.md
    section 5). True: signalled, and recorded; False: it is ending by itself (a refusal of the
    backend is raised). The preemption is counted now (its back-off too, POLICY.md 3.5); the
    lost work when it is killed (``_grace_due``)."""
    if not backend.signal(preemption.job_id):
        return False
    job.terminating_since = now
    job.grace_ends_at = now + timedelta(seconds=grace)
    job.preempted_for_id = job_pk(preemption.preemptor)
    job.preempted_reason = preemption.reason
    job.preemption_count += 1
    job.last_preempted_at = now
    changes.touch(job, *GRACE_FIELDS, "preemption_count", "last_preempted_at")
    changes.event(
        job,
        JobEventKind.SIGNALLED,
        now,
        nodes=job.nodes,
        reason=preemption.reason,
        preemptor_id=job.preempted_for_id,
        message=(
            f"signalled (SIGTERM) for job {preemption.preemptor} ({preemption.reason}): keeps its "
            f"GPUs until it stops, at most {grace:g} s"
        ),
    )
    return True


def resource_mismatch(seen: BackendNode, it: InstanceType) -> str:
    """What the backend reads of a node's resources beyond GPUs that its instance type does not
    give it (docs/resources.md 1), as a sentence for the node's reason; "" when they agree.

    Fewer vCPU or less memory than declared is a mismatch (jobs placed by the declared figures
    would be refused); more is not (a real node's RealMemory is often a little under its
    nominal size, never above). Partitions must be exactly the declared ones: any other is a
    GPU the engine does not count. What the backend does not know (None) is not judged.
    """
    found = []
    if seen.vcpus is not None and seen.vcpus < it.vcpus_per_node:
        found.append(f"{seen.vcpus:,} vCPU of the {it.vcpus_per_node:,} declared")
    if seen.memory_gib is not None and seen.memory_gib < it.memory_gib_per_node:
        found.append(f"{seen.memory_gib:,} GiB memory of the {it.memory_gib_per_node:,} declared")
    if seen.partitions is not None:
        read, declared = dict(seen.partitions), dict(it.partitions_per_node or {})
        for profile in sorted(read.keys() | declared.keys()):
            if read.get(profile, 0) != declared.get(profile, 0):
                found.append(
                    f"{read.get(profile, 0):,} {profile} of the {declared.get(profile, 0):,} declared"
                )
    if not found:
        return ""
    return f"gpugov: the backend reads {', '.join(found)} on {it.name}"


# --- (5) apply -----------------------------------------------------------------------------------


def _spec(job: Job, nodes: int = 1) -> JobSpec:
    """What the backend is asked to run; beyond GPUs, what the job takes on each of its
    ``nodes`` (docs/resources.md 3: ``job_resources``, vCPU and memory spread evenly over a
    job of whole nodes). A job on an instance type of GPUs alone asks nothing more."""
    it = job.instance_type
    kind = engine.InstanceType(
        it.name,
        it.gpus_per_node,
        vcpus_per_node=it.vcpus_per_node,
        memory_gib_per_node=it.memory_gib_per_node,
        partitions_per_node=tuple(sorted((it.partitions_per_node or {}).items())),
    )
    asked = job_resources(
        kind,
        engine.Job(
            job_id(job.pk),
            job.team.name,
            it.name,
            job.gpus,
            0.0,
            vcpus=job.vcpus,
            memory_gib=job.memory_gib,
            partitions=tuple(sorted((job.partitions or {}).items())),
        ),
    )
    spread = max(1, nodes)
    return JobSpec(
        job_id=job_id(job.pk),
        team=job.team.name,
        name=job.name,
        instance_type=it.name,
        gpus=job.gpus,
        command=job.command,
        image=job.image,
        duration_s=job.requested_duration,
        progress_kept_s=job.progress_kept_s,
        vcpus_per_node=asked.get(VCPUS, 0) // spread,
        memory_gib_per_node=asked.get(MEMORY, 0) // spread,
        partitions_per_node=tuple(
            (name, amount) for name, amount in asked.items() if name not in (GPUS, VCPUS, MEMORY) and amount
        ),
    )


def _preemption_cost(job: Job, now: datetime) -> tuple[float, float, float]:
    """What preempting the running ``job`` at ``now`` costs (docs/preemption.md section 2):
    (seconds its run lasted, GPU-seconds of work lost, seconds of this run its last checkpoint
    keeps). The engine's own functions judge it, so that what the loop records is what the
    engine weighed when it chose the victim."""
    started = (job.started_at or now).timestamp()
    run = engine.Job(
        id=job_id(job.pk),
        team=job.team.name,
        instance_type=job.instance_type.name,
        gpus=job.gpus,
        submit_time=job.submitted_at.timestamp(),
        seq=job.pk,
        nodes=tuple((str(node), int(gpus)) for node, gpus in job.nodes or ()),
        started_at=started,
        checkpoint_interval_s=None if job.checkpoint_interval_s is None else float(job.checkpoint_interval_s),
        progress_kept_s=job.progress_kept_s,
    )
    at = now.timestamp()
    ran = max(0.0, at - started)
    return ran, engine.lost_work_s(run, at) * job.gpus, engine.last_checkpoint_s(run, at)


# Long: preemptions and starts share the error handling that keeps what the backend already
# did when a call fails half-way; split, each half would repeat it.
def _apply(
    backend: ClusterBackend,
    plan: engine.Plan,
    now: datetime,
    changes: _Changes,
    start_seq: Iterator[int],
    graces: dict[str, float] | None = None,
) -> tuple[int, int, list[str]]:
    """Preemptions first, then starts, each through the backend and then onto the rows.

    A permanent error on one job is recorded and the job stays as it was; a transient one stops
    the phase (what the backend already did is still written, so nothing is lost).

    A victim with a grace in ``graces`` (seconds, by job id; docs/preemption.md section 5) is
    signalled instead of stopped; then, as in the simulator, none of the plan's starts is
    made: the plan counted the victim's GPUs free, which they are not yet, and the next cycle
    plans again with the victim still on its nodes and its preemptor held back.
    """
    errors: list[str] = []
    graces = graces or {}
    wanted = {job_pk(p.job_id) for p in plan.preemptions} | {job_pk(s.job_id) for s in plan.starts}
    jobs = changes.load(
        {job.pk: job for job in Job.objects.filter(pk__in=wanted).select_related("team", "instance_type")}
    )
    preempted = started = signalled = 0
    # A victim the backend refused to preempt, or found ending by itself, still holds its
    # nodes: its preemptor, and any start on those nodes, waits for the next cycle (which
    # plans from what really runs). Such a victim stays running here: the next sync ends it.
    kept_running: dict[str, str] = {}  # node -> the victim still on it
    not_freed: dict[str, str] = {}  # preemptor -> a victim of it not gone
    ending: set[str] = set()  # victims that ended by themselves: nothing went wrong
    for preemption in plan.preemptions:
        job = jobs.get(job_pk(preemption.job_id))
        if job is None or job.state != JobState.RUNNING:  # cancelled or deleted since the snapshot
            continue
        grace = graces.get(preemption.job_id, 0.0)
        stopped: bool | None
        try:
            if grace > 0:
                if _signal(backend, job, preemption, grace, now, changes):
                    signalled += 1
                    preempted += 1
                    continue
                stopped = False
            else:
                stopped = backend.preempt(preemption.job_id)
        except PermanentBackendError as exc:
            errors.append(f"{'signal' if grace > 0 else 'preempt'} job {preemption.job_id}: {exc}")
            stopped = None
        if not stopped:
            if stopped is False:
                ending.add(preemption.job_id)
                changes.notes.append(
                    f"job {preemption.job_id} was not preempted for job {preemption.preemptor}: the "
                    "backend no longer runs it (it ended by itself); the next cycle plans again"
                )
            not_freed[preemption.preemptor] = preemption.job_id
            kept_running.update((str(node), preemption.job_id) for node, _ in job.nodes)
            continue
        preemptor = jobs.get(job_pk(preemption.preemptor))
        ran, lost_gpu_seconds, kept = _preemption_cost(job, now)
        job.preemption_count += 1
        job.last_preempted_at = now
        job.progress_kept_s += kept
        job.lost_gpu_seconds += lost_gpu_seconds
        changes.touch(job, "preemption_count", "last_preempted_at", "progress_kept_s", "lost_gpu_seconds")
        message = f"preempted by job {preemption.preemptor} ({preemption.reason})"
        changes.event(
            job,
            JobEventKind.PREEMPTED,
            now,
            nodes=job.nodes,
            reason=preemption.reason,
            preemptor=preemptor,
            message=message,
            ran_s=ran,
            lost_gpu_seconds=lost_gpu_seconds,
        )
        _requeue(changes, job, now, preemption.reason, message)
        preempted += 1
    if signalled and plan.starts:
        changes.notes.append(
            f"{signalled} victim(s) signalled within their grace: the plan's {len(plan.starts)} "
            "start(s) wait for the next cycle (docs/preemption.md section 5)"
        )
    for start in () if signalled else plan.starts:
        job = jobs.get(job_pk(start.job_id))
        # Pending now, or preempted a moment ago by this plan; anything else changed meanwhile.
        if job is None or job.state != JobState.PENDING:
            continue
        blocker = next((kept_running[name] for name, _ in start.nodes if name in kept_running), None)
        victim = not_freed.get(start.job_id)
        if blocker is not None or victim is not None:
            if (blocker or victim) in ending:
                changes.notes.append(
                    f"start job {start.job_id}: waits for the next cycle, job {blocker or victim} is ending"
                )
            elif blocker is not None:
                errors.append(
                    f"start job {start.job_id}: not started, job {blocker} on its nodes could not be preempted"
                )
            else:
                errors.append(
                    f"start job {start.job_id}: not started, a job it was to preempt could not be preempted"
                )
            continue
        nodes = [[name, gpus] for name, gpus in start.nodes]
        try:
            external_id = backend.start(_spec(job, len(start.nodes)), start.nodes)
        except PermanentBackendError as exc:
            errors.append(f"start job {start.job_id}: {exc}")
            continue
        _run(job, changes, nodes, now, next(start_seq))
        job.external_id = external_id
        changes.touch(job, "external_id")
        changes.event(job, JobEventKind.STARTED, now, nodes=nodes)
        started += 1
    pause = os.environ.get(PAUSE_BEFORE_APPLY_COMMIT_ENV)
    if pause:
        log.warning("%s: pausing %s s before the apply commit", PAUSE_BEFORE_APPLY_COMMIT_ENV, pause)
        time.sleep(float(pause))
    return preempted, started, errors


# --- (6) record ----------------------------------------------------------------------------------


def _held_reasons(now: datetime) -> dict[str, engine.PendingReason]:
    """The reason of each preemptor held back for victims within their grace (docs/preemption.md
    section 5), worded as the simulator's (one SELECT)."""
    waits: dict[int, list[str]] = {}
    victims = (
        Job.objects.filter(
            state=JobState.RUNNING, terminating_since__isnull=False, preempted_for__state=JobState.PENDING
        )
        .order_by("pk")
        .values_list("pk", "preempted_for", "terminating_since", "grace_ends_at")
    )
    for pk, preemptor, since, ends in victims:
        grace = (ends - since).total_seconds()
        left = max(0.0, (ends - now).total_seconds())
        waits.setdefault(preemptor, []).append(f"job {pk} (grace {grace:.0f} s, {left:.0f} s left)")
    return {
        job_id(pk): engine.PendingReason(
            engine.PendingCode.PREEMPTING,
            f"waits for {', '.join(parts)} to stop: their GPUs are kept for it",
        )
        for pk, parts in waits.items()
    }


def _record_pending_reasons(plan: engine.Plan, held: dict[str, engine.PendingReason] | None = None) -> int:
    """Write the reason of every job left pending, only where it changed (one SELECT and one
    UPDATE per 5,000 changed rows, however many jobs are pending); ``held``: the reasons of the
    jobs the plan did not see (held back, ``_held_reasons``), which take precedence."""
    held = held or {}
    # No ordering: Job's default one (by submission) has SQLite walk every job in that order.
    current = (
        Job.objects.filter(state=JobState.PENDING)
        .order_by()
        .values_list("pk", "pending_reason_code", "pending_reason_message")
    )
    changed = []
    for pk, code, message in current:
        reason = held.get(job_id(pk)) or plan.pending.get(job_id(pk))
        if reason is None:
            continue
        text = reason.message[:500]
        if (code, message) != (reason.code.value, text):
            changed.append(Job(pk=pk, pending_reason_code=reason.code.value, pending_reason_message=text))
    _write_pending_reasons(changed)
    return len(plan.pending) + len(held)


def _write_pending_reasons(rows: list[Job]) -> None:
    """One UPDATE per 5,000 rows. Django's bulk_update builds a CASE per column whose cost grows
    with the batch; PostgreSQL joins a VALUES list instead, and SQLite runs a prepared statement
    per row inside one transaction, which is as fast there."""
    if not rows:
        return
    table = connection.ops.quote_name(Job._meta.db_table)
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            cursor.executemany(
                f"UPDATE {table} SET pending_reason_code = %s, pending_reason_message = %s "
                "WHERE id = %s AND state = 'pending'",
                [(job.pending_reason_code, job.pending_reason_message, job.pk) for job in rows],
            )
            return
        for first in range(0, len(rows), 5000):
            chunk = rows[first : first + 5000]
            values = ", ".join(["(%s::bigint, %s, %s)"] * len(chunk))
            cursor.execute(
                f"UPDATE {table} AS j SET pending_reason_code = v.code, pending_reason_message = v.message "
                f"FROM (VALUES {values}) AS v(id, code, message) WHERE j.id = v.id AND j.state = 'pending'",
                [
                    value
                    for job in chunk
                    for value in (job.pk, job.pending_reason_code, job.pending_reason_message)
                ],
            )


def _graces(snapshot: engine.Snapshot, plan: engine.Plan) -> dict[str, float]:
    """The grace of each victim of ``plan`` (docs/preemption.md section 5), by job id."""
    if not plan.preemptions:
        return {}
    victims = {p.job_id for p in plan.preemptions}
    return {
        job.id: engine.preemption_grace_of(snapshot.policy, job) for job in snapshot.jobs if job.id in victims
    }


def _mark_backend(healthy: bool, error: str, now: datetime) -> None:
    Cluster.objects.filter(pk=1).update(
        backend_healthy=healthy, backend_error=error[:2000], backend_checked_at=now
    )


def _start_seq(now: datetime) -> Iterator[int]:
    """Start order numbers that grow across cycles without a query: microseconds of ``now``
    plus the position in this cycle (POLICY.md 4: the larger started later)."""
    base = int(now.timestamp() * 1_000_000)
    return iter(range(base, base + 10_000_000))


def run_allocation_cycle(*, trigger: str) -> CycleRun | None:
    """Run one allocation cycle; None when another worker is running one (or no cluster exists).

    A backend outage (TransientBackendError) stops the cycle, marks the cluster degraded and is
    recorded on the CycleRun (``backend_outage``); no job is marked failed because of it. The
    Celery task backs off while the outage lasts.
    """
    # (1) Take the lock: one cycle at a time across every worker and machine.
    with cycle_lock() as acquired:
        if not acquired:
            log.info("allocation cycle (%s) skipped: another worker is running one", trigger)
            return None
        cluster = Cluster.objects.filter(pk=1).first()
        if cluster is None:
            log.info("allocation cycle (%s) skipped: no cluster is configured", trigger)
            return None
        return _locked_cycle(cluster, trigger)


def _locked_cycle(cluster: Cluster, trigger: str) -> CycleRun:
    now = timezone.now()
    run = CycleRun(started_at=now, trigger=trigger[:32])
    changes = _Changes()
    start_seq = _start_seq(now)
    errors: list[str] = []
    phase_started = time.perf_counter()

    def lap() -> float:
        nonlocal phase_started
        elapsed, phase_started = (time.perf_counter() - phase_started) * 1000, time.perf_counter()
        return elapsed

    try:
        backend = get_backend(cluster.backend_kind, cluster.backend_settings)
        # (2) Sync from the backend: nodes, then jobs; corrections recorded on the run.
        _sync_nodes(backend, now, changes)
        _sync_jobs(backend, now, changes, start_seq)
        with transaction.atomic():
            changes.save()
        # Victims whose grace ran out leave their nodes before the snapshot is taken.
        _grace_due(backend, now, changes)
        with transaction.atomic():
            changes.save()
        run.sync_ms = lap()
        # (3) Snapshot of the database, now that it agrees with the backend.
        snapshot = build_snapshot(now)
        run.snapshot_ms = lap()
        # (4) The engine decides.
        plan = engine.allocate(snapshot, now.timestamp())
        run.engine_ms = lap()
        # (5) Apply the plan through the backend, then write it (see _apply for the order).
        try:
            run.preempted, run.started, apply_errors = _apply(
                backend, plan, now, changes, start_seq, _graces(snapshot, plan)
            )
            errors.extend(apply_errors)
        finally:
            with transaction.atomic():
                changes.save()
        run.apply_ms = lap()
        # (6) Record pending reasons and the run.
        run.pending = _record_pending_reasons(plan, _held_reasons(now))
        run.ok = not errors
        if not cluster.backend_healthy or cluster.backend_error:
            _mark_backend(True, "", now)
        else:
            Cluster.objects.filter(pk=1).update(backend_checked_at=now)
    except TransientBackendError as exc:
        run.backend_outage = True
        errors.append(f"backend unreachable: {exc}")
        _mark_backend(False, f"{cluster.backend_kind} backend unreachable: {exc}", now)
    except BackendError as exc:
        errors.append(f"backend error: {exc}")
        _mark_backend(False, f"{cluster.backend_kind} backend: {exc}", now)
    except Exception as exc:  # a bug or a database error: keep it visible on the Cycles page
        log.exception("allocation cycle failed")
        errors.append(f"cycle failed: {type(exc).__name__}: {exc}")
    run.record_ms = lap()
    run.ended, run.corrections, run.notes = changes.ended, changes.corrections, changes.notes[:200]
    run.errors = "\n".join(errors)
    run.finished_at = timezone.now()
    run.save()
    return run
