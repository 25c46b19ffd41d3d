"""The accounting of one cycle, kept up to date as jobs start and are preempted (POLICY.md 2).

``CycleState.build`` turns a ``Snapshot`` into mutable per-team, per-instance-type counters
(usage, borrowed, pool used, capacity held for reclaiming teams) and per-instance-type node free
lists, so that each fit test, admission and preemption costs O(1) or O(log n) instead of a
rescan of the jobs. Bad input raises ``ValueError`` naming the field path and the value.
"""

from __future__ import annotations

from bisect import insort
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from math import lcm
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final

from .cost import lost_work_s, min_runtimes
from .placement import NodeShare, Placement

if TYPE_CHECKING:
    from .preemption import Borrowers, Part
from .ranking import ZERO_SHARE, ShareKey, history_terms, priority_weights, share_key, share_units
from .resources import (
    GPUS,
    amount_text,
    counts_gpus_only,
    job_resources,
    max_use_resources,
    quota_resources,
    type_resources,
)
from .snapshot import (
    IdleAllocation,
    InstanceType,
    Job,
    Node,
    PendingCode,
    PendingReason,
    PreemptWhileBorrowing,
    Quota,
    Reclaim,
    Sharing,
    Snapshot,
    Team,
)

_NO_QUOTA = Quota()
_id, _team, _instance_type, _gpus_of = [attrgetter(a) for a in ("id", "team", "instance_type", "gpus")]
# Pending jobs grouped in one pass (``CycleState.pending_groups``); a shape is made of these,
# those preempted before then looked at one by one (their back-off, POLICY.md 3.5).
_grouping = attrgetter("team", "instance_type", "gpus", "priority_class", "preemptions")
Grouping = tuple[str, str, int, str | None, int]
_submit_time, _seq = attrgetter("submit_time"), attrgetter("seq")
# A pending job in its group: its queue order key but the priority, which is its group's
# (POLICY.md 3.1: submit time, seq, id), and the job, made in the snapshot's order
# (``CycleState._build``); a tuple of any length for the compiled build (``cycle.Slot``).
GroupSlot = tuple[Any, ...]
# What a pending reason's message is made of, the first item of its key (``reason_for``).
_OVER_LIMIT: Final = 0
_NO_BORROWING: Final = 1
_LENT_OUT: Final = 2
_NO_IDLE: Final = 3
_CAPACITY_LOST: Final = 4
_NO_PLACEMENT: Final = 5
# Above every start_seq a snapshot carries (the loop's are microseconds since 1970, about 2**51):
# a job started in the cycle is ordered after, by POLICY.md 4 before, every job that started at
# the same time in an earlier cycle, as the next snapshot will order them (``CycleState.start``).
_IN_CYCLE: Final = 2**61


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


@dataclass(frozen=True, slots=True)
class Limits:
    """A team's limits on one instance type, derived from its ``Quota`` (POLICY.md 1 and 2)."""

    quota: int
    lendable: int
    kept: int
    borrow: int | None  # GPUs it may borrow; None = unlimited
    may_borrow: bool

    @property
    def max_use(self) -> int | None:
        return None if self.borrow is None else self.quota + self.borrow


def team_limits(team: Team, instance_type: str) -> Limits:
    """``quota``, ``lendable``, ``kept``, the borrow limit and whether the team may borrow."""
    q = team.quotas.get(instance_type, _NO_QUOTA)
    quota = max(0, q.quota)
    if team.sharing == Sharing.DONT_LEND:
        lendable = 0
    elif q.lend_limit is None:
        lendable = quota
    else:
        lendable = min(max(0, q.lend_limit), quota)
    borrow: int | None
    if team.sharing != Sharing.LEND_AND_BORROW:
        borrow = 0
    elif q.borrow_unlimited:
        borrow = None
    elif q.borrow_limit is not None:
        borrow = max(0, q.borrow_limit)
    else:
        borrow = quota * max(0, q.borrow_limit_percent) // 100
    may_borrow = team.sharing == Sharing.LEND_AND_BORROW and (borrow is None or borrow > 0)
    return Limits(quota, lendable, quota - lendable, borrow, may_borrow)


def effective_preempt_while_borrowing(team: Team) -> PreemptWhileBorrowing:
    """POLICY.md 1: ``lower-priority`` by default, ``never`` when ``reclaim`` is ``never``."""
    if team.preempt_while_borrowing is not None:
        return team.preempt_while_borrowing
    if team.reclaim == Reclaim.NEVER:
        return PreemptWhileBorrowing.NEVER
    return PreemptWhileBorrowing.LOWER_PRIORITY


class TeamType:
    """One team on one instance type: its limits and its running GPUs."""

    __slots__ = (
        "borrow",
        "cand_gpus",
        "cand_max",
        "cand_version",
        "candidates",
        "holding",
        "kept",
        "lendable",
        "max_use",
        "may_borrow",
        "prefixes",
        "quota",
        "res",
        "usage",
    )

    def __init__(self, limits: Limits) -> None:
        self.quota = limits.quota
        self.lendable = limits.lendable
        self.kept = limits.kept
        self.borrow = limits.borrow
        self.max_use = limits.max_use
        self.may_borrow = limits.may_borrow
        self.usage = 0
        self.holding = False
        # Running jobs, in preemption order (POLICY.md 4), those started in this cycle among
        # them: a search that would take one of those waits (``preemption.find_victims``).
        self.candidates: list[JobRecord] = []
        # GPUs of those candidates by priority, and an upper bound on one candidate's GPUs: the
        # quick "not even every candidate would do" test of preemption.
        self.cand_gpus: dict[int, int] = {}
        self.cand_max = 0
        # Bumped whenever ``candidates`` change; the prefixes of them below a priority bound,
        # with their GPUs, made at that version (``preemption.borrowers``).
        self.cand_version = 0
        self.prefixes: dict[int, Part] = {}
        # docs/resources.md 4: its limits and usage of the type's other resources; None where
        # the type counts GPUs alone.
        self.res: TeamRes | None = None

    def candidate_gpus_below(self, priority: int | None) -> int:
        """GPUs of the candidates of priority below ``priority`` (None: all)."""
        if priority is None:
            return sum(self.cand_gpus.values())
        return sum(g for p, g in self.cand_gpus.items() if p < priority)

    def drop_candidate(self, rec: JobRecord) -> None:
        """A candidate was preempted: it is no longer running."""
        self.candidates.remove(rec)
        self.cand_gpus[rec.priority] -= rec.gpus
        self.cand_version += 1

    def unused_lendable(self) -> int:
        """The part of the lendable quota that the team itself does not use."""
        return self.lendable - min(self.lendable, max(0, self.usage - self.kept))


class TypeState:
    """One instance type: capacity, pool and node free lists."""

    __slots__ = (
        "borrowers",
        "cand_version",
        "capacity",
        "capacity_ever",
        "held",
        "name",
        "placement",
        "pool",
        "pool_used",
        "protected",
        "protected_groups",
        "protected_version",
        "quota_sum",
        "res",
        "running",
        "version",
        "watchers",
    )

    def __init__(self, name: str, placement: Placement, capacity: int, capacity_ever: int) -> None:
        self.name = name
        self.placement = placement
        self.capacity = capacity  # ready GPUs
        self.capacity_ever = capacity_ever  # GPUs of every node, ready or not
        self.quota_sum = 0  # the teams' quotas here (``CycleState._build``)
        self.pool = 0
        self.pool_used = 0
        self.held = 0  # unused lendable quota of the teams holding it (POLICY.md 3.3)
        self.running = 0  # GPUs of running jobs, on ready nodes or not
        # Running jobs protected by their minimum runtime, no candidates (docs/preemption.md 1).
        self.protected: list[JobRecord] = []
        # Bumped whenever ``protected`` or their order changes; ``protected_groups`` holds them
        # by team, sorted, with each team's list merged with its candidates
        # (``preemption.min_runtime_reason``), made at that version.
        self.protected_version = 0
        self.protected_groups: tuple[int, dict[int, Any]] = (-1, {})
        self.borrowers: set[int] = set()  # indexes of the teams above their quota here
        # Bumped whenever ``borrowers`` or a team's preemption candidates here change: other
        # teams' candidate lists (``preemption.borrowers``) hold until it moves.
        self.cand_version = 0
        # The sets in which those lists collect the teams that changed since (``touch``).
        self.watchers: list[set[int]] = []
        # Bumped by every change of its accounting (a job on or off its nodes, a hold): what a
        # pending reason here reads (``CycleState.reason_for``) stands until it moves.
        self.version = 0
        # docs/resources.md 4: the type's other resources; None where it counts GPUs alone.
        self.res: TypeRes | None = None

    def touch(self, team: int) -> None:
        """Team ``team``'s candidates here, or whether it borrows here, changed."""
        self.cand_version += 1
        for changed in self.watchers:
            changed.add(team)


