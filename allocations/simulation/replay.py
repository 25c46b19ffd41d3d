"""The event-driven replay of a scenario through the engine's ``allocate`` (SCENARIO.md).

Time jumps from one happening to the next (a submit, a finish, an event, a back-off retry).
At each time everything that happens then is applied first, then cycles run until one changes
nothing (the decisions of one instant come to rest, POLICY.md 3.5). Between two times nothing
changes, so the metrics are integrated piecewise from the accounting after each rest. With a
cycle interval (``options.cycle_interval``, the loop that runs every so many seconds), cycles
run only at its multiples: what happens in between is applied at its time (a finish gives its
GPUs back then) and decided at the next multiple, and a back-off retry waits for the first
multiple at or after the back-off's end.

The replay keeps the engine's ``Job`` of every live job and replaces it only when the job
changes, so a cycle's snapshot holds existing objects, not a rebuild; its jobs are those of an
earlier snapshot and what came and went since (``SnapshotJobs``), not a copy of them all.
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from bisect import bisect_right
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import MISSING, fields, replace
from itertools import repeat, starmap
from operator import add, attrgetter, mul
from types import MemberDescriptorType
from typing import TYPE_CHECKING, Any, TypeVar, overload

from allocations.engine.accounting import attribute, quota_terms
from allocations.engine.cost import last_checkpoint_s, lost_work_s, min_runtime_of, preemption_grace_of
from allocations.engine.cycle import gc_paused
from allocations.engine.snapshot import (
    Job,
    JobChanges,
    Node,
    PendingCode,
    PendingReason,
    Plan,
    Preemption,
    Snapshot,
    Team,
)

from .result import ClusterResult, JobResult, PreemptionRecord, Result, TeamResult, percentile
from .scenario import Cancel, NodeDown, NodeUp, Scenario, ScenarioError, ScenarioJob, UpdatePolicy, UpdateTeam

Allocate = Callable[[Snapshot, float], Plan]
# What ``Replay._measure`` reads of the teams and the policy on one instance type.
_TypeSetup = tuple[str, int, list[tuple[str, str]], list[int], list[int], int]
# The teams' rates from one accounting: their names, then GPUs used, borrowed, lent and idle
# quota, one list each in the order of the names.
_TeamRates = tuple[tuple[str, ...], list[float], list[float], list[float], list[float]]
_K = TypeVar("_K")
if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    _D = TypeVar("_D", bound=DataclassInstance)
Progress = Callable[[float, float | None, int, int], None]  # now, end, jobs done, jobs

# Cycles at one instant before the replay gives up: back-off (POLICY.md 3.5) makes the cycles
# of one instant come to rest after a few rounds; far more than that is an engine bug.
MAX_CYCLES_PER_INSTANT = 1_000
# A garbage collection after this many node, team or policy events (``Replay.run``).
COLLECT_AFTER_EVENTS = 16
# Jobs submitted at one time from which their engine ``Job``s are made by ``build_many``:
# below, its setup per field costs more than it saves.
BUILD_MANY_FROM = 16
# Seconds between two refreshes of the borrowing lately that snapshots carry (docs/fairness.md):
# the loop's history has one sample a minute.
HISTORY_STEP = 60.0
# docs/preemption.md 8: a victim that had run less than this is counted as a short run.
SHORT_RUN_S = 600.0

UNSUBMITTED, PENDING, RUNNING, FINISHED, CANCELLED, REJECTED = (
    "unsubmitted",
    "pending",
    "running",
    "finished",
    "cancelled",
    "rejected",
)


class SimulationError(Exception):
    """The engine returned a plan that cannot be applied, or never came to rest."""


def build_many(cls: type[_D], count: int, **columns: Iterable[Any]) -> list[_D]:
    """``count`` objects of the frozen, slotted dataclass ``cls``: each column gives one field
    its values, one per object in order; the other fields take their defaults. The objects are
    those ``cls(**fields)`` makes one by one (equal, hashed and pickled alike), at half the
    cost: a frozen dataclass's ``__init__`` sets each field with a Python call per field and
    object, where this sets one field of every object with a ``map`` over its slot. The
    replay makes two per job of a backlog at time 0 (the engine's ``Job``, the ``JobResult``).
    ``TypeError`` for a class with a ``__post_init__`` or without slots, a field without a
    column or a plain default, or a column that is no field; ``ValueError`` for a column of
    another length."""
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__, which build_many would skip")
    objects = list(map(object.__new__, repeat(cls, count)))
    for field in fields(cls):
        values = columns.pop(field.name, None)
        slot = getattr(cls, field.name, None)
        if not isinstance(slot, MemberDescriptorType):
            raise TypeError(f"{cls.__name__}.{field.name} is not a slot")
        setter = slot.__set__
        if values is not None:
            deque(starmap(setter, zip(objects, values, strict=True)), maxlen=0)
        elif field.default is not MISSING:
            deque(map(setter, objects, repeat(field.default)), maxlen=0)
        else:
            raise TypeError(f"{cls.__name__}.{field.name}: no column and no default")
    if columns:
        raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(columns))}")
    return objects


class _Run:
    """One job's life in the replay. Its admissions, preemptions and evictions are tuples,
    made again at each (a job has few): the result takes them as they are, and a replay of a
    backlog makes no list per job for the collector to walk."""

    __slots__ = (
        "admitted_at",
        "cancelled_at",
        "evicted_at",
        "finished_at",
        "generation",
        "job",
        "last_preempted_at",
        "nodes",
        "preempted",
        "preemptions",
        "progress_kept",
        "queued_at",
        "spec",
        "start_seq",
        "started_at",
        "state",
    )

    def __init__(self, spec: ScenarioJob) -> None:
        self.spec = spec
        self.state = UNSUBMITTED
        self.job: Job | None = None
        self.nodes: tuple[tuple[str, int], ...] = ()
        self.started_at: float | None = None
        self.start_seq = 0
        self.preemptions = 0
        self.last_preempted_at: float | None = None
        # docs/preemption.md 2: work kept by checkpoints of earlier runs (seconds).
        self.progress_kept = 0.0
        self.queued_at = spec.submit
        self.admitted_at: tuple[float, ...] = ()
        self.preempted: tuple[PreemptionRecord, ...] = ()
        self.evicted_at: tuple[float, ...] = ()
        self.finished_at: float | None = None
        self.cancelled_at: float | None = None
        self.generation = 0  # invalidates its scheduled finish when it stops early

    def pending_job(self) -> Job:
        s = self.spec
        return Job(
            id=s.id,
            team=s.team,
            instance_type=s.instance_type,
            gpus=s.gpus,
            submit_time=s.submit,
            seq=s.seq,
            priority_class=s.priority,
            preemptions=self.preemptions,
            last_preempted_at=self.last_preempted_at,
            submitter=s.submitter,
            checkpoint_interval_s=s.checkpoint_interval_s,
            progress_kept_s=self.progress_kept,
            vcpus=s.vcpus,
            memory_gib=s.memory_gib,
            partitions=s.partitions,
        )


class SnapshotJobs(Sequence[Job]):
    """The jobs of one of the replay's snapshots, the running ones then the pending ones, each
    in the order they became so, as ``tuple(chain(running, pending))`` would give them, without
    that copy of every job at every snapshot: the two tuples of an earlier snapshot (the base)
    and what came and went since, made into one tuple the first time the jobs are read. The
    engine's ``Session`` reads only their number while the snapshots' ``changes`` follow on, so
    with thousands of jobs waiting a snapshot costs what changed (the copy was 10% of the
    100,000-job what-if replay). Equal to the tuple of its jobs, hashed and pickled as it."""

    __slots__ = ("_added_pending", "_added_running", "_base", "_count", "_removed", "_tuple")

    def __init__(
        self,
        base: tuple[tuple[Job, ...], tuple[Job, ...]],
        removed: frozenset[int],
        added_running: tuple[Job, ...],
        added_pending: tuple[Job, ...],
        count: int,
    ) -> None:
        self._base = base
        self._removed = removed  # id() of jobs of the base (the base keeps them alive)
        self._added_running = added_running
        self._added_pending = added_pending
        self._count = count
        self._tuple: tuple[Job, ...] | None = None

    def jobs(self) -> tuple[Job, ...]:
        """The jobs as one tuple (made once)."""
        if self._tuple is None:
            running, pending = self._base
            removed = self._removed
            if removed:
                running = tuple(job for job in running if id(job) not in removed)
                pending = tuple(job for job in pending if id(job) not in removed)
            self._tuple = (*running, *self._added_running, *pending, *self._added_pending)
            assert len(self._tuple) == self._count
        return self._tuple

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Job: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Job, ...]: ...

    def __getitem__(self, index: int | slice) -> Job | tuple[Job, ...]:
        return self.jobs()[index]

    def __iter__(self) -> Iterator[Job]:
        return iter(self.jobs())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SnapshotJobs):
            return other is self or self.jobs() == other.jobs()
        if isinstance(other, tuple):
            return self.jobs() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.jobs())

    def __reduce__(self) -> tuple[type, tuple[tuple[Job, ...]]]:
        return (tuple, (self.jobs(),))

    def __repr__(self) -> str:
        return repr(self.jobs())


class Replay:
    """One replay of ``scenario`` up to ``until`` (else its horizon, else the end rule)."""

    # Long: it declares every field of the replay's state, each with the comment that says what
    # it holds; the methods below read them, so the list is the replay's map.
    def __init__(
        self,
        scenario: Scenario,
        *,
        until: float | None = None,
        allocate: Allocate | None = None,
        progress: Progress | None = None,
    ) -> None:
        if allocate is None:
            from allocations.engine.session import Session

            allocate = Session()
        self.scenario = scenario
        self.allocate = allocate
        self.progress = progress
        self.end = until if until is not None else scenario.horizon

        self.node_specs = {n.name: n for n in scenario.nodes}
        self.node_order = {n.name: i for i, n in enumerate(scenario.nodes)}
        self.ready = {n.name: True for n in scenario.nodes}
        self.node_used = {n.name: 0 for n in scenario.nodes}
        self.node_jobs: dict[str, set[int]] = {n.name: set() for n in scenario.nodes}
        self.nodes_tuple: tuple[Node, ...] = scenario.nodes
        self.capacity: dict[str, int] = {}
        for n in scenario.nodes:
            self.capacity[n.instance_type] = self.capacity.get(n.instance_type, 0) + n.gpus
        self.teams: dict[str, Team] = {t.name: t for t in scenario.teams}
        self.teams_tuple = scenario.teams
        self.policy = scenario.policy

        # A record per job and the queue of submits, made with the cyclic collector paused
        # (``run`` says why): with a hundred thousand jobs, the collections it would start on
        # the way walk every record made so far and the scenario's jobs and find nothing,
        # three quarters of this build.
        with gc_paused():
            self.runs = [_Run(spec) for spec in scenario.jobs]
            self.by_id = {run.spec.id: run for run in self.runs}
            # The jobs to submit by time, then seq (``runs`` is in seq order and the sort is
            # stable), and the time each is due (``_submit_due`` bisects it).
            submits = [run for run in self.runs if run.spec.running_since is None]
            times = [max(0.0, run.spec.submit) for run in submits]
            order = sorted(range(len(submits)), key=times.__getitem__)
            self.submits = [submits[i] for i in order]
            self.submit_times = [times[i] for i in order]
        self.pending: dict[int, _Run] = {}
        self.running: dict[int, _Run] = {}
        # The engine's Job of each pending and running run (by seq), and what changed since the
        # last snapshot (by id(): a Job added then removed before the next cycle cancels out),
        # for the engine's Session (JobChanges).
        self.pending_jobs: dict[int, Job] = {}
        self.running_jobs: dict[int, Job] = {}
        self.added: dict[int, Job] = {}
        self.removed: dict[int, Job] = {}
        # The last snapshot's jobs (``SnapshotJobs``), their base (the running and the pending
        # jobs of an earlier snapshot) and what came and went since that base: the ids of its
        # jobs removed, the jobs added (running and pending, in order) and not removed since.
        self.jobs_view: SnapshotJobs | None = None
        self.base: tuple[tuple[Job, ...], tuple[Job, ...]] = ((), ())
        self.base_removed: set[int] = set()
        self.base_added: tuple[dict[int, Job], dict[int, Job]] = ({}, {})
        self.serial = 0
        self.used: dict[tuple[str, str], int] = {}
        # Running and pending GPUs per instance type, kept as they move (``_measure``).
        self.type_used: dict[str, int] = {}
        self.type_waiting: dict[str, int] = {}
        # What the accounting of ``_measure`` reads besides the pending GPUs: it is made again
        # only when one of these moved (a start or stop, a team or policy update).
        self.used_version = 0
        self.setup_version = 0
        self._accounted: tuple[object, ...] | None = None
        # Per instance type, what the accounting reads of the teams and the policy: (type,
        # capacity, (team, type) keys, quotas, lendable GPUs, unallocated capacity).
        # The team names in that order (one tuple while the setup stands).
        self._setup: tuple[object, list[_TypeSetup], tuple[str, ...]] | None = None
        # The teams' rates (GPUs used, borrowed, lent, idle quota: one list each, in the order
        # of ``names``) and the instance types' (capacity, allocated, idle per type).
        self._team_rates: _TeamRates = ((), [], [], [], [])
        self._type_rates: tuple[int, int, dict[str, int]] = (0, 0, {})
        self.reasons: Mapping[str, PendingReason] = {}

        self.next_submit = 0
        self.events = sorted(scenario.events, key=lambda e: (e.at, e.seq))
        self.next_event = 0
        self.finishes: list[tuple[float, int, int]] = []  # (time, seq, generation)
        # Time 0 and the back-off retry cycles: (time, seq of the job whose back-off ends
        # then, its preemptions at that time); the entry of time 0 has seq -1.
        self.ticks: list[tuple[float, int, int]] = [(0.0, -1, 0)]
        # docs/preemption.md 1: when a running job's minimum runtime ends, (time, seq, its
        # generation): a job waiting for it may start then, so a cycle runs (while jobs wait).
        self.protection_ends: list[tuple[float, int, int]] = []
        # With a cycle interval (``Scenario.cycle_interval``), cycles run only on its grid:
        # what happens between two of its times is applied then, and decided at the next
        # (``cycle_at``); a back-off retry waits for the first grid time at or after its end.
        self.interval = scenario.cycle_interval
        self.cycle_at: float | None = None

        self.start_counter = 0
        self.state_events = 0  # node, team and policy events since the last collection (``run``)
        self.cycles = 0
        self.steps = 0  # times processed
        self.done = 0
        # Integrals, in GPU-seconds.
        self.last_time = 0.0
        self.rates: tuple[_TeamRates, float, float, float] = (self._team_rates, 0, 0, 0)
        self.team_seconds = {
            name: [0.0, 0.0, 0.0, 0.0] for name in self.teams
        }  # used, borrowed, lent, idle quota; up to date after ``_flush_teams``
        # The running sums of ``team_seconds`` while the same teams have rates: one list per
        # figure, in the order of ``_summed_names`` (an instant adds four lists, not 200 items).
        self._summed_names: tuple[str, ...] = ()
        self._summed: list[list[float]] = [[], [], [], []]
        # Fairness over time (docs/fairness.md): per team, its borrowed GPU-seconds decayed with
        # the policy's half-life up to ``last_time``, as the loop reads them off the history.
        self.borrowed_lately: dict[str, float] = {}
        self._history: tuple[float, Mapping[str, float]] = (-1.0, {})
        self._history_policy: object = None
        self.capacity_seconds = 0.0
        self.allocated_seconds = 0.0
        self.idle_waiting_seconds = 0.0
        self.waits: dict[str, list[float]] = {name: [] for name in self.teams}
        self.lost: dict[str, float] = dict.fromkeys(self.teams, 0.0)
        self.team_preemptions: dict[str, int] = dict.fromkeys(self.teams, 0)
        self.node_down_lost = 0.0
        # Victims that had run less than SHORT_RUN_S since their last start.
        self.short_victims = 0
        # docs/preemption.md 5, grace: the victims signalled and still running, by seq, with
        # their preemptor's seq and when their grace ends; the preemptors held back (out of
        # the snapshots, still pending) with the seqs of the victims they wait for; and the
        # grace ends to act on, (time, seq, generation).
        self.terminating: dict[int, tuple[int, float]] = {}
        self.held: dict[int, set[int]] = {}
        self.grace_ends: list[tuple[float, int, int]] = []

    # ------------------------------------------------------------------------------------
    # Starting and stopping jobs

    def _add(self, table: dict[_K, int], key: _K, delta: int) -> None:
        table[key] = table.get(key, 0) + delta

    def _enqueue(self, run: _Run, now: float) -> None:
        """Back to pending after a preemption or a lost node: its wait counts from now."""
        run.state = PENDING
        run.queued_at = now
        run.job = run.pending_job()
        self.pending[run.spec.seq] = run
        self.pending_jobs[run.spec.seq] = run.job
        self.added[id(run.job)] = run.job
        self.base_added[1][id(run.job)] = run.job
        self._add(self.type_waiting, run.spec.instance_type, run.spec.gpus)

    def _enqueue_submitted(self, runs: list[_Run]) -> None:
        """``runs``, submitted at one time (in queue order), become pending: what ``_enqueue``
        does for each, table by table. At time 0 of a replayed backlog that is every job, and one
        call per job and table would be a fifth of the replay's own time there. Their waits count
        from their submit time (``queued_at`` already)."""
        specs = [run.spec for run in runs]
        seqs = [s.seq for s in specs]
        if len(runs) < BUILD_MANY_FROM:
            jobs = [run.pending_job() for run in runs]
        else:  # the engine's ``Job`` as ``pending_job`` makes it for a job never preempted
            jobs = build_many(
                Job,
                len(specs),
                id=map(attrgetter("id"), specs),
                team=map(attrgetter("team"), specs),
                instance_type=map(attrgetter("instance_type"), specs),
                gpus=map(attrgetter("gpus"), specs),
                submit_time=map(attrgetter("submit"), specs),
                seq=seqs,
                priority_class=map(attrgetter("priority"), specs),
                submitter=map(attrgetter("submitter"), specs),
                checkpoint_interval_s=map(attrgetter("checkpoint_interval_s"), specs),
            )
        for run, job in zip(runs, jobs, strict=True):
            run.state = PENDING
            run.job = job
        self.pending.update(zip(seqs, runs, strict=True))
        self.pending_jobs.update(zip(seqs, jobs, strict=True))
        keys = list(map(id, jobs))
        self.added.update(zip(keys, jobs, strict=True))
        self.base_added[1].update(zip(keys, jobs, strict=True))
        waiting = self.type_waiting
        for s in specs:
            waiting[s.instance_type] = waiting.get(s.instance_type, 0) + s.gpus

    def _dequeue(self, run: _Run) -> None:
        del self.pending[run.spec.seq]
        self._removed(self.pending_jobs.pop(run.spec.seq))
        self._add(self.type_waiting, run.spec.instance_type, -run.spec.gpus)

    def _start(
        self, run: _Run, nodes: tuple[tuple[str, int], ...], started_at: float, initial: bool = False
    ) -> None:
        spec = run.spec
        run.state = RUNNING
        run.nodes = nodes
        run.started_at = started_at
        # Jobs already running when the simulation starts all have start_seq 0: the engine
        # orders them by id (POLICY.md 4); every start in the replay counts on from 1.
        if not initial:
            self.start_counter += 1
        run.start_seq = 0 if initial else self.start_counter
        assert run.job is not None
        run.job = replace(run.job, nodes=nodes, started_at=started_at, start_seq=run.start_seq)
        self.running_jobs[spec.seq] = run.job
        self.added[id(run.job)] = run.job
        self.base_added[0][id(run.job)] = run.job
        for name, gpus in nodes:
            self.node_used[name] += gpus
            self.node_jobs[name].add(spec.seq)
        self.running[spec.seq] = run
        self._add(self.used, (spec.team, spec.instance_type), spec.gpus)
        self._add(self.type_used, spec.instance_type, spec.gpus)
        self.used_version += 1
        if spec.duration is not None:
            # docs/preemption.md 2: a job resumed runs the rest of its work less what its
            # checkpoints kept.
            left = max(0.0, spec.duration - run.progress_kept)
            heapq.heappush(self.finishes, (started_at + left, spec.seq, run.generation))
        min_runtime = min_runtime_of(self.policy, run.job)
        if min_runtime > 0:
            end = self._grid(started_at + min_runtime)
            heapq.heappush(self.protection_ends, (end, spec.seq, run.generation))

    def _lost(self, run: _Run, now: float) -> float:
        """A run stopped at ``now`` (docs/preemption.md 2): the GPU-seconds it throws away,
        the time since its last checkpoint times its GPUs; its checkpoints' progress is kept
        for the next run."""
        assert run.job is not None
        run.progress_kept += last_checkpoint_s(run.job, now)
        return run.spec.gpus * lost_work_s(run.job, now)

    def _stop(self, run: _Run) -> None:
        spec = run.spec
        for name, gpus in run.nodes:
            self.node_used[name] -= gpus
            self.node_jobs[name].discard(spec.seq)
        del self.running[spec.seq]
        self._removed(self.running_jobs.pop(spec.seq))
        self._add(self.used, (spec.team, spec.instance_type), -spec.gpus)
        self._add(self.type_used, spec.instance_type, -spec.gpus)
        self.used_version += 1
        run.nodes = ()
        run.generation += 1
        if spec.seq in self.terminating:
            self._victim_gone(spec.seq)

    def _removed(self, job: Job) -> None:
        key = id(job)
        if self.added.pop(key, None) is None:
            self.removed[key] = job
        running, pending = self.base_added
        if running.pop(key, None) is None and pending.pop(key, None) is None:
            self.base_removed.add(key)

    def _place_initial(self) -> None:
        """Jobs with ``running_since`` are running at 0: placed by ``initial_placement``."""
        initial = sorted(
            (r for r in self.runs if r.spec.running_since is not None),
            key=lambda r: (r.spec.running_since, r.spec.seq),
        )
        places = initial_placement(
            [(n.name, n.instance_type, n.gpus) for n in self.scenario.nodes],
            [(r.spec.instance_type, r.spec.gpus) for r in initial],
        )
        errors = []
        for run, nodes in zip(initial, places, strict=True):
            spec = run.spec
            run.job = run.pending_job()
            if nodes is None:
                errors.append(
                    f"{spec.path}.running_since: no room for job {spec.id!r} ({spec.gpus} GPUs of "
                    f"{spec.instance_type}) beside the jobs already running at 0"
                )
                continue
            assert spec.running_since is not None
            self._start(run, nodes, spec.running_since, initial=True)
        if errors:
            raise ScenarioError(errors)

    # ------------------------------------------------------------------------------------
    # What happens at one time

    def _finish_due(self, now: float) -> bool:
        finished = False
        while self.finishes and self.finishes[0][0] <= now:
            _, seq, generation = heapq.heappop(self.finishes)
            run = self.runs[seq]
            if run.state != RUNNING or run.generation != generation:
                continue  # stopped before: a stale entry
            self._stop(run)
            run.state = FINISHED
            run.finished_at = now
            self.done += 1
            finished = True
        return finished

    def _apply_events(self, now: float) -> None:
        while self.next_event < len(self.events) and self.events[self.next_event].at <= now:
            action = self.events[self.next_event].action
            self.next_event += 1
            if not isinstance(action, Cancel):
                self.state_events += 1
            if isinstance(action, NodeDown):
                self._node_down(action, now)
            elif isinstance(action, NodeUp):
                down = [
                    n
                    for n in self.scenario.nodes
                    if n.instance_type == action.instance_type and not self.ready[n.name]
                ]
                for node in down[: action.count]:
                    self.ready[node.name] = True
                    self.capacity[node.instance_type] += node.gpus
                self._nodes_changed()
            elif isinstance(action, Cancel):
                self._cancel(self.by_id[action.job_id], now)
            elif isinstance(action, UpdateTeam):
                self.teams[action.team.name] = action.team
                self.teams_tuple = tuple(self.teams.values())
                self.setup_version += 1
            elif isinstance(action, UpdatePolicy):
                self.policy = action.policy
                self.setup_version += 1

    def _node_down(self, action: NodeDown, now: float) -> None:
        """The nodes with the fewest GPUs in use go first (then file order); their jobs go
        back to pending with their original submit time and lose the work since their last
        checkpoint (all of it without checkpoints)."""
        up = [
            n for n in self.scenario.nodes if n.instance_type == action.instance_type and self.ready[n.name]
        ]
        up.sort(key=lambda n: (self.node_used[n.name], self.node_order[n.name]))
        for node in up[: action.count]:
            for seq in sorted(self.node_jobs[node.name]):
                run = self.runs[seq]
                assert run.started_at is not None
                self.node_down_lost += self._lost(run, now)
                self._stop(run)
                run.evicted_at += (now,)
                self._enqueue(run, now)
            self.ready[node.name] = False
            self.capacity[node.instance_type] -= node.gpus
        self._nodes_changed()

    def _nodes_changed(self) -> None:
        self.nodes_tuple = tuple(
            n if self.ready[n.name] else replace(n, ready=False) for n in self.scenario.nodes
        )

    def _cancel(self, run: _Run, now: float) -> None:
        if run.state == RUNNING:
            self._stop(run)
        elif run.state == PENDING and run.spec.seq in self.held:
            # Held back for its victims (docs/preemption.md 5): they go on stopping.
            for victim in self.held.pop(run.spec.seq):
                self.terminating[victim] = (-1, self.terminating[victim][1])
            del self.pending[run.spec.seq]
            self._add(self.type_waiting, run.spec.instance_type, -run.spec.gpus)
        elif run.state == PENDING:
            self._dequeue(run)
        elif run.state != UNSUBMITTED:
            return  # finished, cancelled or rejected already: nothing to cancel
        run.state = CANCELLED
        run.cancelled_at = now
        self.done += 1

    def _submit_due(self, now: float) -> None:
        start = self.next_submit
        end = bisect_right(self.submit_times, now, start)
        if end == start:
            return
        self.next_submit = end
        # Those cancelled before their submit time are left out.
        due = [run for run in self.submits[start:end] if run.state == UNSUBMITTED]
        rejected = self.scenario.rejected
        if rejected:
            for run in due:
                if run.spec.id in rejected:
                    run.state = REJECTED
                    self.done += 1
            due = [run for run in due if run.state == UNSUBMITTED]
        if due:
            self._enqueue_submitted(due)

    # ------------------------------------------------------------------------------------
    # Cycles

    def _snapshot(self) -> Snapshot:
        changes = JobChanges(self.serial, tuple(self.added.values()), tuple(self.removed.values()))
        if self.added or self.removed or self.jobs_view is None:
            # Every change of the two tables goes through ``added`` and ``removed``: with both
            # empty (a back-off retry at an instant where nothing else happened) the jobs are
            # the last snapshot's, and so is their view.
            count = len(self.running_jobs) + len(self.pending_jobs)
            running, pending = self.base_added
            since = len(self.base_removed) + len(running) + len(pending)
            if self.jobs_view is None or since > max(32, math.isqrt(4 * count)):
                # A new base: what came and went since the last one grew too long to copy at
                # each snapshot (about the square root of the jobs, which balances that copy
                # against the base's copy of all the jobs).
                self.base = (tuple(self.running_jobs.values()), tuple(self.pending_jobs.values()))
                self.base_removed = set()
                self.base_added = ({}, {})
                self.jobs_view = SnapshotJobs(self.base, frozenset(), (), (), count)
            else:
                self.jobs_view = SnapshotJobs(
                    self.base,
                    frozenset(self.base_removed),
                    tuple(running.values()),
                    tuple(pending.values()),
                    count,
                )
            self.added, self.removed = {}, {}
        self.serial += 1
        return Snapshot(
            instance_types=self.scenario.instance_types,
            nodes=self.nodes_tuple,
            teams=self.teams_tuple,
            policy=self.policy,
            jobs=self.jobs_view,
            serial=self.serial,
            changes=changes,
            borrowed_history=self._borrowed_history(),
        )

    def _settle(self, now: float) -> None:
        """Cycles at ``now`` until one changes nothing (a cycle with no pending job would
        decide nothing, so none runs)."""
        for _ in range(MAX_CYCLES_PER_INSTANT):
            if not self.pending:
                return
            plan = self.allocate(self._snapshot(), now)
            self.cycles += 1
            self.reasons = plan.pending
            changed = self._apply(plan, now)
            # A job of duration 0 finishes at the time it starts.
            changed = self._finish_due(now) or changed
            if not changed:
                return
        raise SimulationError(
            f"the cycles at t={now:g} did not come to rest after {MAX_CYCLES_PER_INSTANT} cycles "
            "(the engine keeps starting or preempting jobs at one instant)"
        )

    def _apply(self, plan: Plan, now: float) -> bool:
        """Apply a plan: preemptions first, then starts (the Plan contract). A victim with a
        grace (docs/preemption.md 5) is signalled instead of stopped, and its preemptor held
        back: the plan's starts are then left to the next cycle, which counts the victims
        still running."""
        signalled = False
        for p in plan.preemptions:
            run = self.by_id.get(p.job_id)
            if run is None or run.state != RUNNING:
                state = "unknown" if run is None else run.state
                raise SimulationError(
                    f"t={now:g}: the plan preempts job {p.job_id!r}, which is {state}, not running"
                )
            if p.preemptor not in self.by_id:
                raise SimulationError(
                    f"t={now:g}: the plan preempts {p.job_id!r} for an unknown job {p.preemptor!r}"
                )
            assert run.started_at is not None
            team = run.spec.team
            if now - run.started_at < SHORT_RUN_S:
                self.short_victims += 1
            self.team_preemptions[team] = self.team_preemptions.get(team, 0) + 1
            assert run.job is not None
            grace = preemption_grace_of(self.policy, run.job)
            if grace > 0:
                signalled = True
                self._signal(run, p, now, grace)
            else:
                self.lost[team] = self.lost.get(team, 0.0) + self._lost(run, now)
                self._stop(run)
            run.preemptions += 1
            run.last_preempted_at = now
            run.preempted += (PreemptionRecord(now, str(p.reason.value), p.preemptor),)
            if grace <= 0:
                self._enqueue(run, now)
            # Back-off (POLICY.md 3.5): the job may preempt again from now + 2^(n-1): give it a
            # cycle then (with a cycle interval, the first cycle time from then).
            heapq.heappush(
                self.ticks,
                (self._grid(now + 2.0 ** min(run.preemptions - 1, 60)), run.spec.seq, run.preemptions),
            )
        if signalled:
            return True
        for s in plan.starts:
            run = self.by_id.get(s.job_id)
            if run is None or run.state != PENDING:
                state = "unknown" if run is None else run.state
                raise SimulationError(
                    f"t={now:g}: the plan starts job {s.job_id!r}, which is {state}, not pending"
                )
            self._check_placement(run, s.nodes, now)
            self._dequeue(run)
            self.waits.setdefault(run.spec.team, []).append(now - run.queued_at)
            run.admitted_at += (now,)
            self._start(run, s.nodes, now)
        return bool(plan.starts or plan.preemptions)

    def _signal(self, run: _Run, p: Preemption, now: float, grace: float) -> None:
        """docs/preemption.md 5: ``run`` is told to stop and keeps its nodes, counted, until it
        ends or its grace runs out (``_grace_due``); its preemptor leaves the snapshots until
        every victim it waits for is gone (``_victim_gone``)."""
        seq = run.spec.seq
        assert run.job is not None
        old = run.job
        run.job = replace(old, terminating_since=now)
        # Taken out and put back last, as a changed job is in the snapshot's view.
        del self.running_jobs[seq]
        self._removed(old)
        self.running_jobs[seq] = run.job
        self.added[id(run.job)] = run.job
        self.base_added[0][id(run.job)] = run.job
        end = now + grace
        preemptor = self.by_id[p.preemptor]
        pseq = preemptor.spec.seq
        self.terminating[seq] = (pseq, end)
        heapq.heappush(self.grace_ends, (self._grid(end), seq, run.generation))
        if preemptor.state == PENDING:
            if pseq not in self.held:
                self.held[pseq] = set()
                self._removed(self.pending_jobs.pop(pseq))
            self.held[pseq].add(seq)
        else:  # pragma: no cover - a preemptor is pending (the engine's contract)
            self.terminating[seq] = (-1, end)

    def _victim_gone(self, seq: int) -> None:
        """A signalled victim is off its nodes (it ended, was killed, cancelled or lost its
        node): once its preemptor waits for no other, the preemptor is back in the snapshots,
        with the GPUs it was given."""
        pseq, _ = self.terminating.pop(seq)
        waits = self.held.get(pseq)
        if waits is None:
            return
        waits.discard(seq)
        if not waits:
            del self.held[pseq]
            preemptor = self.runs[pseq]
            job = preemptor.pending_job()
            preemptor.job = job
            self.pending_jobs[pseq] = job
            self.added[id(job)] = job
            self.base_added[1][id(job)] = job

    def _grace_due(self, now: float) -> None:
        """The victims whose grace ran out are killed: they lose the work since their last
        checkpoint, as a victim with no grace does at once, and go back to pending."""
        ends = self.grace_ends
        while ends and ends[0][0] <= now:
            _, seq, generation = heapq.heappop(ends)
            run = self.runs[seq]
            if run.state != RUNNING or run.generation != generation or seq not in self.terminating:
                continue
            team = run.spec.team
            self.lost[team] = self.lost.get(team, 0.0) + self._lost(run, now)
            self._stop(run)
            self._enqueue(run, now)

    def held_reasons(self, now: float) -> dict[str, PendingReason]:
        """The pending reason of each preemptor held back (docs/preemption.md 5)."""
        reasons = {}
        for pseq, victims in self.held.items():
            parts = []
            for seq in sorted(victims):
                _, end = self.terminating[seq]
                run = self.runs[seq]
                assert run.job is not None and run.job.terminating_since is not None
                grace = end - run.job.terminating_since
                parts.append(f"job {run.spec.id} (grace {grace:g} s, {max(0.0, end - now):g} s left)")
            reasons[self.runs[pseq].spec.id] = PendingReason(
                PendingCode.PREEMPTING, f"waits for {', '.join(parts)} to stop: their GPUs are kept for it"
            )
        return reasons

    def _check_placement(self, run: _Run, nodes: tuple[tuple[str, int], ...], now: float) -> None:
        spec = run.spec
        problem = None
        if sum(g for _, g in nodes) != spec.gpus:
            problem = f"places {sum(g for _, g in nodes)} GPUs for a job of {spec.gpus}"
        for name, gpus in nodes:
            node = self.node_specs.get(name)
            if node is None:
                problem = f"uses an unknown node {name!r}"
            elif not self.ready[name]:
                problem = f"uses node {name!r}, which is down"
            elif node.instance_type != spec.instance_type:
                problem = f"uses node {name!r} of {node.instance_type}, not {spec.instance_type}"
            elif self.node_used[name] + gpus > node.gpus:
                problem = (
                    f"puts {gpus} GPUs on node {name!r}, which has {node.gpus - self.node_used[name]} free"
                )
        if problem:
            raise SimulationError(f"t={now:g}: the plan starting job {spec.id!r} {problem}")

    # ------------------------------------------------------------------------------------
    # Metrics

    def _measure(self) -> None:
        """The rates that hold until the next time something happens. The accounting (who
        uses, borrows and lends what: ``accounting.attribute`` on each instance type, the rule
        of ``accounting.account`` without its rows) is made again only when the usage, the
        capacity, a team or the policy moved since the last time: an instant where jobs were
        only submitted changes nothing of it but the GPUs waiting. What it reads of the teams
        and the policy is kept while they stand."""
        setup = (self.setup_version, tuple(self.capacity.items()))
        key = (self.used_version, setup)
        if key != self._accounted:
            if self._setup is None or self._setup[0] != setup:
                per_type: list[_TypeSetup] = []
                for instance_type, cap in self.capacity.items():
                    keys = [(team.name, instance_type) for team in self.teams_tuple]
                    per_type.append(
                        (instance_type, cap, keys, *quota_terms(self.teams_tuple, instance_type, cap))
                    )
                self._setup = (setup, per_type, tuple(team.name for team in self.teams_tuple))
            used = self.used
            share = self.policy.share_unallocated
            names = self._setup[2]
            sums: list[list[float]] = []
            capacity = allocated = 0
            idle: dict[str, int] = {}
            for instance_type, cap, keys, quotas, lendables, unallocated in self._setup[1]:
                rows_used = [used.get(k, 0) for k in keys]
                unused, borrowed, lent, _ = attribute(rows_used, quotas, lendables, unallocated, share)
                # Each team's figures summed over the instance types, from 0.0 as floats.
                rows = [
                    [0.0 + u for u in rows_used],
                    [0.0 + b for b in borrowed],
                    [0.0 + x for x in lent],
                    [0.0 + max(0.0, u - x) for u, x in zip(unused, lent, strict=True)],
                ]
                # Every type's keys are the teams, in the order of ``names``.
                sums = [list(map(add, a, b)) for a, b in zip(sums, rows, strict=True)] if sums else rows
                type_allocated = self.type_used.get(instance_type, 0)
                capacity += cap
                allocated += type_allocated
                idle[instance_type] = max(0, cap - type_allocated)
            if not sums:
                sums = [[0.0] * len(names) for _ in range(4)]
            self._team_rates = (names, sums[0], sums[1], sums[2], sums[3])
            self._type_rates = (capacity, allocated, idle)
            self._accounted = key
        capacity, allocated, idle = self._type_rates
        waiting = self.type_waiting
        idle_waiting = sum(min(free, waiting.get(name, 0)) for name, free in idle.items())
        self.rates = (self._team_rates, capacity, allocated, idle_waiting)

    def _integrate(self, to: float) -> None:
        span = to - self.last_time
        if span <= 0:
            return
        (names, *rates), capacity, allocated, idle_waiting = self.rates
        assert len(rates) == 4
        if names is not self._summed_names:
            self._flush_teams()
            self._summed_names = names
            seconds = [self.team_seconds.setdefault(name, [0.0, 0.0, 0.0, 0.0]) for name in names]
            self._summed = [[row[i] for row in seconds] for i in range(4)]
        # Each team's figure += its rate * span, as four lists.
        self._summed = [
            list(map(add, summed, map(mul, rate, repeat(span))))
            for summed, rate in zip(self._summed, rates, strict=True)
        ]
        self.capacity_seconds += capacity * span
        self.allocated_seconds += allocated * span
        self.idle_waiting_seconds += idle_waiting * span
        if self.policy.fair_share_half_life_s > 0:
            self._decay(names, rates[1], span)
        self.last_time = to

    def _decay(self, names: Sequence[str], borrowed: Sequence[float], span: float) -> None:
        """Decay each team's borrowing lately over ``span`` seconds and add what it borrowed
        meanwhile (at a constant rate b, ``b * h / ln 2 * (1 - 2 ** (-span / h))``)."""
        half_life = self.policy.fair_share_half_life_s
        factor = 0.5 ** (span / half_life)
        gained = half_life / math.log(2) * (1 - factor)
        lately = self.borrowed_lately
        for name in lately:
            lately[name] *= factor
        for name, rate in zip(names, borrowed, strict=True):
            if rate:
                lately[name] = lately.get(name, 0.0) + rate * gained

    def _borrowed_history(self) -> Mapping[str, float]:
        """``Snapshot.borrowed_history`` at the current time: the decayed average of borrowed
        GPUs of each team (``selectors/fairness.py`` reads the same from the loop's history).
        Made again once a minute at most (``HISTORY_STEP``), as the loop's history is sampled:
        the engine's session starts again whenever it changes, and a busy replay has several
        instants a second."""
        policy = self.policy
        if policy.fair_share_half_life_s <= 0 or policy.fair_share_history_percent <= 0:
            return {}
        at, _ = self._history
        if (
            at < 0
            or self.last_time < at
            or self.last_time - at >= HISTORY_STEP
            or self._history_policy is not policy
        ):
            self._history_policy = policy
            scale = math.log(2) / policy.fair_share_half_life_s
            history = {
                name: seconds * scale
                for name, seconds in self.borrowed_lately.items()
                if seconds > 0 and name in self.teams
            }
            self._history = (self.last_time, history)
        return self._history[1]

    def _flush_teams(self) -> None:
        """Bring ``team_seconds`` up to date with the running sums."""
        for i, name in enumerate(self._summed_names):
            self.team_seconds[name] = [figure[i] for figure in self._summed]

    # ------------------------------------------------------------------------------------
    # The run

    def _next_time(self) -> float | None:
        """The next time something happens; None when only back-off retries are left (the end
        rule of SCENARIO.md) and no end time was asked for."""
        while self.finishes:
            _, seq, generation = self.finishes[0]
            run = self.runs[seq]
            if run.state == RUNNING and run.generation == generation:
                break
            heapq.heappop(self.finishes)
        times = []
        if self.next_submit < len(self.submits):
            times.append(max(0.0, self.submits[self.next_submit].spec.submit))
        if self.next_event < len(self.events):
            times.append(self.events[self.next_event].at)
        if self.finishes:
            times.append(self.finishes[0][0])
        if self.cycle_at is not None:
            times.append(self.cycle_at)
        if not times and self.end is None and self.steps > 0:
            return None
        # A retry cycle is due only while its job is pending with the same preemptions: one
        # that started, was preempted again (a later back-off) or was cancelled since ends no
        # back-off then, and the engine reads time for nothing else (POLICY.md 3.5), so that
        # cycle would decide as the last one at rest did.
        while self.ticks and not self._retry_due(self.ticks[0]):
            heapq.heappop(self.ticks)
        if self.ticks:
            times.append(self.ticks[0][0])
        # A minimum runtime ending matters only while jobs wait: one may start then.
        ends = self.protection_ends
        while ends and not self._still_protected(ends[0]):
            heapq.heappop(ends)
        if ends and self.pending:
            times.append(ends[0][0])
        graces = self.grace_ends
        while graces and not self._still_terminating(graces[0]):
            heapq.heappop(graces)
        if graces:
            times.append(graces[0][0])
        return min(times) if times else None

    def _still_terminating(self, end: tuple[float, int, int]) -> bool:
        run = self.runs[end[1]]
        return run.state == RUNNING and run.generation == end[2] and end[1] in self.terminating

    def _still_protected(self, end: tuple[float, int, int]) -> bool:
        run = self.runs[end[1]]
        return run.state == RUNNING and run.generation == end[2]

    def _grid(self, t: float) -> float:
        """The first cycle time at or after ``t``."""
        if not self.interval:
            return t
        return float(math.ceil(t / self.interval) * self.interval)

    def _retry_due(self, tick: tuple[float, int, int]) -> bool:
        _, seq, preemptions = tick
        if seq < 0:
            return True
        run = self.runs[seq]
        return run.state == PENDING and run.preemptions == preemptions

    def run(self) -> Result:
        # No cyclic garbage collection during the run (as during each of the engine's cycles):
        # the replay and the engine's session free what they drop by reference counting
        # (``tests/simulation/test_replay.py`` checks it), so a collection only walks the live
        # jobs, records and plans and finds nothing: in the 100,000-job what-if replay, 31 full
        # collections and 14,000 young ones, 8% of its time. But a session starts again from
        # the snapshot after a node, team or policy change, and drops its state, which holds
        # cycles (records and their teams): one collection every ``COLLECT_AFTER_EVENTS``
        # such events keeps what waits to be collected to a few states.
        with gc_paused():
            return self._run()

    def _run(self) -> Result:
        self._place_initial()
        self._measure()
        last_report = time.monotonic()
        while True:
            now = self._next_time()
            if now is None or (self.end is not None and now > self.end):
                break
            self._integrate(now)
            while self.ticks and self.ticks[0][0] <= now:
                heapq.heappop(self.ticks)
            while self.protection_ends and self.protection_ends[0][0] <= now:
                heapq.heappop(self.protection_ends)
            self._finish_due(now)
            self._grace_due(now)
            self._apply_events(now)
            self._submit_due(now)
            cycle_time = self._grid(now)
            if cycle_time == now:
                self.cycle_at = None
                self._settle(now)
            else:
                self.cycle_at = cycle_time
            if self.state_events >= COLLECT_AFTER_EVENTS:
                self.state_events = 0
                gc.collect()
            self._measure()
            self.last_time = now
            self.steps += 1
            if self.progress is not None and self.steps % 256 == 0 and time.monotonic() - last_report > 0.2:
                last_report = time.monotonic()
                self.progress(now, self.end, self.done, len(self.runs))
        end_time = self.end if self.end is not None else self.last_time
        self._integrate(end_time)
        self._flush_teams()
        if self.progress is not None:
            self.progress(end_time, self.end, self.done, len(self.runs))
        return self._result(end_time)

    def _result(self, end_time: float) -> Result:
        runs = [run for run in self.runs if run.state != UNSUBMITTED]
        not_submitted = [run.spec.id for run in self.runs if run.state == UNSUBMITTED]
        specs = [run.spec for run in runs]
        states = [run.state for run in runs]
        counts = dict.fromkeys((RUNNING, PENDING, FINISHED, CANCELLED, REJECTED), 0)
        counts.update(Counter(states))
        # The last plan's reasons read once as a dict: the engine's are a mapping made on
        # demand, whose ``get`` would be a Python call per pending job.
        reasons = dict(self.reasons.items())
        reasons.update(self.held_reasons(end_time))
        rejected = self.scenario.rejected
        why = [
            reasons.get(s.id) if state == PENDING else rejected[s.id] if state == REJECTED else None
            for s, state in zip(specs, states, strict=True)
        ]
        ids = [s.id for s in specs]
        # A job's tuples of times and preemptions are its record's own (no copy).
        results = build_many(
            JobResult,
            len(runs),
            id=ids,
            team=map(attrgetter("team"), specs),
            instance_type=map(attrgetter("instance_type"), specs),
            gpus=map(attrgetter("gpus"), specs),
            priority=map(attrgetter("priority"), specs),
            submit=map(attrgetter("submit"), specs),
            state=states,
            admitted_at=map(attrgetter("admitted_at"), runs),
            preempted=map(attrgetter("preempted"), runs),
            finished_at=map(attrgetter("finished_at"), runs),
            cancelled_at=map(attrgetter("cancelled_at"), runs),
            pending_reason=why,
            evicted_at=map(attrgetter("evicted_at"), runs),
        )
        jobs = dict(zip(ids, results, strict=True))
        teams = {}
        all_waits: list[float] = []
        for name in self.teams:
            seconds = self.team_seconds.get(name, [0.0, 0.0, 0.0, 0.0])
            waits = self.waits.get(name, [])
            all_waits.extend(waits)
            teams[name] = TeamResult(
                gpu_hours=seconds[0] / 3600,
                borrowed_gpu_hours=seconds[1] / 3600,
                lent_gpu_hours=seconds[2] / 3600,
                idle_quota_gpu_hours=seconds[3] / 3600,
                wait_p50_s=percentile(waits, 50),
                wait_p95_s=percentile(waits, 95),
                preemptions=self.team_preemptions.get(name, 0),
                lost_gpu_hours=self.lost.get(name, 0.0) / 3600,
                starts=len(waits),
                borrowed_lately_gpu_hours=self.borrowed_lately.get(name, 0.0) / 3600,
            )
        preemptions = sum(self.team_preemptions.values())
        cluster = ClusterResult(
            capacity_gpu_hours=self.capacity_seconds / 3600,
            allocated_gpu_hours=self.allocated_seconds / 3600,
            utilization=self.allocated_seconds / self.capacity_seconds if self.capacity_seconds else 0.0,
            idle_while_waiting_gpu_hours=self.idle_waiting_seconds / 3600,
            wait_mean_s=sum(all_waits) / len(all_waits) if all_waits else 0,
            wait_p95_s=percentile(all_waits, 95),
            lost_gpu_hours=sum(self.lost.values()) / 3600,
            preemptions=preemptions,
            cycles=self.cycles,
            node_down_lost_gpu_hours=self.node_down_lost / 3600,
            starts=len(all_waits),
            preemptions_per_job=preemptions / len(runs) if runs else 0.0,
            short_victims_share=self.short_victims / preemptions if preemptions else 0.0,
        )
        return Result(
            name=self.scenario.name,
            end_time=end_time,
            jobs=jobs,
            teams=teams,
            cluster=cluster,
            not_submitted=tuple(not_submitted),
            trace=self.scenario.trace,
            counts=counts,
        )


def replay(
    scenario: Scenario,
    *,
    until: float | None = None,
    allocate: Allocate | None = None,
    progress: Progress | None = None,
) -> Result:
    """Replay ``scenario`` through ``allocate`` (the engine's by default) and report."""
    # Built and run in one pause of the cyclic collector (``Replay.run`` says why), so that
    # the records made before the run are walked once when it ends, not once more between.
    with gc_paused():
        return Replay(scenario, until=until, allocate=allocate, progress=progress).run()


def initial_placement(
    nodes: Sequence[tuple[str, str, int]], jobs: Sequence[tuple[str, int]]
) -> list[tuple[tuple[str, int], ...] | None]:
    """Where the jobs running at 0 go, in the order given (oldest run first): a job of at most a
    node's GPUs on the fullest node of its type that still has room (the first such node on a
    tie), a larger one on whole empty nodes in node order; None for a job with no room.
    ``nodes``: (name, instance type, GPUs); ``jobs``: (instance type, GPUs)."""
    used = {name: 0 for name, _, _ in nodes}
    of_type: dict[str, list[tuple[str, int]]] = {}
    for name, instance_type, gpus in nodes:
        of_type.setdefault(instance_type, []).append((name, gpus))
    places: list[tuple[tuple[str, int], ...] | None] = []
    for instance_type, gpus in jobs:
        candidates = of_type.get(instance_type, [])
        place: tuple[tuple[str, int], ...] | None = None
        if candidates:
            per_node = candidates[0][1]
            if gpus <= per_node:
                roomy = [(size - used[name], i, name) for i, (name, size) in enumerate(candidates)]
                fits = [entry for entry in roomy if entry[0] >= gpus]
                if fits:
                    place = ((min(fits)[2], gpus),)
            else:
                empty = [name for name, _ in candidates if used[name] == 0][: gpus // per_node]
                if len(empty) * per_node >= gpus:
                    place = tuple((name, per_node) for name in empty)
        for name, share in place or ():
            used[name] += share
        places.append(place)
    return places
