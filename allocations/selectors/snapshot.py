"""The engine's input, read from the database: ``build_snapshot(now)`` (POLICY.md section 3).

The query count is constant (seven SELECTs for a cycle however many jobs, teams or nodes there
are, eight with fairness over time on): the allocation loop runs it every few seconds on
clusters with thousands of pending jobs.
Ids are ``str(pk)`` and ``Job.seq`` is the primary key, the "then id" tie-break of POLICY.md;
times are Unix seconds.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import datetime
from typing import Any

from allocations import engine
from allocations.choices import ACTIVE_JOB_STATES, JobState, NodeState
from allocations.models import ClusterPolicy, InstanceType, Job, Node, PriorityClass, Team, TeamQuota
from allocations.policy_fields import (
    ENGINE_TEAM_LIMITS,
    INSTANCE_TYPE_FIELDS,
    QUOTA_FIELDS,
    TEAM_SETTINGS,
    engine_instance_type,
    engine_team,
)
from allocations.selectors.fairness import borrowed_history, borrowed_lately


def job_id(pk: int) -> str:
    """The engine's id of the job whose primary key is ``pk``."""
    return str(pk)


def job_pk(job_id: str) -> int:
    """The primary key of the job the engine calls ``job_id`` (the mapping back)."""
    return int(job_id)


def _seconds(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


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
        fair_share_half_life_s=float(row.fair_share_half_life_s),
        fair_share_history_percent=row.fair_share_history_percent,
        min_runtime_s=float(row.min_runtime_s),
        preemption_grace_s=float(row.preemption_grace_s),
    )


def policy_snapshot() -> engine.Snapshot:
    """The cluster and its policy as the engine's frozen dataclasses, with no jobs: what
    ``engine.never_fits`` judges a new job on (six SELECTs, whatever the number of jobs).

    Every node is included (only ``ready`` ones count towards capacity); every team, active or
    not, so that an inactive team's jobs get their ``team-inactive`` reason."""
    instance_types = tuple(
        engine_instance_type(row)
        for row in InstanceType.objects.order_by("name").values(*INSTANCE_TYPE_FIELDS)
    )
    nodes = tuple(
        engine.Node(name=name, instance_type=type_name, gpus=gpus, ready=state == NodeState.READY)
        for name, type_name, gpus, state in Node.objects.order_by("name").values_list(
            "name", "instance_type__name", "gpus", "state"
        )
    )
    quotas: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in TeamQuota.objects.values("team_id", "instance_type__name", *QUOTA_FIELDS).order_by(
        "team_id", "instance_type__name"
    ):
        quotas[row["team_id"]][row["instance_type__name"]] = row
    teams = tuple(
        engine_team(row["name"], row, quotas.get(row["pk"], {}))
        for row in Team.objects.order_by("name").values("pk", "name", *TEAM_SETTINGS, *ENGINE_TEAM_LIMITS)
    )
    priority_classes = tuple(
        engine.PriorityClass(
            name=name,
            weight=weight,
            min_runtime_s=None if min_runtime is None else float(min_runtime),
            preemption_grace_s=None if grace is None else float(grace),
        )
        for name, weight, min_runtime, grace in PriorityClass.objects.order_by("-weight", "name").values_list(
            "name", "weight", "min_runtime_s", "preemption_grace_s"
        )
    )
    return engine.Snapshot(
        instance_types=instance_types,
        nodes=nodes,
        teams=teams,
        policy=_policy(priority_classes),
        jobs=(),
    )


def build_snapshot(now: datetime) -> engine.Snapshot:
    """Everything one cycle decides from: ``policy_snapshot()`` and the running and pending
    jobs (jobs on a draining node keep running there), and, with fairness over time on, each
    team's borrowing lately (one more SELECT, ``selectors/fairness.py``). ``now`` is the
    cycle's clock, which the history is decayed to; the engine gets it separately.

    docs/preemption.md section 5: a running job within its grace carries ``terminating_since``
    (its GPUs stay counted, and the engine never picks it again), and a pending job waiting for
    such a victim (``Job.preempted_for``) is left out, held back as the simulator holds it: the
    GPUs it waits for are its own once the victim is gone."""
    rows = list(
        # The live states as the job_live partial index names them, so that SQLite uses it too.
        Job.objects.filter(state__in=ACTIVE_JOB_STATES)
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
            "submitter__username",
            "checkpoint_interval_s",
            "progress_kept_s",
            "terminating_since",
            "preempted_for",
            "vcpus",
            "memory_gib",
            "partitions",
        )
    )
    held = {
        row["preempted_for"]
        for row in rows
        if row["state"] == JobState.RUNNING and row["terminating_since"] is not None
    }
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
            # The team's limit of running GPUs per member counts by username (docs/limits.md).
            submitter=row["submitter__username"],
            checkpoint_interval_s=(
                None if row["checkpoint_interval_s"] is None else float(row["checkpoint_interval_s"])
            ),
            progress_kept_s=row["progress_kept_s"],
            terminating_since=(
                _seconds(row["terminating_since"]) if row["state"] == JobState.RUNNING else None
            ),
            # docs/resources.md 3: None and {} (every job of GPUs alone) leave the defaults.
            vcpus=row["vcpus"],
            memory_gib=row["memory_gib"],
            partitions=tuple(sorted((str(k), int(v)) for k, v in (row["partitions"] or {}).items())),
        )
        for row in rows
        if not (row["state"] == JobState.PENDING and row["pk"] in held)
    )
    snapshot = policy_snapshot()
    policy = snapshot.policy
    if policy.fair_share_half_life_s > 0 and policy.fair_share_history_percent > 0:
        half_life = policy.fair_share_half_life_s
        history = borrowed_history(borrowed_lately(now, half_life), half_life)
        known = {team.name for team in snapshot.teams}  # a team deleted since has no say
        return replace(snapshot, jobs=jobs, borrowed_history={k: v for k, v in history.items() if k in known})
    return replace(snapshot, jobs=jobs)
