"""Reads of the console: the "Capacity and quotas" overview, the over-commit check, and the
filtered lists of jobs and audit entries.

Every function runs a fixed number of queries, whatever the number of teams, nodes or rows
(aggregates and ``select_related``), so console pages stay fast as the cluster grows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta

from django.db.models import Count, F, Q, QuerySet, Sum
from django.utils import timezone

from allocations.choices import BorrowLimitKind, NodeState
from allocations.engine import resources
from allocations.models import AuditEntry, Cluster, InstanceType, Job, Node, Team, TeamQuota
from allocations.policy_fields import INSTANCE_TYPE_FIELDS, QUOTA_FIELDS, engine_instance_type, engine_quota


def gpus_text(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


@dataclass(frozen=True)
class TeamQuotaRow:
    """One team's quota of one instance type, as the overview shows it."""

    quota: TeamQuota
    borrow_cap_gpus: int | None  # None: unlimited; 0 for a team that never borrows
    borrow_cap_text: str  # as configured: "50% = 4 GPUs", "8 GPUs", "unlimited"
    lend_limit_text: str  # "whole quota", "4 GPUs", "nothing (don't lend)"
    may_borrow: bool

    @property
    def team(self) -> Team:
        return self.quota.team

    @property
    def max_use_text(self) -> str:
        """POLICY.md section 2: ``max_use = quota + borrow_limit`` (quota alone if it never borrows)."""
        if self.borrow_cap_gpus is None:
            return "unlimited"
        return gpus_text(self.quota.quota + self.borrow_cap_gpus)


@dataclass(frozen=True)
class InstanceTypeCapacity:
    """Capacity and quotas of one instance type (POLICY.md sections 1 and 2)."""

    instance_type: InstanceType
    nodes_total: int
    nodes_ready: int
    nodes_draining: int
    nodes_down: int
    gpus_total: int
    ready_gpus: int  # the capacity: only ready nodes count
    quota_sum: int
    teams: list[TeamQuotaRow] = field(default_factory=list)
    # docs/resources.md 2 and 4, per resource besides GPUs that the type declares: the teams'
    # quotas as the ratio rule resolves them, and the ready nodes' total. Empty: GPUs alone.
    resource_quota_sums: dict[str, int] = field(default_factory=dict)
    resource_capacity: dict[str, int] = field(default_factory=dict)

    @property
    def unallocated(self) -> int:
        """Ready GPUs in no team's quota (POLICY.md section 2)."""
        return max(0, self.ready_gpus - self.quota_sum)

    @property
    def over_committed_resources(self) -> list[str]:
        """The resources besides GPUs whose quotas exceed the ready nodes' total."""
        return [
            name
            for name, total in self.resource_quota_sums.items()
            if total > self.resource_capacity.get(name, 0)
        ]

    @property
    def over_committed(self) -> bool:
        return self.quota_sum > self.ready_gpus or bool(self.over_committed_resources)

    @property
    def warning(self) -> str:
        """The over-commit warning with both numbers of each resource over, or "" when quotas
        fit the capacity."""
        parts = []
        if self.quota_sum > self.ready_gpus:
            parts.append(
                f"Quotas of {self.instance_type.name} add up to {gpus_text(self.quota_sum)}, "
                f"more than its {self.ready_gpus} ready GPUs."
            )
        for name in self.over_committed_resources:
            parts.append(
                f"Quotas of {self.instance_type.name} add up to "
                f"{resources.amount_text(name, self.resource_quota_sums[name])}, more than its ready "
                f"nodes' {resources.amount_text(name, self.resource_capacity.get(name, 0))}."
            )
        return " ".join(parts)

    @property
    def quota_percent(self) -> int:
        """Share of the ready capacity promised as quota (for the bar), capped at 100."""
        if self.ready_gpus == 0:
            return 100 if self.quota_sum else 0
        return min(100, round(100 * self.quota_sum / self.ready_gpus))


