"""The cycle's memory of work it has proven useless, and how long each remembered fact holds.

A job that cannot start leaves the accounting as it was, so a later job of its team and shape
(instance type, GPUs, priority, whether it may look for victims now) meeting the same state
waits for the same reason. The cycle (``cycle.py``) asks this module, and only this module,
whether it may skip a job or a search:

- ``Memory.remember(failure, rec, search)``: a job of the shape just failed (after
  ``search``, or none when it may not look for victims); its reason is returned and kept.
- ``Memory.recall(failure)``: the reason every job of the shape gets now without a test, or
  None when something that could help has changed since.
- ``Memory.search(rec, ident)``: ``preemption.find_victims``, unless a search of the same
  kind failed with nothing relevant changed since.
- ``Memory.change()``: a start, a preemption or a hold (the cycle's *epoch*).
- ``FollowOn``: the memory a cycle that changed something leaves for the next cycle at the
  same instant (a ``Session``'s). ``quiet_plan``, ``saved_epochs`` and ``restore_epochs``:
  a session's cycle after one that changed nothing (``BatchedCycle.quiet``).

Each fact and what it depends on (its inputs; the counters are kept by the accounting,
``state.CycleState``, where the change happens):

| fact | holds while |
| --- | --- |
| a failure at the cycle's epoch (``Failure.epoch``) | nothing at all changed (no start, preemption or hold) |
| a search failed (``SEARCHED``) | no preemption there and no team borrowing more there (``preempt_epoch``) |
| a search ended at the share bound (``SHARE_BOUND``) | no share rose where its team borrows (``rise_epoch``) |
| no search (``NO_SEARCH``) | no GPUs freed there (``free_epoch``), or the pool it lacked did not grow (``Failure.pool``) |
| over its team's borrow limit (``TEAM_LIMIT``) | its team's usage and candidates there (``TeamType.cand_version``), across a session's cycles |
| victims found but one started in this cycle (``DEFERRED``) | nothing changed on its type (``TypeState.version``, ``preempt_epoch``) |
| every kind but ``TEAM_LIMIT`` | whether the job ends within its quota; under fair share its team's borrowed GPUs and usage there |
| a failed search of ``Memory.search`` | as ``SEARCHED`` or ``SHARE_BOUND``, for the same shape, within-quota side and (fair share) own share |
| a reason's figures (``Failure.reason_at``) | nothing changed on its type (``TypeState.version``) |
| any failure on a type with jobs protected by their minimum runtime (``TypeState.protected``) | only at its epoch: its reason may be ``min-runtime``, which reads the whole state (``preemption.min_runtime_reason``); never carried |
| a ``Session``'s state once a job was protected or checkpointed in it (``CycleState.timed``) | the same ``now``: at a new one ``Queues.advance`` makes ended protections candidates, reorders checkpointed ones and moves the epochs of the types it touched |
| ``FollowOn``, ``Queues.epoch_base`` (a session) | the next snapshot is this plan applied and nothing else; teams, policy and nodes are the very same objects (``Session._update``) |

A job protected by its minimum runtime (docs/preemption.md 1) is no candidate at all, and the
set of protected jobs only grows within a cycle (a job started in it with a minimum runtime is
protected from its start): a failure without them stands as it did. Only the reasons read
them, and those are made again at every failure there.

What none of them depends on, and must stay so for the memory to be right: the job's own
submit time and id (except under ``lower-or-newer-equal-priority``, whose jobs are each decided
alone: ``_Team.lone``), and anything of another team that the accounting does not count in the
counters above.

**A new per-team setting** (a field of ``snapshot.Team``) is safe when:

1. it changes no decision, or what it changes is read through ``TeamType`` / ``TeamState``
   values that the counters above already follow (usage, quota, borrowed GPUs, candidates);
2. otherwise, if it changes which jobs may look for victims, it goes into
   ``preemption.may_look`` (the shape's ``eligible`` follows);
3. if it changes what a failed search or reason depends on, the accounting bumps the right
   counter where that input moves (``state.CycleState``), or the fact gets a field here that
   ``remember`` records and ``recall`` compares;
4. if it makes jobs of one shape decide differently (as ``lower-or-newer-equal-priority``
   does), the team is ``lone`` (``cycle._Team``); if the difference is a test made before
   anything else (``max_running_gpus_per_member``: twins of two members differ), the twins
   past it share the failure, and each consumed twin is tested (``_Team.capped``);
5. a ``Session`` rebuilds whenever ``snapshot.teams`` is another object, so a changed setting
   never meets an old memory across cycles (and whenever ``snapshot.borrowed_history``
   differs: the history of fairness over time is fixed within a cycle and, like the weight,
   enters only ``share_key``, so every fact that follows a team's borrowed GPUs follows it);
6. a case in ``tests/engine/test_shortcuts.py``'s generator (``busy_cluster``) draws it, so the
   comparison with ``tests/engine/reference.py`` covers it.
"""

