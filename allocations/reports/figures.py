"""The figures of a weekly report, per team and for the cluster, as plain dataclasses.

Sources (``weekly_figures`` runs the same nine queries whatever the number of teams, jobs or
weeks). Each figure is read where the dashboards read it (``selectors/history.py``), so that a
report and a dashboard of the same days never disagree:

1. hour rollups of the history (``TeamUsageRollup``, ``CapacityRollup``), summed per week of
   the 8-week trend and per local day of the reported week: GPU-hours, pending job-hours and
   the preemptions suffered, by reason. Hour rollups, not day rollups: day rollups are UTC
   days, and a week of the cluster's calendar starts at its local midnight;
2. JobEvent rows, through ``selectors.history.job_activity`` (two queries): jobs run,
   finished and failed, waits, preemptions caused, GPU-hours lost to preemption;
3. ``PendingReasonSample`` rows (``reports/services.py`` samples the pending jobs' reasons,
   which jobs lose when they start): the most frequent pending reasons, the borrow cap;
4. instance types' ``price_per_gpu_hour``: the chargeback.

Where the sources disagree the report says so instead of printing a figure that contradicts
another: preemptions counted by the history without a JobEvent row (``Jobs.unrecorded``), a week
whose jobs waited without a pending reason sampled (``pending_job_hours`` with no reasons).

GPU-hours are rollup GPU-minutes / 60. A week without samples (the sampler was down) has no
figures for those hours: the report says how many hours were sampled.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import date, datetime
from typing import Any, TypeVar

from django.db.models import Case, F, IntegerField, QuerySet, Sum, Value, When

from allocations import engine
from allocations.models import (
    CapacityRollup,
    HistoryPeriod,
    InstanceType,
    PendingReasonSample,
    Team,
    TeamUsageRollup,
)
from allocations.selectors.history import JobActivity, WaitStatistics, job_activity
from allocations.services.history import PREEMPTION_FIELDS

from .weeks import Week

TREND_WEEKS = 8
# Recommendation 1: a team that used under this share of its quota for this many weeks.
UNDERUSED_SHARE = 0.5
UNDERUSED_WEEKS = 4
TOP = 3  # lenders and borrowers named in the cluster report
TOP_PENDING_REASONS = 3

Figures = TypeVar("Figures", "Usage", "Jobs")


# --- The figures -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Usage:
    """GPU-hours of a team (or of all teams) over a period, and their cost.

    ``used_within_quota + borrowed`` is what the team ran; ``lent`` is its quota that others
    used, ``idle_quota`` its quota that nobody used (POLICY.md section 2)."""

    quota: float = 0.0
    used_within_quota: float = 0.0
    borrowed: float = 0.0
    lent: float = 0.0
    idle_quota: float = 0.0
    cost_own: float = 0.0
    cost_borrowed: float = 0.0
    preemptions: int = 0  # counted by the history sampler (the trend's figure)

    @property
    def used(self) -> float:
        return self.used_within_quota + self.borrowed

    @property
    def cost(self) -> float:
        return self.cost_own + self.cost_borrowed

    @property
    def quota_utilization(self) -> float | None:
        """Share of the quota's GPU-hours used by the team itself; None without a quota."""
        return self.used_within_quota / self.quota if self.quota else None

    def __add__(self, other: Usage) -> Usage:
        return _added(self, other)


@dataclass(frozen=True, slots=True)
class TypeUsage:
    """A team's usage of one instance type in the week, at that type's price."""

    instance_type: str
    price_per_gpu_hour: float
    usage: Usage


@dataclass(frozen=True, slots=True)
class WeekUsage:
    """One week of the trend."""

    week: str
    usage: Usage


@dataclass(frozen=True, slots=True)
class DailyRow:
    """One local day of the reported week (the CSV attachment): a team on one instance type,
    or (``team`` empty) the cluster's capacity of one instance type."""

    day: date
    team: str
    instance_type: str
    usage: Usage = field(default_factory=Usage)
    capacity: float = 0.0
    idle: float = 0.0
    idle_while_waiting: float = 0.0


@dataclass(frozen=True, slots=True)
class PendingReasonTotal:
    """Job-hours (and GPU-hours) that jobs spent pending with one reason (POLICY.md 5)."""

    code: str
    job_hours: float
    gpu_hours: float


