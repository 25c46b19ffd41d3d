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
3. Finished jobs are written too (``backfill-`` names). In the minute window they are the
   demand itself: each team's wanted GPUs on a type are jobs of its size, submitted as the
   demand rises, started first come first served as its allocation allows, each running 10
   minutes to 6 hours; so the wait-time charts and a what-if replay of that window see the
   load the capacity history shows. Before the window, a sample of jobs for the wait charts.
Running it again replaces the history of the period (and the earlier ``backfill-`` jobs).
The history ends now, or at ``--end``: the same seed and end give the same history (the demand
follows the hour of the day and the day of the week, so the end matters as much as the seed).
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, models, transaction
from django.utils import timezone

from allocations import engine
from allocations.choices import JobState
from allocations.engine.accounting import account
from allocations.models import (
    CapacityMinute,
    CapacityRollup,
    InstanceType,
    Job,
    PriorityClass,
    Team,
    TeamUsageMinute,
    TeamUsageRollup,
)
from allocations.selectors.snapshot import build_snapshot
from allocations.services import history

JOB_PREFIX = "backfill-"
TEAM_COLUMNS = [
    "quota",
    "used",
    "used_within_quota",
    "borrowed",
    "lent",
    "idle_quota",
    "pending_gpus",
    "running_jobs",
    "pending_jobs",
]
CAPACITY_COLUMNS = [
    "capacity",
    "allocated",
    "idle",
    "unallocated",
    "pending_gpus",
    "pending_jobs",
    "idle_while_waiting",
]
FLOAT_SUMS = ("lent_gpu_minutes", "idle_quota_gpu_minutes")


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


