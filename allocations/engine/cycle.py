"""One allocation cycle (POLICY.md section 3): ``allocate(snapshot, now) -> Plan``.

The cycle in POLICY.md's steps:

1. Each team's pending jobs in queue order (3.1): ``Queues`` sorts them by shape (below), and
   a team's queue is the merge of its shapes (``_Team.head``).
2. Each team offers its head; the heads compete in one heap keyed by the head order (3.2:
   ``_rank``, ``_offer``). A team's rank depends only on its own usage, so only the teams a
   decision touched are re-ranked.
3. The winner starts if it fits; otherwise section 4's search is tried; otherwise it waits
   with its reason (section 5), may hold its team's unused lendable quota, and under strict
   FIFO its team offers nothing more (3.3: ``_decide``, ``_finish``).
4. Repeat from 2 until no team offers a head (3.4: ``run``).
5. A job in its back-off looks for no victims (3.5): its shape is not ``eligible``
   (``preemption.may_look_for_victims``).

It takes exactly the decisions of those steps taken one job at a time, and gives the same plan
as the plain reference cycle of the tests (``tests/engine/reference.py``), which they compare
on random snapshots. What it skips is the work of jobs that cannot change anything; what it
remembers to skip it, and for how long, is ``memory.py``'s.

**Shapes.** A team's pending jobs are split by *shape*: instance type, GPUs, priority and whether
the job may look for victims now (not in its back-off). Each shape's jobs are sorted by the queue
order (POLICY.md 3.1); the team's queue is the merge of its shapes, its head the first of their
heads. No ``JobRecord`` is made for a job until it is really decided.

**Failing shapes.** A job that waits leaves the state as it was (apart from a hold, which counts
as a change), so while nothing changes, every later job of its team and shape would wait for the
same reason: the decision is remembered per shape (``memory.Failure``) and *epoch*, the count
of changes. Such jobs are *consumed* without a test.

**The order of the pops.** The heads heap pops each team's jobs in its queue order; a job whose
key is below that of the job popped before it (a smaller job that would not borrow, say) is
popped right after it. So, between two changes, the pops come in the order of each job's
*prefix maximum*: the largest key among its team's jobs up to it. Consuming a team's waiting twins
up to its next job of a shape that is not failing, ``N``, is therefore exact as long as no change
happens before them; the team goes back into the heap keyed by ``N``'s prefix maximum. When a
decision does change the state (a start, a preemption, a hold), the jobs consumed past that
decision's key were, in truth, popped after it: they are given back (*rolled back*) and will be
decided afresh in the new state. Jobs consumed before it keep the reason of their shape at that
epoch. Each consumption is a slice of a shape's sorted list, found by bisection.

So a cycle costs a few operations per *change* and per team, plus sorting and slicing the
pending jobs, instead of a heap pop, a push and a lookup per pending job.
"""

from __future__ import annotations

import gc
import heapq
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import count
from operator import itemgetter
from typing import Any

from .memory import Failure, FollowOn, Memory, quiet_plan
from .placement import NodeShare
from .preemption import (
    Search,
    back_off_end,
    may_look,
    may_look_for_victims,
)
from .ranking import share_key
from .snapshot import (
    IdleAllocation,
    Job,
    PendingCode,
    PendingReason,
    PendingReasons,
    Plan,
    Preemption,
    PreemptionReason,
    PreemptTeamTasks,
    Queueing,
    Reclaim,
    Snapshot,
    Start,
)
from .state import (
    CycleState,
    Grouping,
    GroupSlot,
    JobRecord,
    NeverFitJudge,
    TeamState,
    VictimKey,
    inactive_reason,
    job_borrows,
    job_demand,
    victim_key,
)

OrderKey = tuple[int, float, int, str]
# A job's place in its shape: its order key without the priority, which is the shape's
# (``_Shape.neg``), then the job (or its record, for a job preempted in the cycle): (submit
# time, seq, id, job or record). Ids are unique, so no comparison reaches the job; a 3-tuple
# (submit time, seq, id) sorts just before the slot of its own job. With the submit time first,
# a sort compares the floats with its own fast comparison, not the equal priorities first and
# then the floats generically. Typed as a tuple of any length, which the compiled build keeps
# as the tuple object: read from a list, a tuple of fixed type is unpacked into a C struct
# (every item checked) and boxed anew when stored or compared, about 10% of a settled
# 100k-job first-come-first-serve cycle.
Slot = tuple[Any, ...]
_slot_id = itemgetter(2)
Key = tuple[Any, ...]
# Jobs consumed without a test in the current epoch, not yet final: (shape, from, to, reason,
# the shape's rank when consumed).
LogEntry = tuple["_Shape", int, int, PendingReason, tuple[int, ...]]
# Team index, instance type, GPUs, priority, may look, and what its jobs ask of the type's other
# resources (docs/resources.md 3; None where the type counts GPUs alone).
Ident = tuple[int, str, int, int, bool, tuple[int, ...] | None]