@dataclass(frozen=True, slots=True)
class Jobs(WaitStatistics):
    """What the team's jobs did in the week: the preemptions they suffered as the history (and
    the dashboards) counted them, everything else from their JobEvent rows (``JobActivity``)."""

    started: int = 0  # distinct jobs that started at least once
    finished: int = 0
    failed: int = 0
    waits: tuple[float, ...] = ()  # seconds, one per start in the week
    preemptions_suffered: dict[str, int] = field(default_factory=dict)  # by reason, from the history
    preemptions_caused: int = 0
    gpu_hours_lost: float = 0.0
    preemptions_recorded: int = 0  # preempted events: the preemptions ``gpu_hours_lost`` covers

    @classmethod
    def of(cls, activity: JobActivity, suffered: dict[str, int]) -> Jobs:
        return cls(
            started=activity.started,
            finished=activity.finished,
            failed=activity.failed,
            waits=activity.waits,
            preemptions_suffered={reason: n for reason, n in sorted(suffered.items()) if n},
            preemptions_caused=activity.preemptions_caused,
            gpu_hours_lost=activity.gpu_hours_lost,
            preemptions_recorded=activity.preempted,
        )

    @property
    def unrecorded(self) -> int:
        """Preemptions the history counted that no JobEvent row records (a history written
        without its jobs, such as an imported or synthetic one): the GPU-hours they lost and who
        caused them are not known."""
        return max(0, self.preempted - self.preemptions_recorded)

    @property
    def preempted(self) -> int:
        return sum(self.preemptions_suffered.values())


@dataclass(frozen=True, slots=True)
class TeamReport:
    """The figures of one team's week."""

    team: str
    display_name: str
    week: Week
    usage: Usage
    by_type: tuple[TypeUsage, ...]
    jobs: Jobs
    pending_reasons: tuple[PendingReasonTotal, ...]
    trend: tuple[WeekUsage, ...]
    daily: tuple[DailyRow, ...]
    hours_sampled: float
    pending_job_hours: float = 0.0  # job-hours its jobs waited, from the history


@dataclass(frozen=True, slots=True)
class Recommendation:
    """A suggested policy change and the figures that support it."""

    kind: str  # lower-quota | raise-borrow-limit
    team: str
    text: str
    evidence: str


@dataclass(frozen=True, slots=True)
class ClusterReport:
    """The cluster's week: every team, capacity, who lent and borrowed most, recommendations."""

    week: Week
    usage: Usage
    capacity: float  # GPU-hours of ready capacity
    allocated: float
    idle: float
    idle_while_waiting: float
    teams: tuple[TeamReport, ...]
    jobs: Jobs
    top_lenders: tuple[tuple[str, float], ...]
    top_borrowers: tuple[tuple[str, float], ...]
    pending_reasons: tuple[PendingReasonTotal, ...]
    recommendations: tuple[Recommendation, ...]
    trend: tuple[WeekUsage, ...]
    trend_capacity: tuple[tuple[str, float, float], ...]  # (week, capacity, idle while waiting)
    daily: tuple[DailyRow, ...]
    hours_sampled: float
    pending_job_hours: float = 0.0

    @property
    def borrowed_from_unallocated(self) -> float:
        """GPU-hours borrowed from capacity in no team's quota: ``usage`` sums every team, and
        borrowing draws on unallocated capacity first, then on lent quota."""
        return max(0.0, self.usage.borrowed - self.usage.lent)

    def team(self, name: str) -> TeamReport:
        for report in self.teams:
            if report.team == name:
                return report
        raise KeyError(name)


# --- Queries -----------------------------------------------------------------------------------
def _bucket(bounds: Sequence[datetime]) -> Case:
    """The index of the [bounds[i], bounds[i+1]) interval an hour rollup starts in."""
    return Case(
        *[When(start__gte=bounds[i], start__lt=bounds[i + 1], then=Value(i)) for i in range(len(bounds) - 1)],
        output_field=IntegerField(),
    )


TEAM_SUMS = {
    "quota": "quota_gpu_minutes",
    "used_within_quota": "used_within_quota_gpu_minutes",
    "borrowed": "borrowed_gpu_minutes",
    "lent": "lent_gpu_minutes",
    "idle_quota": "idle_quota_gpu_minutes",
}