@dataclass(slots=True)
class DemandJob:
    """One job of the synthetic demand: submitted, started (None while it waits), its run."""

    submit: float
    gpus: int
    run_s: float
    priority_id: int | None
    start: float | None = None


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
        self.busy: list[tuple[float, str, str, float, int]] = []  # (t, team, type, pending, used)
        # The demand as jobs (minute window only), with a generator of its own so that the
        # capacity history is the same with or without them.
        self.tracking = False
        self.job_rng = random.Random(rng.random())
        self.open: dict[tuple[str, str], list[DemandJob]] = defaultdict(list)
        self.type_running: dict[str, int] = defaultdict(int)  # GPUs the demand's jobs hold
        self.done: list[tuple[tuple[str, str], DemandJob]] = []
        self.priority_ids = list(PriorityClass.objects.order_by("-weight").values_list("id", flat=True))

    def step(self, t: float, step_minutes: int) -> tuple[Any, dict[tuple[str, str], dict[str, int]]]:
        """One moment: the accounting and the preemptions since the previous step."""
        used: dict[tuple[str, str], int] = {}
        pending: dict[tuple[str, str], tuple[int, int]] = {}
        preempted: dict[tuple[str, str], dict[str, int]] = {}
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
                # Borrowed GPUs given back while others' in-quota use grew: reclaimed jobs.
                drop = self.previous_borrowed[key] - borrowed
                if drop >= d.job_gpus:  # whole jobs only: minute-to-minute jitter preempts nothing
                    counts["reclaim"] = drop // d.job_gpus
                if waiting and self.rng.random() < 0.01 * step_minutes:
                    counts["in-team"] = 1
                if borrowed and self.rng.random() < 0.003 * step_minutes:
                    counts["fair-share"] = 1
                if counts:
                    preempted[key] = counts
                self.previous_borrowed[key] = borrowed
                if self.rng.random() < 0.003 * step_minutes and not self.tracking:
                    self.busy.append((t, team_name, name, waiting / max(1, u + waiting), d.job_gpus))
                if self.tracking:
                    self._track(key, t, want, u, d.job_gpus)
        accounting = account(
            instance_types=self.types,
            capacity=self.capacity,
            teams=self.teams,
            policy=self.snapshot.policy,
            used=used,
            pending=pending,
        )
        return accounting, preempted

    def _track(self, key: tuple[str, str], t: float, want: int, used: int, gpus: int) -> None:
        """The demand of one team on one type at ``t`` as jobs: ended ones leave, new ones come
        while the jobs fall short of ``want``, and waiting ones start in submit order while the
        allocation ``used`` and the type's capacity have room. A running job runs to its end:
        when the allocation dips (its minute-to-minute noise), the team's jobs hold a little
        more than it for a while, never more than the capacity."""
        rng = self.job_rng
        name = key[1]
        kept = []
        for job in self.open[key]:
            if job.start is not None and job.start + job.run_s <= t:
                self.done.append((key, job))
                self.type_running[name] -= job.gpus
            else:
                kept.append(job)
        total = sum(job.gpus for job in kept)
        while total < want:
            priority = rng.choice(self.priority_ids) if self.priority_ids else None
            kept.append(DemandJob(t - rng.uniform(0, 60), gpus, rng.uniform(600, 6 * 3600), priority))
            total += gpus
        busy = sum(job.gpus for job in kept if job.start is not None)
        room = self.capacity[name] - self.type_running[name]
        for job in kept:
            if job.start is None and busy + job.gpus <= used and job.gpus <= room:
                job.start = t
                busy += job.gpus
                room -= job.gpus
                self.type_running[name] += job.gpus
        self.open[key] = kept

    def _team_values(self, row: Any, preempted: dict[tuple[str, str], dict[str, int]]) -> dict[str, Any]:
        d = self.demand.get((row.team, row.instance_type))
        job_gpus = d.job_gpus if d else 1
        counts = preempted.get((row.team, row.instance_type), {})
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
        }

    @staticmethod
    def _capacity_values(row: Any) -> dict[str, Any]:
        return {
            "capacity": row.capacity,
            "allocated": row.allocated,
            "idle": row.idle,
            "unallocated": row.unallocated,
            "pending_gpus": row.pending_gpus,
            "pending_jobs": row.pending_jobs,
            "idle_while_waiting": min(row.idle, row.pending_gpus),
        }

    def minute_samples(self, start: datetime, end: datetime) -> int:
        """Step every minute of [start, end] and write minute samples; returns rows written."""
        self.tracking = True
        team_rows: list[tuple[Any, ...]] = []
        capacity_rows: list[tuple[Any, ...]] = []
        minute = start
        while minute <= end:
            at = db_time(minute)
            accounting, preempted = self.step(minute.timestamp(), 1)
            for row in accounting.teams:
                values = self._team_values(row, preempted)
                if values["quota"] or values["used"] or values["pending_gpus"] or values["lent"]:
                    ids = (at, self.team_ids[row.team], self.type_ids[row.instance_type])
                    team_rows.append((*ids, *values.values()))
            for row in accounting.instance_types:
                values = self._capacity_values(row)
                capacity_rows.append((at, self.type_ids[row.instance_type], *values.values()))
            minute += history.MINUTE
        team_columns = ["minute", "team_id", "instance_type_id", *self._team_values_columns()]
        insert_rows(TeamUsageMinute, team_columns, team_rows)
        insert_rows(CapacityMinute, ["minute", "instance_type_id", *CAPACITY_COLUMNS], capacity_rows)
        return len(team_rows) + len(capacity_rows)

    @staticmethod
    def _team_values_columns() -> list[str]:
        return [*TEAM_COLUMNS, *history.PREEMPTION_FIELDS.values()]

    def hour_rollups(self, start: datetime, end: datetime, step: int) -> int:
        """Step [start, end) every ``step`` minutes and write hour rollups directly, each step
        standing for ``step`` minutes; returns rows written."""
        team_columns = [
            *history.TEAM_SUMS.values(),
            *history.PREEMPTION_FIELDS.values(),
            "peak_used",
            "peak_pending_gpus",
        ]
        capacity_columns = [*history.CAPACITY_SUMS.values(), "minutes", "peak_allocated", "peak_pending_gpus"]
        team_rows: list[tuple[Any, ...]] = []
        capacity_rows: list[tuple[Any, ...]] = []
        hour = start
        while hour < end:
            teams: dict[tuple[str, str], dict[str, float]] = {}
            types: dict[str, dict[str, float]] = {}
            for k in range(0, 60, step):
                accounting, preempted = self.step((hour + timedelta(minutes=k)).timestamp(), step)
                for row in accounting.teams:
                    v = self._team_values(row, preempted)
                    acc = teams.setdefault((row.team, row.instance_type), dict.fromkeys(team_columns, 0.0))
                    for column, rollup in history.TEAM_SUMS.items():
                        acc[rollup] += v[column] * step
                    for column in history.PREEMPTION_FIELDS.values():
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
        return len(team_rows) + len(capacity_rows)

    def write_jobs(self) -> int:
        """The finished jobs: the demand's jobs of the minute window (``_track``), and before
        it, jobs at the moments sampled while stepping (the busier the team's type was, pending
        over demand, the longer the wait)."""
        tz = timezone.get_current_timezone()
        jobs = []
        for i, (t, team, name, busy, gpus) in enumerate(self.busy):
            started = datetime.fromtimestamp(t, tz=tz)
            wait = self.rng.expovariate(1 / (30 + 4 * 3600 * busy**2))
            jobs.append(
                Job(
                    team_id=self.team_ids[team],
                    instance_type_id=self.type_ids[name],
                    name=f"{JOB_PREFIX}{team}-{i}",
                    gpus=gpus,
                    state=JobState.FINISHED,
                    submitted_at=started - timedelta(seconds=wait),
                    started_at=started,
                    finished_at=min(self.now, started + timedelta(seconds=self.rng.uniform(600, 6 * 3600))),
                )
            )
        for i, ((team, name), job) in enumerate(self.done, start=len(jobs)):
            assert job.start is not None
            jobs.append(
                Job(
                    team_id=self.team_ids[team],
                    instance_type_id=self.type_ids[name],
                    name=f"{JOB_PREFIX}{team}-{i}",
                    gpus=job.gpus,
                    priority_class_id=job.priority_id,
                    state=JobState.FINISHED,
                    submitted_at=datetime.fromtimestamp(job.submit, tz=tz),
                    started_at=datetime.fromtimestamp(job.start, tz=tz),
                    finished_at=datetime.fromtimestamp(job.start + job.run_s, tz=tz),
                )
            )
        Job.objects.bulk_create(jobs, batch_size=5000)
        return len(jobs)