from __future__ import annotations

from .placement import NodeShare
from .preemption import (
    NONE_AT_SHARE_BOUND,
    NONE_FOUND,
    Search,
    find_victims,
    min_runtime_reason,
    own_candidates,
    team_limit_hopeless,
)
from .snapshot import Job, PendingCode, PendingReason, PendingReasons, Plan, Preemption, Reclaim, Start
from .state import CycleState, JobRecord, TeamState, TeamType, TypeState

# How a shape's job failed, which says what may make its twins succeed (the table above).
SEARCHED, SHARE_BOUND, NO_SEARCH, TEAM_LIMIT, DEFERRED = 0, 1, 2, 3, 4

Epochs = tuple[dict[str, int], dict[str, int], dict[str, int]]


class Failure:
    """What one shape (its team, instance type, GPUs, whether it may look for victims)
    remembers of its last failure."""

    __slots__ = (
        "borrowed",
        "cands",
        "eligible",
        "epoch",
        "free",
        "gpus",
        "kind",
        "pe",
        "pool",
        "reason",
        "reason_at",
        "res",
        "rise",
        "team",
        "ts",
        "tt",
        "usage",
        "version",
        "within",
    )

    def __init__(
        self,
        team: TeamState,
        tt: TeamType,
        ts: TypeState,
        gpus: int,
        eligible: bool,
        res: tuple[int, ...] | None = None,
    ) -> None:
        self.team = team
        # What its jobs ask of the type's other resources (docs/resources.md 3), or None.
        self.res = res
        self.tt = tt
        self.ts = ts
        self.gpus = gpus
        self.eligible = eligible
        self.epoch = -1  # the cycle's epoch when it failed (-1: never)
        self.reason: PendingReason | None = None
        self.reason_at = -1  # the type's ``version`` when ``reason`` was made
        self.kind = SEARCHED
        # Its instance type's epochs when it failed.
        self.pe = -1
        self.free = -1
        self.rise = -1
        # The pool its team could still take when its job failed for want of it (fits()' pool
        # test), else -1: a search that ended at the share bound, or no search, fails again
        # while its team's usage stands and that pool does not grow, GPUs freed or not (a
        # freed GPU lowers no share, and the share bound is all that search read).
        self.pool = -1
        self.within = False  # whether the job would have ended within its team's quota
        # Its team's borrowed GPUs and usage of the type: fair share reads the team's share.
        self.borrowed = 0
        self.usage = 0
        self.cands = -1  # its team's ``cand_version`` there (``TEAM_LIMIT``)
        self.version = -1  # its type's ``version`` (``DEFERRED``)

    def forget(self) -> None:
        self.epoch = -1