def borrow_cap(quota: TeamQuota) -> tuple[int | None, str, bool]:
    """The team's borrow cap on this instance type: (GPUs or None for unlimited, as configured,
    may borrow). ``lend`` and ``dont-lend`` teams never borrow (POLICY.md section 1)."""
    sharing = quota.team.sharing
    if quota.borrow_limit_kind == BorrowLimitKind.UNLIMITED:
        gpus, text = None, "unlimited"
    elif quota.borrow_limit_kind == BorrowLimitKind.ABSOLUTE:
        gpus = quota.borrow_limit or 0
        text = gpus_text(gpus)
    else:
        gpus = quota.quota * quota.borrow_limit_percent // 100
        text = f"{quota.borrow_limit_percent}% = {gpus_text(gpus)}"
    if sharing != "lend-and-borrow":
        return 0, f"never borrows ({text} ignored)", False
    return gpus, text, gpus is None or gpus > 0


def lend_limit_text(quota: TeamQuota) -> str:
    if quota.team.sharing == "dont-lend":
        return "nothing (don't lend)"
    if quota.lend_limit is None:
        return "whole quota"
    return f"{gpus_text(quota.lend_limit)} of {quota.quota}"


def capacity_overview(instance_types: Iterable[int] | None = None) -> list[InstanceTypeCapacity]:
    """Per instance type: node and GPU counts, ready capacity, quotas, unallocated GPUs and each
    team's quota with its borrow cap and lend limit. Three queries, whatever the size."""
    types = InstanceType.objects.all()
    nodes = Node.objects.all()
    quotas = TeamQuota.objects.select_related("team", "instance_type").order_by("team__name")
    if instance_types is not None:
        ids = list(instance_types)
        types, nodes, quotas = (
            types.filter(pk__in=ids),
            nodes.filter(instance_type__in=ids),
            quotas.filter(instance_type__in=ids),
        )
    ready = Q(state=NodeState.READY)
    node_counts = {
        row["instance_type"]: row
        for row in nodes.order_by()
        .values("instance_type")
        .annotate(
            n_total=Count("id"),
            n_ready=Count("id", filter=ready),
            n_draining=Count("id", filter=Q(state=NodeState.DRAINING)),
            n_down=Count("id", filter=Q(state=NodeState.DOWN)),
            gpus_total=Sum("gpus"),
            gpus_ready=Sum("gpus", filter=ready),
        )
    }
    rows_by_type: dict[int, list[TeamQuotaRow]] = defaultdict(list)
    for quota in quotas:
        gpus, text, may_borrow = borrow_cap(quota)
        rows_by_type[quota.instance_type_id].append(
            TeamQuotaRow(
                quota=quota,
                borrow_cap_gpus=gpus,
                borrow_cap_text=text,
                lend_limit_text=lend_limit_text(quota),
                may_borrow=may_borrow,
            )
        )
    overview = []
    for instance_type in types:
        counts = node_counts.get(instance_type.pk, {})
        team_rows = rows_by_type.get(instance_type.pk, [])
        overview.append(
            InstanceTypeCapacity(
                instance_type=instance_type,
                nodes_total=counts.get("n_total", 0),
                nodes_ready=counts.get("n_ready", 0),
                nodes_draining=counts.get("n_draining", 0),
                nodes_down=counts.get("n_down", 0),
                gpus_total=counts.get("gpus_total") or 0,
                ready_gpus=counts.get("gpus_ready") or 0,
                quota_sum=sum(row.quota.quota for row in team_rows),
                teams=team_rows,
                **_resource_sums(instance_type, counts.get("n_ready", 0), team_rows),
            )
        )
    return overview


def _resource_sums(
    instance_type: InstanceType, ready_nodes: int, team_rows: list[TeamQuotaRow]
) -> dict[str, dict[str, int]]:
    """The quotas of each resource besides GPUs, resolved by the ratio rule, and the ready
    nodes' total of it (docs/resources.md 2 and 4); nothing for a type of GPUs alone."""
    it = engine_instance_type({f: getattr(instance_type, f) for f in INSTANCE_TYPE_FIELDS})
    per_node = resources.type_resources(it)
    per_node.pop(resources.GPUS)
    if not per_node:
        return {}
    sums = dict.fromkeys(per_node, 0)
    for row in team_rows:
        resolved = resources.quota_resources(
            it, engine_quota({f: getattr(row.quota, f) for f in QUOTA_FIELDS})
        )
        for name in sums:
            sums[name] += resolved.get(name, 0)
    capacity = {name: amount * ready_nodes for name, amount in per_node.items()}
    return {"resource_quota_sums": sums, "resource_capacity": capacity}


