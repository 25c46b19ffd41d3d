"""What one allocation cycle takes in and gives back (POLICY.md sections 1 and 3).

Every input and output is a frozen dataclass. Times are plain seconds (floats): the simulator's
clock starts at 0; the Celery loop passes Unix timestamps. Nothing here imports Django.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from dataclasses import dataclass, field
from enum import StrEnum


class Sharing(StrEnum):
    LEND_AND_BORROW = "lend-and-borrow"
    LEND = "lend"
    DONT_LEND = "dont-lend"


class PreemptTeamTasks(StrEnum):
    LOWER_PRIORITY = "lower-priority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "lower-or-newer-equal-priority"
    NEVER = "never"


class Reclaim(StrEnum):
    ANY = "any"
    LOWER_PRIORITY = "lower-priority"
    NEVER = "never"


class PreemptWhileBorrowing(StrEnum):
    LOWER_PRIORITY = "lower-priority"
    NEVER = "never"


class IdleAllocation(StrEnum):
    FAIR_SHARE = "fair-share"
    FIRST_COME_FIRST_SERVE = "first-come-first-serve"


class TaskRanking(StrEnum):
    PRIORITY = "priority"
    FIRST_COME_FIRST_SERVE = "first-come-first-serve"


class Queueing(StrEnum):
    BEST_EFFORT_FIFO = "best-effort-fifo"
    STRICT_FIFO = "strict-fifo"


class PreemptionReason(StrEnum):
    """POLICY.md section 4."""

    IN_TEAM = "in-team"
    RECLAIM = "reclaim"
    RECLAIM_WHILE_BORROWING = "reclaim-while-borrowing"
    FAIR_SHARE = "fair-share"


class PendingCode(StrEnum):
    """POLICY.md section 5, in the order in which they are tested."""

    TEAM_INACTIVE = "team-inactive"
    EXCEEDS_MAX = "exceeds-max"
    MEMBER_LIMIT = "member-limit"
    BLOCKED_BY_FIFO = "blocked-by-fifo"
    BORROW_LIMIT = "borrow-limit"
    WAITING_FOR_QUOTA = "waiting-for-quota"
    CAPACITY_LOST = "capacity-lost"
    NO_IDLE_CAPACITY = "no-idle-capacity"
    FRAGMENTED = "fragmented"
    # docs/preemption.md 4: the victims it needs are protected only by their minimum runtime.
    MIN_RUNTIME = "min-runtime"
    # docs/preemption.md 5: it preempted jobs that are stopping within their grace; their GPUs
    # are its own once they have. The engine never gives it: the caller holds such a job back.
    PREEMPTING = "preempting"


@dataclass(frozen=True, slots=True)
class InstanceType:
    """An instance type and what each of its nodes has (docs/resources.md 1). vCPU and memory
    of 0 and no partitions: GPUs alone are counted, as POLICY.md section 1 does."""

    name: str
    gpus_per_node: int
    vcpus_per_node: int = 0
    memory_gib_per_node: int = 0
    # (profile, count per node), sorted by profile: partitions the administrator fixed.
    partitions_per_node: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Node:
    """A node of one instance type. Only ``ready`` nodes count towards capacity and take new
    jobs; jobs already on a draining node keep running there."""

    name: str
    instance_type: str
    gpus: int
    ready: bool = True


@dataclass(frozen=True, slots=True)
class Quota:
    """A team's settings for one instance type (POLICY.md section 1)."""

    quota: int = 0
    lend_limit: int | None = None  # None: the whole quota may be lent
    borrow_limit_percent: int = 50
    borrow_limit: int | None = None  # absolute cap on borrowing; overrides the percentage
    borrow_unlimited: bool = False  # borrow_limit: unlimited
    # docs/resources.md 2: the per-resource form's entries other than GPUs ((name, amount),
    # sorted by name; ``quota`` is its GPUs), or ``instances`` (N nodes' worth of everything,
    # ``quota`` then N times the GPUs of a node). Neither: GPUs alone, the ratio gives the rest.
    resources: tuple[tuple[str, int], ...] = ()
    instances: int | None = None
    # Absolute borrow limits of resources other than GPUs ((name, amount), sorted by name); a
    # resource not named here keeps ``borrow_limit_percent`` (or ``borrow_unlimited``).
    borrow_limits: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Team:
    name: str
    quotas: Mapping[str, Quota] = field(default_factory=dict)  # by instance type; missing = Quota()
    active: bool = True
    sharing: Sharing = Sharing.LEND_AND_BORROW
    fair_share_weight: int = 1
    preempt_team_tasks: PreemptTeamTasks = PreemptTeamTasks.LOWER_PRIORITY
    reclaim: Reclaim = Reclaim.ANY
    # None: the default of POLICY.md section 1 (lower-priority, or never when reclaim is never).
    preempt_while_borrowing: PreemptWhileBorrowing | None = None
    preempt_while_borrowing_max_priority: int | None = None
    # Most GPUs a member's jobs may run at once in the team, over every instance type (None:
    # no limit). A pending job of a member at it waits with ``member-limit`` and blocks
    # nobody (docs/limits.md).
    max_running_gpus_per_member: int | None = None


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    weight: int
    # docs/preemption.md 1: None takes the cluster policy's ``min_runtime_s``.
    min_runtime_s: float | None = None
    # docs/preemption.md 5: None takes the cluster policy's ``preemption_grace_s``.
    preemption_grace_s: float | None = None