class TypeRes:
    """An instance type's resources other than whole GPUs (docs/resources.md 1 and 4), in
    ``names`` order (vCPU, memory, then the partition profiles): per resource the ready nodes'
    capacity, the pool, the pool used, what reclaiming teams hold, what running jobs use, and
    each node's free amounts (by the node's index in the type's ``Placement``)."""

    __slots__ = (
        "capacity",
        "capacity_ever",
        "dom",
        "held",
        "names",
        "node_free",
        "per_node",
        "pool",
        "pool_used",
        "quota_sum",
        "running",
    )

    def __init__(self, names: tuple[str, ...], per_node: list[int], ready: list[bool]) -> None:
        k = len(names)
        # Each resource's index in ``TeamState.res_borrowed`` (``CycleState._build_dominant``).
        self.dom: list[int] = []
        self.names = names
        self.per_node = per_node
        n_ready = sum(1 for r in ready if r)
        self.capacity = [a * n_ready for a in per_node]
        self.capacity_ever = [a * len(ready) for a in per_node]
        self.pool = [0] * k
        self.pool_used = [0] * k
        self.held = [0] * k
        self.running = [0] * k
        self.quota_sum = [0] * k
        # Every node of a type has the same resources (docs/resources.md 1).
        self.node_free: list[list[int]] = [list(per_node) for _ in ready]


class TeamRes:
    """A team's limits and usage of one instance type's other resources (docs/resources.md 2
    and 4), in ``TypeRes.names`` order. Every one lends its whole quota but under
    ``dont-lend``; lend limits are GPUs only. ``max_use`` None: unlimited."""

    __slots__ = ("dom", "kept", "lendable", "max_use", "may_borrow", "quota", "usage")

    def __init__(self, team: Team, it: InstanceType, names: tuple[str, ...]) -> None:
        q = team.quotas.get(it.name, _NO_QUOTA)
        quotas = quota_resources(it, q)
        maxes = max_use_resources(it, q)
        lend_and_borrow = team.sharing == Sharing.LEND_AND_BORROW
        self.quota = [max(0, quotas[n]) for n in names]
        self.lendable = [0 if team.sharing == Sharing.DONT_LEND else a for a in self.quota]
        self.kept = [a - b for a, b in zip(self.quota, self.lendable, strict=True)]
        self.max_use: list[int | None] = [
            (maxes[n] if lend_and_borrow else a) for n, a in zip(names, self.quota, strict=True)
        ]
        self.may_borrow = [
            lend_and_borrow and (m is None or m > a) for m, a in zip(self.max_use, self.quota, strict=True)
        ]
        self.usage = [0] * len(names)
        self.dom: list[int] = []  # as ``TypeRes.dom``

    def unused_lendable(self, k: int, usage: int) -> int:
        lendable = self.lendable[k]
        return lendable - min(lendable, max(0, usage - self.kept[k]))


def job_borrows(tt: TeamType, g: int, res: tuple[int, ...] | None) -> bool:
    """Whether a job of ``g`` GPUs asking ``res`` would take its team above its quota there
    (POLICY.md 3.2); on a type that counts other resources, above its quota of any resource it
    asks for (docs/resources.md 4)."""
    if res is None:
        return tt.usage + g > tt.quota
    tr = tt.res
    assert tr is not None
    if g and tt.usage + g > tt.quota:
        return True
    return any(a and tr.usage[k] + a > tr.quota[k] for k, a in enumerate(res))