def overcommit_warnings(instance_types: Iterable[int] | None = None) -> list[str]:
    """A warning with both numbers for every instance type whose quotas exceed its ready GPUs."""
    return [row.warning for row in capacity_overview(instance_types) if row.over_committed]


def get_cluster() -> Cluster | None:
    """The cluster this installation governs (a singleton), with its policy; None before set-up."""
    return Cluster.objects.select_related("policy").filter(pk=1).first()


# The job list's sorts (``forms.JOB_SORTS``) as columns; every sort ends on the id so that a
# page boundary never splits ties differently from one request to the next.
JOB_SORT_COLUMNS = {
    "submitted": ("submitted_at",),
    "id": (),
    "name": ("name",),
    "submitter": ("submitter__username",),
    "team": ("team__name",),
    "state": ("state",),
    "priority": ("priority_class__weight",),
    "gpus": ("gpus",),
    "instance_type": ("instance_type__name",),
}


def console_jobs(
    *,
    query: str = "",
    team: str = "",
    submitter: str = "",
    instance_type: str = "",
    priority_class: str = "",
    state: str = "",
    sort: str = "-submitted",
) -> QuerySet[Job]:
    """All jobs, filtered and sorted for the console's job list.

    ``query`` matches the job's name, its submitter's username or its team's name (a part of
    any, any case) or its id; ``submitter`` a part of the submitter's username; the others
    are exact names. ``sort`` is a key of ``JOB_SORT_COLUMNS``, "-" first for descending.
    """
    jobs = Job.objects.select_related("team", "instance_type", "priority_class", "submitter")
    if query:
        match = (
            Q(name__icontains=query)
            | Q(submitter__username__icontains=query)
            | Q(team__name__icontains=query)
        )
        if query.lstrip("#").isdigit():
            match |= Q(pk=int(query.lstrip("#")))
        jobs = jobs.filter(match)
    if team:
        jobs = jobs.filter(team__name=team)
    if submitter:
        jobs = jobs.filter(submitter__username__icontains=submitter)
    if instance_type:
        jobs = jobs.filter(instance_type__name=instance_type)
    if priority_class:
        jobs = jobs.filter(priority_class__name=priority_class)
    if state:
        jobs = jobs.filter(state=state)
    descending = sort.startswith("-")
    columns = JOB_SORT_COLUMNS.get(sort.lstrip("-"), JOB_SORT_COLUMNS["submitted"])
    order = [
        F(column).desc(nulls_last=True) if descending else F(column).asc(nulls_first=True)
        for column in columns
    ]
    return jobs.order_by(*order, "-id" if descending else "id")


def audit_entries(
    *,
    object_type: str = "",
    object_query: str = "",
    actor: str = "",
    since: date | None = None,
    until: date | None = None,
) -> QuerySet[AuditEntry]:
    """Audit entries, newest first. ``object_query`` matches the object's name or id; ``since``
    and ``until`` are whole days (inclusive) in the server's time zone."""
    entries = AuditEntry.objects.all()
    if object_type:
        entries = entries.filter(object_type=object_type)
    if object_query:
        entries = entries.filter(Q(object_repr__icontains=object_query) | Q(object_id=object_query))
    if actor:
        entries = entries.filter(actor_name=actor)
    zone = timezone.get_current_timezone()
    if since:
        entries = entries.filter(at__gte=datetime.combine(since, time.min, tzinfo=zone))
    if until:
        entries = entries.filter(at__lt=datetime.combine(until + timedelta(days=1), time.min, tzinfo=zone))
    return entries.order_by("-at", "-id")


def audit_object_types() -> list[str]:
    return list(AuditEntry.objects.order_by("object_type").values_list("object_type", flat=True).distinct())


def audit_actors() -> list[str]:
    return list(AuditEntry.objects.order_by("actor_name").values_list("actor_name", flat=True).distinct())
