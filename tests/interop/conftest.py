"""A policy that uses every setting the exporters map, plus the ones they can only warn about."""

from __future__ import annotations

from typing import Any

import pytest

from allocations.models import ClusterPolicy, InstanceType, PriorityClass, Team, TeamQuota
from tests import factories as f


class RichPolicy:
    """Three teams on two instance types.

    ``expressible`` keeps to what HyperPod can say exactly (one borrow percentage per team,
    absolute and unlimited limits, no lend limit, reclaim ``any``); ``add_inexpressible()``
    then adds a setting of each kind HyperPod cannot express.
    """

    def __init__(self) -> None:
        self.cluster = f.make_cluster()
        self.p5 = f.make_instance_type("ml.p5.48xlarge", 8)
        self.g5 = f.make_instance_type("ml.g5.12xlarge", 4)
        f.make_nodes(self.p5, 4)
        f.make_nodes(self.g5, 2)
        self.classes = f.make_priority_classes()
        ClusterPolicy.objects.filter(cluster=self.cluster).update(
            idle_allocation="first-come-first-serve", share_unallocated=False
        )
        self.research = f.make_team("research", fair_share_weight=30, sharing="lend-and-borrow")
        self.quota(self.research, self.p5, quota=16, borrow_limit_percent=100)
        self.quota(self.research, self.g5, quota=4, borrow_limit_kind="absolute", borrow_limit=2)
        self.serving = f.make_team(
            "serving", fair_share_weight=70, sharing="dont-lend", preempt_team_tasks="never"
        )
        self.quota(self.serving, self.p5, quota=8, borrow_limit_percent=0)
        self.interns = f.make_team("interns", fair_share_weight=0, sharing="lend", active=False)
        self.quota(self.interns, self.g5, quota=0, borrow_limit_kind="unlimited")

    def quota(self, team: Team, instance_type: InstanceType, **values: Any) -> TeamQuota:
        return TeamQuota.objects.create(team=team, instance_type=instance_type, **values)

    def add_inexpressible(self) -> None:
        TeamQuota.objects.filter(team=self.research, instance_type=self.p5).update(lend_limit=10)
        Team.objects.filter(pk=self.research.pk).update(
            reclaim="lower-priority",
            preempt_while_borrowing="never",
            preempt_team_tasks="lower-or-newer-equal-priority",
        )
        Team.objects.filter(pk=self.serving.pk).update(preempt_while_borrowing_max_priority=40)
        ClusterPolicy.objects.update(fair_share_half_life_s=86400, fair_share_history_percent=50)
        # A second percentage in one team: HyperPod has one per team.
        self.quota(self.serving, self.g5, quota=4, borrow_limit_percent=75)
        ClusterPolicy.objects.filter(cluster=self.cluster).update(
            task_ranking="first-come-first-serve", queueing="strict-fifo"
        )
        for i in range(8):
            PriorityClass.objects.create(name=f"extra-{i}", weight=i)


@pytest.fixture
def rich_policy(db: None) -> RichPolicy:
    return RichPolicy()
