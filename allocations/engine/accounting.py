"""Who uses whose GPUs: the accounting of POLICY.md section 2, per team and instance type.

The simulator integrates these figures over time; the web app's history sampler, reports and
metrics compute them from the same snapshot the allocation loop takes. Pure Python, no Django.

Attribution rule for "lent" (POLICY.md counts borrowing, not who lends; this decides it):

1. A team's ``borrowed`` GPUs are its running GPUs above its quota; ``unused`` quota is its
   quota minus its running GPUs (never below 0).
2. The borrowed GPUs of an instance type, summed over teams, are drawn first from the capacity
   in no team's quota (``unallocated``, the ready capacity above the sum of quotas) when the
   policy shares it (``share_unallocated``);
3. then from the teams' unused *lendable* quota (``min(unused, lendable)``; ``lendable`` is the
   ``lend_limit``, else the whole quota, and 0 for ``dont-lend`` teams), in proportion to it;
4. then, should borrowing exceed that (limits lowered while jobs run, a team turned
   ``dont-lend``), from the rest of the unused quota, in proportion to it;
5. then, when the policy does not share unallocated capacity, from that capacity last.

A team's ``lent`` is what steps 3 and 4 drew from it; its ``idle_quota`` is its unused quota
that nobody uses (``unused - lent``). The sums are consistent: for every instance type,
``sum(lent) + unallocated_used == sum(borrowed)`` (up to floating-point rounding).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .snapshot import ClusterPolicy, Quota, Sharing, Snapshot, Team


@dataclass(frozen=True, slots=True)
class TeamUsage:
    """One team on one instance type, in GPUs (``lent`` and ``idle_quota`` may be fractional:
    borrowing is attributed to lenders in proportion)."""

    team: str
    instance_type: str
    quota: int
    used: int
    used_within_quota: int
    borrowed: int
    lent: float
    idle_quota: float
    pending_gpus: int
    pending_jobs: int


@dataclass(frozen=True, slots=True)
class InstanceTypeUsage:
    """One instance type: ``capacity`` is the ready GPUs, ``allocated`` the running GPUs,
    ``idle`` the difference, ``unallocated`` the ready capacity in no team's quota and
    ``unallocated_used`` the part of it borrowers use."""

    instance_type: str
    capacity: int
    allocated: int
    idle: int
    unallocated: int
    unallocated_used: float
    pending_gpus: int
    pending_jobs: int


@dataclass(frozen=True, slots=True)
class Accounting:
    teams: tuple[TeamUsage, ...]
    instance_types: tuple[InstanceTypeUsage, ...]

    def team(self, team: str, instance_type: str) -> TeamUsage:
        """The row of one team and instance type (KeyError when there is none)."""
        for row in self.teams:
            if row.team == team and row.instance_type == instance_type:
                return row
        raise KeyError((team, instance_type))

    def instance_type(self, name: str) -> InstanceTypeUsage:
        for row in self.instance_types:
            if row.instance_type == name:
                return row
        raise KeyError(name)


def lendable(team: Team, quota: Quota) -> int:
    """GPUs of the quota the team may lend (POLICY.md section 2)."""
    if team.sharing is Sharing.DONT_LEND:
        return 0
    return quota.quota if quota.lend_limit is None else min(quota.lend_limit, quota.quota)


def quota_terms(teams: Sequence[Team], instance_type: str, capacity: int) -> tuple[list[int], list[int], int]:
    """What the accounting reads of ``teams`` on one instance type of ``capacity`` ready GPUs:
    each team's quota and lendable GPUs there, and the ready capacity in no team's quota."""
    quotas = [team.quotas.get(instance_type) or Quota() for team in teams]
    lendables = [lendable(team, q) for team, q in zip(teams, quotas, strict=True)]
    return [q.quota for q in quotas], lendables, max(0, capacity - sum(q.quota for q in quotas))


def attribute(
    used: Sequence[int],
    quotas: Sequence[int],
    lendables: Sequence[int],
    unallocated: int,
    share_unallocated: bool,
) -> tuple[list[int], list[int], list[float], float]:
    """Steps 1 to 5 of the module docstring on one instance type, for teams given by their
    running GPUs, quotas and lendable GPUs there (``lendable``): each team's unused quota,
    borrowed GPUs and lent GPUs, and the unallocated capacity borrowers use. ``account`` is
    made of it; the simulator calls it alone at every instant where usage moved."""
    unused = [max(0, q - u) for q, u in zip(quotas, used, strict=True)]
    borrowed = [max(0, u - q) for q, u in zip(quotas, used, strict=True)]
    lendable_unused = [min(lend, free) for lend, free in zip(lendables, unused, strict=True)]
    rest_unused = [free - lend for free, lend in zip(unused, lendable_unused, strict=True)]
    left: float = sum(borrowed)
    unallocated_used: float = 0.0
    if share_unallocated:
        unallocated_used = min(left, unallocated)
        left -= unallocated_used
    lent = [0.0] * len(quotas)
    for source in (lendable_unused, rest_unused):
        total = sum(source)
        if left <= 0 or total == 0:
            continue
        take = min(left, total)
        for i, part in enumerate(source):
            lent[i] += take * part / total
        left -= take
    if left > 0:
        # Unshared unallocated capacity last, then whatever remains (only with usage above
        # the ready capacity, e.g. a snapshot taken mid-change): keeps the sums consistent.
        unallocated_used += left
    return unused, borrowed, lent, unallocated_used


def account(
    *,
    instance_types: Iterable[str],
    capacity: Mapping[str, int],
    teams: Sequence[Team],
    policy: ClusterPolicy,
    used: Mapping[tuple[str, str], int],
    pending: Mapping[tuple[str, str], tuple[int, int]] | None = None,
) -> Accounting:
    """The accounting from aggregates, for callers that keep them (the simulator).

    ``capacity``: ready GPUs per instance type; ``used``: running GPUs per (team, instance
    type); ``pending``: (GPUs, jobs) pending per (team, instance type). Missing keys are 0.
    Usage of teams not in ``teams`` counts as allocated but is not attributed to anyone.
    """
    pending = pending or {}
    team_rows: list[TeamUsage] = []
    type_rows: list[InstanceTypeUsage] = []
    for instance_type in instance_types:
        cap = capacity.get(instance_type, 0)
        quotas, lendables, unallocated = quota_terms(teams, instance_type, cap)
        rows_used = [used.get((team.name, instance_type), 0) for team in teams]
        unused, borrowed, lent, unallocated_used = attribute(
            rows_used, quotas, lendables, unallocated, policy.share_unallocated
        )
        allocated = sum(used.get(key, 0) for key in used if key[1] == instance_type)
        type_pending = [pending.get((team.name, instance_type), (0, 0)) for team in teams]
        for i, team in enumerate(teams):
            team_rows.append(
                TeamUsage(
                    team=team.name,
                    instance_type=instance_type,
                    quota=quotas[i],
                    used=rows_used[i],
                    used_within_quota=min(rows_used[i], quotas[i]),
                    borrowed=borrowed[i],
                    lent=lent[i],
                    idle_quota=max(0.0, unused[i] - lent[i]),
                    pending_gpus=type_pending[i][0],
                    pending_jobs=type_pending[i][1],
                )
            )
        all_pending = [v for key, v in pending.items() if key[1] == instance_type]
        type_rows.append(
            InstanceTypeUsage(
                instance_type=instance_type,
                capacity=cap,
                allocated=allocated,
                idle=max(0, cap - allocated),
                unallocated=unallocated,
                unallocated_used=unallocated_used,
                pending_gpus=sum(g for g, _ in all_pending),
                pending_jobs=sum(n for _, n in all_pending),
            )
        )
    return Accounting(teams=tuple(team_rows), instance_types=tuple(type_rows))


def account_snapshot(snapshot: Snapshot) -> Accounting:
    """The accounting of one snapshot: capacity from its ready nodes, usage from its running
    jobs, pending from its pending jobs."""
    capacity: dict[str, int] = {}
    for node in snapshot.nodes:
        if node.ready:
            capacity[node.instance_type] = capacity.get(node.instance_type, 0) + node.gpus
    used: dict[tuple[str, str], int] = {}
    pending: dict[tuple[str, str], tuple[int, int]] = {}
    for job in snapshot.jobs:
        key = (job.team, job.instance_type)
        if job.running:
            used[key] = used.get(key, 0) + job.gpus
        else:
            gpus, count = pending.get(key, (0, 0))
            pending[key] = (gpus + job.gpus, count + 1)
    return account(
        instance_types=[t.name for t in snapshot.instance_types],
        capacity=capacity,
        teams=snapshot.teams,
        policy=snapshot.policy,
        used=used,
        pending=pending,
    )