def allocate(snapshot: Snapshot, now: float) -> Plan:
    """One allocation cycle: which jobs start where, which are preempted, why the rest wait.

    Pure and deterministic: the same snapshot and ``now`` give the same plan. Raises
    ``ValueError`` naming the field and value when the snapshot is inconsistent (an unknown
    team, instance type or node, a duplicate id).
    """
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


class _Shape:
    """One team's pending jobs of one shape, in queue order, read through a cursor ``at``."""

    __slots__ = (
        "at",
        "eligible",
        "failure",
        "gpus",
        "ident",
        "ids",
        "keys",
        "neg",
        "rank",
        "rank_borrowed",
        "rank_usage",
        "res",
        "team",
        "ts",
        "tt",
        "unfit",
    )

    def __init__(
        self,
        ident: Ident,
        gpus: int,
        eligible: bool,
        keys: list[Slot],
        state: CycleState,
        team: TeamState,
        instance_type: str,
    ) -> None:
        self.ident = ident  # (team index, instance type, GPUs, priority, may look, resources)
        self.gpus = gpus
        self.res = ident[5]
        self.eligible = eligible
        self.neg = -ident[3]  # minus the priority: the first item of its jobs' order keys
        self.keys = keys
        self.ids: list[str] = list(map(_slot_id, keys))
        self.at = 0
        self.team = team
        self.tt = team.per_type[instance_type]
        self.ts = state.types[instance_type]
        self.failure = Failure(team, self.tt, self.ts, gpus, eligible, ident[5])
        # ``BatchedCycle._rank``, with the team's usage and borrowed GPUs it was made at.
        self.rank: tuple[int, ...] = ()
        self.rank_usage = -1
        self.rank_borrowed = -1
        self.unfit: PendingReason | None = None  # exceeds-max: waits whatever happens

    def insert(self, key: OrderKey, item: JobRecord) -> None:
        """A job preempted in this cycle re-enters its team's queue, not before the cursor."""
        at = max(self.at, bisect_left(self.keys, key[1:], self.at))
        self.keys.insert(at, (key[1], key[2], key[3], item))
        self.ids.insert(at, key[3])


class _Team:
    """A team's shapes and its place in the heads heap."""

    __slots__ = (
        "blocked",
        "by_ident",
        "capped",
        "dirty",
        "heap",
        "log",
        "lone",
        "shapes",
        "state",
        "version",
    )

    def __init__(self, state: TeamState) -> None:
        self.state = state
        self.shapes: list[_Shape] = []
        self.by_ident: dict[Ident, _Shape] = {}
        self.version = 0
        self.blocked: str | None = None  # strict FIFO: the id of the head that waits
        # lower-or-newer-equal-priority: a job's candidates depend on its own submit time, so
        # no two of its jobs share a decision.
        self.lone = state.team.preempt_team_tasks == PreemptTeamTasks.LOWER_OR_NEWER_EQUAL_PRIORITY
        # A limit per member (``CycleState.member_limit``), tested before anything else: twins
        # share a failure only once past it, so each consumed twin is tested against it.
        self.capped = state.members is not None
        # Consumed, not yet final (``LogEntry``).
        self.log: list[LogEntry] = []
        # The shapes by the order key of their next job: (minus its priority, the items of its
        # slot, id, shape), cleaned lazily (an entry whose job is no longer its shape's next
        # is skipped). Whatever moves a shape's cursor pushes its new next job, or marks the
        # heap ``dirty`` (rebuilt when next read). One flat tuple: a heap compares its entries
        # item by item, and a nested tuple is compared twice (once for equality, then for
        # order).
        self.heap: list[tuple[Any, ...]] = []
        self.dirty = True

    def rebuild(self) -> None:
        self.heap = [(s.neg, *s.keys[s.at], id(s), s) for s in self.shapes if s.at < len(s.keys)]
        heapq.heapify(self.heap)
        self.dirty = False

    def push(self, shape: _Shape) -> None:
        """The shape's cursor moved forward: enter its next job."""
        if not self.dirty and shape.at < len(shape.keys):
            heapq.heappush(self.heap, (shape.neg, *shape.keys[shape.at], id(shape), shape))

    def add(self, shape: _Shape) -> None:
        self.shapes.append(shape)
        self.by_ident[shape.ident] = shape

    def drop(self, shape: _Shape) -> None:
        self.shapes.remove(shape)
        del self.by_ident[shape.ident]

    def head(self) -> _Shape | None:
        """The shape holding the team's first pending job not yet decided."""
        if self.dirty:
            self.rebuild()
        heap = self.heap
        while heap:
            entry = heap[0]
            shape: _Shape = entry[-1]
            at = shape.at
            # The same job at the cursor, by identity of the job: never the dataclass
            # ``__eq__`` of two jobs, field by field in Python (once 14% of a what-if replay's
            # engine time, when the compiled build compared slots unpacked into C structs).
            if at < len(shape.keys) and shape.keys[at][3] is entry[4]:
                return shape
            heapq.heappop(heap)  # stale: that shape has moved on
        return None


