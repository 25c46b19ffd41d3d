"""``manage.py backfill_demo_history --days 90``: months of plausible capacity history in seconds.

The demo cluster (``load_demo``) starts with no history, so its dashboards would be empty for
days. This fills the history of the teams, quotas and nodes in the database with a synthetic
workload: each team's demand follows a working-day rhythm, weekly lulls, noise and bursts; a
simplified allocator gives each team its demand within quota, then shares the idle GPUs
between borrowers by fair-share weight up to their borrow limits; the engine's own accounting
(``engine/accounting.py``) then says who lent what, exactly as the live sampler does.

1. The last ``HISTORY_MINUTE_DAYS`` days are stepped minute by minute and written as minute
   samples, then rolled up by ``services.history`` (so hours are the sums of their minutes).
2. Older days are stepped every ``--old-step`` minutes and written directly as hour rollups
   (each step stands for its minutes), then rolled up into days.
3. Finished jobs are written too (``backfill-`` names), with the JobEvent rows the loop would
   have written (submitted, started, preempted, requeued, finished). They are the demand
   itself: each team's wanted GPUs on a type are jobs of its size, submitted as the demand
   rises, started first come first served as its allocation allows, each running 10 minutes
   to 6 hours. The preemptions the history counts are these jobs' preemptions: the newest
   runs are cut short and wait again, each preempted by the next job to start on that type
   (of its own team for in-team, of another team otherwise). So the weekly reports, the
   dashboards and a what-if replay, which read jobs and events, see the load the capacity
   history shows. Each preempted event records how long the run lasted and the GPU-seconds it
   lost (the demo's jobs have no checkpoints: the whole run), and the history counts them as
   the live sampler does (``history.victim_cost``, ``history.RAN_FIELDS``).
4. Pending reasons are sampled as ``reports.services`` samples them (every 5 minutes in the
   minute window, every step before it), from the history's pending jobs, with the reason the
   simplified allocator had for each team: under its quota (``waiting-for-quota``), held at
   its borrow limit (``borrow-limit``) or no idle GPUs to borrow (``no-idle-capacity``).
Running it again replaces the history of the period (and the earlier ``backfill-`` jobs).
The history ends now, or at ``--end``: the same seed and end give the same history (the demand
follows the hour of the day and the day of the week, so the end matters as much as the seed).
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, models, transaction
from django.utils import timezone

from allocations import engine
from allocations.choices import JobEventKind, JobState
from allocations.engine.accounting import account
from allocations.models import (
    CapacityMinute,
    CapacityRollup,
    InstanceType,
    Job,
    JobEvent,
    PendingReasonSample,
    PriorityClass,
    Team,
    TeamUsageMinute,
    TeamUsageRollup,
)
from allocations.reports.services import PENDING_SAMPLE_DAYS, PENDING_SAMPLE_MINUTES
from allocations.selectors.snapshot import build_snapshot
from allocations.services import history

JOB_PREFIX = "backfill-"
# The columns of the minute samples, in the order the rows below are written.
TEAM_COLUMNS = list(history.TEAM_SUMS)
CAPACITY_COLUMNS = list(history.CAPACITY_SUMS)
FLOAT_SUMS = ("lent_gpu_minutes", "idle_quota_gpu_minutes", "lost_gpu_seconds")
# A preemption names as its preemptor a job that started on the type within this many seconds
# (or by the next step, before the minute window), as the loop starts it in the same cycle.
PREEMPTOR_WINDOW_S = 15 * 60
PREEMPTED_COLUMNS = tuple(history.PREEMPTION_FIELDS.values())
REASON_COLUMNS = ["at", "team_id", "instance_type_id", "code", "jobs", "gpus", "minutes"]
# The message of the event that cancels, at the history's end, a job it preempted.
HISTORY_END = "The demo history ends here; its live part does not run this job."
EVENT_COLUMNS = [
    "job_id",
    "kind",
    "at",
    "nodes",
    "reason",
    "preemptor_id",
    "message",
    "ran_s",
    "lost_gpu_seconds",
]


def db_time(moment: datetime) -> Any:
    """A datetime as the database driver takes it (SQLite: text in UTC)."""
    return connection.ops.adapt_datetimefield_value(moment)


def insert_rows(model: type[models.Model], columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    """Insert plain tuples with one prepared statement: the ORM's ``bulk_create`` builds and
    prepares a model instance per row, which made this command take minutes instead of seconds.
    ``columns`` are attribute names (``team_id``); datetimes must already be ``db_time``."""
    fields = {f.attname: f for f in model._meta.concrete_fields}
    quote = connection.ops.quote_name
    names = ", ".join(quote(fields[c].column) for c in columns)
    sql = f"INSERT INTO {quote(model._meta.db_table)} ({names}) VALUES ({', '.join(['%s'] * len(columns))})"
    with connection.cursor() as cursor:
        for i in range(0, len(rows), 10000):
            cursor.executemany(sql, rows[i : i + 10000])


@dataclass(slots=True, eq=False)
class DemandEvent:
    """A start, preemption or requeue of a demand job (a JobEvent row once written); a
    preemption's preemptor is named once a job starts in its place (``_name_preemptors``)."""

    at: float
    kind: str
    reason: str = ""
    preemptor: DemandJob | None = None
    ran_s: float | None = None  # of a preemption: how long the run it cut short lasted
    lost_gpu_seconds: float | None = None


