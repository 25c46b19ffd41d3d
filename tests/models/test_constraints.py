"""The database itself refuses a bad policy row, whatever path it comes by (not only the form):
each case writes straight through the ORM and expects an IntegrityError."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import IntegrityError, transaction

from allocations.models import Cluster, InstanceType, Node, PriorityClass, Team, TeamQuota
from tests.conftest import Personas

pytestmark = pytest.mark.django_db


def _quota_of(personas: Personas) -> Any:
    return TeamQuota.objects.filter(team=personas.team, instance_type=personas.instance_type)


BREACHES: dict[str, Callable[[Personas], Any]] = {
    "negative quota (create)": lambda p: TeamQuota.objects.create(
        team=p.other_team,
        instance_type=InstanceType.objects.create(name="ml.g5.xlarge", gpus_per_node=1),
        quota=-3,
    ),
    "negative quota (update)": lambda p: _quota_of(p).update(quota=-3),
    "lend limit above quota": lambda p: _quota_of(p).update(lend_limit=9),
    "negative lend limit": lambda p: _quota_of(p).update(lend_limit=-1),
    "duplicate quota row": lambda p: TeamQuota.objects.create(
        team=p.team, instance_type=p.instance_type, quota=1
    ),
    "borrow percent above 10000": lambda p: _quota_of(p).update(borrow_limit_percent=10001),
    "absolute borrow limit without GPUs": lambda p: _quota_of(p).update(borrow_limit_kind="absolute"),
    "unknown borrow limit kind": lambda p: _quota_of(p).update(borrow_limit_kind="lots"),
    "team weight 101": lambda p: Team.objects.filter(pk=p.team.pk).update(fair_share_weight=101),
    "bad team name": lambda p: Team.objects.create(name="Bad_Name"),
    "team name ending in a dash": lambda p: Team.objects.create(name="team-"),
    "duplicate team name": lambda p: Team.objects.create(name="team-a"),
    "unknown sharing mode": lambda p: Team.objects.filter(pk=p.team.pk).update(sharing="hoard"),
    "reclaim never with preempt while borrowing lower-priority": lambda p: Team.objects.filter(
        pk=p.team.pk
    ).update(reclaim="never", preempt_while_borrowing="lower-priority"),
    "max priority 101": lambda p: Team.objects.filter(pk=p.team.pk).update(
        preempt_while_borrowing_max_priority=101
    ),
    "priority class weight 101": lambda p: PriorityClass.objects.create(name="urgent", weight=101),
    "priority class name not a DNS label": lambda p: PriorityClass.objects.create(name="Urgent!", weight=5),
    "duplicate priority class": lambda p: PriorityClass.objects.create(name="training", weight=5),
    "instance type with 0 GPUs per node": lambda p: InstanceType.objects.create(
        name="ml.none", gpus_per_node=0
    ),
    "negative price": lambda p: InstanceType.objects.filter(pk=p.instance_type.pk).update(
        price_per_gpu_hour=-1
    ),
    "unknown node state": lambda p: Node.objects.filter(pk=p.nodes[0].pk).update(state="melted"),
    "second cluster": lambda p: Cluster.objects.create(pk=2, name="another"),
}


@pytest.mark.parametrize("breach", BREACHES.values(), ids=BREACHES.keys())
def test_database_refuses(personas: Personas, breach: Callable[[Personas], Any]) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        breach(personas)


def test_the_same_rows_within_bounds_are_accepted(personas: Personas) -> None:
    """The cases above fail because of the bound they cross, not because of the way they write."""
    assert _quota_of(personas).update(quota=0, lend_limit=0, borrow_limit_percent=10000) == 1
    assert Team.objects.filter(pk=personas.team.pk).update(fair_share_weight=100, reclaim="never") == 1
    Team.objects.create(name="a" * 40)
    PriorityClass.objects.create(name="urgent", weight=100)