def node_shares(res: tuple[int, ...], nodes: NodeShare) -> list[list[int]]:
    """What a job asking ``res`` takes of each of its nodes: all of it on one node; spread
    evenly over whole nodes (docs/resources.md 3), the first nodes taking the remainder."""
    n = len(nodes)
    if n == 1:
        return [list(res)]
    return [[d // n + (1 if i < d % n else 0) for d in res] for i in range(n)]


def job_demand(it: InstanceType, names: tuple[str, ...], job: Job) -> tuple[int, ...]:
    """What ``job`` asks of the type's other resources, in ``names`` order (docs/resources.md
    3). Raises ``ValueError`` naming the field for a partition the type does not have or an
    amount below 0."""
    for name, amount in (("vcpus", job.vcpus), ("memory_gib", job.memory_gib)):
        if amount is not None and amount < 0:
            raise ValueError(f"job.{name}: must be 0 or more, got {amount!r}")
    for profile, count in job.partitions:
        if profile not in names:
            raise ValueError(f"job.partitions: {it.name} has no partition {profile!r}")
        if count < 0:
            raise ValueError(f"job.partitions: must be 0 or more, got {count!r} of {profile!r}")
    asked = job_resources(it, job)
    return tuple(asked[n] for n in names)


class TeamState:
    """One team across instance types."""

    __slots__ = (
        "borrowed",
        "history",
        "index",
        "members",
        "per_type",
        "res_borrowed",
        "scale",
        "share",
        "team",
        "unit",
        "version",
    )

    def __init__(self, team: Team, index: int) -> None:
        self.team = team
        self.index = index
        # The GPUs each member runs in the team, by submitter, kept only when the team limits
        # them (``max_running_gpus_per_member``; ``CycleState.member_limit``).
        self.members: dict[str, int] | None = None if team.max_running_gpus_per_member is None else {}
        self.unit = 0  # its weight's unit among the cycle's teams (``ranking.share_units``)
        self.per_type: dict[str, TeamType] = {}
        self.borrowed = 0  # sum over instance types of max(0, usage - quota)
        # The same per resource other than GPUs, by ``CycleState.dom_factor``'s index; empty
        # when every instance type counts GPUs alone.
        self.res_borrowed: list[int] = []
        self.share = ZERO_SHARE  # share_key of ``borrowed``, kept with it (CycleState._change_usage)
        # Its borrowing in the past and the weight of borrowing now (``ranking.history_terms``):
        # fixed for the cycle, so its share still moves only with ``borrowed``.
        self.history = 0
        self.scale = 1
        self.version = 0  # bumped whenever its head's rank may have changed


class JobRecord:
    """A job during the cycle, with what the cycle needs precomputed. (A plain class, not a
    dataclass: compiled by mypyc, a dataclass's generated ``__init__`` stays interpreted, 2% of a
    100k-job cycle.)"""

    __slots__ = (
        "gpus",
        "job",
        "last_preempted_at",
        "nodes",
        "order_key",
        "preemptions",
        "priority",
        "protected_until",
        "res",
        "started_in_cycle",
        "team",
        "ts",
        "tt",
        "victim_key",
    )

    def __init__(
        self, job: Job, team: TeamState, tt: TeamType, ts: TypeState, priority: int, now: float = 0.0
    ) -> None:
        self.job = job
        self.team = team
        self.tt = tt
        self.ts = ts
        self.gpus = job.gpus
        self.priority = priority
        # POLICY.md 3.1: priority high first, submit time, seq, id.
        self.order_key: tuple[int, float, int, str] = (-priority, job.submit_time, job.seq, job.id)
        self.victim_key = victim_key(priority, job, now)  # POLICY.md 4: candidate order
        self.nodes: NodeShare = job.nodes
        self.preemptions = job.preemptions
        self.last_preempted_at = job.last_preempted_at
        self.started_in_cycle = False  # set by ``CycleState.start``
        # docs/preemption.md 1: until then it has not run its minimum runtime and is no
        # preemption candidate (``CycleState.protect``); -inf for every other job.
        self.protected_until = float("-inf")
        # docs/resources.md 3: what it asks of its type's other resources (``TypeRes.names``);
        # None where the type counts GPUs alone.
        self.res: tuple[int, ...] | None = None

    def __repr__(self) -> str:
        return f"JobRecord({self.job.id!r}, team={self.team.team.name!r}, gpus={self.gpus}, nodes={self.nodes!r})"


VictimKey = tuple[int, float, float, int, int, str]


def victim_key(priority: int, job: Job, now: float) -> VictimKey:
    """POLICY.md 4 as docs/preemption.md 3 reads it: lower priority first; least work lost first
    (the latest last checkpoint, or start without checkpoints); most recently started first
    (the later start_seq among equal start times); then id. For jobs without checkpoints it is
    POLICY.md's order exactly. (A job started in the cycle: ``CycleState.start``.)"""
    if job.started_at is None:
        return (priority, float("inf"), float("inf"), -job.start_seq, job.seq, job.id)
    started = job.started_at
    since = started
    if job.checkpoint_interval_s:
        # When the work a preemption would lose began: its last checkpoint.
        since = now - lost_work_s(job, now)
    return (priority, -since, -started, -job.start_seq, job.seq, job.id)


class CycleState:
    """Mutable accounting for one cycle."""

    def __init__(
        self, snapshot: Snapshot, now: float, shortcuts: bool = True, pending_records: bool = True
    ) -> None:
        self.snapshot = snapshot
        # Off: pending jobs get no ``JobRecord`` here (the batched cycle makes them on demand);
        # they are still validated, and grouped in ``pending_groups``.
        self.pending_records = pending_records
        self.pending_groups: dict[Grouping, list[GroupSlot]] = {}
        # Off: no necessary-condition bounds before preemption searches (tests compare both).
        self.shortcuts = shortcuts
        self.now = now
        self.policy = snapshot.policy
        self.fair_share = self.policy.idle_allocation == IdleAllocation.FAIR_SHARE
        # docs/preemption.md 1 and 3: each class's minimum runtime, and whether a job was ever
        # protected by one or ordered by its checkpoints in this state: both move with ``now``,
        # so a ``Session`` then builds again at a new instant.
        self.min_runtime = float(self.policy.min_runtime_s)
        self.min_runtimes = min_runtimes(self.policy)
        self.timed = False
        self.types: dict[str, TypeState] = {}
        self.teams: dict[str, TeamState] = {}
        self.team_list: list[TeamState] = []
        self.records: list[JobRecord] = []
        self.pool_total = 0
        # docs/resources.md 5: shares compare ``max_r borrowed_r * L // pool_r`` with ``L`` the
        # least common multiple of the pools' totals, so ``share_key`` is given ``L`` as its
        # total. With GPUs alone ``L`` is the GPU pool and the factor 1: POLICY.md's share.
        self.share_total = 0
        self.gpu_factor = 1
        self.dom_factor: list[int] = []
        # Per instance type, bumped by whatever may let a preemption search that failed there
        # succeed: a preemption (frees GPUs), or a team borrowing more (its jobs, the one it
        # started among them, become candidates; its share rises). Admissions otherwise only
        # make searches harder (``start``).
        self.preempt_epoch: dict[str, int] = {}
        # Two parts of it. ``free_epoch``: a preemption there, the one thing in a cycle that
        # frees GPUs (and pool) of the type, so the one thing that can make a job fit that did
        # not. ``rise_epoch``: a team's share rising where it borrows and has candidates, the
        # one thing that can give a search that ended for want of a team with a share as high
        # as the preemptor's such a team (``memory.Memory.search``).
        self.free_epoch: dict[str, int] = {}
        self.rise_epoch: dict[str, int] = {}
        # Starts so far, which order the jobs started in the cycle (``start``); a session's
        # cycles go on counting.
        self.cycle_starts = 0
        # Per instance type: the highest shares of the teams borrowing there, with the
        # ``share_version`` and ``cand_version`` they were read at (``preemption._top_share``).
        self.top_shares: dict[str, tuple[int, int, list[tuple[ShareKey, int]]]] = {}
        # Other teams' candidate lists by (instance type, priority bounds), with the type's
        # ``cand_version`` they were made at (``preemption.borrowers``).
        self.other_lists: dict[tuple[str, int | None, int | None], Borrowers] = {}
        # Bumped whenever a team's share moves (its borrowed GPUs).
        self.share_version = 0
        # Reasons made, by what their message says (``reason_for``): a replay's session asks
        # for the same few thousand again and again (99.5% of 1.8 million in a 3-day what-if
        # replay), and a reason is frozen, so one object serves every job and cycle that has it.
        self.reasons: dict[tuple[object, ...], PendingReason] = {}
        # Whether some instance type counts resources other than GPUs (docs/resources.md).
        self.resources = False
        self.it_defs: dict[str, InstanceType] = {}
        self._build(snapshot)
        self.reset_epochs()

    # -- building ----------------------------------------------------------------------
    def _build(self, snapshot: Snapshot) -> None:
        types, nodes_by_type, node_type = _check_types_and_nodes(snapshot)
        self.it_defs = types
        self._build_teams(snapshot, types)
        weights = priority_weights(self.policy)
        self.weights = weights
        self.node_type = node_type
        jobs: Sequence[Job] = snapshot.jobs
        if self.pending_records:
            used = self._check_jobs(jobs, types, node_type)
        else:
            # The pending jobs are grouped by what a shape is made of (``pending_groups``) and
            # the groups, not the jobs, are checked: a few thousand lookups instead of 100k.
            # Each attribute of a job is read once: a read costs more than the rest of what
            # is done with it (``list.append``, a tuple made).
            running: list[Job] = []
            pending: list[Job] = []
            for job in jobs:
                if job.nodes:
                    running.append(job)
                else:
                    pending.append(job)
            ids = list(map(_id, pending))
            # Each job's slot is made here, in the snapshot's order, and put in its group, all
            # by functions written in C (``map`` of ``list.append`` over the groups' lists,
            # drained by a ``deque`` that keeps nothing): the jobs lie in memory in about that
            # order, and reading them group by group instead took twice as long.
            slots = zip(map(_submit_time, pending), map(_seq, pending), ids, pending, strict=True)
            groups: defaultdict[Grouping, list[GroupSlot]] = defaultdict(list)
            deque(map(list.append, map(groups.__getitem__, map(_grouping, pending)), slots), maxlen=0)
            used = self._check_jobs(running, types, node_type, groups, len(jobs), ids)
            self.pending_groups = groups
            jobs = running

        for name, it in types.items():
            nodes = nodes_by_type[name]
            placement = Placement(it.gpus_per_node, nodes, used)
            capacity = sum(n.gpus for n in nodes if n.ready)
            ts = self.types[name] = TypeState(name, placement, capacity, sum(n.gpus for n in nodes))
            if not counts_gpus_only(it):
                self._build_res(ts, it)

        # Pools (POLICY.md 2): lendable quota plus, when shared, the capacity in no quota.
        for name, ts in self.types.items():
            quota_sum = sum(t.per_type[name].quota for t in self.team_list)
            ts.quota_sum = quota_sum
            lendable_sum = sum(t.per_type[name].lendable for t in self.team_list)
            unallocated = max(0, ts.capacity - quota_sum) if self.policy.share_unallocated else 0
            ts.pool = lendable_sum + unallocated
            self.pool_total += ts.pool
            if ts.res is not None:
                self._res_pools(ts, ts.res)
        self.share_total = self.pool_total
        if self.resources:
            self._build_dominant()

        # Each team's usage is counted once per instance type, not once per running job.
        records = self.records
        usage: dict[int, tuple[JobRecord, int]] = {}
        for job in jobs:
            rec = self._record(job)
            records.append(rec)
            if job.nodes:
                self._candidate(rec)
                first, gpus = usage.get(id(rec.tt), (rec, 0))
                usage[id(rec.tt)] = (first, gpus + rec.gpus)
        for first, gpus in usage.values():
            self._change_usage(first, gpus)
        for rec in records:
            if rec.res is not None and rec.nodes:
                self._change_res(rec, 1)
        if any(t.members is not None for t in self.team_list):
            for rec in records:
                if rec.nodes:
                    self._member_usage(rec, rec.gpus)
        for team_state in self.team_list:
            for tt in team_state.per_type.values():
                tt.candidates.sort(key=lambda r: r.victim_key)

    def _build_res(self, ts: TypeState, it: InstanceType) -> None:
        """docs/resources.md 4: the type's other resources, and each team's limits of them."""
        per_node = type_resources(it)
        names = tuple(n for n in per_node if n != GPUS)
        ts.res = TypeRes(names, [per_node[n] for n in names], ts.placement.ready)
        for team_state in self.team_list:
            team_state.per_type[ts.name].res = TeamRes(team_state.team, it, names)
        self.resources = True

    def _res_pools(self, ts: TypeState, yr: TypeRes) -> None:
        """POLICY.md 2's pools per resource (docs/resources.md 4)."""
        for k in range(len(yr.names)):
            quota_k = sum(_team_res(t.per_type[ts.name]).quota[k] for t in self.team_list)
            lendable_k = sum(_team_res(t.per_type[ts.name]).lendable[k] for t in self.team_list)
            yr.quota_sum[k] = quota_k
            free_k = max(0, yr.capacity[k] - quota_k) if self.policy.share_unallocated else 0
            yr.pool[k] = lendable_k + free_k

    def _build_dominant(self) -> None:
        """docs/resources.md 5: each resource's factor ``L // pool_r`` (0 for a pool of 0), and
        the GPU history scaled to the same unit."""
        totals: dict[str, int] = {}
        for ts in self.types.values():
            if ts.res is not None:
                for name, pool in zip(ts.res.names, ts.res.pool, strict=True):
                    totals[name] = totals.get(name, 0) + pool
        names = sorted(totals)
        positive = [p for p in [self.pool_total, *(totals[n] for n in names)] if p > 0]
        scale = lcm(*positive) if positive else 0
        self.share_total = scale
        self.gpu_factor = scale // self.pool_total if self.pool_total > 0 else 0
        self.dom_factor = [scale // totals[n] if totals[n] > 0 else 0 for n in names]
        index = {n: i for i, n in enumerate(names)}
        for ts in self.types.values():
            if ts.res is not None:
                ts.res.dom = [index[n] for n in ts.res.names]
                for team_state in self.team_list:
                    _team_res(team_state.per_type[ts.name]).dom = ts.res.dom
        for team_state in self.team_list:
            team_state.res_borrowed = [0] * len(names)
            team_state.history *= self.gpu_factor

    def _build_teams(self, snapshot: Snapshot, types: dict[str, InstanceType]) -> None:
        for i, team in enumerate(snapshot.teams):
            if team.name in self.teams:
                raise ValueError(f"teams[{i}].name: duplicate team {team.name!r}")
            for it_name in sorted(team.quotas):
                if it_name not in types:
                    raise ValueError(f"teams[{i}].quotas: unknown instance type {it_name!r}")
            # A whole number (share_units takes their least common multiple).
            if not isinstance(team.fair_share_weight, int) or not 0 <= team.fair_share_weight <= 100:
                raise ValueError(
                    f"teams[{i}].fair_share_weight: must be 0..100, got {team.fair_share_weight!r}"
                )
            cap = team.max_running_gpus_per_member
            if cap is not None and (not isinstance(cap, int) or cap < 1):
                raise ValueError(f"teams[{i}].max_running_gpus_per_member: must be 1 or more, got {cap!r}")
            ts_team = TeamState(team, i)
            for it_name in types:
                ts_team.per_type[it_name] = TeamType(team_limits(team, it_name))
            self.teams[team.name] = ts_team
            self.team_list.append(ts_team)
        units = share_units(t.team.fair_share_weight for t in self.team_list)
        for ts_team in self.team_list:
            ts_team.unit = units[ts_team.team.fair_share_weight]
        self._build_history(snapshot)

    def _build_history(self, snapshot: Snapshot) -> None:
        """Each team's borrowing in the past (docs/fairness.md), checked."""
        policy = snapshot.policy
        half_life = policy.fair_share_half_life_s
        if not half_life >= 0 or half_life == float("inf"):
            raise ValueError(f"policy.fair_share_half_life_s: must be 0 or more, got {half_life!r}")
        percent = policy.fair_share_history_percent
        if not isinstance(percent, int) or not 0 <= percent <= 100:
            raise ValueError(f"policy.fair_share_history_percent: must be 0..100, got {percent!r}")
        for name, value in snapshot.borrowed_history.items():
            if name not in self.teams:
                raise ValueError(f"borrowed_history[{name!r}]: unknown team {name!r}")
            if not 0 <= value < float("inf"):
                raise ValueError(f"borrowed_history[{name!r}]: must be 0 or more, got {value!r}")
        for ts_team in self.team_list:
            ts_team.history, ts_team.scale = history_terms(
                policy, snapshot.borrowed_history.get(ts_team.team.name, 0.0)
            )

    def _check_jobs(
        self,
        jobs: Sequence[Job],
        types: dict[str, InstanceType],
        node_type: dict[str, str],
        groups: dict[Grouping, list[GroupSlot]] | None = None,
        total: int = 0,
        pending_ids: list[str] | None = None,
    ) -> dict[str, int]:
        """Validate the jobs; returns the GPUs in use per node. The common case (nothing wrong)
        is checked with set operations; the first bad job is then found one job at a time.
        With ``groups`` (the pending jobs, by team, instance type and GPUs among others),
        ``jobs`` are the running ones, ``total`` the count of all (the snapshot's) and
        ``pending_ids`` the ids of the others."""
        if groups is not None:
            ids = set(pending_ids or ())
            ids.update(map(_id, jobs))
            fine = len(ids) == total and all(
                team in self.teams and it in types and gpus > 0 for team, it, gpus, _, _ in groups
            )
        else:
            fine = len(set(map(_id, jobs))) == len(jobs)
        if (
            fine
            and set(map(_team, jobs)) <= self.teams.keys()
            and set(map(_instance_type, jobs)) <= types.keys()
            and min(map(_gpus_of, jobs), default=1) > 0
        ):
            used: dict[str, int] = {}
            for job in jobs:
                for name, gpus in job.nodes:
                    if node_type.get(name) != job.instance_type:
                        break
                    used[name] = used.get(name, 0) + gpus
                else:
                    continue
                break  # a bad node: the one-by-one check names the job's index
            else:
                return used
        return self._check_jobs_one_by_one(self.snapshot.jobs, node_type, types)

    def _check_jobs_one_by_one(
        self, jobs: Sequence[Job], node_type: dict[str, str], types: dict[str, InstanceType]
    ) -> dict[str, int]:
        used: dict[str, int] = {}
        seen: set[str] = set()
        for i, job in enumerate(jobs):
            if job.id in seen:
                raise ValueError(f"jobs[{i}].id: duplicate job id {job.id!r}")
            seen.add(job.id)
            if job.team not in self.teams:
                raise ValueError(f"jobs[{i}].team: unknown team {job.team!r}")
            if job.instance_type not in types:
                raise ValueError(f"jobs[{i}].instance_type: unknown instance type {job.instance_type!r}")
            it = types[job.instance_type]
            if job.gpus < 0 or (job.gpus == 0 and not job.partitions):
                raise ValueError(f"jobs[{i}].gpus: must be above 0, got {job.gpus!r}")
            if job.gpus == 0 and counts_gpus_only(it):
                # docs/resources.md 1: a resource the type does not declare cannot be asked for.
                raise ValueError(
                    f"jobs[{i}].partitions: {it.name} has no partitions, got {dict(job.partitions)!r}"
                )
            for name, gpus in job.nodes:
                if node_type.get(name) != job.instance_type:
                    raise ValueError(f"jobs[{i}].nodes: unknown node {name!r} of {job.instance_type}")
                used[name] = used.get(name, 0) + gpus
        return used

    def record(self, job: Job) -> JobRecord:
        """A job's record; a running job is counted and becomes the last of its team's
        preemption candidates there (``_build`` sorts them; a session puts it in its place),
        unless its minimum runtime protects it (``protect``). The batched cycle makes a pending
        job's record only when it first decides it."""
        rec = self._record(job)
        if job.nodes:
            self._change_usage(rec, rec.gpus)
            if rec.res is not None:
                self._change_res(rec, 1)
            self._candidate(rec)
            if rec.team.members is not None:
                self._member_usage(rec, rec.gpus)
        return rec

    def _record(self, job: Job) -> JobRecord:
        owner = self.teams[job.team]
        prio = 0 if job.priority_class is None else self.weights.get(job.priority_class, 0)
        ts = self.types[job.instance_type]
        rec = JobRecord(job, owner, owner.per_type[job.instance_type], ts, prio, self.now)
        yr = ts.res
        if yr is not None:
            rec.res = job_demand(self.it_defs[ts.name], yr.names, job)
        if job.nodes:
            if job.checkpoint_interval_s:
                self.timed = True
            if job.started_at is not None and job.terminating_since is None:
                until = job.started_at + self.min_runtime_of(job)
                if self.now < until:
                    rec.protected_until = until
        return rec

    def min_runtime_of(self, job: Job) -> float:
        """``cost.min_runtime_of`` with the classes looked up once per cycle."""
        if job.priority_class is None:
            return self.min_runtime
        return self.min_runtimes.get(job.priority_class, self.min_runtime)

    def _candidate(self, rec: JobRecord) -> None:
        """A running job becomes the last of its team's candidates there, or, protected by its
        minimum runtime, one of its type's ``protected`` jobs (no candidate). A job that
        terminates (docs/preemption.md 5) is neither: it was already preempted once, and its
        GPUs, still counted, are its preemptor's."""
        if rec.job.terminating_since is not None:
            return
        if rec.protected_until > self.now:
            self.protect(rec)
            return
        rec.tt.candidates.append(rec)
        self.counted(rec)

    def protect(self, rec: JobRecord) -> None:
        """docs/preemption.md 1: a running job that has not run its minimum runtime is no
        candidate of any search; it is kept aside for the pending reason ``min-runtime``
        (``preemption.min_runtime_reason``)."""
        rec.ts.protected.append(rec)
        rec.ts.protected_version += 1
        self.timed = True

    def counted(self, rec: JobRecord) -> None:
        """Count a candidate just put in its team's list."""
        tt = rec.tt
        tt.cand_version += 1
        tt.cand_gpus[rec.priority] = tt.cand_gpus.get(rec.priority, 0) + rec.gpus
        tt.cand_max = max(tt.cand_max, rec.gpus)
        rec.ts.touch(rec.team.index)

    # -- accounting --------------------------------------------------------------------
    def _change_usage(self, rec: JobRecord, delta: int) -> None:
        tt, ts, team = rec.tt, rec.ts, rec.team
        ts.version += 1
        old = tt.usage
        new = old + delta
        kept = tt.kept
        ts.pool_used += max(0, new - kept) - max(0, old - kept)
        if tt.holding:
            before = tt.unused_lendable()
            tt.usage = new
            ts.held += tt.unused_lendable() - before
        tt.usage = new
        quota = tt.quota
        borrowed = max(0, new - quota) - max(0, old - quota)
        if borrowed:
            self.share_version += 1
            team.borrowed += borrowed
            if self.resources:
                team.share = self.dominant_share(team, team.borrowed, team.res_borrowed)
            else:
                team.share = share_key(team.borrowed, team.unit, self.pool_total, team.history, team.scale)
        if (old > quota) != (new > quota):
            ts.touch(team.index)
            if new > quota:
                ts.borrowers.add(team.index)
            else:
                ts.borrowers.discard(team.index)
        ts.running += delta

    def _change_res(self, rec: JobRecord, sign: int) -> None:
        """A job asking other resources goes on (``sign`` 1) or off (-1) its nodes: its team's
        usage, the pool used, what its team holds and the nodes' free amounts, per resource
        (docs/resources.md 4). By sign: a job of partitions alone has 0 GPUs."""
        tt, ts = rec.tt, rec.ts
        tr, yr, asked = tt.res, ts.res, rec.res
        assert tr is not None and yr is not None and asked is not None
        team = rec.team
        moved = False
        for k, amount in enumerate(asked):
            if not amount:
                continue
            old = tr.usage[k]
            new = old + sign * amount
            quota = tr.quota[k]
            borrowed = max(0, new - quota) - max(0, old - quota)
            if borrowed:
                team.res_borrowed[tr.dom[k]] += borrowed
                moved = True
            kept = tr.kept[k]
            yr.pool_used[k] += max(0, new - kept) - max(0, old - kept)
            if tt.holding:
                yr.held[k] += tr.unused_lendable(k, new) - tr.unused_lendable(k, old)
            tr.usage[k] = new
            yr.running[k] += sign * amount
        if moved:
            self.share_version += 1
            team.share = self.dominant_share(team, team.borrowed, team.res_borrowed)
        index = ts.placement.index
        for (name, _), share in zip(rec.nodes, node_shares(asked, rec.nodes), strict=True):
            free = yr.node_free[index[name]]
            for k, amount in enumerate(share):
                free[k] -= sign * amount

    def _member_usage(self, rec: JobRecord, delta: int) -> None:
        """Count a running job's GPUs for its submitter, in a team that limits its members."""
        members = rec.team.members
        who = rec.job.submitter
        if members is not None and who is not None:
            members[who] = members.get(who, 0) + delta

    def member_limit(self, rec: JobRecord) -> PendingReason | None:
        """Why a pending job may not start because of its team's ``max_running_gpus_per_member``
        (docs/limits.md), or None. Its submitter's running GPUs in the team, over every instance
        type, with this job's, must stay within the limit; a job with no submitter is not held
        to it. Tested before the fit test: such a job neither starts, nor looks for victims,
        nor holds its team's quota."""
        who = rec.job.submitter
        if rec.team.members is None or who is None:
            return None
        return self.member_reason(rec.team, who, rec.gpus)

    def member_reason(self, team: TeamState, who: str, gpus: int) -> PendingReason | None:
        """``member_limit`` for a job of ``gpus`` GPUs submitted by ``who`` to ``team``."""
        members = team.members
        cap = team.team.max_running_gpus_per_member
        if members is None or cap is None:
            return None
        running = members.get(who, 0)
        after = running + gpus
        if after <= cap:
            return None
        return PendingReason(
            PendingCode.MEMBER_LIMIT,
            f"member {who} runs {_gpus(running)} in team {team.team.name}; with this job's "
            f"{gpus} that would be {after}, above the team's limit of {cap} GPUs running per member",
        )

    def pool_available(self, tt: TeamType, ts: TypeState) -> int:
        """What the pool can still give team ``tt``: capacity held by other teams excluded."""
        held_by_others = ts.held - (tt.unused_lendable() if tt.holding else 0)
        return ts.pool - ts.pool_used - held_by_others

    def fits(self, rec: JobRecord, within_quota: bool = False) -> bool:
        """POLICY.md 2 "fits"; with ``within_quota`` the team must also end within its quota."""
        if rec.res is not None:
            return self.fits_res(rec, within_quota)
        tt, ts, g = rec.tt, rec.ts, rec.gpus
        after = tt.usage + g
        if within_quota or tt.max_use is not None:
            limit = tt.quota if within_quota else tt.max_use
            if limit is not None and after > limit:
                return False
        kept = tt.kept
        above = max(0, after - kept) - max(0, tt.usage - kept)
        if above and above > self.pool_available(tt, ts):
            return False
        if ts.running + g > ts.capacity:
            return False
        return ts.placement.can_place(g)

    def res_available(self, tt: TeamType, ts: TypeState, k: int) -> int:
        """``pool_available`` of the type's other resource ``k``."""
        tr, yr = tt.res, ts.res
        assert tr is not None and yr is not None
        own = tr.unused_lendable(k, tr.usage[k]) if tt.holding else 0
        return yr.pool[k] - yr.pool_used[k] - (yr.held[k] - own)

    def res_failure(
        self, tt: TeamType, ts: TypeState, g: int, asked: tuple[int, ...], within_quota: bool = False
    ) -> tuple[int, int] | None:
        """docs/resources.md 4: the first of the job's resources (-1: GPUs, else the index in
        ``TypeRes.names``), in section 1's order, whose figures fail section 2's first three
        conditions, and which (0: the team's limit, 1: the pool, 2: the ready capacity); None
        when every one holds."""
        failures = self.res_failures(tt, ts, g, asked, within_quota, every=False)
        return failures[0] if failures else None

    def res_failures(
        self,
        tt: TeamType,
        ts: TypeState,
        g: int,
        asked: tuple[int, ...],
        within_quota: bool = False,
        every: bool = True,
    ) -> list[tuple[int, int]]:
        """``res_failure`` of each resource that fails (of the first alone unless ``every``),
        in section 1's order (docs/resources.md 6: what a preemptor lacks)."""
        out: list[tuple[int, int]] = []
        tr, yr = tt.res, ts.res
        assert tr is not None and yr is not None
        if g:
            after = tt.usage + g
            limit = tt.quota if within_quota else tt.max_use
            kept = tt.kept
            above = max(0, after - kept) - max(0, tt.usage - kept)
            if limit is not None and after > limit:
                out.append((-1, 0))
            elif above and above > self.pool_available(tt, ts):
                out.append((-1, 1))
            elif ts.running + g > ts.capacity:
                out.append((-1, 2))
            if out and not every:
                return out
        for k, amount in enumerate(asked):
            if not amount:
                continue
            usage = tr.usage[k]
            after = usage + amount
            limit_k = tr.quota[k] if within_quota else tr.max_use[k]
            kept = tr.kept[k]
            above = max(0, after - kept) - max(0, usage - kept)
            if limit_k is not None and after > limit_k:
                out.append((k, 0))
            elif above and above > self.res_available(tt, ts, k):
                out.append((k, 1))
            elif yr.running[k] + amount > yr.capacity[k]:
                out.append((k, 2))
            else:
                continue
            if not every:
                return out
        return out

    def fits_res(self, rec: JobRecord, within_quota: bool = False) -> bool:
        """``fits`` of a job on a type that counts other resources (docs/resources.md 4)."""
        asked = rec.res
        assert asked is not None
        return (
            self.res_failure(rec.tt, rec.ts, rec.gpus, asked, within_quota) is None
            and self.res_nodes(rec.ts, rec.gpus, asked, False) is not None
        )

    def res_nodes(self, ts: TypeState, g: int, asked: tuple[int, ...], take: bool) -> NodeShare | None:
        """docs/resources.md 4: the placement of a job on a type that counts other resources,
        taken when ``take``; None when none exists. One node: the fullest ready node with room
        for all of it (by free GPUs, then the other resources in order, then name). Larger than
        a node: whole free nodes in name order with room for their share of the rest."""
        yr = ts.res
        assert yr is not None
        placement = ts.placement
        free, ready, size, names = placement.free, placement.ready, placement.gpus, placement.names
        node_free = yr.node_free
        if g <= placement.gpus_per_node:
            best = -1
            best_key: list[int] = []
            for i in range(len(names)):
                if not ready[i] or free[i] < g:
                    continue
                room = node_free[i]
                if any(r < a for r, a in zip(room, asked, strict=True)):
                    continue
                key = [free[i], *room]
                if best < 0 or key < best_key:
                    best, best_key = i, key
            if best < 0:
                return None
            nodes: NodeShare = ((names[best], g),)
        else:
            per = -(-g // placement.gpus_per_node)
            least = [-(-a // per) for a in asked]
            taken: list[tuple[str, int]] = []
            left = g
            for i in range(len(names)):
                if left <= 0:
                    break
                if (
                    ready[i]
                    and free[i] == size[i] > 0
                    and all(r >= a for r, a in zip(node_free[i], least, strict=True))
                ):
                    share = min(size[i], left)
                    taken.append((names[i], share))
                    left -= share
            if left > 0:
                return None
            nodes = tuple(taken)
            for (name, _), share_k in zip(nodes, node_shares(asked, nodes), strict=True):
                room = node_free[placement.index[name]]
                if any(r < a for r, a in zip(room, share_k, strict=True)):
                    return None
        if take:
            placement.take(nodes)
        return nodes

    def start(self, rec: JobRecord) -> NodeShare:
        """Put a job that fits on its nodes (best fit), count it, and make it a candidate.

        It is a candidate at once, ordered as the next snapshot will order it (POLICY.md 4:
        started now, after every job started at this time before, by ``_IN_CYCLE``), so that a
        later search of the cycle sees the order of section 4; a search whose victims would
        include it waits for the next cycle instead (``preemption.find_victims``).

        What a start changes for the searches that failed: to other teams it is a candidate
        only where its team borrows, and then its team's borrowed GPUs rose, which bumps the
        epochs of every type where the team borrows and has candidates (its share rose too).
        To its own team's searches it gives nothing: taking it back leaves the state it
        started from, so each set of victims with it does no better than the same set without
        it did before (and under fair share those searches are remembered with the team's
        usage, which moved)."""
        nodes = (
            rec.ts.placement.place(rec.gpus)
            if rec.res is None
            else self.res_nodes(rec.ts, rec.gpus, rec.res, True)
        )
        if nodes is None:  # pragma: no cover - fits() checked placement just before
            raise RuntimeError(f"no placement for {rec.job.id} after a successful fit test")
        rec.nodes = nodes
        team = rec.team
        borrowed = team.borrowed
        share = team.share
        self._change_usage(rec, rec.gpus)
        if rec.res is not None:
            self._change_res(rec, 1)
        if team.members is not None:
            self._member_usage(rec, rec.gpus)
        self.cycle_starts += 1
        job = rec.job
        now = self.now
        rec.victim_key = (rec.priority, -now, -now, -(_IN_CYCLE + self.cycle_starts), job.seq, job.id)
        rec.started_in_cycle = True
        if job.checkpoint_interval_s:
            self.timed = True
        tt = rec.tt
        min_runtime = self.min_runtime_of(job)
        if min_runtime > 0:
            # docs/preemption.md 1: protected from its start, no candidate at all.
            rec.protected_until = now + min_runtime
            self.protect(rec)
        else:
            insort(tt.candidates, rec, key=_victim_key)
            self.counted(rec)
        if (team.share > share) if self.resources else (team.borrowed > borrowed):
            # Its share rose: its candidates may now be taken where it borrows.
            for name, team_tt in team.per_type.items():
                if team_tt.usage > team_tt.quota and team_tt.candidates:
                    self.preempt_epoch[name] += 1
                    self.rise_epoch[name] += 1
        return nodes

    def unstart(self, rec: JobRecord) -> None:
        """Undo ``start`` (a session takes its cycle's plan back)."""
        self.remove(rec)
        if rec.protected_until > float("-inf"):
            rec.ts.protected.remove(rec)
            rec.ts.protected_version += 1
            rec.protected_until = float("-inf")
        else:
            rec.tt.drop_candidate(rec)
        rec.ts.touch(rec.team.index)
        rec.nodes = ()
        rec.started_in_cycle = False
        rec.victim_key = victim_key(rec.priority, rec.job, self.now)

    def remove(self, rec: JobRecord) -> None:
        """Take a running job off its nodes (a preemption, or a trial of one)."""
        rec.ts.placement.give(rec.nodes)
        self._change_usage(rec, -rec.gpus)
        if rec.res is not None:
            self._change_res(rec, -1)
        if rec.team.members is not None:
            self._member_usage(rec, -rec.gpus)

    def restore(self, rec: JobRecord) -> None:
        """Undo ``remove``: put the job back on the same nodes."""
        rec.ts.placement.take(rec.nodes)
        self._change_usage(rec, rec.gpus)
        if rec.res is not None:
            self._change_res(rec, 1)
        if rec.team.members is not None:
            self._member_usage(rec, rec.gpus)

    def preempted(self, rec: JobRecord) -> None:
        """A victim a search took off its nodes: no longer running nor a candidate, its
        preemption counted (the back-off of POLICY.md 3.5). It frees GPUs on its instance type;
        under fair share it also lowers its team's share. Elsewhere other teams' searches read
        that share only where the team borrows (only there are its jobs their candidates), and
        not in one direction only (the greedy search may go another way): remembered failed
        searches there no longer hold. Its own searches are remembered with its borrowed GPUs,
        which moved if its share did."""
        # Never one started in this cycle: a search that would take one waits instead.
        assert not rec.started_in_cycle, rec
        rec.tt.drop_candidate(rec)
        rec.ts.touch(rec.team.index)
        rec.nodes = ()
        rec.preemptions += 1
        rec.last_preempted_at = self.now
        epochs = self.preempt_epoch
        epochs[rec.ts.name] += 1
        self.free_epoch[rec.ts.name] += 1
        if self.fair_share:
            for name, tt in rec.team.per_type.items():
                if name != rec.ts.name and tt.usage > tt.quota and tt.candidates:
                    epochs[name] += 1

    def reset_epochs(self) -> None:
        """The epochs start at 0. A session's cycles share one state, and its epochs go on
        counting from one cycle to the next (``cycle.BatchedCycle``): a cycle's memory of a
        failure then never matches a later cycle's epochs by chance."""
        self.preempt_epoch = dict.fromkeys(self.types, 0)
        self.free_epoch = dict.fromkeys(self.types, 0)
        self.rise_epoch = dict.fromkeys(self.types, 0)

    def hold(self, tt: TeamType, ts: TypeState) -> bool:
        """POLICY.md 3.3: take the team's unused lendable quota out of the pool for this cycle.

        Returns whether anything changed (the team was not holding yet)."""
        if tt.holding:
            return False
        tt.holding = True
        ts.version += 1
        ts.held += tt.unused_lendable()
        tr, yr = tt.res, ts.res
        if tr is not None and yr is not None:
            for k in range(len(yr.names)):
                yr.held[k] += tr.unused_lendable(k, tr.usage[k])
        return True

    # -- shares ------------------------------------------------------------------------
    def share_with(self, rec: JobRecord) -> ShareKey:
        """The share of the job's team once the job runs (POLICY.md 3.2 and 4)."""
        tt = rec.tt
        extra = max(0, tt.usage + rec.gpus - tt.quota) - max(0, tt.usage - tt.quota)
        team = rec.team
        if self.resources:
            tr = tt.res
            return self.share_adding(
                team,
                team.borrowed,
                team.res_borrowed,
                tt,
                tt.usage,
                tr.usage if tr is not None else [],
                rec.gpus,
                rec.res,
            )
        return share_key(team.borrowed + extra, team.unit, self.pool_total, team.history, team.scale)

    def dominant_share(self, team: TeamState, gpus: int, res: list[int]) -> ShareKey:
        """docs/resources.md 5: the team's share with ``gpus`` borrowed GPUs and ``res``
        borrowed of each other resource, its largest scaled by ``dom_factor``."""
        best = gpus * self.gpu_factor
        for borrowed, factor in zip(res, self.dom_factor, strict=True):
            best = max(best, borrowed * factor)
        return share_key(best, team.unit, self.share_total, team.history, team.scale)

    def share_adding(
        self,
        team: TeamState,
        gpus: int,
        res: list[int],
        tt: TeamType,
        usage: int,
        res_usage: list[int],
        g: int,
        asked: tuple[int, ...] | None,
    ) -> ShareKey:
        """``dominant_share`` once ``g`` GPUs and ``asked`` more (less, when negative) run on
        ``tt``, whose usage is ``usage`` and ``res_usage`` then (docs/resources.md 5)."""
        gpus += max(0, usage + g - tt.quota) - max(0, usage - tt.quota)
        tr = tt.res
        if asked is not None and tr is not None:
            res = list(res)
            for k, a in enumerate(asked):
                if a:
                    quota, before = tr.quota[k], res_usage[k]
                    res[tr.dom[k]] += max(0, before + a - quota) - max(0, before - quota)
        return self.dominant_share(team, gpus, res)

    # -- reasons (POLICY.md section 5, from step 4 on) ------------------------------------
    def reason(self, rec: JobRecord) -> PendingReason:
        """Why a job that does not fit now stays pending: the first applicable of section 5
        after ``team-inactive``, ``exceeds-max`` and ``blocked-by-fifo``."""
        return self.reason_for(rec.team, rec.tt, rec.ts, rec.gpus, rec.res)

    def reason_for(
        self, team_state: TeamState, tt: TeamType, ts: TypeState, g: int, res: tuple[int, ...] | None = None
    ) -> PendingReason:
        """``reason`` of a job of ``g`` GPUs (and ``res`` of the type's other resources) of that
        team and instance type: it reads nothing else of the job. The figures are read first;
        the message is written only for figures not met before (``reasons``)."""
        if res is not None:
            return self.res_reason(team_state, tt, ts, g, res)
        team = team_state.team.name
        it = ts.name
        usage = tt.usage
        key: tuple[object, ...]
        if tt.may_borrow and tt.max_use is not None and usage + g > tt.max_use:
            key = (_OVER_LIMIT, team, it, usage, tt.max_use, tt.quota, tt.borrow, g)
        elif not tt.may_borrow and usage + g > tt.quota:
            key = (_NO_BORROWING, team, it, usage, tt.quota, g)
        else:
            kept = tt.kept
            above = max(0, usage + g - kept) - max(0, usage - kept)
            available = self.pool_available(tt, ts)
            if above and above > available:
                idle = max(0, available)
                if usage + g <= tt.quota:
                    held = ts.held - (tt.unused_lendable() if tt.holding else 0)
                    lent = max(0, ts.pool_used - sum_own_pool_use(tt))
                    key = (_LENT_OUT, team, it, usage, tt.quota, lent, max(0, held), idle, above)
                else:
                    key = (_NO_IDLE, team, it, usage, tt.max_use, idle, above)
            elif ts.running + g > ts.capacity:
                key = (_CAPACITY_LOST, it, ts.running, ts.capacity, ts.capacity_ever, ts.quota_sum, g)
            else:
                placement = ts.placement
                whole = g > placement.gpus_per_node
                room = placement.empty_gpus if whole else placement.largest_free()
                key = (_NO_PLACEMENT, it, placement.free_ready, g, whole, room)
        reason = self.reasons.get(key)
        if reason is None:
            if len(self.reasons) >= 1 << 16:  # a long replay: keep the memory bounded
                self.reasons.clear()
            reason = self.reasons[key] = _reason_from(key)
        return reason

    def res_reason(
        self, team_state: TeamState, tt: TeamType, ts: TypeState, g: int, asked: tuple[int, ...]
    ) -> PendingReason:
        """docs/resources.md 7: ``reason_for`` on a type that counts other resources. It names
        the first resource, in section 1's order, whose figures fail, and those figures."""
        tr, yr = tt.res, ts.res
        assert tr is not None and yr is not None
        team, it = team_state.team.name, ts.name
        failed = self.res_failure(tt, ts, g, asked)
        key: tuple[object, ...]
        if failed is None:
            wanted = [(GPUS, g)] if g else []
            wanted += [(n, a) for n, a in zip(yr.names, asked, strict=True) if a]
            key = (_NO_PLACEMENT, it, tuple(wanted))
        else:
            k, kind = failed
            if k < 0:
                name, usage, amount, quota, max_use = GPUS, tt.usage, g, tt.quota, tt.max_use
                may_borrow, kept, running, capacity = tt.may_borrow, tt.kept, ts.running, ts.capacity
                available = self.pool_available(tt, ts)
            else:
                name, usage, amount, quota, max_use = (
                    yr.names[k],
                    tr.usage[k],
                    asked[k],
                    tr.quota[k],
                    tr.max_use[k],
                )
                may_borrow, kept, running, capacity = (
                    tr.may_borrow[k],
                    tr.kept[k],
                    yr.running[k],
                    yr.capacity[k],
                )
                available = self.res_available(tt, ts, k)
            if kind == 0:
                key = (
                    _OVER_LIMIT if may_borrow else _NO_BORROWING,
                    team,
                    it,
                    name,
                    usage,
                    quota,
                    max_use,
                    amount,
                )
            elif kind == 1:
                above = max(0, usage + amount - kept) - max(0, usage - kept)
                within = usage + amount <= quota
                key = (
                    _LENT_OUT if within else _NO_IDLE,
                    team,
                    it,
                    name,
                    usage,
                    quota,
                    max_use,
                    max(0, available),
                    above,
                )
            else:
                key = (_CAPACITY_LOST, it, name, running, capacity, amount)
        key = ("res", *key)
        reason = self.reasons.get(key)
        if reason is None:
            if len(self.reasons) >= 1 << 16:
                self.reasons.clear()
            reason = self.reasons[key] = _res_reason_from(key)
        return reason


def _of_its(name: str, amount: int) -> str:
    """``2,048 GiB memory`` or, as POLICY.md's messages say it, ``4 GPU`` (quota, limit)."""
    return f"{amount:,} GPU" if name == GPUS else amount_text(name, amount)


def _res_reason_from(key: tuple[object, ...]) -> PendingReason:
    """The reason ``CycleState.res_reason`` keys by ``key`` (docs/resources.md 7)."""
    kind = key[1]
    if kind == _NO_PLACEMENT:
        _, _, it, wanted = key
        assert isinstance(wanted, tuple)
        asked = ", ".join(amount_text(n, a) for n, a in wanted)
        return PendingReason(PendingCode.FRAGMENTED, f"no ready {it} node has room for {asked} at once")
    if kind == _CAPACITY_LOST:
        _, _, it, name, running, capacity, amount = key
        return PendingReason(
            PendingCode.CAPACITY_LOST,
            f"{_int(running):,} of the {amount_text(str(name), _int(capacity))} ready on {it} are in use; "
            f"{amount_text(str(name), _int(amount))} more requested",
        )
    _, _, team, it, name, usage, quota, max_use, *rest = key
    n = str(name)
    if kind == _OVER_LIMIT:
        return PendingReason(
            PendingCode.BORROW_LIMIT,
            f"{team} uses {_int(usage):,} of its {_of_its(n, _int(max_use))} limit on {it} "
            f"(quota {_int(quota):,}); {amount_text(n, _int(rest[0]))} more would exceed it",
        )
    if kind == _NO_BORROWING:
        return PendingReason(
            PendingCode.WAITING_FOR_QUOTA,
            f"{team} uses {_int(usage):,} of its {_of_its(n, _int(quota))} quota on {it} and may not "
            f"borrow; {amount_text(n, _int(rest[0]))} more requested",
        )
    idle, above = _int(rest[0]), _int(rest[1])
    if kind == _LENT_OUT:
        return PendingReason(
            PendingCode.WAITING_FOR_QUOTA,
            f"{team} uses {_int(usage):,} of its {_of_its(n, _int(quota))} quota on {it}; its lendable "
            f"quota is lent out and may not be reclaimed now; {amount_text(n, idle)} idle in the pool, "
            f"{amount_text(n, above)} needed",
        )
    uses = (
        f"uses {amount_text(n, _int(usage))} on {it} (no borrow limit)"
        if max_use is None
        else f"uses {_int(usage):,} of its {_of_its(n, _int(max_use))} limit on {it}"
    )
    return PendingReason(
        PendingCode.NO_IDLE_CAPACITY,
        f"{team} {uses}; {amount_text(n, idle)} idle in the pool, {amount_text(n, above)} needed",
    )


def inactive_reason(team: TeamState) -> PendingReason:
    """POLICY.md 5.1: a pending job of a team whose allocation is disabled."""
    return PendingReason(PendingCode.TEAM_INACTIVE, f"{team.team.name}'s allocation is disabled")


def _check_types_and_nodes(
    snapshot: Snapshot,
) -> tuple[dict[str, InstanceType], dict[str, list[Node]], dict[str, str]]:
    """The snapshot's instance types by name, their nodes, and each node's type, checked."""
    types: dict[str, InstanceType] = {}
    for i, it in enumerate(snapshot.instance_types):
        if it.name in types:
            raise ValueError(f"instance_types[{i}].name: duplicate instance type {it.name!r}")
        if it.gpus_per_node <= 0:
            raise ValueError(f"instance_types[{i}].gpus_per_node: must be above 0, got {it.gpus_per_node!r}")
        types[it.name] = it
    nodes_by_type: dict[str, list[Node]] = {name: [] for name in types}
    node_type: dict[str, str] = {}
    for i, node in enumerate(snapshot.nodes):
        if node.instance_type not in types:
            raise ValueError(f"nodes[{i}].instance_type: unknown instance type {node.instance_type!r}")
        if node.name in node_type:
            raise ValueError(f"nodes[{i}].name: duplicate node {node.name!r}")
        if node.gpus < 0:
            raise ValueError(f"nodes[{i}].gpus: must be 0 or more, got {node.gpus!r}")
        node_type[node.name] = node.instance_type
        nodes_by_type[node.instance_type].append(node)
    return types, nodes_by_type, node_type


def _reason_from(key: tuple[object, ...]) -> PendingReason:
    """The reason ``CycleState.reason_for`` keys by ``key``: its code and the figures its
    message gives (POLICY.md section 5)."""
    kind = key[0]
    if kind == _OVER_LIMIT:
        _, team, it, usage, max_use, quota, borrow, g = key
        return PendingReason(
            PendingCode.BORROW_LIMIT,
            f"{team} uses {usage} of its {max_use} GPU limit on {it} "
            f"(quota {quota} + borrow limit {borrow}); {g} more would exceed it",
        )
    if kind == _NO_BORROWING:
        _, team, it, usage, quota, g = key
        return PendingReason(
            PendingCode.WAITING_FOR_QUOTA,
            f"{team} uses {usage} of its {quota} GPU quota on {it} and may not borrow; {g} more requested",
        )
    if kind == _LENT_OUT:
        _, team, it, usage, quota, lent, held, idle, above = key
        return PendingReason(
            PendingCode.WAITING_FOR_QUOTA,
            f"{team} uses {usage} of its {quota} GPU quota on {it}; its lendable quota is lent "
            f"out ({_gpus(_int(lent))} of the pool borrowed, {_gpus(_int(held))} held for reclaiming "
            f"teams) and may not be reclaimed now; {_gpus(_int(idle))} idle in the pool, {above} needed",
        )
    if kind == _NO_IDLE:
        _, team, it, usage, max_use, idle, above = key
        uses = (
            f"uses {usage} GPUs on {it} (no borrow limit)"
            if max_use is None
            else f"uses {usage} of its {max_use} GPU limit on {it}"
        )
        return PendingReason(
            PendingCode.NO_IDLE_CAPACITY,
            f"{team} {uses}; {_gpus(_int(idle))} idle in the pool, {above} needed",
        )
    if kind == _CAPACITY_LOST:
        # POLICY.md 5.6: the team's limits and the pool allow it but the ready capacity does
        # not, because nodes are not ready, or because the quotas promise more than the ready
        # nodes hold (over-committed, or nodes lost); each part is said only when it is true.
        _, it, running, capacity, capacity_ever, quota_sum, g = key
        ready = _int(capacity)
        not_ready = _int(capacity_ever) - ready
        lost = f" ({_gpus(not_ready)} on nodes not ready)" if not_ready > 0 else ""
        quotas = ""
        if _int(quota_sum) > ready:
            unit = "GPU" if ready == 1 else "GPUs"
            quotas = f"; quotas on it add up to {_gpus(_int(quota_sum))}, more than its {ready} ready {unit}"
        return PendingReason(
            PendingCode.CAPACITY_LOST,
            f"{running} of the {_gpus(ready)} ready on {it} are in use{lost}{quotas}; {g} more requested",
        )
    _, it, free_ready, g, whole, room = key
    if whole:
        detail = f"{_gpus(_int(room))} on whole free nodes"
    else:
        detail = f"at most {_gpus(_int(room))} free on one node"
    return PendingReason(
        PendingCode.FRAGMENTED,
        f"{_gpus(_int(free_ready))} free on ready {it} nodes but no placement for {g}: {detail}",
    )


def _team_res(tt: TeamType) -> TeamRes:
    res = tt.res
    assert res is not None
    return res


def _int(value: object) -> int:
    assert isinstance(value, int)
    return value


def sum_own_pool_use(tt: TeamType) -> int:
    """The team's own use of the pool (its usage above ``kept``)."""
    return max(0, tt.usage - tt.kept)


# -- can never fit (POLICY.md section 2) --------------------------------------------------
def _pool_ever(teams: Sequence[Team], it: str, capacity_ever: int, share_unallocated: bool) -> int:
    limits = [team_limits(t, it) for t in teams]
    unallocated = max(0, capacity_ever - sum(lim.quota for lim in limits)) if share_unallocated else 0
    return sum(lim.lendable for lim in limits) + unallocated


def never_fit_reason(
    *,
    team: str,
    instance_type: str,
    gpus: int,
    gpus_per_node: int,
    limits: Limits,
    pool_ever: int,
    biggest: int,
    whole: int,
) -> PendingReason | None:
    """``exceeds-max`` when ``gpus`` can never fit; the numbers go in the message. ``biggest``
    is the GPUs of the type's largest node, ``whole`` the GPUs on its nodes of at least
    ``gpus_per_node`` (ready or not)."""
    if gpus > gpus_per_node and gpus % gpus_per_node:
        return PendingReason(
            PendingCode.EXCEEDS_MAX,
            f"{gpus} GPUs is more than one {instance_type} node ({gpus_per_node} GPUs) and not a whole "
            f"number of nodes: ask for a multiple of {gpus_per_node}",
        )
    max_use = limits.max_use
    if max_use is not None and gpus > max_use:
        return PendingReason(
            PendingCode.EXCEEDS_MAX,
            f"{gpus} GPUs of {instance_type} asked; {team} may use at most {max_use} "
            f"(quota {limits.quota} + borrow limit {limits.borrow})",
        )
    if gpus > limits.kept + pool_ever:
        return PendingReason(
            PendingCode.EXCEEDS_MAX,
            f"{gpus} GPUs of {instance_type} asked; {team} can reach at most {limits.kept + pool_ever} "
            f"({limits.kept} kept + a pool of {pool_ever})",
        )
    if gpus <= gpus_per_node:
        if gpus > biggest:
            return PendingReason(
                PendingCode.EXCEEDS_MAX,
                f"{gpus} GPUs of {instance_type} asked; the largest node has {biggest}",
            )
    elif gpus > whole:
        return PendingReason(
            PendingCode.EXCEEDS_MAX,
            f"{gpus} GPUs of {instance_type} asked; the cluster has {whole} on its nodes",
        )
    return None


class NeverFitJudge:
    """``never_fit_reason`` for many jobs of one snapshot, computing each team's bounds once."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._types = {it.name: it for it in snapshot.instance_types}
        self._teams = {t.name: t for t in snapshot.teams}
        self._node_gpus: dict[str, list[int]] = {}
        for node in snapshot.nodes:
            self._node_gpus.setdefault(node.instance_type, []).append(node.gpus)
        # Per instance type: (all its GPUs, its largest node, GPUs on nodes of a whole node's
        # size), read once rather than once per team and size judged.
        self._figures: dict[str, tuple[int, int, int]] = {}
        self._pool: dict[str, int] = {}
        self._limits: dict[tuple[str, str], Limits] = {}
        self._cache: dict[tuple[str, str, int, tuple[int, ...] | None], PendingReason | None] = {}
        # Per instance type that counts other resources, each team's limits of them.
        self._res_limits: dict[str, dict[str, TeamRes]] = {}

    def judge(
        self, team: str, instance_type: str, gpus: int, res: tuple[int, ...] | None = None
    ) -> PendingReason | None:
        """``never_fit_reason`` of a job of the team, type and GPUs; ``res``: what it asks of
        the type's other resources (docs/resources.md 4), on a type that counts them."""
        key = (team, instance_type, gpus, res)
        if key in self._cache:
            return self._cache[key]
        if team not in self._teams:
            raise ValueError(f"job.team: unknown team {team!r}")
        if instance_type not in self._types:
            raise ValueError(f"job.instance_type: unknown instance type {instance_type!r}")
        if gpus < 0 or (gpus == 0 and not any(res or ())):
            raise ValueError(f"job.gpus: must be above 0, got {gpus!r}")
        gpus_per_node = self._types[instance_type].gpus_per_node
        figures = self._figures.get(instance_type)
        if figures is None:
            node_gpus = self._node_gpus.get(instance_type, [])
            figures = (
                sum(node_gpus),
                max(node_gpus, default=0),
                sum(n for n in node_gpus if n >= gpus_per_node),
            )
            self._figures[instance_type] = figures
        if instance_type not in self._pool:
            self._pool[instance_type] = _pool_ever(
                self._snapshot.teams, instance_type, figures[0], self._snapshot.policy.share_unallocated
            )
        lkey = (team, instance_type)
        if lkey not in self._limits:
            self._limits[lkey] = team_limits(self._teams[team], instance_type)
        result = never_fit_reason(
            team=team,
            instance_type=instance_type,
            gpus=gpus,
            gpus_per_node=gpus_per_node,
            limits=self._limits[lkey],
            pool_ever=self._pool[instance_type],
            biggest=figures[1],
            whole=figures[2],
        )
        if result is None and res:
            result = self._res_never(team, self._types[instance_type], gpus, res)
        self._cache[key] = result
        return result

    def _res_never(
        self, team: str, it: InstanceType, gpus: int, res: tuple[int, ...]
    ) -> PendingReason | None:
        """docs/resources.md 3 and 4: ``exceeds-max`` when a resource other than GPUs can never
        fit: more than its nodes have, than the team may use, or than it can ever reach."""
        per_node = type_resources(it)
        names = tuple(n for n in per_node if n != GPUS)
        nodes = len(self._node_gpus.get(it.name, []))
        per = -(-gpus // it.gpus_per_node) if gpus > it.gpus_per_node else 1
        others = self._res_limits.get(it.name)
        if others is None:
            others = self._res_limits[it.name] = {t.name: TeamRes(t, it, names) for t in self._snapshot.teams}
        mine = others[team]
        for k, amount in enumerate(res):
            name = names[k]
            if not amount:
                continue
            asked = f"{amount_text(name, amount)} of {it.name} asked"
            most = per * per_node[name]
            if amount > most:
                where = "a node has" if per == 1 else f"{per} nodes have"
                return PendingReason(PendingCode.EXCEEDS_MAX, f"{asked}; {where} {amount_text(name, most)}")
            max_use = mine.max_use[k]
            if max_use is not None and amount > max_use:
                return PendingReason(
                    PendingCode.EXCEEDS_MAX, f"{asked}; {team} may use at most {amount_text(name, max_use)}"
                )
            quota_sum = sum(t.quota[k] for t in others.values())
            free = (
                max(0, per_node[name] * nodes - quota_sum) if self._snapshot.policy.share_unallocated else 0
            )
            reach = mine.kept[k] + sum(t.lendable[k] for t in others.values()) + free
            if amount > reach:
                return PendingReason(
                    PendingCode.EXCEEDS_MAX, f"{asked}; {team} can reach at most {amount_text(name, reach)}"
                )
        return None


def never_fits(snapshot: Snapshot, job: Job) -> PendingReason | None:
    """POLICY.md 2 "can never fit", judged on ``snapshot`` (its teams, policy and nodes).

    Returns ``exceeds-max`` with the numbers when ``job.gpus`` exceeds the team's ``max_use``,
    or ``kept + pool``, or what the nodes (ready or not) could ever hold; also when a job larger
    than one node is not a whole number of nodes (its own message, same code). None when it may
    fit some day. Raises ``ValueError`` naming the field for an unknown team or instance type,
    or GPUs not above 0 (0 with partitions asked). On an instance type that counts other
    resources, also when one of them can never fit (docs/resources.md 3 and 4).
    """
    if job.gpus == 0 and not job.partitions:  # it asks for GPUs, partitions, or both (section 3)
        raise ValueError(f"job.gpus: must be above 0, got {job.gpus!r}")
    res = None
    it = next((t for t in snapshot.instance_types if t.name == job.instance_type), None)
    if it is not None and not counts_gpus_only(it):
        res = job_demand(it, tuple(n for n in type_resources(it) if n != GPUS), job)
    return NeverFitJudge(snapshot).judge(job.team, job.instance_type, job.gpus, res)


def _victim_key(rec: JobRecord) -> VictimKey:
    return rec.victim_key