def _team_sums(bounds: Sequence[datetime]) -> QuerySet[Any]:
    """Team rollups summed per (bucket, team, instance type): one query."""
    return (
        TeamUsageRollup.objects.filter(period=HistoryPeriod.HOUR, start__gte=bounds[0], start__lt=bounds[-1])
        .annotate(bucket=_bucket(bounds))
        .values("bucket", "team_id", "instance_type_id")
        .annotate(
            **{key: Sum(column) for key, column in TEAM_SUMS.items()},
            **{column: Sum(column) for column in PREEMPTION_FIELDS.values()},
            pending_job_minutes=Sum("pending_job_minutes"),
        )
        .order_by()
    )


def _capacity_sums(bounds: Sequence[datetime]) -> QuerySet[Any]:
    """Capacity rollups summed per (bucket, instance type): one query."""
    return (
        CapacityRollup.objects.filter(period=HistoryPeriod.HOUR, start__gte=bounds[0], start__lt=bounds[-1])
        .annotate(bucket=_bucket(bounds))
        .values("bucket", "instance_type_id")
        .annotate(
            minutes=Sum("minutes"),
            capacity=Sum("capacity_gpu_minutes"),
            allocated=Sum("allocated_gpu_minutes"),
            idle=Sum("idle_gpu_minutes"),
            idle_while_waiting=Sum("idle_while_waiting_gpu_minutes"),
        )
        .order_by()
    )


def _usage(row: dict[str, Any], price: float) -> Usage:
    hours = {key: float(row[key] or 0) / 60 for key in TEAM_SUMS}
    return Usage(
        **hours,
        cost_own=hours["used_within_quota"] * price,
        cost_borrowed=hours["borrowed"] * price,
        preemptions=sum(int(row[c] or 0) for c in PREEMPTION_FIELDS.values()),
    )


def _pending_reasons(week: Week) -> QuerySet[Any]:
    """Pending job-minutes and GPU-minutes per (team, instance type, reason): one query."""
    return (
        PendingReasonSample.objects.filter(at__gte=week.start, at__lt=week.end)
        .values("team_id", "instance_type_id", "code")
        .annotate(job_minutes=Sum(F("jobs") * F("minutes")), gpu_minutes=Sum(F("gpus") * F("minutes")))
        .order_by()
    )


def _reason_totals(rows: Iterable[dict[str, Any]]) -> tuple[PendingReasonTotal, ...]:
    jobs: dict[str, float] = defaultdict(float)
    gpus: dict[str, float] = defaultdict(float)
    for row in rows:
        jobs[row["code"]] += (row["job_minutes"] or 0) / 60
        gpus[row["code"]] += (row["gpu_minutes"] or 0) / 60
    ranked = sorted(jobs, key=lambda code: (-jobs[code], code))
    return tuple(PendingReasonTotal(code, jobs[code], gpus[code]) for code in ranked if jobs[code] > 0)


def _merge_jobs(parts: Iterable[Jobs]) -> Jobs:
    total = Jobs()
    suffered: dict[str, int] = defaultdict(int)
    for part in parts:
        for reason, n in part.preemptions_suffered.items():
            suffered[reason] += n
        total = _added(total, part, preemptions_suffered={})
    return replace(total, preemptions_suffered=dict(sorted(suffered.items())))


def _added(a: Figures, b: Figures, **others: Any) -> Figures:
    """``a`` and ``b`` added field by field (numbers summed, tuples joined), but for the fields
    ``others`` gives the values of."""
    sums = {f.name: getattr(a, f.name) + getattr(b, f.name) for f in fields(a) if f.name not in others}
    return replace(a, **sums, **others)


def _sum_usage(parts: Iterable[Usage]) -> Usage:
    total = Usage()
    for part in parts:
        total = total + part
    return total


