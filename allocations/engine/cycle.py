"""One allocation cycle (POLICY.md section 3): ``allocate(snapshot, now) -> Plan``.

The cycle in steps:

1. Build the accounting (``CycleState``) and each active team's queue of pending jobs, ordered
   by priority (high first), submit time, then id (3.1).
2. Each team offers its head; the heads sit in one heap ranked by the policy's head order
   (3.2). A team's rank depends only on its own usage, so only the teams touched by a
   decision (the admitted team and the victims' teams) are re-ranked.
3. The winner starts if it fits; otherwise section 4's preemption is tried; otherwise it gets
   its pending reason (section 5), may hold its team's unused lendable quota (3.3), and under
   strict FIFO its team offers nothing more. A winner whose victims would include a job started
   earlier in the cycle waits for the next cycle, with its reason (``preemption.find_victims``).
4. Repeat until no team offers a head.

A job that cannot start leaves the state as it was (apart from a hold), so a job of the same
team and shape (instance type, GPUs, priority, whether it may preempt) meeting the same state
gets the same decision: the result is remembered per shape and reused until the next change
(a start, a preemption or a hold). That turns 100k pending jobs of a full cluster into a
handful of real fit tests.
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .preemption import find_victims_once, may_look_for_victims
from .snapshot import (
    IdleAllocation,
    PendingCode,
    PendingReason,
    Plan,
    Preemption,
    PreemptionReason,
    PreemptTeamTasks,
    Queueing,
    Reclaim,
    Snapshot,
    Start,
)
from .state import CycleState, JobRecord, NeverFitJudge, TeamState

QueueEntry = tuple[tuple[int, float, int, str], JobRecord]


def allocate(snapshot: Snapshot, now: float) -> Plan:
    """One allocation cycle: which jobs start where, which are preempted, why the rest wait.

    Pure and deterministic: the same snapshot and ``now`` give the same plan. Raises
    ``ValueError`` naming the field and value when the snapshot is inconsistent (an unknown
    team, instance type or node, a duplicate id).
    """
    from .batched import BatchedCycle, Queues

    with gc_paused():
        return BatchedCycle(Queues(snapshot, now), now).run()


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection during a cycle. A cycle makes hundreds of thousands of
    tuples and records and frees none of them before it ends, so each collection the
    interpreter starts on the way only walks live objects (the snapshot's jobs among them) and
    finds nothing: 10 to 20% of a 100k-job cycle. A collector already off stays off."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def allocate_one_by_one(snapshot: Snapshot, now: float) -> Plan:
    """The cycle of this module, deciding the pending jobs one heap pop at a time (with its
    remembered decisions). ``allocate`` runs the batched cycle, which must give the same plan."""
    return _Cycle(snapshot, now).run()


def allocate_plainly(snapshot: Snapshot, now: float) -> Plan:
    """The same cycle without its shortcuts (the remembered decisions of twin jobs, the
    remembered failed searches and the bounds tested before a search). It must give the same
    plan as ``allocate``; the tests check that it does."""
    return _Cycle(snapshot, now, shortcuts=False).run()


class _Cycle:
    def __init__(self, snapshot: Snapshot, now: float, shortcuts: bool = True) -> None:
        self.shortcuts = shortcuts
        self.state = CycleState(snapshot, now, shortcuts)
        self.now = now
        self.judge = NeverFitJudge(snapshot)
        self.fair_share = snapshot.policy.idle_allocation == IdleAllocation.FAIR_SHARE
        self.strict = snapshot.policy.queueing == Queueing.STRICT_FIFO
        self.pending: dict[str, PendingReason] = {}
        self.starts: list[Start] = []
        self.preemptions: list[Preemption] = []
        # Each team's queue: its pending jobs sorted once, read through a cursor, plus a small
        # heap of jobs preempted during the cycle that re-enter it (POLICY.md 3.1 order).
        self.queues: dict[int, list[QueueEntry]] = {}
        self.cursor: dict[int, int] = {}
        self.requeued: dict[int, list[QueueEntry]] = {}
        self.blocked: dict[int, str] = {}  # team index -> the blocking head's id
        self.heads: list[tuple[Any, ...]] = []
        self.epoch = 0  # bumped by every start, preemption and hold
        self.remembered: dict[tuple[object, ...], tuple[int, PendingReason]] = {}
        self.searched: dict[tuple[object, ...], tuple[bool, int]] = {}  # failed searches (find_victims_once)
        self.last_shape: tuple[object, ...] | None = None  # the shape of the last job left waiting

    # -- step 1 ------------------------------------------------------------------------
    def _queues(self) -> None:
        state = self.state
        for team in state.team_list:
            self.queues[team.index] = []
            self.cursor[team.index] = 0
            self.requeued[team.index] = []
        for rec in state.records:
            if rec.nodes:
                continue
            if not rec.team.team.active:
                self.pending[rec.job.id] = _inactive(rec)
                continue
            self.queues[rec.team.index].append((rec.order_key, rec))
        for queue in self.queues.values():
            queue.sort(key=lambda e: e[0])

    def _head(self, index: int) -> JobRecord | None:
        """The team's first pending job not yet decided in this cycle."""
        queue, at, back = self.queues[index], self.cursor[index], self.requeued[index]
        if back and (at >= len(queue) or back[0][0] < queue[at][0]):
            return back[0][1]
        return queue[at][1] if at < len(queue) else None

    def _take_head(self, index: int) -> JobRecord:
        queue, at, back = self.queues[index], self.cursor[index], self.requeued[index]
        if back and (at >= len(queue) or back[0][0] < queue[at][0]):
            return heapq.heappop(back)[1]
        self.cursor[index] = at + 1
        return queue[at][1]

    def _left(self, index: int) -> list[JobRecord]:
        """The team's jobs not decided in this cycle, in queue order."""
        rest = self.queues[index][self.cursor[index] :] + self.requeued[index]
        return [rec for _, rec in sorted(rest, key=lambda e: e[0])]

    # -- step 2 ------------------------------------------------------------------------
    def _offer(self, team: TeamState) -> None:
        """(Re-)enter the team's head in the competition (POLICY.md 3.2)."""
        team.version += 1
        if team.index in self.blocked or not team.team.active:
            return
        head = self._head(team.index)
        if head is None:
            return
        rec = head
        tt = rec.tt
        borrows = 1 if tt.usage + rec.gpus > tt.quota else 0
        if self.fair_share:
            tier, value = self.state.share_with(rec)
            key: tuple[Any, ...] = (borrows, tier, value, *rec.order_key, team.index, team.version)
        else:
            # first-come-first-serve: within quota first, then priority, submit time, id.
            key = (borrows, *rec.order_key, team.index, team.version)
        heapq.heappush(self.heads, key)

    # -- step 3 ------------------------------------------------------------------------
    def _decide(self, rec: JobRecord) -> set[TeamState]:
        """Start, preempt for, or leave pending one head; returns the teams whose rank changed."""
        state = self.state
        job = rec.job
        self.last_shape = None
        unfit = self.judge.judge(job.team, job.instance_type, rec.gpus)
        if unfit is not None:
            self.pending[job.id] = unfit
            return set()
        eligible = may_look_for_victims(state, rec)
        shape: tuple[object, ...] = (rec.team.index, rec.ts.name, rec.gpus, rec.priority, eligible)
        if rec.team.team.preempt_team_tasks == PreemptTeamTasks.LOWER_OR_NEWER_EQUAL_PRIORITY:
            shape += rec.order_key  # its candidates depend on its submit time too
        seen = self.remembered.get(shape) if self.shortcuts else None
        if seen is not None and seen[0] == self.epoch:
            self._wait(rec, seen[1])
            self.last_shape = shape
            return set()
        if state.fits(rec):
            self._start(rec)
            return {rec.team}
        if eligible:
            victims = find_victims_once(state, rec, shape, self.searched)
            if victims is not None:
                changed = {rec.team}
                for victim, reason in victims:
                    self._preempt(victim, reason, rec)
                    changed.add(victim.team)
                self._start(rec)
                return changed
            # A head whose victims would include a job started in this cycle holds too (3.3): it
            # may take none of them now, and no other team should borrow its quota meanwhile.
            if rec.team.team.reclaim != Reclaim.ANY and state.hold(rec.tt, rec.ts):
                self.epoch += 1
        why = state.reason(rec)
        self.remembered[shape] = (self.epoch, why)
        self._wait(rec, why)
        self.last_shape = shape
        return set()

    def _twins(self, team: TeamState, rec: JobRecord, key: tuple[Any, ...]) -> None:
        """Decide at once the team's next jobs of the same shape as ``rec``, which just waited
        without changing anything: each would win the next heap pop (its rank is ``rec``'s
        with its own submit time and id, and beats every other head) and would meet the same
        state, so it gets the same reason."""
        shape = self.last_shape
        if shape is None or not self.shortcuts:
            return
        seen = self.remembered.get(shape)
        if seen is None or seen[0] != self.epoch:
            return
        reason = seen[1]
        rank = key[:-6]  # the key without the job's order key, team index and version
        heads = self.heads
        index = team.index
        lone = team.team.preempt_team_tasks == PreemptTeamTasks.LOWER_OR_NEWER_EQUAL_PRIORITY
        while not lone and index not in self.blocked:
            nxt = self._head(index)
            if nxt is None or nxt.gpus != rec.gpus or nxt.ts is not rec.ts or nxt.priority != rec.priority:
                return
            if may_look_for_victims(self.state, nxt) != shape[4]:
                return
            if heads and not (*rank, *nxt.order_key, index, team.version) < heads[0]:
                return
            self._take_head(index)
            self._wait(nxt, reason)

    def _wait(self, rec: JobRecord, reason: PendingReason) -> None:
        self.pending[rec.job.id] = reason
        if self.strict:
            self.blocked.setdefault(rec.team.index, rec.job.id)

    def _start(self, rec: JobRecord) -> None:
        nodes = self.state.start(rec)
        self.starts.append(Start(rec.job.id, nodes))
        self.pending.pop(rec.job.id, None)
        self.epoch += 1

    def _preempt(self, victim: JobRecord, reason: PreemptionReason, preemptor: JobRecord) -> None:
        """Record a victim (already taken off its nodes) and put it back in its team's queue."""
        self.preemptions.append(Preemption(victim.job.id, reason, preemptor.job.id))
        self.state.preempted(victim)
        if victim.team.team.active:
            heapq.heappush(self.requeued[victim.team.index], (victim.order_key, victim))
        else:
            self.pending[victim.job.id] = _inactive(victim)
        self.epoch += 1

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> Plan:
        self._queues()
        for team in self.state.team_list:
            self._offer(team)
        heads = self.heads
        team_list = self.state.team_list
        while heads:
            key = heapq.heappop(heads)
            team = team_list[key[-2]]
            if key[-1] != team.version:
                continue  # a stale entry: the team was re-ranked since
            rec = self._take_head(team.index)
            epoch = self.epoch
            changed = self._decide(rec)
            if not changed and epoch == self.epoch:
                self._twins(team, rec, key)
            changed.add(team)
            for touched in sorted(changed, key=lambda t: t.index):
                self._offer(touched)
        self._finish()
        return Plan(starts=tuple(self.starts), preemptions=tuple(self.preemptions), pending=self.pending)

    def _finish(self) -> None:
        """Reasons for the jobs left behind a blocked head (strict FIFO)."""
        for index, head in sorted(self.blocked.items()):
            for rec in self._left(index):
                job = rec.job
                unfit = self.judge.judge(job.team, job.instance_type, rec.gpus)
                self.pending[job.id] = unfit or PendingReason(
                    PendingCode.BLOCKED_BY_FIFO,
                    f"strict FIFO: {job.team}'s job {head} does not fit and blocks the jobs behind it",
                )


def _inactive(rec: JobRecord) -> PendingReason:
    return PendingReason(PendingCode.TEAM_INACTIVE, f"{rec.team.team.name}'s allocation is disabled")