class Memory:
    """One cycle's memory: its epoch (the count of changes), the epoch its memories start from
    (an earlier one for a ``FollowOn``) and its failed searches."""

    __slots__ = ("carry", "epoch", "fair_share", "first_epoch", "searched", "state")

    def __init__(self, state: CycleState, epoch: int, carry: bool, follow: FollowOn | None) -> None:
        self.state = state
        self.fair_share = state.fair_share
        self.epoch = epoch  # bumped by every start, preemption and hold
        self.first_epoch = epoch
        # Whether a failure holds across changes at all: not under strict FIFO, where a
        # failure blocks the team.
        self.carry = carry
        self.searched: dict[tuple[object, ...], tuple[bool, int]] = {}
        if follow is not None:
            # Go on from the memory of the cycle before at this instant, from its first epoch
            # (the instance types' epochs go on counting).
            self.first_epoch = follow.first
            assert epoch > follow.epoch  # no memory of that cycle matches ``epoch`` exactly

    def change(self) -> None:
        """A start, a preemption or a hold."""
        self.epoch += 1

    def remember(self, f: Failure, rec: JobRecord, search: Search | None) -> PendingReason:
        """A job of the shape failed, after ``search`` (None: it may not look for victims).
        Returns its reason (section 5), kept while the type's state stands."""
        state = self.state
        if search is None:
            kind = NO_SEARCH
        elif search.deferred:
            kind = DEFERRED
        else:
            kind = SHARE_BOUND if search.share_bound else SEARCHED
        ts = rec.ts
        tt = rec.tt
        if f.reason_at != ts.version or f.reason is None or ts.protected:
            f.reason = state.reason(rec)
            f.reason_at = ts.version
        if ts.protected and search is not None and search.victims is None and not search.deferred:
            # docs/preemption.md 4: the victims it needs may be protected by their minimum
            # runtime; that search reads the whole state, so its reason is made for each
            # failure (never carried: ``carried``).
            protected = min_runtime_reason(state, rec)
            if protected is not None:
                f.reason = protected
            f.reason_at = ts.version
        why = f.reason
        if why.code == PendingCode.BORROW_LIMIT and (
            not f.eligible or team_limit_hopeless(rec, own_candidates(rec), within_quota=False)
        ):
            # Over its team's limit (POLICY.md 5.4) even with every own candidate gone, and
            # other teams' victims do not lower its team's usage: nothing but that usage
            # changes this (nor the reason's figures, all its team's own).
            kind = TEAM_LIMIT
            f.cands = tt.cand_version
        f.kind = kind
        f.epoch = self.epoch
        name = ts.name
        f.pe = state.preempt_epoch[name]
        f.free = state.free_epoch[name]
        kept = tt.kept
        above = max(0, tt.usage + rec.gpus - kept) - max(0, tt.usage - kept)
        pool = state.pool_available(tt, ts)
        f.pool = pool if above and above > pool else -1
        f.rise = state.rise_epoch[name]
        f.within = tt.usage + rec.gpus <= tt.quota
        f.borrowed = rec.team.borrowed
        f.usage = tt.usage
        f.version = ts.version
        return why

    def recall(self, f: Failure) -> PendingReason | None:
        """The reason every job of the shape gets now without a test, if any."""
        if f.epoch == self.epoch:
            return f.reason
        return self.carried(f)

    def carried(self, f: Failure) -> PendingReason | None:
        """A shape that failed earlier in the cycle fails again, whatever changed since, when
        none of it could help: no start makes a job fit that did not (it only takes GPUs,
        pool and room on nodes, and a holding team starting gives back to the pool no more
        than it takes), nor does a hold (other teams' pool only shrinks), so a job that could
        not look for victims fails again until a preemption frees GPUs there (``free_epoch``);
        a search fails again while its instance type's ``preempt_epoch`` stands, or, if it
        ended for want of a team with a share as high, while no GPUs were freed there and no
        share rose (``rise_epoch``); under fair share also while its team's borrowed GPUs and
        usage there stand (what ``search`` rests on). GPUs freed do not count against a job
        that failed for want of pool while that pool has not grown (``Failure.pool``). A job
        over its team's borrow limit even without its team's candidates fails again while its
        team's usage and candidates there stand, also from an earlier cycle of a session
        (``TEAM_LIMIT``). Only the reason is made again, in the current state: its figures may
        have moved. A job that waited because its victims would include a job started in the
        cycle (``DEFERRED``) waits again only while nothing changed on its type."""
        if not self.carry or f.ts.protected or f.res is not None or self.state.resources:
            # (Nor on a type that counts other resources: the reasoning below is in GPUs.)
            # A job protected by its minimum runtime on the type may make any failure's reason
            # ``min-runtime`` (``remember``), which reads the whole state: nothing is carried.
            return None
        tt, ts = f.tt, f.ts
        state = self.state
        kind = f.kind
        if kind == DEFERRED:
            # Its search found victims, one of them started in this cycle. Any change there (a
            # start, a preemption, a hold: the type's ``version``) may turn that into other
            # victims or none: a start takes room, so the greedy search may go past the point
            # where it fitted and give that job back. Elsewhere only shares move, and those of
            # teams borrowing there move the ``preempt_epoch`` (the preemptor's own: below).
            if f.epoch < self.first_epoch or f.version != ts.version or f.pe != state.preempt_epoch[ts.name]:
                return None
        elif kind == TEAM_LIMIT:
            # Also from an earlier cycle of a session: its team's limit cannot change without
            # a new state, nor its usage and candidates there without these moving. But a
            # failed search holds its team's quota (POLICY.md 3.3) once per cycle: not from an
            # earlier cycle where this one would hold.
            if f.epoch < 0 or tt.usage != f.usage or tt.cand_version != f.cands:
                return None
            if f.epoch < self.first_epoch and f.eligible and f.team.team.reclaim != Reclaim.ANY:
                return None
        elif f.epoch < self.first_epoch:
            return None
        elif kind == SEARCHED:
            if f.pe != state.preempt_epoch[ts.name]:
                return None
        elif kind == SHARE_BOUND and f.rise != state.rise_epoch[ts.name]:
            return None
        elif f.free != state.free_epoch[ts.name] and (
            f.pool < 0 or tt.usage != f.usage or state.pool_available(tt, ts) > f.pool
        ):
            # GPUs were freed there, and the job did not fail for want of pool that is still
            # wanting (its team's usage as it was, the pool it may take no larger).
            return None
        if kind != TEAM_LIMIT:
            if (tt.usage + f.gpus <= tt.quota) != f.within:
                return None
            if self.fair_share and (f.team.borrowed != f.borrowed or tt.usage != f.usage):
                return None
        if f.reason_at != ts.version:
            f.reason = state.reason_for(f.team, tt, ts, f.gpus, f.res)
            f.reason_at = ts.version
        f.epoch = self.epoch
        return f.reason

    def search(self, rec: JobRecord, ident: tuple[object, ...]) -> Search:
        """``find_victims``, unless it already failed in this cycle for a job of the same
        ``ident`` (its shape) as far within its quota, with nothing since that could help on
        its instance type (its ``preempt_epoch``): such a search fails again.

        Under fair share the search also reads the preemptor's own team's share once the job
        runs, and not in one direction only: a higher share lets rule A take fewer victims, so
        the greedy search goes another way, which may find a set where the old way did not
        (``tests/engine/test_shortcuts.py``). That share moves with the team's borrowed GPUs
        and its usage of the type, so both are part of the memory there.

        A fair-share search that ended for want of another team with a share as high as the
        preemptor's (and no candidate of its own) fails again until another team's share rises
        where it borrows (``rise_epoch``): a preemption only lowers shares and takes candidates
        away, and the preemptor's own share is in the memory.

        A search that found victims but waits (``Search.deferred``) is not remembered: the next
        change may let it take jobs that were running before the cycle, or none."""
        state = self.state
        tt = rec.tt
        own: tuple[object, ...] | None = (rec.team.borrowed, tt.usage) if self.fair_share else None
        if own is not None and state.resources:
            # docs/resources.md 5: the share reads every resource borrowed.
            team = rec.team
            own = (
                team.borrowed,
                tuple(team.res_borrowed),
                tt.usage,
                tuple(tt.res.usage) if tt.res is not None else (),
            )
        key = (ident, tt.usage + rec.gpus <= tt.quota, own)
        name = rec.ts.name
        memo = self.searched.get(key)
        if memo is not None and memo[1] == (state.rise_epoch if memo[0] else state.preempt_epoch)[name]:
            return NONE_AT_SHARE_BOUND if memo[0] else NONE_FOUND
        search = find_victims(state, rec)
        if search.victims is None and not search.deferred:
            bound = search.share_bound
            self.searched[key] = (bound, (state.rise_epoch if bound else state.preempt_epoch)[name])
        return search