@dataclass(frozen=True, slots=True)
class ClusterPolicy:
    idle_allocation: IdleAllocation = IdleAllocation.FAIR_SHARE
    task_ranking: TaskRanking = TaskRanking.PRIORITY
    share_unallocated: bool = True
    queueing: Queueing = Queueing.BEST_EFFORT_FIFO
    priority_classes: tuple[PriorityClass, ...] = ()
    # Fairness over time (docs/fairness.md): 0 and 0 are the share of this instant alone.
    fair_share_half_life_s: float = 0.0
    fair_share_history_percent: int = 0
    # docs/preemption.md 1: a running job is no preemption candidate until it has run this
    # long since its last start (0: from its start, today's behaviour).
    min_runtime_s: float = 0.0
    # docs/preemption.md 5: how long a victim may take to stop once signalled (0: at once).
    # No decision of the engine reads it; the simulator and the loop carry it out.
    preemption_grace_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Job:
    """A pending job (``nodes`` empty) or a running one (``nodes`` set).

    ``seq`` breaks ties where POLICY.md says "then id": the position in the scenario file, or
    the database's primary key. ``priority_class`` is looked up in the policy's classes; a job
    with no class, or with a class the policy no longer has, has priority 0.
    """

    id: str
    team: str
    instance_type: str
    gpus: int
    submit_time: float
    seq: int = 0
    priority_class: str | None = None
    nodes: tuple[tuple[str, int], ...] = ()  # (node name, GPUs on that node)
    started_at: float | None = None
    # Among jobs started at the same time, the larger start_seq started later (POLICY.md 4).
    start_seq: int = 0
    # Back-off (POLICY.md 3.5): how often it has been preempted, and when last.
    preemptions: int = 0
    last_preempted_at: float | None = None
    # Who submitted it (a username), for the team's ``max_running_gpus_per_member``; None: a
    # job of nobody in particular, never held to that limit.
    submitter: str | None = None
    # docs/preemption.md 2: a checkpoint every so many seconds of a run (None or 0: none), and
    # the work kept from earlier runs by checkpoints (the simulator and the loop subtract it from
    # the remaining duration; no decision reads it).
    checkpoint_interval_s: float | None = None
    progress_kept_s: float = 0.0
    # docs/preemption.md 5: a running job signalled to stop (since then) for a preemptor, within
    # its grace. Its GPUs stay counted and it is no candidate of any search: its preemptor's
    # GPUs are reserved until the caller takes it off its nodes.
    terminating_since: float | None = None
    # docs/resources.md 3: vCPU and memory asked (None: the ratio of its GPUs' node share), and
    # the partitions asked ((profile, count), sorted by profile).
    vcpus: int | None = None
    memory_gib: int | None = None
    partitions: tuple[tuple[str, int], ...] = ()

    @property
    def running(self) -> bool:
        return bool(self.nodes)


