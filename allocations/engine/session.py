"""``allocate`` for a caller that runs cycle after cycle: the simulator and the what-if lab.

Consecutive snapshots of a replay share almost every object: the same instance types, nodes,
teams and policy, and the same ``Job`` for every job that did not change. A ``Session`` keeps
what a cycle starts from (``cycle.Queues``: the accounting of the running jobs and each team's
pending jobs sorted by shape) and, at the next call, brings it up to date with the jobs that
differ, by object identity: a few inserts and removals instead of a rebuild. Each cycle's own
changes are taken back afterwards, since the next snapshot says what was applied. After a
cycle that changed nothing, while only pending jobs come and go, the next cycle decides only
the new jobs' shapes (``BatchedCycle.quiet``). After a cycle that changed something, when
the next snapshot is that cycle's plan applied and nothing else, at the same instant, the next
cycle goes on from its memory of failed decisions (``memory.FollowOn``).

Every call returns exactly ``allocate(snapshot, now)`` (the tests compare them cycle by cycle).
Whatever the session cannot follow (other teams, nodes or policy, time going back, a job it
cannot place) makes it start again from the snapshot, which also raises the same
``ValueError`` as ``allocate`` for a bad one.
"""

from __future__ import annotations

from typing import cast

from .cycle import BatchedCycle, Queues, gc_paused
from .memory import FollowOn, restore_epochs, saved_epochs
from .snapshot import Job, PendingReasons, Plan, Snapshot
from .state import JobRecord


class Session:
    """A callable ``(snapshot, now) -> Plan``, equal to ``allocate``, faster on a sequence of
    snapshots that share their objects."""

    def __init__(self) -> None:
        self._queues: Queues | None = None
        self._jobs: dict[int, Job] = {}  # id() -> job of the last snapshot (kept alive)
        self._records: dict[int, JobRecord] = {}  # id() of a running job -> its record
        self._ids: set[str] = set()
        self._serial: int | None = None  # the serial of the last snapshot
        # The reasons of the last cycle when it changed nothing (``BatchedCycle.quiet``): the
        # session reads that plan's ``pending`` again (which no one may change).
        self._quiet: PendingReasons | None = None
        # The last cycle's ``FollowOn``, its queues and time, for the next cycle.
        self._follow: tuple[FollowOn, Queues, float] | None = None
        self._changes: tuple[tuple[Job, ...], tuple[Job, ...]] | None = None  # set by _update
        self.rebuilds = 0  # how often it started again from a snapshot
        self.followed = 0  # cycles that went on from the one before (``FollowOn``)
        self.quiet_cycles = 0  # cycles decided by ``BatchedCycle.quiet``
        self.quiet_given_up = 0  # and those it gave up (a new job changed something)

    def __call__(self, snapshot: Snapshot, now: float) -> Plan:
        with gc_paused():
            return self._cycle(snapshot, now)

    def _cycle(self, snapshot: Snapshot, now: float) -> Plan:
        queues = self._queues
        self._queues = None  # until this call has brought it up to date
        quiet = self._quiet
        self._quiet = None
        follow = self._follow
        self._follow = None
        if queues is None or not self._update(queues, snapshot, now):
            queues = Queues(snapshot, now)
            self.rebuilds += 1
            jobs = snapshot.jobs
            self._jobs = dict(zip(map(id, jobs), jobs, strict=True))
            self._records = {id(rec.job): rec for rec in queues.state.records}
            self._ids = {job.id for job in jobs}
        self._queues = queues
        self._serial = snapshot.serial
        try:
            plan: Plan | None = None
            if quiet is not None and queues.quiet_added is not None:
                epochs = saved_epochs(queues.state)
                cycle = BatchedCycle(queues, now)
                plan = cycle.quiet(quiet)
                cycle.undo()
                if plan is None:
                    restore_epochs(queues.state, epochs)
                    self.quiet_given_up += 1
                else:
                    self.quiet_cycles += 1
            if plan is None:
                on: FollowOn | None = None
                if (
                    follow is not None
                    and follow[1] is queues
                    and follow[2] == now
                    and (changes := self._changes) is not None
                    and follow[0].matches(*changes)
                ):
                    on = follow[0]
                    self.followed += 1
                cycle = BatchedCycle(queues, now, on)
                plan = cycle.run()
                cycle.undo()
                if cycle.follow_on is not None:
                    self._follow = (cycle.follow_on, queues, now)
        except BaseException:
            self._queues = None
            raise
        if cycle.rested:
            self._quiet = cast(PendingReasons, plan.pending)
            queues.quiet_added, queues.quiet_gone = {}, set()
        else:
            queues.quiet_added = None
        return plan

    def _update(self, queues: Queues, snapshot: Snapshot, now: float) -> bool:
        """Bring ``queues`` to ``snapshot``; False when it must be built again. The jobs removed
        and added are left in ``_changes``."""
        self._changes = None
        last = queues.snapshot
        if (
            snapshot.instance_types is not last.instance_types
            or snapshot.nodes is not last.nodes
            or snapshot.teams is not last.teams
            or snapshot.policy is not last.policy
            or snapshot.borrowed_history != last.borrowed_history
            or now < queues.now
        ):
            return False
        # docs/preemption.md 1 and 3: minimum runtimes end and checkpoints move the victim
        # order with time (``Queues.advance``); running jobs added below are judged at ``now``.
        if now != queues.now and queues.state.timed:
            queues.advance(now)
        queues.now = now
        queues.state.now = now
        jobs = snapshot.jobs
        if jobs is not last.jobs:
            changes = snapshot.changes
            old = self._jobs
            if changes is not None and self._serial is not None and changes.since == self._serial:
                removed, added = changes.removed, changes.added
                for job in removed:
                    if old.pop(id(job), None) is not job:
                        return False
                for job in added:
                    old[id(job)] = job
                if len(old) != len(jobs):
                    return False
            else:
                new = dict(zip(map(id, jobs), jobs, strict=True))
                if len(new) != len(jobs):
                    return False  # the same job object twice
                removed = tuple(old[k] for k in old.keys() - new.keys())
                added = tuple(new[k] for k in new.keys() - old.keys())
                self._jobs = new
            self._changes = (removed, added)
            state = queues.state
            ids = self._ids
            for job in removed:
                ids.discard(job.id)
            for job in added:
                if (
                    job.id in ids
                    or job.team not in state.teams
                    or job.instance_type not in state.types
                    or job.gpus <= 0
                    or any(state.node_type.get(name) != job.instance_type for name, _ in job.nodes)
                ):
                    return False
                ids.add(job.id)
            for job in removed:
                if job.nodes:
                    rec = self._records.pop(id(job), None)
                    if rec is None:
                        return False
                    queues.remove_running(rec)
                elif not queues.remove_pending(job):
                    return False
            for job in added:
                if job.nodes:
                    self._records[id(job)] = queues.add_running(job)
                else:
                    queues.add_pending(job)
        queues.snapshot = snapshot
        queues.end_backoffs(now)
        return True
