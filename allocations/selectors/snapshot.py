"""The engine's input, read from the database: ``build_snapshot(now)`` (POLICY.md section 3).

The query count is constant (seven SELECTs however many jobs, teams or nodes there are): the
allocation loop runs it every few seconds on clusters with thousands of pending jobs.
Ids are ``str(pk)`` and ``Job.seq`` is the primary key, the "then id" tie-break of POLICY.md;
times are Unix seconds.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from allocations import engine
from allocations.choices import ACTIVE_JOB_STATES, BorrowLimitKind, JobState, NodeState
from allocations.models import ClusterPolicy, InstanceType, Job, Node, PriorityClass, Team, TeamQuota


def job_id(pk: int) -> str:
    """The engine's id of the job whose primary key is ``pk``."""
    return str(pk)


def job_pk(job_id: str) -> int:
    """The primary key of the job the engine calls ``job_id`` (the mapping back)."""
    return int(job_id)


def _seconds(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def _quota(row: TeamQuota) -> engine.Quota:
    """A TeamQuota row as the engine's Quota: the borrow limit kind picks one of three fields."""
    return engine.Quota(
        quota=row.quota,
        lend_limit=row.lend_limit,
        borrow_limit_percent=row.borrow_limit_percent,
        borrow_limit=row.borrow_limit if row.borrow_limit_kind == BorrowLimitKind.ABSOLUTE else None,
        borrow_unlimited=row.borrow_limit_kind == BorrowLimitKind.UNLIMITED,
    )


def _policy(priority_classes: tuple[engine.PriorityClass, ...]) -> engine.ClusterPolicy:
    """The cluster policy (defaults when none is stored yet) with every priority class."""
    row = ClusterPolicy.objects.filter(cluster_id=1).first()
    if row is None:
        return engine.ClusterPolicy(priority_classes=priority_classes)
    return engine.ClusterPolicy(
        idle_allocation=engine.IdleAllocation(row.idle_allocation),
        task_ranking=engine.TaskRanking(row.task_ranking),
        share_unallocated=row.share_unallocated,
        queueing=engine.Queueing(row.queueing),
        priority_classes=priority_classes,
    )


def build_snapshot(now: datetime) -> engine.Snapshot:
    """Everything one cycle decides from, as the engine's frozen dataclasses.

    Every node is included (only ``ready`` ones count towards capacity; jobs on a draining node
    keep running there); every team, active or not, so that an inactive team's jobs get their
    ``team-inactive`` reason; the running and pending jobs. ``now`` is accepted so that callers
    pass the cycle's clock explicitly; the snapshot itself holds no "now".
    """
    del now  # the snapshot is a picture of the rows; the engine gets `now` separately
    instance_types = tuple(
        engine.InstanceType(name=name, gpus_per_node=gpus)
        for name, gpus in InstanceType.objects.order_by("name").values_list("name", "gpus_per_node")
    )
    nodes = tuple(
        engine.Node(name=name, instance_type=type_name, gpus=gpus, ready=state == NodeState.READY)
        for name, type_name, gpus, state in Node.objects.order_by("name").values_list(
            "name", "instance_type__name", "gpus", "state"
        )
    )
    quotas: dict[int, dict[str, engine.Quota]] = defaultdict(dict)
    for row in TeamQuota.objects.select_related("instance_type").order_by("team_id", "instance_type__name"):
        quotas[row.team_id][row.instance_type.name] = _quota(row)
    teams = tuple(
        engine.Team(
            name=team.name,
            quotas=quotas.get(team.pk, {}),
            active=team.active,
            sharing=engine.Sharing(team.sharing),
            fair_share_weight=team.fair_share_weight,
            preempt_team_tasks=engine.PreemptTeamTasks(team.preempt_team_tasks),
            reclaim=engine.Reclaim(team.reclaim),
            preempt_while_borrowing=(
                engine.PreemptWhileBorrowing(team.preempt_while_borrowing)
                if team.preempt_while_borrowing
                else None
            ),
            preempt_while_borrowing_max_priority=team.preempt_while_borrowing_max_priority,
        )
        for team in Team.objects.order_by("name")
    )
    priority_classes = tuple(
        engine.PriorityClass(name=name, weight=weight)
        for name, weight in PriorityClass.objects.order_by("-weight", "name").values_list("name", "weight")
    )
    jobs = tuple(
        engine.Job(
            id=job_id(row["pk"]),
            team=row["team__name"],
            instance_type=row["instance_type__name"],
            gpus=row["gpus"],
            submit_time=row["submitted_at"].timestamp(),
            seq=row["pk"],
            priority_class=row["priority_class__name"],
            nodes=(
                tuple((str(node), int(gpus)) for node, gpus in row["nodes"] or ())
                if row["state"] == JobState.RUNNING
                else ()
            ),
            started_at=_seconds(row["started_at"]) if row["state"] == JobState.RUNNING else None,
            start_seq=row["start_seq"],
            preemptions=row["preemption_count"],
            last_preempted_at=_seconds(row["last_preempted_at"]),
        )
        # The live states as the job_live partial index names them, so that SQLite uses it too.
        for row in Job.objects.filter(state__in=ACTIVE_JOB_STATES)
        .order_by("pk")
        .values(
            "pk",
            "state",
            "team__name",
            "instance_type__name",
            "gpus",
            "submitted_at",
            "priority_class__name",
            "nodes",
            "started_at",
            "start_seq",
            "preemption_count",
            "last_preempted_at",
        )
    )
    return engine.Snapshot(
        instance_types=instance_types,
        nodes=nodes,
        teams=teams,
        policy=_policy(priority_classes),
        jobs=jobs,
    )