# --- Assembly ----------------------------------------------------------------------------------
# Long, in numbered steps: each step is one query and the figures made from it, and the steps
# share the maps of the first (split, they would pass those maps along).
def weekly_figures(week: Week, *, teams: Sequence[str] | None = None) -> ClusterReport:
    """The figures of ``week``: the cluster's and every team's (or only ``teams``' reports;
    the cluster's totals always cover every team). Nine queries."""
    # 1. Teams and instance types (two queries).
    team_rows = list(Team.objects.values_list("id", "name", "display_name").order_by("name"))
    type_rows = list(InstanceType.objects.values_list("id", "name", "price_per_gpu_hour"))
    type_name = {pk: name for pk, name, _ in type_rows}
    price = {pk: float(p) for pk, _, p in type_rows}
    team_name = {pk: name for pk, name, _ in team_rows}

    # 2. The history: 8 weeks of team and capacity sums, and the week's days (four queries).
    trend_weeks = [week.shifted(i - TREND_WEEKS + 1) for i in range(TREND_WEEKS)]
    week_bounds = [w.start for w in trend_weeks] + [week.end]
    day_bounds = week.day_bounds()
    trend_usage: dict[tuple[int, int], Usage] = defaultdict(Usage)  # (team, week index)
    by_type: dict[tuple[int, int], Usage] = {}  # (team, type) in the reported week
    # The reported week's preemptions by reason and pending job-minutes, per team.
    suffered: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    pending_minutes: dict[int, float] = defaultdict(float)
    for row in _team_sums(week_bounds):
        usage = _usage(row, price[row["instance_type_id"]])
        trend_usage[(row["team_id"], row["bucket"])] += usage
        if row["bucket"] == TREND_WEEKS - 1:
            by_type[(row["team_id"], row["instance_type_id"])] = usage
            for reason, column in PREEMPTION_FIELDS.items():
                suffered[row["team_id"]][reason] += int(row[column] or 0)
            pending_minutes[row["team_id"]] += float(row["pending_job_minutes"] or 0)
    daily_team: dict[int, list[DailyRow]] = defaultdict(list)
    for row in _team_sums(day_bounds):
        daily_team[row["team_id"]].append(
            DailyRow(
                day=week.days()[row["bucket"]],
                team=team_name[row["team_id"]],
                instance_type=type_name[row["instance_type_id"]],
                usage=_usage(row, price[row["instance_type_id"]]),
            )
        )
    trend_capacity: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0.0])
    minutes_sampled = 0.0
    for row in _capacity_sums(week_bounds):
        sums = trend_capacity[row["bucket"]]
        for i, key in enumerate(("capacity", "allocated", "idle", "idle_while_waiting")):
            sums[i] += float(row[key] or 0) / 60
        if row["bucket"] == TREND_WEEKS - 1:
            # Every instance type is sampled each minute: the largest count is the week's.
            minutes_sampled = max(minutes_sampled, float(row["minutes"] or 0))
    daily_capacity = [
        DailyRow(
            day=week.days()[row["bucket"]],
            team="",
            instance_type=type_name[row["instance_type_id"]],
            capacity=float(row["capacity"] or 0) / 60,
            idle=float(row["idle"] or 0) / 60,
            idle_while_waiting=float(row["idle_while_waiting"] or 0) / 60,
        )
        for row in _capacity_sums(day_bounds)
    ]

    # 3. Jobs and pending reasons (three queries).
    activity = job_activity(week.start, week.end)
    jobs = {
        team_id: Jobs.of(activity.get(team_id, JobActivity()), suffered[team_id]) for team_id in team_name
    }
    reason_rows = list(_pending_reasons(week))
    reasons_by_team: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in reason_rows:
        reasons_by_team[row["team_id"]].append(row)

    # 4. One report per team, then the cluster's.
    reports = []
    for team_id, name, display_name in team_rows:
        types = tuple(
            TypeUsage(type_name[t], price[t], usage)
            for (tid, t), usage in sorted(by_type.items(), key=lambda kv: type_name[kv[0][1]])
            if tid == team_id
        )
        reports.append(
            TeamReport(
                team=name,
                display_name=display_name or name,
                week=week,
                usage=_sum_usage(t.usage for t in types),
                by_type=types,
                jobs=jobs.get(team_id, Jobs()),
                pending_reasons=_reason_totals(reasons_by_team[team_id]),
                trend=tuple(
                    WeekUsage(w.label, trend_usage.get((team_id, i), Usage()))
                    for i, w in enumerate(trend_weeks)
                ),
                daily=tuple(sorted(daily_team[team_id], key=lambda r: (r.day, r.instance_type))),
                hours_sampled=minutes_sampled / 60,
                pending_job_hours=pending_minutes[team_id] / 60,
            )
        )
    everyone = tuple(reports)
    capacity = trend_capacity.get(TREND_WEEKS - 1, [0.0] * 5)
    cluster = ClusterReport(
        week=week,
        usage=_sum_usage(r.usage for r in everyone),
        capacity=capacity[0],
        allocated=capacity[1],
        idle=capacity[2],
        idle_while_waiting=capacity[3],
        teams=everyone if teams is None else tuple(r for r in everyone if r.team in teams),
        jobs=_merge_jobs(r.jobs for r in everyone),
        top_lenders=_top((r.team, r.usage.lent) for r in everyone),
        top_borrowers=_top((r.team, r.usage.borrowed) for r in everyone),
        pending_reasons=_reason_totals(reason_rows),
        recommendations=(
            *_underused(everyone),
            *_borrow_capped(reason_rows, team_name, type_name, daily_capacity),
        ),
        trend=tuple(
            WeekUsage(w.label, _sum_usage(r.trend[i].usage for r in everyone))
            for i, w in enumerate(trend_weeks)
        ),
        trend_capacity=tuple(
            (w.label, trend_capacity[i][0], trend_capacity[i][3])
            if i in trend_capacity
            else (w.label, 0.0, 0.0)
            for i, w in enumerate(trend_weeks)
        ),
        daily=tuple(sorted(daily_capacity, key=lambda r: (r.day, r.instance_type))),
        hours_sampled=minutes_sampled / 60,
        pending_job_hours=sum(r.pending_job_hours for r in everyone),
    )
    return cluster