@dataclass(slots=True, eq=False)
class DemandJob:
    """One job of the synthetic demand: submitted, started (None while it waits), its run, and
    what happened to it since its submission."""

    submit: float
    gpus: int
    run_s: float
    priority_id: int | None
    start: float | None = None
    events: list[DemandEvent] = field(default_factory=list)
    preempted_at: float | None = None


@dataclass
class Demand:
    """One team's demand on one instance type: a daily rhythm times an AR(1) noise, plus bursts."""

    base: float
    phase: float
    noise: float = 0.0
    burst_until: float = 0.0
    burst: float = 0.0
    job_gpus: int = 1

    def at(self, t: float, rng: random.Random, step_minutes: int) -> int:
        hour = (t / 3600) % 24
        weekday = int(t // 86400 + 3) % 7  # 1970-01-01 was a Thursday
        rhythm = 0.55 + 0.45 * math.sin((hour - 9 + self.phase) / 24 * 2 * math.pi)
        weekly = 0.55 if weekday >= 5 else 1.0
        # AR(1) noise with a standard deviation of 0.25 that decays per minute, whatever the step.
        decay = 0.97**step_minutes
        self.noise = decay * self.noise + rng.gauss(0, 0.25 * math.sqrt(1 - decay**2))
        if t >= self.burst_until and rng.random() < 0.0015 * step_minutes:
            self.burst_until = t + rng.uniform(1, 8) * 3600
            self.burst = self.base * rng.uniform(0.5, 1.5)
        burst = self.burst if t < self.burst_until else 0.0
        return max(0, round(self.base * rhythm * weekly * (1 + self.noise) + burst))


def borrow_cap(team: engine.Team, quota: engine.Quota) -> float:
    """How far above its quota a team may go (POLICY.md section 1)."""
    if team.sharing is not engine.Sharing.LEND_AND_BORROW or not team.active:
        return 0
    if quota.borrow_unlimited:
        return math.inf
    if quota.borrow_limit is not None:
        return quota.borrow_limit
    return quota.quota * quota.borrow_limit_percent // 100


def share_idle(idle: int, wants: dict[str, int], weights: dict[str, int]) -> dict[str, int]:
    """Idle GPUs shared between borrowers by fair-share weight (water-filling, whole GPUs)."""
    given = dict.fromkeys(wants, 0)
    active = [t for t, want in wants.items() if want > 0]
    while idle > 0 and active:
        total = sum(max(weights[t], 0.01) for t in active)
        round_idle = idle
        for team in sorted(active, key=lambda t: (-weights[t], t)):
            share = max(1, math.floor(round_idle * max(weights[team], 0.01) / total))
            take = min(share, wants[team] - given[team], idle)
            given[team] += take
            idle -= take
        active = [t for t in active if given[t] < wants[t]]
    return given


class Command(BaseCommand):
    help = "Fill the capacity history of the demo cluster with a plausible synthetic workload."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=90, help="Days of history to write (default 90)")
        parser.add_argument(
            "--seed", type=int, default=6, help="Random seed (the same seed and --end, the same history)"
        )
        parser.add_argument(
            "--end",
            help="When the history ends, ISO 8601 (default: now); UTC when it names no time zone",
        )
        parser.add_argument(
            "--old-step", type=int, default=30, help="Minutes per step before the minute-sample window"
        )
        parser.add_argument("--no-jobs", action="store_true", help="Do not write finished jobs")

    def handle(self, *args: Any, **options: Any) -> None:
        days, step = options["days"], options["old_step"]
        if days < 1 or days > 3660:
            raise CommandError(f"--days: must be between 1 and 3660, got {days}")
        if step < 1 or 60 % step:
            raise CommandError(
                f"--old-step: must divide 60 (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60), got {step}"
            )
        began = time.perf_counter()
        now = timezone.now()
        if options.get("end"):
            now = self._end(options["end"], now)
        snapshot = build_snapshot(now)
        if not snapshot.teams or not snapshot.instance_types:
            raise CommandError("no teams or instance types in the database: run `manage.py load_demo` first")
        rng = random.Random(options["seed"])
        end = history.floor_minute(now)
        start = history.floor_day(end - timedelta(days=days))
        minute_start = max(start, history.floor_hour(end - timedelta(days=settings.HISTORY_MINUTE_DAYS)))
        generator = Workload(snapshot, rng, now)

        # It takes from seconds to minutes by the machine and the days: say what it is doing.
        self.stdout.write(
            f"writing {days} days of synthetic history: hour rollups, then minute samples, then jobs",
        )
        self.stdout.flush()
        with transaction.atomic():
            self._clear(start, end, jobs=not options["no_jobs"])
            hours = generator.hour_rollups(start, minute_start, step)
            minutes = generator.minute_samples(minute_start, end)
            history.rollup_hours(minute_start, history.floor_hour(end) + history.HOUR)
            history.rollup_days(history.floor_day(start), history.floor_day(end) + history.DAY)
            jobs = 0 if options["no_jobs"] else generator.write_jobs()
        self.stdout.write(
            f"backfilled {days} days for {len(snapshot.teams)} teams x {len(snapshot.instance_types)} "
            f"instance types: {minutes} minute rows, {hours} hour rows, {jobs} jobs "
            f"in {time.perf_counter() - began:.1f} s"
        )

    @staticmethod
    def _end(value: str, now: datetime) -> datetime:
        try:
            end = datetime.fromisoformat(value)
        except ValueError:
            raise CommandError(f"--end: not an ISO 8601 date and time, got {value!r}") from None
        if timezone.is_naive(end):
            end = end.replace(tzinfo=UTC)
        if end > now:
            raise CommandError(f"--end: must not be in the future, got {value!r}")
        return end

    def _clear(self, start: datetime, end: datetime, *, jobs: bool) -> None:
        TeamUsageMinute.objects.filter(minute__gte=start, minute__lte=end).delete()
        CapacityMinute.objects.filter(minute__gte=start, minute__lte=end).delete()
        TeamUsageRollup.objects.filter(start__gte=history.floor_day(start)).delete()
        CapacityRollup.objects.filter(start__gte=history.floor_day(start)).delete()
        PendingReasonSample.objects.filter(at__gte=start, at__lte=end).delete()
        if jobs:
            Job.objects.filter(name__startswith=JOB_PREFIX, state=JobState.FINISHED).delete()