class Queues:
    """What a cycle starts from: the accounting of the running jobs (``CycleState``) and each
    team's pending jobs by shape. ``allocate`` builds it for one cycle; a ``Session`` keeps it
    between cycles and brings it up to date with what changed in the next snapshot."""

    def __init__(self, snapshot: Snapshot, now: float) -> None:
        self.snapshot = snapshot
        self.state = CycleState(snapshot, now, pending_records=False)
        self.now = now
        self.judge = NeverFitJudge(snapshot)
        self.fair_share = snapshot.policy.idle_allocation == IdleAllocation.FAIR_SHARE
        self.strict = snapshot.policy.queueing == Queueing.STRICT_FIFO
        self.teams: list[_Team] = [_Team(t) for t in self.state.team_list]
        # Pending jobs of inactive teams, by team index (a dict as an ordered set of ids).
        self.inactive: dict[int, dict[str, None]] = {}
        # Pending jobs in their back-off that may look for victims once it ends: (end, n, job).
        self.backoff: list[tuple[float, int, Job]] = []
        # The records made of pending jobs, by ``id`` of the job (held, so the id stands).
        self.records: dict[int, tuple[Job, JobRecord]] = {}
        self._noted = count()
        # Cycles of a session go on counting epochs from here. After a cycle that changed
        # nothing (no start, preemption or hold) it stays that cycle's epoch until a running
        # job is added or removed: the next cycle starts from the very same accounting, so the
        # reasons its shapes failed with still hold for every job of those shapes (pending jobs
        # added or moved out of their back-off included). Not under strict FIFO, where only a
        # job really decided in the cycle blocks its team.
        self.epoch_base = 0
        # Kept by a ``Session`` after a cycle that changed nothing, for as long as no running
        # job is added or removed: the pending jobs added since, with the shape each went to
        # (the reason, for an inactive team's), and the ids of those taken out
        # (``BatchedCycle.quiet``). None: not kept.
        self.quiet_added: dict[str, _Shape | PendingReason] | None = None
        self.quiet_gone: set[str] = set()
        self._shapes(self.state.pending_groups)
        self.state.pending_groups = {}

    def _shapes(self, groups: dict[Grouping, list[GroupSlot]]) -> None:
        state = self.state
        now = self.now
        weights = state.weights
        # Merge groups into shapes: classes of equal weight share a shape, and the back-off
        # (which depends on each job's own preemptions) is decided per job where it may apply.
        merged: dict[Ident, list[Slot]] = {}
        for (team_name, it, gpus, pclass, preempted), slots in groups.items():
            team = state.teams[team_name]
            if not team.team.active:
                self.inactive.setdefault(team.index, {}).update(dict.fromkeys([s[2] for s in slots]))
                continue
            prio = 0 if pclass is None else weights.get(pclass, 0)
            static = self.may_look(team, it, gpus)
            if state.types[it].res is not None:
                # docs/resources.md 3: jobs of one size that ask other amounts of the type's
                # other resources are not twins.
                for slot in slots:
                    eligible = static and (preempted == 0 or not self._backed_off(slot[3], now, static))
                    res = self.demand(slot[3])
                    merged.setdefault((team.index, it, gpus, prio, eligible, res), []).append(slot)
            elif preempted > 0:
                for slot in slots:
                    eligible = static and not self._backed_off(slot[3], now, static)
                    merged.setdefault((team.index, it, gpus, prio, eligible, None), []).append(slot)
            else:
                merged.setdefault((team.index, it, gpus, prio, static, None), []).extend(slots)
        for ident, keys in sorted(merged.items(), key=_first):
            # One priority in a shape: its queue order is submit time, seq, id (POLICY.md 3.1).
            keys.sort()
            self.new_shape(ident, keys)

    def new_shape(self, ident: Ident, keys: list[Slot]) -> _Shape:
        index, it, gpus, _, eligible, res = ident
        team = self.state.team_list[index]
        shape = _Shape(ident, gpus, eligible, keys, self.state, team, it)
        shape.unfit = self.judge.judge(team.team.name, it, gpus, res)
        self.teams[index].add(shape)
        return shape

    def _backed_off(self, job: Job, now: float, static: bool) -> bool:
        """Whether the job is in its back-off; one that may look for victims once it ends is
        noted, so that a session moves it to its eligible shape then."""
        until = back_off_end(job.preemptions, job.last_preempted_at)
        if until is not None and now < until:
            if static:
                heapq.heappush(self.backoff, (until, next(self._noted), job))
            return True
        return False

    def may_look(self, team: TeamState, it: str, gpus: int) -> bool:
        """``preemption.may_look`` for a job of the team, type and size."""
        return may_look(team, team.per_type[it], gpus, self.fair_share)

    # -- a session's changes -----------------------------------------------------------
    def ident(self, job: Job, eligible: bool) -> Ident:
        team = self.state.teams[job.team]
        prio = 0 if job.priority_class is None else self.state.weights.get(job.priority_class, 0)
        return (team.index, job.instance_type, job.gpus, prio, eligible, self.demand(job))

    def demand(self, job: Job) -> tuple[int, ...] | None:
        """What the job asks of its type's other resources (``JobRecord.res``)."""
        state = self.state
        res = state.types[job.instance_type].res
        if res is None:
            return None
        return job_demand(state.it_defs[job.instance_type], res.names, job)

    def add_pending(self, job: Job) -> None:
        team = self.state.teams[job.team]
        if not team.team.active:
            self.inactive.setdefault(team.index, {})[job.id] = None
            if self.quiet_added is not None:
                self.quiet_added[job.id] = inactive_reason(team)
            return
        static = self.may_look(team, job.instance_type, job.gpus)
        eligible = static and not self._backed_off(job, self.now, static)
        self._insert(self.ident(job, eligible), job)

    def _insert(self, ident: Ident, job: Job) -> None:
        key: Slot = (job.submit_time, job.seq, job.id, job)
        shape = self.teams[ident[0]].by_ident.get(ident)
        if shape is None:
            shape = self.new_shape(ident, [key])
        else:
            at = bisect_left(shape.keys, key)
            shape.keys.insert(at, key)
            shape.ids.insert(at, job.id)
        if self.quiet_added is not None:
            self.quiet_added[job.id] = shape

    def remove_pending(self, job: Job) -> bool:
        """Take a pending job out of its shape; False when it is in none (or another job)."""
        team = self.state.teams[job.team]
        if not team.team.active:
            if self.inactive.get(team.index, {}).pop(job.id, 0) is not None:
                return False
            self._gone(job.id)
            return True
        for eligible in (True, False):
            ident = self.ident(job, eligible)
            shape = self.teams[team.index].by_ident.get(ident)
            if shape is None:
                continue
            at = bisect_left(shape.keys, (job.submit_time, job.seq, job.id))
            if at < len(shape.keys) and shape.keys[at][3] is job:
                del shape.keys[at], shape.ids[at]
                self.records.pop(id(job), None)
                if not shape.keys:
                    self.teams[team.index].drop(shape)
                self._gone(job.id)
                return True
        return False

    def _gone(self, job_id: str) -> None:
        if self.quiet_added is not None:
            self.quiet_added.pop(job_id, None)
            self.quiet_gone.add(job_id)

    def add_running(self, job: Job) -> JobRecord:
        self.epoch_base += 1
        self.quiet_added = None
        rec = self.state.record(job)
        tt = rec.tt
        if rec.protected_until == float("-inf") and job.terminating_since is None:
            tt.candidates.pop()
            insort(tt.candidates, rec, key=_victim_key)
            tt.cand_version += 1
        rec.ts.touch(rec.team.index)
        rec.ts.placement.take(job.nodes)
        return rec

    def remove_running(self, rec: JobRecord) -> None:
        self.epoch_base += 1
        self.quiet_added = None
        self.state.remove(rec)
        tt = rec.tt
        if rec.protected_until > float("-inf"):
            rec.ts.protected.remove(rec)
            rec.ts.protected_version += 1
        elif rec.job.terminating_since is None:
            tt.drop_candidate(rec)
        rec.ts.touch(rec.team.index)
        if rec.gpus >= tt.cand_max:
            tt.cand_max = max((c.gpus for c in tt.candidates), default=0)

    def advance(self, now: float) -> None:
        """A later instant in a state where jobs were protected by their minimum runtime or
        ordered by their checkpoints (``CycleState.timed``; docs/preemption.md 1 and 3): the
        protections that ended make their jobs candidates, and checkpointed candidates take
        their order at ``now``; the state is then what a new one built at ``now`` would be.
        Every memory that could read either is let go: the types touched have their epochs
        moved (new or reordered candidates may help a search, or let a team with a high share
        into one), and no quiet cycle starts from the last one (its ``min-runtime`` reasons
        tell a time left)."""
        state = self.state
        state.now = now
        touched: set[str] = set()
        for name, ts in state.types.items():
            if not ts.protected:
                continue
            touched.add(name)  # a reason's time left moved, or a protection ended
            still: list[JobRecord] = []
            for rec in ts.protected:
                # Its place among the candidates of ``preemption.min_runtime_reason`` too.
                rec.victim_key = victim_key(rec.priority, rec.job, now)
                if rec.protected_until > now:
                    still.append(rec)
                    continue
                rec.protected_until = float("-inf")
                insort(rec.tt.candidates, rec, key=_victim_key)
                state.counted(rec)
            ts.protected = still
            ts.protected_version += 1
        for team in state.team_list:
            for name, tt in team.per_type.items():
                moved = False
                for rec in tt.candidates:
                    if rec.job.checkpoint_interval_s:
                        key = victim_key(rec.priority, rec.job, now)
                        if key != rec.victim_key:
                            rec.victim_key = key
                            moved = True
                if moved:
                    tt.candidates.sort(key=_victim_key)
                    tt.cand_version += 1
                    state.types[name].touch(team.index)
                    touched.add(name)
        for name in touched:
            state.preempt_epoch[name] += 1
            state.rise_epoch[name] += 1
            state.free_epoch[name] += 1
            state.types[name].version += 1
        if touched:
            self.epoch_base += 1
            self.quiet_added = None

    def end_backoffs(self, now: float) -> None:
        """Jobs whose back-off has ended by ``now`` move to their eligible shape."""
        while self.backoff and self.backoff[0][0] <= now:
            _, _, job = heapq.heappop(self.backoff)
            if self.remove_pending(job):
                self._insert(self.ident(job, True), job)


