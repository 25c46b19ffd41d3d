"""Small builders for database rows in tests. They write rows directly (not through services)
so that a test of a service sees only what the service itself did."""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone

from allocations.models import (
    Cluster,
    ClusterPolicy,
    InstanceType,
    Job,
    Membership,
    Node,
    PriorityClass,
    Team,
    TeamQuota,
)

_counter = itertools.count(1)


def make_cluster(**fields: Any) -> Cluster:
    cluster, _ = Cluster.objects.get_or_create(pk=1, defaults={"name": "test-cluster", **fields})
    ClusterPolicy.objects.get_or_create(cluster=cluster)
    return cluster


def make_instance_type(name: str = "ml.p5.48xlarge", gpus_per_node: int = 8, **fields: Any) -> InstanceType:
    obj, _ = InstanceType.objects.get_or_create(
        name=name, defaults={"gpus_per_node": gpus_per_node, **fields}
    )
    return obj


def make_nodes(
    instance_type: InstanceType, count: int, prefix: str | None = None, **fields: Any
) -> list[Node]:
    prefix = prefix or instance_type.name.replace(".", "-")
    now = timezone.now()
    return [
        Node.objects.create(
            name=f"{prefix}-{next(_counter)}",
            instance_type=instance_type,
            gpus=instance_type.gpus_per_node,
            state_since=now,
            **fields,
        )
        for _ in range(count)
    ]


def make_team(name: str, quotas: dict[InstanceType, int] | None = None, **fields: Any) -> Team:
    team = Team.objects.create(name=name, display_name=name.replace("-", " ").title(), **fields)
    for instance_type, quota in (quotas or {}).items():
        TeamQuota.objects.create(team=team, instance_type=instance_type, quota=quota)
    return team


def make_priority_classes() -> dict[str, PriorityClass]:
    weights = {"inference": 100, "training": 70, "fine-tuning": 50, "experimentation": 10}
    return {
        name: PriorityClass.objects.get_or_create(name=name, defaults={"weight": weight})[0]
        for name, weight in weights.items()
    }


def make_user(username: str, *, staff: bool = False, password: str = "pw-for-tests-only") -> Any:
    user = get_user_model().objects.create_user(
        username=username, email=f"{username}@example.com", password=password, is_staff=staff
    )
    return user


def make_member(user: Any, team: Team, role: str = "member") -> Membership:
    return Membership.objects.create(user=user, team=team, role=role)


def make_job(
    team: Team,
    instance_type: InstanceType,
    gpus: int,
    *,
    name: str | None = None,
    submitted_at: datetime | None = None,
    **fields: Any,
) -> Job:
    return Job.objects.create(
        team=team,
        instance_type=instance_type,
        gpus=gpus,
        name=name or f"job-{next(_counter)}",
        submitted_at=submitted_at or timezone.now(),
        **fields,
    )
