"""The reference cycle: POLICY.md section 3, one job at a time, with no shortcut.

``allocate`` (``allocations/engine/cycle.py``) must give exactly the plan of this cycle, reasons
included; the tests compare the two on random busy clusters (``test_shortcuts.py``). It is slow
and plain on purpose: each pending job is popped from one heap of team heads, tested, and
started, given victims, or left waiting, in the state as it is then. It shares the engine's
accounting (``state.CycleState``, built with ``shortcuts=False``: no bound tested before a
search) and section 4's search (``preemption.find_victims``), and nothing of the cycle's memory
of failures. Shares are ``CycleState.share_with``'s, read afresh at each offer: the dominant
resource share (docs/resources.md 5) once some instance type counts other resources; a search for a
job on such a type judges every resource the job lacks (section 6). Product
code never imports it.

1. Each active team's pending jobs, ordered by priority (high first), submit time, then id (3.1).
2. Each team offers its head; the heads compete in one heap ranked by the head order (3.2). A
   team's rank depends only on its own usage, so only the teams a decision touched are re-ranked.
3. The winner waits with ``exceeds-max`` if it can never fit, or with ``member-limit`` if its
   submitter is at the team's limit of running GPUs per member (neither blocks its team). It
   starts if it fits; otherwise section 4's search is tried; otherwise it waits with
   its reason (section 5), may hold its team's unused lendable quota (3.3), and under strict FIFO
   its team offers nothing more.
4. Repeat until no team offers a head; jobs behind a blocked head get their reason (3.4).
"""

from __future__ import annotations

import heapq
from typing import Any

from allocations.engine.preemption import find_victims, may_look_for_victims, min_runtime_reason
from allocations.engine.snapshot import (
    IdleAllocation,
    PendingCode,
    PendingReason,
    Plan,
    Preemption,
    PreemptionReason,
    Queueing,
    Reclaim,
    Snapshot,
    Start,
)
from allocations.engine.state import (
    CycleState,
    JobRecord,
    NeverFitJudge,
    TeamState,
    inactive_reason,
    job_borrows,
)

QueueEntry = tuple[tuple[int, float, int, str], JobRecord]


def allocate(snapshot: Snapshot, now: float) -> Plan:
    """The plan of one cycle, decided one heap pop per job."""
    return _Cycle(snapshot, now).run()