class BatchedCycle:
    def __init__(self, queues: Queues, now: float, follow: FollowOn | None = None) -> None:
        self.queues = queues
        self.state = state = queues.state
        state.now = now
        # The epochs of the instance types go on counting from the cycles before (a session's):
        # a memory of one of those cycles matches them only if nothing changed there since.
        self.now = now
        self.fair_share = queues.fair_share
        self.strict = queues.strict
        self.teams = queues.teams
        for team in self.teams:
            team.blocked = None
            team.dirty = True
            for shape in team.shapes:
                shape.at = 0
        # The plan's reasons (``PendingReasons``): the jobs decided one by one, and the runs
        # of twins that failed together (a copy of the ids each).
        self.pending: dict[str, PendingReason] = {}
        self.runs: list[tuple[list[str], PendingReason]] = []
        for index, ids in queues.inactive.items():
            self.runs.append((list(ids), inactive_reason(state.team_list[index])))
        self.starts: list[Start] = []
        self.preemptions: list[Preemption] = []
        # (*key, team version): one flat tuple (``_Team.heap``).
        self.heads: list[Key] = []
        self.memory = Memory(state, queues.epoch_base, not self.strict, follow)
        self.logged: list[_Team] = []  # teams with a non-empty log
        self.requeue: list[JobRecord] = []
        # What ``undo`` takes back: starts and preemptions in order (a preemption with the
        # victim's nodes, preemptions and last preemption before it), requeued victims and
        # the shapes made for them.
        self.changes: list[tuple[JobRecord, tuple[NodeShare, int, float | None] | None]] = []
        self.inserted: list[tuple[_Shape, JobRecord]] = []
        self.created: list[_Shape] = []
        self.rested = False  # set by ``run``: the cycle changed nothing (not under strict FIFO)
        self.held_any = False  # a hold was taken (POLICY.md 3.3)
        # Set by ``run`` after a change, for the next cycle at this instant (``FollowOn``).
        self.follow_on: FollowOn | None = None

    # -- keys ------------------------------------------------------------------------------
    def _rank(self, team: TeamState, shape: _Shape) -> tuple[int, ...]:
        """The head order (POLICY.md 3.2) of the shape's jobs, before their own order key. It
        reads the team's usage of the type and its borrowed GPUs: kept while they stand."""
        tt = shape.tt
        usage = tt.usage
        res = shape.res
        if shape.rank_usage == usage and shape.rank_borrowed == team.borrowed and res is None:
            return shape.rank
        g = shape.gpus
        borrows = 1 if (usage + g > tt.quota if res is None else job_borrows(tt, g, res)) else 0
        rank: tuple[int, ...]
        if self.fair_share:
            state = self.state
            if state.resources:
                # docs/resources.md 5: the dominant share, which moves with every resource.
                tr = tt.res
                tier, value = state.share_adding(
                    team,
                    team.borrowed,
                    team.res_borrowed,
                    tt,
                    usage,
                    tr.usage if tr is not None else [],
                    g,
                    res,
                )
            else:
                extra = max(0, usage + g - tt.quota) - max(0, usage - tt.quota)
                tier, value = share_key(
                    team.borrowed + extra, team.unit, state.pool_total, team.history, team.scale
                )
            rank = (borrows, tier, value)
        else:
            rank = (borrows,)
        shape.rank, shape.rank_usage, shape.rank_borrowed = rank, usage, team.borrowed
        if self.fair_share and self.state.resources:
            shape.rank_borrowed = -1  # never kept: the share reads more than borrowed GPUs
        return rank

    def _key(self, team: _Team, shape: _Shape, at: int) -> Key:
        return (*self._rank(team.state, shape), shape.neg, *shape.keys[at], team.state.index)

    def _failing(self, team: _Team, shape: _Shape) -> PendingReason | None:
        """The reason every job of this shape gets now without a test, if any."""
        if shape.unfit is not None:
            return shape.unfit
        if team.lone:
            return None
        return self.memory.recall(shape.failure)

    # -- the heap --------------------------------------------------------------------------
    def _offer(self, team: _Team) -> None:
        """(Re-)enter the team's head with its key in the current state (POLICY.md 3.2)."""
        team.version += 1
        if team.blocked is not None:
            return
        shape = team.head()
        if shape is not None:
            heapq.heappush(self.heads, (*self._key(team, shape, shape.at), team.version))

    def _advance(self, team: _Team, base: Key) -> None:
        """Consume the team's jobs of failing shapes up to its next job ``N`` of a shape that is
        not failing, and put the team back in the heap keyed by ``N``'s prefix maximum (the
        larger of ``base``, the keys consumed and ``N``'s own key)."""
        team.version += 1
        if team.blocked is not None:
            return
        nxt: _Shape | None = None
        failing: list[tuple[_Shape, PendingReason]] = []
        memory = self.memory
        epoch = -2 if team.lone else memory.epoch  # no shape fails at epoch -2
        # The team's shapes in the order of their next jobs: the failing ones up to the first
        # that is not (``_failing`` inlined: this is the cycle's hottest loop).
        while (shape := team.head()) is not None:
            reason = shape.unfit
            if reason is None and epoch >= 0:
                failure = shape.failure
                reason = failure.reason if failure.epoch == epoch else memory.carried(failure)
            if reason is None:
                nxt = shape
                break
            heapq.heappop(team.heap)  # the head's own entry
            failing.append((shape, reason))
        top = base
        for shape, reason in failing:
            start = shape.at
            if nxt is None or shape.neg < nxt.neg:
                end = len(shape.keys)  # every job of the shape comes before ``N``
            elif shape.neg > nxt.neg:
                end = start
            else:
                end = bisect_left(shape.keys, nxt.keys[nxt.at], start)
            if end > start:
                if not team.log:
                    self.logged.append(team)
                rank = self._rank(team.state, shape)
                if team.capped and reason is not shape.unfit:
                    self._log_members(team, shape, start, end, reason, rank)
                else:
                    team.log.append((shape, start, end, reason, rank))
                shape.at = end
                last = (*rank, shape.neg, *shape.keys[end - 1], team.state.index)
                if last > top:
                    top = last
            team.push(shape)
        if nxt is not None:
            own = self._key(team, nxt, nxt.at)
            heapq.heappush(self.heads, (*(own if own > top else top), team.version))

    def _log_members(
        self, team: _Team, shape: _Shape, start: int, end: int, reason: PendingReason, rank: tuple[int, ...]
    ) -> None:
        """Log a capped team's twins consumed with their shape's failure: each whose submitter
        is at the team's limit per member waits with ``member-limit`` instead (tested first,
        as ``_decide`` does), in runs of one reason. Member counts move only with a change, so
        the reasons hold as the shape's do."""
        state = self.state
        made: dict[str, PendingReason | None] = {}
        keys = shape.keys
        at = start
        current = reason
        for i in range(start, end):
            item = keys[i][3]
            who = item.job.submitter if isinstance(item, JobRecord) else item.submitter
            why = reason
            if who is not None:
                if who not in made:
                    made[who] = state.member_reason(team.state, who, shape.gpus)
                capped = made[who]
                if capped is not None:
                    why = capped
            if why is not current:
                if i > at:
                    team.log.append((shape, at, i, current, rank))
                at, current = i, why
        team.log.append((shape, at, end, current, rank))

    def _settle_logs(self, event: Key | None) -> list[_Team]:
        """A change happened at key ``event`` (None: the cycle ended). Consumed jobs that come
        before it keep their reasons; the rest are given back. Returns the teams given back."""
        given_back: list[_Team] = []
        runs = self.runs
        # The event's key in parts: its rank (as long as every rank of the cycle), minus its
        # priority, its slot.
        n = 3 if self.fair_share else 1
        head: Key = ()
        ev_neg = 0
        ev_slot: Slot = ()
        if event is not None:
            head, ev_neg, ev_slot = event[:n], event[n], event[n + 1 : n + 5]
        for team in self.logged:
            # The first job given back, in queue order: its shape's ``neg`` and its slot.
            cut: Slot | None = None
            cut_neg = 0
            if event is not None:
                for shape, start, end, _, rank in team.log:
                    if rank > head:
                        at = start
                    elif rank < head:
                        continue
                    elif shape.neg != ev_neg:
                        if shape.neg < ev_neg:
                            continue  # each of its jobs comes before the event
                        at = start
                    else:
                        at = bisect_right(shape.keys, ev_slot, start, end)
                    if at < end:
                        first = shape.keys[at]
                        if cut is None or shape.neg < cut_neg or (shape.neg == cut_neg and first < cut):
                            cut, cut_neg = first, shape.neg
            for shape, start, end, reason, _ in team.log:
                if cut is None or shape.neg < cut_neg:
                    stop = end
                elif shape.neg > cut_neg:
                    stop = start
                else:
                    stop = bisect_left(shape.keys, cut, start, end)
                if stop > start:
                    runs.append((shape.ids[start:stop], reason))
                if stop < end:
                    shape.at = min(shape.at, stop)
                    team.dirty = True
            if cut is not None:
                given_back.append(team)
            team.log = []
        self.logged = []
        return given_back

    # -- deciding --------------------------------------------------------------------------
    def _record(self, team: _Team, shape: _Shape) -> JobRecord:
        item = shape.keys[shape.at][3]
        shape.at += 1
        team.push(shape)
        if isinstance(item, JobRecord):
            return item
        # A pending job decided again (given back, or in a session's next cycle) keeps its
        # record: deciding a job that waits changes nothing of it, and ``undo`` takes a start
        # back off it.
        records = self.queues.records
        kept = records.get(id(item))
        if kept is not None and kept[0] is item:
            return kept[1]
        rec = self.state.record(item)
        records[id(item)] = (item, rec)
        return rec

    def _decide(self, team: _Team, shape: _Shape, rec: JobRecord) -> set[TeamState]:
        """POLICY.md 3.3: start, preempt for, or leave pending the winning head; returns the
        teams whose rank changed."""
        state = self.state
        memory = self.memory
        if rec.team.members is not None:
            # Its submitter at the team's limit per member: it waits, and blocks nobody, even
            # under strict FIFO (docs/limits.md).
            capped = state.member_limit(rec)
            if capped is not None:
                self.pending[rec.job.id] = capped
                return set()
        # 3.3: the winner is admitted if it fits.
        if state.fits(rec):
            self._start(rec)
            return {rec.team}
        # 3.3 and 4: if it may look for victims (not in its back-off, 3.5), preemption is tried.
        search: Search | None = None
        if shape.eligible:
            search = memory.search(rec, shape.ident + rec.order_key if team.lone else shape.ident)
            victims = search.victims
            if victims is not None:
                changed = {rec.team}
                for victim, reason in victims:
                    self._preempt(victim, reason, rec)
                    changed.add(victim.team)
                self._start(rec)
                return changed
            # 3.3: a head that finds no victim holds its team's unused lendable quota.
            if rec.team.team.reclaim != Reclaim.ANY and state.hold(rec.tt, rec.ts):
                memory.change()
                self.held_any = True
        # 3.3 and section 5: it stays pending with a reason; under strict FIFO its team offers
        # nothing more (3.4).
        why = memory.remember(shape.failure, rec, search)
        self.pending[rec.job.id] = why
        if self.strict:
            team.blocked = rec.job.id
        return set()

    def _start(self, rec: JobRecord) -> None:
        nodes = self.state.start(rec)
        self.changes.append((rec, None))
        self.starts.append(Start(rec.job.id, nodes))
        self.pending.pop(rec.job.id, None)
        self.memory.change()

    def _preempt(self, victim: JobRecord, reason: PreemptionReason, preemptor: JobRecord) -> None:
        """Record a victim (already taken off its nodes); it re-enters its queue after the
        consumed jobs are settled."""
        self.preemptions.append(Preemption(victim.job.id, reason, preemptor.job.id))
        self.changes.append((victim, (victim.nodes, victim.preemptions, victim.last_preempted_at)))
        self.state.preempted(victim)
        self.requeue.append(victim)
        self.memory.change()

    def _requeue(self, rec: JobRecord) -> None:
        team_state = rec.team
        if not team_state.team.active:
            self.pending[rec.job.id] = inactive_reason(team_state)
            return
        it, g = rec.ts.name, rec.gpus
        eligible = may_look_for_victims(self.state, rec)
        ident = (team_state.index, it, g, rec.priority, eligible, rec.res)
        team = self.teams[team_state.index]
        shape = team.by_ident.get(ident)
        if shape is None:
            key = rec.order_key
            shape = self.queues.new_shape(ident, [(key[1], key[2], key[3], rec)])
            self.created.append(shape)
        else:
            shape.insert(rec.order_key, rec)
            self.inserted.append((shape, rec))
        team.dirty = True

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> Plan:
        """POLICY.md section 3, from its step 2 (step 1 is ``Queues``)."""
        # 2. Each team offers its head.
        for team in self.teams:
            self._offer(team)
        heads = self.heads
        teams = self.teams
        memory = self.memory
        # 4. Repeat until no team offers a head.
        while heads:
            # 2. The best head wins.
            entry = heapq.heappop(heads)
            team = teams[entry[-2]]
            if entry[-1] != team.version:
                continue  # a stale entry: the team was re-ranked since
            key = entry[:-1]
            shape = team.head()
            if shape is None:  # pragma: no cover - a team with no job is not in the heap
                continue
            if self._failing(team, shape) is not None:
                # 3. It would wait for a reason remembered: its team's waiting twins with it.
                self._advance(team, key)
                continue
            # 3. It starts, preempts for, or waits.
            rec = self._record(team, shape)
            epoch = memory.epoch
            changed = self._decide(team, shape, rec)
            if epoch == memory.epoch:
                self._advance(team, key)
                continue
            # 2. A change: settle what was consumed, then re-rank the teams it touched.
            touched = {t.state.index for t in self._settle_logs(key)}
            for victim in self.requeue:
                self._requeue(victim)
            self.requeue = []
            touched.update(t.index for t in changed)
            touched.add(team.state.index)
            for index in sorted(touched):
                self._offer(teams[index])
        self._settle_logs(None)
        # 3. Under strict FIFO the jobs behind a blocked head wait (section 5).
        self._finish()
        # What a session's next cycle may go on from (``memory.FollowOn``).
        rested = memory.epoch == self.queues.epoch_base and not self.strict
        self.queues.epoch_base = memory.epoch if rested else memory.epoch + 1
        self.rested = rested
        if not rested and not self.strict and not self.held_any:
            self.follow_on = FollowOn(memory, self.starts, self.preemptions)
        return Plan(
            starts=tuple(self.starts),
            preemptions=tuple(self.preemptions),
            pending=PendingReasons(self.runs, self.pending),
        )

    def quiet(self, before: PendingReasons) -> Plan | None:
        """``run``, for the cycle after one that changed nothing (``before``: its reasons) when
        since then only pending jobs came and went (``Queues.quiet_added`` and ``quiet_gone``):
        the accounting is the very same, so every shape that failed then fails again with the
        same reason (as ``run`` finds from the shapes' memory), and only the first job of a
        shape with no such memory is decided. When they all fail too, nothing changes and the
        plan is ``before`` with the jobs that came and went; otherwise (a start, a preemption
        or a hold) it returns None: ``undo``, and ``run`` a new cycle. About 40% of a what-if
        replay's cycles are such cycles: a submission or a back-off ending, at an instant after
        one that came to rest. Not for a lone team's new jobs (each is decided on its own), nor
        under strict FIFO."""
        added = self.queues.quiet_added
        assert added is not None and not self.strict
        memory = self.memory
        epoch = memory.epoch
        for item in added.values():
            if isinstance(item, PendingReason):
                continue
            shape = item
            team = self.teams[shape.ident[0]]
            if team.lone or team.capped:  # its jobs share no decision, or not every member's
                return None
            if shape.unfit is not None or shape.failure.epoch == epoch:
                continue
            self._decide(team, shape, self._record(team, shape))
            if memory.epoch != epoch:
                if shape.failure.epoch > epoch:  # a hold: that memory is of a state to be undone
                    shape.failure.forget()
                return None
        reasons: dict[str, PendingReason] = {}
        for job_id, item in added.items():
            if isinstance(item, PendingReason):
                reasons[job_id] = item
            else:
                reason = item.unfit or item.failure.reason
                assert reason is not None
                reasons[job_id] = reason
        self.rested = True
        return quiet_plan(before, reasons, self.queues.quiet_gone)

    def _finish(self) -> None:
        """Reasons for the jobs left behind a blocked head (strict FIFO)."""
        for team in self.teams:
            if team.blocked is None:
                continue
            name = team.state.team.name
            blocked = PendingReason(
                PendingCode.BLOCKED_BY_FIFO,
                f"strict FIFO: {name}'s job {team.blocked} does not fit and blocks the jobs behind it",
            )
            for shape in team.shapes:
                rest = shape.ids[shape.at :]
                if rest:
                    self.runs.append((rest, shape.unfit or blocked))

    def undo(self) -> None:
        """Take back everything the cycle changed in its ``Queues`` (a session's next cycle
        starts from the snapshot, not from this plan)."""
        state = self.state
        for ts in state.types.values():
            ts.held = 0
            if ts.res is not None:
                ts.res.held = [0] * len(ts.res.names)
            ts.version += 1
        for team_state in state.team_list:
            for tt in team_state.per_type.values():
                tt.holding = False
        for shape, rec in reversed(self.inserted):
            for i in range(len(shape.keys) - 1, -1, -1):
                if shape.keys[i][3] is rec:
                    del shape.keys[i], shape.ids[i]
                    break
        for shape in self.created:
            self.teams[shape.ident[0]].drop(shape)
        for rec, saved in reversed(self.changes):
            if saved is None:
                state.unstart(rec)
                continue
            rec.nodes, rec.preemptions, rec.last_preempted_at = saved
            state.restore(rec)
            tt = rec.tt
            insort(tt.candidates, rec, key=_victim_key)
            tt.cand_version += 1
            rec.ts.touch(rec.team.index)
            tt.cand_gpus[rec.priority] += rec.gpus


def _victim_key(rec: JobRecord) -> VictimKey:
    return rec.victim_key


def _first(pair: tuple[Ident, object]) -> Ident:
    return pair[0]