class Workload:
    """The synthetic cluster: demand per team and type, allocation, accounting per step."""

    def __init__(self, snapshot: engine.Snapshot, rng: random.Random, now: datetime) -> None:
        self.snapshot = snapshot
        self.rng = rng
        self.now = now
        self.types = [t.name for t in snapshot.instance_types]
        self.capacity: dict[str, int] = defaultdict(int)
        for node in snapshot.nodes:
            if node.ready:
                self.capacity[node.instance_type] += node.gpus
        self.teams = list(snapshot.teams)
        self.quotas = {
            (team.name, name): (team.quotas.get(name) or engine.Quota()).quota
            for team in self.teams
            for name in self.types
        }
        self.team_ids = dict(Team.objects.values_list("name", "id"))
        self.type_ids = dict(InstanceType.objects.values_list("name", "id"))
        gpus_per_node = {t.name: t.gpus_per_node for t in snapshot.instance_types}
        self.demand: dict[tuple[str, str], Demand] = {}
        for team in self.teams:
            for name in self.types:
                quota = (team.quotas.get(name) or engine.Quota()).quota
                if not team.active or (quota == 0 and team.sharing is not engine.Sharing.LEND_AND_BORROW):
                    continue
                base = max(quota, 2 if self.capacity[name] else 0) * rng.uniform(0.45, 1.25)
                sizes = [g for g in (1, 2, 4, 8) if g <= max(1, gpus_per_node[name])]
                self.demand[(team.name, name)] = Demand(base, rng.uniform(-3, 3), job_gpus=rng.choice(sizes))
        self.previous_borrowed: dict[tuple[str, str], int] = defaultdict(int)
        self.previous_own: dict[tuple[str, str], int] = defaultdict(int)
        # Per instance type, the preemptions whose preemptor has not started yet: (team, event).
        self.unnamed: dict[str, list[tuple[str, DemandEvent]]] = defaultdict(list)
        # Why each team's jobs wait at the current step (the pending reason samples).
        self.reasons: dict[tuple[str, str], str] = {}
        # The demand as jobs, with a generator of its own so that the capacity history is the
        # same with or without them written.
        self.job_rng = random.Random(rng.random())
        self.open: dict[tuple[str, str], list[DemandJob]] = defaultdict(list)
        self.type_running: dict[str, int] = defaultdict(int)  # GPUs the demand's jobs hold
        self.done: list[tuple[tuple[str, str], DemandJob]] = []
        # What the current step's preemptions cost, by (team, type): ``history.COST_FIELDS``.
        self.costs: dict[tuple[str, str], dict[str, float]] = {}
        self.priority_ids = list(PriorityClass.objects.order_by("-weight").values_list("id", flat=True))

    def step(self, t: float, step_minutes: int) -> tuple[Any, dict[tuple[str, str], dict[str, int]]]:
        """One moment: the accounting and the preemptions since the previous step."""
        used: dict[tuple[str, str], int] = {}
        pending: dict[tuple[str, str], tuple[int, int]] = {}
        preempted: dict[tuple[str, str], dict[str, int]] = {}
        self.costs = {}
        weights = {team.name: team.fair_share_weight for team in self.teams}
        for name in self.types:
            wants: dict[str, int] = {}
            own: dict[str, int] = {}
            caps: dict[str, float] = {}
            for team in self.teams:
                d = self.demand.get((team.name, name))
                if d is None:
                    continue
                quota = team.quotas.get(name) or engine.Quota()
                want = d.at(t, self.rng, step_minutes)
                own[team.name] = min(want, quota.quota)
                caps[team.name] = borrow_cap(team, quota)
                wants[team.name] = max(0, min(want - own[team.name], caps[team.name]))
                wants[team.name] = int(wants[team.name])
                pending[(team.name, name)] = (want, 0)
            within = sum(own.values())
            capacity = self.capacity[name]
            if within > capacity:  # capacity lost: scale everyone's quota use down
                scale = capacity / within
                own = {k: math.floor(v * scale) for k, v in own.items()}
                within = sum(own.values())
            extra = share_idle(capacity - within, wants, weights)
            # Every team's jobs give back their GPUs before any team's start, as in one cycle.
            admit: list[tuple[tuple[str, str], int, int, int]] = []
            grown = {t: max(0, own[t] - self.previous_own[(t, name)]) for t in own}
            for team_name in own:
                key = (team_name, name)
                d = self.demand[key]
                u = own[team_name] + extra.get(team_name, 0)
                used[key] = u
                want = pending[key][0]
                waiting = max(0, want - u)
                pending[key] = (waiting, math.ceil(waiting / d.job_gpus))
                borrowed = max(0, u - self.quotas[key])
                counts: dict[str, int] = {}
                # Borrowed GPUs given back while others' in-quota use grew: reclaimed jobs (a
                # borrower whose own demand fell gives GPUs back without a preemption).
                others_grew = sum(grown.values()) - grown[team_name]
                drop = min(self.previous_borrowed[key] - borrowed, others_grew)
                if drop >= d.job_gpus:  # whole jobs only: minute-to-minute jitter preempts nothing
                    counts["reclaim"] = drop // d.job_gpus
                if waiting and self.rng.random() < 0.01 * step_minutes:
                    counts["in-team"] = 1
                if borrowed and self.rng.random() < 0.003 * step_minutes:
                    counts["fair-share"] = 1
                if counts:
                    preempted[key] = counts
                self.previous_borrowed[key] = borrowed
                self.previous_own[key] = own[team_name]
                if u < self.quotas[key]:
                    self.reasons[key] = engine.PendingCode.WAITING_FOR_QUOTA.value
                elif want - own[team_name] > caps[team_name]:
                    self.reasons[key] = engine.PendingCode.BORROW_LIMIT.value
                else:
                    self.reasons[key] = engine.PendingCode.NO_IDLE_CAPACITY.value
                self._release(key, t, counts)
                admit.append((key, want, u, d.job_gpus))
            starting: dict[str, list[DemandJob]] = defaultdict(list)
            for key, want, u, gpus in admit:
                self._admit(key, t, want, u, gpus, starting)
            self._name_preemptors(name, t, step_minutes, starting)
        accounting = account(
            instance_types=self.types,
            capacity=self.capacity,
            teams=self.teams,
            policy=self.snapshot.policy,
            used=used,
            pending=pending,
        )
        return accounting, preempted

    def _release(self, key: tuple[str, str], t: float, counts: dict[str, int]) -> None:
        """The jobs of one team on one type that stop at ``t``: ended ones leave, and the newest
        runs are preempted as ``counts`` says, lowered to the jobs there are to preempt so that
        the history counts exactly the preemptions its jobs record. A preempted job waits again
        with its submission kept (POLICY.md section 4), its run to do again."""
        name = key[1]
        kept = []
        for job in self.open[key]:
            if job.start is not None and job.start + job.run_s <= t:
                self.done.append((key, job))
                self.type_running[name] -= job.gpus
            else:
                kept.append(job)
        self.open[key] = kept
        if not counts:
            return
        newest = sorted((job for job in kept if job.start is not None), key=lambda job: -(job.start or 0))
        for reason in sorted(counts):
            taken = newest[: counts[reason]]
            del newest[: counts[reason]]
            counts[reason] = len(taken)
            for job in taken:
                # No checkpoints in the demo: the whole run is lost.
                ran = t - (job.start or t)
                lost = job.gpus * ran
                costs = self.costs.setdefault(key, dict.fromkeys(history.COST_FIELDS, 0.0))
                costs["lost_gpu_seconds"] += lost
                costs[history.RAN_FIELDS[history.ran_band(ran)][1]] += 1
                job.start, job.preempted_at = None, t
                self.type_running[name] -= job.gpus
                preemption = DemandEvent(t, JobEventKind.PREEMPTED, reason, ran_s=ran, lost_gpu_seconds=lost)
                job.events += [preemption, DemandEvent(t, JobEventKind.REQUEUED, reason)]
                self.unnamed[name].append((key[0], preemption))

    def _admit(
        self,
        key: tuple[str, str],
        t: float,
        want: int,
        used: int,
        gpus: int,
        starting: dict[str, list[DemandJob]],
    ) -> None:
        """The demand of one team on one type at ``t`` as jobs: new ones come while the jobs
        fall short of ``want``, and waiting ones start in submit order while the allocation
        ``used`` and the type's capacity have room (a job preempted at ``t`` waits at least a
        step). A running job runs to its end: when the allocation dips (its minute-to-minute
        noise), the team's jobs hold a little more than it for a while, never more than the
        capacity."""
        rng = self.job_rng
        name = key[1]
        kept = self.open[key]
        total = sum(job.gpus for job in kept)
        while total < want:
            priority = rng.choice(self.priority_ids) if self.priority_ids else None
            kept.append(DemandJob(t - rng.uniform(0, 60), gpus, rng.uniform(600, 6 * 3600), priority))
            total += gpus
        busy = sum(job.gpus for job in kept if job.start is not None)
        room = self.capacity[name] - self.type_running[name]
        for job in kept:
            if job.start is None and job.preempted_at != t and busy + job.gpus <= used and job.gpus <= room:
                job.start = t
                job.events.append(DemandEvent(t, JobEventKind.STARTED))
                starting[key[0]].append(job)
                busy += job.gpus
                room -= job.gpus
                self.type_running[name] += job.gpus

    def _name_preemptors(
        self, name: str, t: float, step_minutes: int, starting: dict[str, list[DemandJob]]
    ) -> None:
        """Name the preemptor of each preemption on type ``name`` still without one: a job that
        started at ``t``, of the same team for an in-team preemption, of another team for
        reclaim and fair share. One that finds none within ``PREEMPTOR_WINDOW_S`` (or a step)
        names none, as an event whose preemptor was deleted."""
        window = max(PREEMPTOR_WINDOW_S, step_minutes * 60)
        waiting = []
        for team, event in self.unnamed[name]:
            if event.reason == engine.PreemptionReason.IN_TEAM.value:
                candidates = starting.get(team, [])
            else:
                candidates = [job for other, jobs in starting.items() if other != team for job in jobs]
            if candidates:
                event.preemptor = self.job_rng.choice(candidates)
            elif t - event.at < window:
                waiting.append((team, event))
        self.unnamed[name] = waiting

    def _team_values(self, row: Any, preempted: dict[tuple[str, str], dict[str, int]]) -> dict[str, Any]:
        d = self.demand.get((row.team, row.instance_type))
        job_gpus = d.job_gpus if d else 1
        counts = preempted.get((row.team, row.instance_type), {})
        costs = self.costs.get((row.team, row.instance_type), {})
        return {
            "quota": row.quota,
            "used": row.used,
            "used_within_quota": row.used_within_quota,
            "borrowed": row.borrowed,
            "lent": row.lent,
            "idle_quota": row.idle_quota,
            "pending_gpus": row.pending_gpus,
            "running_jobs": math.ceil(row.used / job_gpus),
            "pending_jobs": row.pending_jobs,
            **{column: counts.get(reason, 0) for reason, column in history.PREEMPTION_FIELDS.items()},
            **{column: costs.get(column, 0) for column in history.COST_FIELDS},
        }

    @staticmethod
    def _capacity_values(row: Any) -> dict[str, Any]:
        sample = history.capacity_sample(row)
        return {column: getattr(sample, column) for column in CAPACITY_COLUMNS}

    def minute_samples(self, start: datetime, end: datetime) -> int:
        """Step every minute of [start, end] and write minute samples; returns rows written."""
        team_rows: list[tuple[Any, ...]] = []
        capacity_rows: list[tuple[Any, ...]] = []
        reason_rows: list[tuple[Any, ...]] = []
        minute = start
        while minute <= end:
            at = db_time(minute)
            accounting, preempted = self.step(minute.timestamp(), 1)
            if minute.minute % PENDING_SAMPLE_MINUTES == 0:
                reason_rows += self._reason_samples(minute, accounting, PENDING_SAMPLE_MINUTES)
            for row in accounting.teams:
                values = self._team_values(row, preempted)
                # As the live sampler: a row with nothing but preemptions is written too.
                if any(values[c] for c in ("quota", "used", "pending_gpus", "lent", *PREEMPTED_COLUMNS)):
                    ids = (at, self.team_ids[row.team], self.type_ids[row.instance_type])
                    team_rows.append((*ids, *values.values()))
            for row in accounting.instance_types:
                values = self._capacity_values(row)
                capacity_rows.append((at, self.type_ids[row.instance_type], *values.values()))
            minute += history.MINUTE
        team_columns = ["minute", "team_id", "instance_type_id", *self._team_values_columns()]
        insert_rows(TeamUsageMinute, team_columns, team_rows)
        insert_rows(CapacityMinute, ["minute", "instance_type_id", *CAPACITY_COLUMNS], capacity_rows)
        insert_rows(PendingReasonSample, REASON_COLUMNS, reason_rows)
        return len(team_rows) + len(capacity_rows)

    def _reason_samples(self, moment: datetime, accounting: Any, minutes: int) -> list[tuple[Any, ...]]:
        """The pending reason samples of one step (``reports.services.pending_reasons_sample``'s
        rows): the history's pending jobs of each team and type, with the allocator's reason.
        None older than the samples' retention, which the live sampler would delete."""
        if moment < self.now - timedelta(days=PENDING_SAMPLE_DAYS):
            return []
        at = db_time(moment)
        return [
            (
                at,
                self.team_ids[row.team],
                self.type_ids[row.instance_type],
                self.reasons[(row.team, row.instance_type)],
                row.pending_jobs,
                row.pending_gpus,
                minutes,
            )
            for row in accounting.teams
            if row.pending_jobs and (row.team, row.instance_type) in self.reasons
        ]

    @staticmethod
    def _team_values_columns() -> list[str]:
        return [*TEAM_COLUMNS, *history.PREEMPTION_FIELDS.values(), *history.COST_FIELDS]

    def hour_rollups(self, start: datetime, end: datetime, step: int) -> int:
        """Step [start, end) every ``step`` minutes and write hour rollups directly, each step
        standing for ``step`` minutes; returns rows written."""
        team_columns = [
            *history.TEAM_SUMS.values(),
            *history.PREEMPTION_FIELDS.values(),
            *history.COST_FIELDS,
            "peak_used",
            "peak_pending_gpus",
        ]
        capacity_columns = [*history.CAPACITY_SUMS.values(), "minutes", "peak_allocated", "peak_pending_gpus"]
        team_rows: list[tuple[Any, ...]] = []
        capacity_rows: list[tuple[Any, ...]] = []
        reason_rows: list[tuple[Any, ...]] = []
        hour = start
        while hour < end:
            teams: dict[tuple[str, str], dict[str, float]] = {}
            types: dict[str, dict[str, float]] = {}
            for k in range(0, 60, step):
                moment = hour + timedelta(minutes=k)
                accounting, preempted = self.step(moment.timestamp(), step)
                reason_rows += self._reason_samples(moment, accounting, step)
                for row in accounting.teams:
                    v = self._team_values(row, preempted)
                    acc = teams.setdefault((row.team, row.instance_type), dict.fromkeys(team_columns, 0.0))
                    for column, rollup in history.TEAM_SUMS.items():
                        acc[rollup] += v[column] * step
                    for column in [*history.PREEMPTION_FIELDS.values(), *history.COST_FIELDS]:
                        acc[column] += v[column]
                    acc["peak_used"] = max(acc["peak_used"], v["used"])
                    acc["peak_pending_gpus"] = max(acc["peak_pending_gpus"], v["pending_gpus"])
                for row in accounting.instance_types:
                    v = self._capacity_values(row)
                    acc = types.setdefault(row.instance_type, dict.fromkeys(capacity_columns, 0.0))
                    acc["minutes"] += step
                    for column, rollup in history.CAPACITY_SUMS.items():
                        acc[rollup] += v[column] * step
                    acc["peak_allocated"] = max(acc["peak_allocated"], v["allocated"])
                    acc["peak_pending_gpus"] = max(acc["peak_pending_gpus"], v["pending_gpus"])
            at = db_time(hour)
            for (team, name), acc in teams.items():
                if any(acc.values()):
                    values = (v if c in FLOAT_SUMS else round(v) for c, v in acc.items())
                    team_rows.append(("hour", at, self.team_ids[team], self.type_ids[name], *values))
            for name, acc in types.items():
                capacity_rows.append(("hour", at, self.type_ids[name], *(round(v) for v in acc.values())))
            hour += history.HOUR
        insert_rows(
            TeamUsageRollup, ["period", "start", "team_id", "instance_type_id", *team_columns], team_rows
        )
        insert_rows(CapacityRollup, ["period", "start", "instance_type_id", *capacity_columns], capacity_rows)
        insert_rows(PendingReasonSample, REASON_COLUMNS, reason_rows)
        return len(team_rows) + len(capacity_rows)

    def write_jobs(self) -> int:
        """The demand's finished jobs (``_release``) and their events, in the order they were
        submitted.

        Of the jobs still running or waiting at the history's end, those preempted during it
        are written too, cancelled at its end: the history counted their preemptions, so the
        reports and dashboards, which read each preemption from its job's events, need their
        rows to agree with it. The others are not written (a live demo has no such jobs in
        its backend, and they are in no count of the history but its GPU-hours)."""
        tz = timezone.get_current_timezone()

        def moment(t: float) -> datetime:
            return datetime.fromtimestamp(t, tz=tz)

        def preempted(job: DemandJob) -> bool:
            return any(e.kind == JobEventKind.PREEMPTED for e in job.events)

        end = self.now.timestamp()  # every event of the history is at or before it
        cut = [(key, job) for key, jobs in self.open.items() for job in jobs if preempted(job)]
        done = sorted([*self.done, *cut], key=lambda pair: pair[1].submit)
        cancelled = {id(job) for _, job in cut}
        jobs = []
        for i, ((team, name), job) in enumerate(done):
            preemptions = [e.at for e in job.events if e.kind == JobEventKind.PREEMPTED]
            if id(job) in cancelled:
                last_start = max(e.at for e in job.events if e.kind == JobEventKind.STARTED)
                state, started, ended = JobState.CANCELLED, last_start, end
            else:
                assert job.start is not None
                state, started, ended = JobState.FINISHED, job.start, job.start + job.run_s
            jobs.append(
                Job(
                    team_id=self.team_ids[team],
                    instance_type_id=self.type_ids[name],
                    name=f"{JOB_PREFIX}{team}-{i}",
                    gpus=job.gpus,
                    priority_class_id=job.priority_id,
                    state=state,
                    submitted_at=moment(job.submit),
                    started_at=moment(started),
                    finished_at=moment(ended),
                    preemption_count=len(preemptions),
                    lost_gpu_seconds=sum(e.lost_gpu_seconds or 0.0 for e in job.events),
                    last_preempted_at=moment(preemptions[-1]) if preemptions else None,
                )
            )
        Job.objects.bulk_create(jobs, batch_size=5000)  # sets each row's id (PostgreSQL, SQLite)
        pk = {id(job): row.pk for (_, job), row in zip(done, jobs, strict=True)}
        no_nodes = JobEvent._meta.get_field("nodes").get_db_prep_value([], connection)
        events: list[tuple[Any, ...]] = []
        for (_, job), row in zip(done, jobs, strict=True):
            if id(job) in cancelled:
                last = DemandEvent(end, JobEventKind.CANCELLED)
            else:
                assert job.start is not None
                last = DemandEvent(job.start + job.run_s, JobEventKind.FINISHED)
            history_of_job = [DemandEvent(job.submit, JobEventKind.SUBMITTED), *job.events, last]
            for event in history_of_job:
                by = pk.get(id(event.preemptor)) if event.preemptor is not None else None
                message = HISTORY_END if event.kind == JobEventKind.CANCELLED else ""
                events.append(
                    (
                        row.pk, event.kind, db_time(moment(event.at)), no_nodes, event.reason, by, message,
                        event.ran_s, event.lost_gpu_seconds,
                    )
                )  # fmt: skip
        insert_rows(JobEvent, EVENT_COLUMNS, events)
        return len(jobs)