@dataclass(frozen=True, slots=True)
class JobChanges:
    """What differs between a snapshot and the one numbered ``since`` of the same series: the
    job objects added and the ones removed (a job that changed is both). A hint that lets a
    ``Session`` skip comparing every job; no plan depends on it."""

    since: int
    added: tuple[Job, ...] = ()
    removed: tuple[Job, ...] = ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one cycle decides from. ``jobs`` holds the running and the pending jobs.

    ``serial`` and ``changes`` are for callers that send a series of snapshots to a
    ``Session`` (the simulator): the snapshot's number in the series, and what changed since
    an earlier one. They take no part in equality and never change a plan."""

    instance_types: tuple[InstanceType, ...]
    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]
    policy: ClusterPolicy
    # A tuple, or any sequence equal to the tuple of its jobs (the simulator's ``SnapshotJobs``).
    jobs: Sequence[Job]
    serial: int | None = field(default=None, compare=False, repr=False)
    changes: JobChanges | None = field(default=None, compare=False, repr=False)
    # Per team, its borrowed GPUs averaged over the past with weights halving every
    # ``policy.fair_share_half_life_s`` (docs/fairness.md); a team not named has none.
    borrowed_history: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Start:
    job_id: str
    nodes: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Preemption:
    job_id: str
    reason: PreemptionReason
    preemptor: str


@dataclass(frozen=True, slots=True)
class PendingReason:
    code: PendingCode
    message: str


class PendingReasons(Mapping[str, PendingReason]):
    """``Plan.pending`` as the batched cycle makes it: *runs* of jobs that share one reason
    (the twins of a shape that failed together, a list of ids each) less the ids in ``gone``
    (jobs that left since the plan a quiet cycle starts from), and the jobs decided one by one
    (``singles``). No id is in two runs, nor in a run and the singles unless it is in ``gone``
    (a job that left its run and came back, in a quiet cycle, moved out of its back-off).

    A dict of every pending job is made only when the plan is read as a mapping, once; a
    reader of every plan of a replay that follows the jobs by their reason's code (the
    what-if lab's ``ReasonRecorder``) takes the runs as they are (``parts``) instead. With
    thousands of jobs waiting, that dict, made at every cycle, was one of the largest costs of
    a what-if replay besides the engine's decisions themselves.

    Nothing here may change once the plan is returned: the lists are the cycle's own copies."""

    __slots__ = ("_dict", "gone", "runs", "singles")

    def __init__(
        self,
        runs: Sequence[tuple[Sequence[str], PendingReason]] = (),
        singles: Mapping[str, PendingReason] | None = None,
        gone: frozenset[str] = frozenset(),
    ) -> None:
        self.runs = runs
        self.singles: Mapping[str, PendingReason] = {} if singles is None else singles
        self.gone = gone
        self._dict: dict[str, PendingReason] | None = None

    def parts(
        self,
    ) -> tuple[Sequence[tuple[Sequence[str], PendingReason]], Mapping[str, PendingReason], frozenset[str]]:
        """(runs, singles, gone): the mapping is the runs' ids less ``gone``, and the singles."""
        return self.runs, self.singles, self.gone

    def _read(self) -> dict[str, PendingReason]:
        made = self._dict
        if made is None:
            made = {}
            for ids, reason in self.runs:
                made.update(dict.fromkeys(ids, reason))
            for job_id in self.gone:
                made.pop(job_id, None)
            made.update(self.singles)
            self._dict = made
        return made

    def __getitem__(self, job_id: str) -> PendingReason:
        return self._read()[job_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._read()

    def get(self, job_id: str, default: PendingReason | None = None) -> PendingReason | None:  # type: ignore[override]
        return self._read().get(job_id, default)

    # The dict's own views: ``Mapping``'s would call ``__getitem__`` once per job.
    def keys(self) -> KeysView[str]:
        return self._read().keys()

    def items(self) -> ItemsView[str, PendingReason]:
        return self._read().items()

    def values(self) -> ValuesView[PendingReason]:
        return self._read().values()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PendingReasons):
            return self._read() == other._read()
        if isinstance(other, Mapping):
            return self._read() == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PendingReasons({self._read()!r})"


@dataclass(frozen=True, slots=True)
class Plan:
    """The decisions of one cycle, in the order they were taken.

    Apply ``preemptions`` before ``starts``. A job preempted in a cycle may start again in the
    same cycle on other nodes (only where it fits without preempting, POLICY.md 3.5): it is
    then in both. Every victim was running before the plan: a job the plan starts is never
    preempted by it (its preemptor waits for the next cycle). ``pending`` has a reason for every
    job left pending, keyed by job id.
    """

    starts: tuple[Start, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    pending: Mapping[str, PendingReason] = field(default_factory=dict)