class _Cycle:
    def __init__(self, snapshot: Snapshot, now: float) -> None:
        self.state = CycleState(snapshot, now, shortcuts=False)
        self.judge = NeverFitJudge(snapshot)
        self.fair_share = snapshot.policy.idle_allocation == IdleAllocation.FAIR_SHARE
        self.strict = snapshot.policy.queueing == Queueing.STRICT_FIFO
        self.pending: dict[str, PendingReason] = {}
        self.starts: list[Start] = []
        self.preemptions: list[Preemption] = []
        # Each team's pending jobs in queue order, and the jobs preempted in the cycle that
        # re-enter it (sorted again at each read: this cycle is plain, not fast).
        self.queues: dict[int, list[QueueEntry]] = {}
        self.blocked: dict[int, str] = {}  # team index -> the blocking head's id
        self.heads: list[tuple[Any, ...]] = []
        self.version: dict[int, int] = {}

    # -- step 1 ------------------------------------------------------------------------
    def _queues(self) -> None:
        for team in self.state.team_list:
            self.queues[team.index] = []
            self.version[team.index] = 0
        for rec in self.state.records:
            if rec.nodes:
                continue
            if not rec.team.team.active:
                self.pending[rec.job.id] = inactive_reason(rec.team)
                continue
            self.queues[rec.team.index].append((rec.order_key, rec))
        for queue in self.queues.values():
            queue.sort(key=lambda e: e[0])

    # -- step 2 ------------------------------------------------------------------------
    def _offer(self, team: TeamState) -> None:
        """(Re-)enter the team's head in the competition (POLICY.md 3.2)."""
        self.version[team.index] += 1
        queue = self.queues[team.index]
        if team.index in self.blocked or not team.team.active or not queue:
            return
        rec = queue[0][1]
        tt = rec.tt
        borrows = 1 if job_borrows(tt, rec.gpus, rec.res) else 0
        rank: tuple[Any, ...] = (borrows,)
        if self.fair_share:
            rank += self.state.share_with(rec)
        # first-come-first-serve: within quota first, then priority, submit time, id.
        heapq.heappush(self.heads, (*rank, *rec.order_key, team.index, self.version[team.index]))

    # -- step 3 ------------------------------------------------------------------------
    def _decide(self, rec: JobRecord) -> set[TeamState]:
        """Start, preempt for, or leave pending one head; returns the teams whose rank changed."""
        state = self.state
        job = rec.job
        unfit = self.judge.judge(job.team, job.instance_type, rec.gpus, rec.res)
        if unfit is not None:
            self.pending[job.id] = unfit
            return set()
        capped = state.member_limit(rec)
        if capped is not None:  # its submitter at the team's limit per member: blocks nobody
            self.pending[job.id] = capped
            return set()
        if state.fits(rec):
            self._start(rec)
            return {rec.team}
        searched = False
        if may_look_for_victims(state, rec):
            search = find_victims(state, rec)
            victims = search.victims
            searched = not search.deferred
            if victims is not None:
                changed = {rec.team}
                for victim, reason in victims:
                    self._preempt(victim, reason, rec)
                    changed.add(victim.team)
                self._start(rec)
                return changed
            # A head that may take no victim now holds its team's unused lendable quota (3.3).
            if rec.team.team.reclaim != Reclaim.ANY:
                state.hold(rec.tt, rec.ts)
        # docs/preemption.md 4: the victims it needs are protected by their minimum runtime.
        why = state.reason(rec)
        protected = min_runtime_reason(state, rec) if searched else None
        self.pending[job.id] = protected or why
        if self.strict:
            self.blocked.setdefault(rec.team.index, job.id)
        return set()

    def _start(self, rec: JobRecord) -> None:
        nodes = self.state.start(rec)
        self.starts.append(Start(rec.job.id, nodes))
        self.pending.pop(rec.job.id, None)

    def _preempt(self, victim: JobRecord, reason: PreemptionReason, preemptor: JobRecord) -> None:
        """Record a victim (already taken off its nodes) and put it back in its team's queue."""
        self.preemptions.append(Preemption(victim.job.id, reason, preemptor.job.id))
        self.state.preempted(victim)
        if victim.team.team.active:
            queue = self.queues[victim.team.index]
            queue.append((victim.order_key, victim))
            queue.sort(key=lambda e: e[0])
        else:
            self.pending[victim.job.id] = inactive_reason(victim.team)

    # -- step 4 ------------------------------------------------------------------------
    def run(self) -> Plan:
        self._queues()
        team_list = self.state.team_list
        for team in team_list:
            self._offer(team)
        while self.heads:
            key = heapq.heappop(self.heads)
            team = team_list[key[-2]]
            if key[-1] != self.version[team.index]:
                continue  # a stale entry: the team was re-ranked since
            rec = self.queues[team.index].pop(0)[1]
            changed = self._decide(rec)
            changed.add(team)
            for touched in sorted(changed, key=lambda t: t.index):
                self._offer(touched)
        for index, head in sorted(self.blocked.items()):
            name = team_list[index].team.name
            for _, rec in self.queues[index]:
                job = rec.job
                unfit = self.judge.judge(job.team, job.instance_type, rec.gpus, rec.res)
                self.pending[job.id] = unfit or PendingReason(
                    PendingCode.BLOCKED_BY_FIFO,
                    f"strict FIFO: {name}'s job {head} does not fit and blocks the jobs behind it",
                )
        return Plan(starts=tuple(self.starts), preemptions=tuple(self.preemptions), pending=self.pending)