def _top(pairs: Iterable[tuple[str, float]]) -> tuple[tuple[str, float], ...]:
    ranked = sorted((p for p in pairs if p[1] > 0), key=lambda p: (-p[1], p[0]))
    return tuple(ranked[:TOP])


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


def _underused(reports: Iterable[TeamReport]) -> list[Recommendation]:
    """Teams that used under half their quota in each of the last four weeks (with a quota
    in each): candidates to lower their quota or lend more of it."""
    found = []
    for report in reports:
        recent = report.trend[-UNDERUSED_WEEKS:]
        shares = [w.usage.quota_utilization for w in recent]
        if len(recent) < UNDERUSED_WEEKS or any(s is None or s >= UNDERUSED_SHARE for s in shares):
            continue
        idle = sum(w.usage.idle_quota for w in recent)
        found.append(
            Recommendation(
                kind="lower-quota",
                team=report.team,
                text=(
                    f"Team {report.team} used under {UNDERUSED_SHARE:.0%} of its quota for "
                    f"{UNDERUSED_WEEKS} weeks: lower its quota or let it lend more."
                ),
                evidence=(
                    "Quota utilization "
                    + ", ".join(f"{w.week} {_percent(s)}" for w, s in zip(recent, shares, strict=True))
                    + f"; {idle:.1f} GPU-hours of its quota sat idle."
                ),
            )
        )
    return found


def _borrow_capped(
    rows: Iterable[dict[str, Any]],
    team_name: dict[int, str],
    type_name: dict[int, str],
    daily_capacity: Iterable[DailyRow],
) -> list[Recommendation]:
    """The team whose jobs waited longest on its borrow cap (``borrow-limit`` pending reason,
    POLICY.md section 5), with the idle capacity of that instance type meanwhile."""
    waited: dict[tuple[int, int], tuple[float, float]] = defaultdict(lambda: (0.0, 0.0))
    for row in rows:
        if row["code"] == engine.PendingCode.BORROW_LIMIT.value:
            jobs, gpus = waited[(row["team_id"], row["instance_type_id"])]
            waited[(row["team_id"], row["instance_type_id"])] = (
                jobs + (row["job_minutes"] or 0) / 60,
                gpus + (row["gpu_minutes"] or 0) / 60,
            )
    if not waited:
        return []
    (team_id, type_id), (job_hours, gpu_hours) = max(
        waited.items(), key=lambda kv: (kv[1][0], -kv[0][0], -kv[0][1])
    )
    if job_hours <= 0:
        return []
    idle = sum(r.idle_while_waiting for r in daily_capacity if r.instance_type == type_name[type_id])
    return [
        Recommendation(
            kind="raise-borrow-limit",
            team=team_name[team_id],
            text=(
                f"Team {team_name[team_id]} waited most on its borrow limit on {type_name[type_id]}: "
                "consider raising it."
            ),
            evidence=(
                f"Its jobs waited {job_hours:.1f} job-hours ({gpu_hours:.1f} GPU-hours) with reason "
                f"borrow-limit while {idle:.1f} GPU-hours of {type_name[type_id]} were idle as jobs waited."
            ),
        )
    ]


def hours(seconds: float | None) -> str:
    """A wait for people: ``-``, ``45 s``, ``12 min`` or ``3.5 h``."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