class FollowOn:
    """What a cycle that changed something leaves for the next cycle at the same instant
    (``BatchedCycle.run``, ``Session``): that cycle starts from the very accounting this one
    ended with, once its plan is applied and nothing else happened, so the memory of the
    shapes' failures (``Memory.carried``) goes on from where this cycle left it.

    The jobs it started were preemption candidates from their start, in the order the next
    snapshot gives them (``CycleState.start``): the next cycle's searches see the candidates
    this cycle's last ones saw, and a failure stands as it stood. What changes is only that
    those jobs may be taken now; a search that would have taken one waited, and is not carried
    into the next cycle (``DEFERRED``). Not after a cycle that held capacity for a reclaiming team
    (POLICY.md 3.3): a hold lasts until the end of its cycle, so the next one starts with more
    pool than this one ended with."""

    __slots__ = ("epoch", "first", "starts", "victims")

    def __init__(self, memory: Memory, starts: list[Start], preemptions: list[Preemption]) -> None:
        self.epoch = memory.epoch
        self.first = memory.first_epoch
        # The starts (id -> nodes) and the victims' ids, which the next snapshot must differ
        # by and by nothing else.
        self.starts: dict[str, NodeShare] = {s.job_id: s.nodes for s in starts}
        self.victims: set[str] = {p.job_id for p in preemptions}

    def matches(self, removed: tuple[Job, ...], added: tuple[Job, ...]) -> bool:
        """Whether the jobs removed and added since are exactly this cycle's plan applied: each
        started job pending -> running on its nodes, each victim running -> pending (a victim
        started again in the cycle: running -> running on its new nodes)."""
        starts, victims = self.starts, self.victims
        moved = len(starts) + len(victims) - len(victims & starts.keys())
        if len(removed) != moved or len(added) != moved:
            return False
        gone: set[str] = set()
        for job in removed:
            if job.nodes:
                if job.id not in victims:
                    return False
            elif job.id not in starts or job.id in victims:
                return False
            gone.add(job.id)
        if len(gone) != len(removed):
            return False
        came: set[str] = set()
        for job in added:
            if job.nodes:
                if starts.get(job.id) != job.nodes:
                    return False
            elif job.id not in victims or job.id in starts:
                return False
            came.add(job.id)
        return len(came) == len(added)


def quiet_plan(before: PendingReasons, added: dict[str, PendingReason], gone_now: set[str]) -> Plan:
    """The plan of a quiet cycle (``BatchedCycle.quiet``): ``before``'s reasons less the jobs
    gone since, with the new ones (``added``: each job's reason). Its runs stay as they are,
    less every job gone since (a job that came back, moved out of its back-off, is one of the
    singles, which are read after ``gone``)."""
    runs, singles, gone = before.parts()
    pending = dict(singles)
    for job_id in gone_now:
        pending.pop(job_id, None)
    pending.update(added)
    if gone_now:
        gone = gone | gone_now
    return Plan(pending=PendingReasons(runs, pending, gone))


def saved_epochs(state: CycleState) -> Epochs:
    """The instance types' epochs, before a quiet cycle that may be given up."""
    return state.preempt_epoch.copy(), state.free_epoch.copy(), state.rise_epoch.copy()


def restore_epochs(state: CycleState, saved: Epochs) -> None:
    """A quiet cycle given up is taken back with the rest: the memories of the cycle at rest
    before (at these epochs) hold again for the cycle that follows."""
    state.preempt_epoch, state.free_epoch, state.rise_epoch = saved
