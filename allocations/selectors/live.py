"""Reads of "the cluster right now": what each team uses beside its quota, what each node runs,
and the free capacity members choose from.

The figures come from the live Job rows (running and pending) and the quotas, through the same
accounting the allocation loop, the history sampler and the team queue page use
(``engine.accounting``), so the console never disagrees with them. Every function runs a fixed
number of queries, whatever the number of jobs, nodes or teams.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from allocations.choices import JobState, NodeState
from allocations.engine.accounting import InstanceTypeUsage, TeamUsage, account_snapshot
from allocations.models import InstanceType, Job, Node
from allocations.selectors.policy import InstanceTypeCapacity, TeamQuotaRow, capacity_overview
from allocations.selectors.snapshot import build_snapshot


@dataclass(frozen=True)
class TeamNow:
    """One team on one instance type now: its usage (``engine.accounting.TeamUsage``) beside its
    quota row (borrow cap and lend limit as configured; None when it has no quota there) and
    the submit time of its oldest pending job."""

    usage: TeamUsage
    quota_row: TeamQuotaRow | None
    oldest_pending: datetime | None

    @property
    def team(self) -> str:
        return self.usage.team


@dataclass(frozen=True)
class InstanceTypeNow:
    """One instance type now: its capacity and quotas (``capacity_overview``), its usage, and
    where its borrowed GPUs come from (POLICY.md section 2)."""

    capacity: InstanceTypeCapacity
    usage: InstanceTypeUsage
    teams: list[TeamNow] = field(default_factory=list)
    oldest_pending: datetime | None = None

    @property
    def borrowed(self) -> int:
        return sum(row.usage.borrowed for row in self.teams)

    @property
    def borrowed_from_unallocated(self) -> float:
        """Borrowed GPUs drawn from capacity in no team's quota (nobody lends them)."""
        return self.usage.unallocated_used

    @property
    def borrowed_from_quota(self) -> float:
        """Borrowed GPUs drawn from other teams' unused quota: what they lend."""
        return sum(row.usage.lent for row in self.teams)

    @property
    def lenders(self) -> list[TeamNow]:
        return [row for row in self.teams if row.usage.lent > 0]

    @property
    def used_percent(self) -> int:
        """Share of the ready capacity running jobs use (for the bar), capped at 100."""
        if self.usage.capacity == 0:
            return 100 if self.usage.allocated else 0
        return min(100, round(100 * self.usage.allocated / self.usage.capacity))


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def cluster_now(now: datetime) -> list[InstanceTypeNow]:
    """Per instance type, each team's used-within-quota, borrowed, lent, idle quota and pending
    GPUs with its oldest wait, beside its quota, borrow cap and lend limit. Ten queries: the
    capacity overview's three and the snapshot's seven."""
    overview = capacity_overview()
    snapshot = build_snapshot(now)
    accounting = account_snapshot(snapshot)
    oldest: dict[tuple[str, str], float] = {}
    for job in snapshot.jobs:
        if not job.running:
            key = (job.team, job.instance_type)
            oldest[key] = min(oldest.get(key, job.submit_time), job.submit_time)
    rows = []
    for capacity in overview:
        name = capacity.instance_type.name
        quota_rows = {row.team.name: row for row in capacity.teams}
        teams = []
        for usage in accounting.teams:
            if usage.instance_type != name:
                continue
            if usage.team not in quota_rows and not (usage.used or usage.pending_jobs):
                continue  # a team with no quota and nothing here: not worth a row
            waited = oldest.get((usage.team, name))
            teams.append(
                TeamNow(
                    usage=usage,
                    quota_row=quota_rows.get(usage.team),
                    oldest_pending=None if waited is None else _at(waited),
                )
            )
        waits = [at for (_, type_name), at in oldest.items() if type_name == name]
        rows.append(
            InstanceTypeNow(
                capacity=capacity,
                usage=accounting.instance_type(name),
                teams=teams,
                oldest_pending=_at(min(waits)) if waits else None,
            )
        )
    return rows


# --- Nodes ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeJob:
    """A running job's share of one node."""

    pk: int
    name: str
    team: str
    gpus: int  # on this node
    started_at: datetime | None


def node_jobs(node_names: list[str] | None = None) -> dict[str, list[NodeJob]]:
    """The running jobs on each node (by node name), largest share first. One query: every
    running job's placement, read from ``Job.nodes``; ``node_names`` keeps only those nodes."""
    wanted = None if node_names is None else set(node_names)
    by_node: dict[str, list[NodeJob]] = defaultdict(list)
    rows = (
        Job.objects.filter(state=JobState.RUNNING)
        .order_by("pk")
        .values_list("pk", "name", "team__name", "nodes", "started_at")
    )
    for pk, name, team, placement, started_at in rows:
        for node, gpus in placement or ():
            if wanted is None or node in wanted:
                by_node[str(node)].append(NodeJob(pk, name, team, int(gpus), started_at))
    for jobs in by_node.values():
        jobs.sort(key=lambda job: (-job.gpus, job.pk))
    return dict(by_node)


# --- Free capacity (what members see) ---------------------------------------------------------------
@dataclass(frozen=True)
class FreeCapacity:
    """One instance type as members see it: capacity, use and free GPUs, no team's jobs."""

    instance_type: InstanceType
    ready_gpus: int
    used_gpus: int
    pending_gpus: int
    nodes_ready: int
    largest_free_on_a_node: int  # the most GPUs free on one ready node
    free_nodes: int  # ready nodes with nothing running

    @property
    def free_gpus(self) -> int:
        return max(0, self.ready_gpus - self.used_gpus)


def free_capacity() -> list[FreeCapacity]:
    """Per instance type: ready, used, free and pending GPUs, and how free GPUs lie on nodes.
    Aggregates only (no job, no team), so anyone ``access.can_see_free_capacity`` may see them.
    Three queries."""
    used_on: dict[str, int] = defaultdict(int)
    used_by_type: dict[int, int] = defaultdict(int)
    pending_by_type: dict[int, int] = defaultdict(int)
    jobs = Job.objects.filter(state__in=(JobState.RUNNING, JobState.PENDING)).order_by()
    for state, type_id, gpus, placement in jobs.values_list("state", "instance_type_id", "gpus", "nodes"):
        if state == JobState.RUNNING:
            used_by_type[type_id] += gpus
            for node, on_node in placement or ():
                used_on[str(node)] += int(on_node)
        else:
            pending_by_type[type_id] += gpus
    nodes: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for type_id, name, gpus in Node.objects.filter(state=NodeState.READY).values_list(
        "instance_type_id", "name", "gpus"
    ):
        nodes[type_id].append((name, gpus))
    rows = []
    for instance_type in InstanceType.objects.order_by("name"):
        ready = nodes.get(instance_type.pk, [])
        free_on = [max(0, gpus - used_on.get(name, 0)) for name, gpus in ready]
        rows.append(
            FreeCapacity(
                instance_type=instance_type,
                ready_gpus=sum(gpus for _, gpus in ready),
                used_gpus=used_by_type.get(instance_type.pk, 0),
                pending_gpus=pending_by_type.get(instance_type.pk, 0),
                nodes_ready=len(ready),
                largest_free_on_a_node=max(free_on, default=0),
                free_nodes=sum(1 for (name, _) in ready if used_on.get(name, 0) == 0),
            )
        )
    return rows
