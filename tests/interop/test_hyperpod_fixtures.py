"""Hand-written HyperPod documents (this project's own fixtures) import as expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from allocations.interop import hyperpod
from allocations.interop import services as interop_services
from allocations.models import ClusterPolicy, PriorityClass, Team, TeamQuota

pytestmark = pytest.mark.django_db
FIXTURES = Path(__file__).parent / "fixtures"


def test_a_single_compute_quota_request_from_the_cli_imports(personas):
    text = (FIXTURES / "compute-quota-team-a.json").read_text()
    imported = hyperpod.parse(text)
    # The cluster has no ARN configured: nothing to compare the request's ARN with.
    assert imported.warnings == []
    interop_services.policy_import_apply(actor=personas.cluster_admin, imported=imported)
    team = Team.objects.get(name="team-a")
    assert (team.display_name, team.fair_share_weight, team.sharing) == (
        "Team A (ML research)",
        10,
        "lend-and-borrow",
    )
    quota = TeamQuota.objects.get(team=team)
    # Count is in instances: 1 x 8 GPUs.
    assert (quota.quota, quota.borrow_limit_kind, quota.borrow_limit_percent) == (8, "percent", 100)
    assert Team.objects.get(name="team-b").fair_share_weight == 1  # not in the request: untouched


def test_a_bundle_imports_the_cluster_policy_classes_and_teams(personas):
    personas.cluster.backend_settings = {
        "hyperpod_cluster_arn": "arn:aws:sagemaker:us-west-2:123456789012:cluster/zzzzz12345zz"
    }
    personas.cluster.save()
    imported = hyperpod.parse((FIXTURES / "hyperpod-bundle.json").read_text())
    assert len(imported.warnings) == 4  # every request names another cluster
    assert "ClusterSchedulerConfig.ClusterArn" in imported.warnings[0]
    interop_services.policy_import_apply(actor=personas.cluster_admin, imported=imported)

    assert dict(PriorityClass.objects.values_list("name", "weight")) == {
        "inference": 90,
        "training": 70,
        "experimentation": 10,
    }
    policy = ClusterPolicy.objects.get()
    assert (policy.idle_allocation, policy.share_unallocated) == ("fair-share", True)
    quotas = {q.team.name: q for q in TeamQuota.objects.select_related("team")}
    assert (quotas["team-a"].quota, quotas["team-a"].borrow_limit_percent) == (12, 50)
    assert (quotas["team-b"].quota, quotas["team-b"].borrow_limit_kind, quotas["team-b"].borrow_limit) == (
        4,
        "absolute",
        8,
    )
    team_c = Team.objects.get(name="team-c")
    # SageMaker's defaults for what the request leaves out: weight 0, LowerPriority, Enabled.
    assert (team_c.fair_share_weight, team_c.preempt_team_tasks, team_c.active) == (0, "lower-priority", True)
    assert Team.objects.get(name="team-b").preempt_team_tasks == "never"
