"""HyperPod export: every request passes SageMaker's model; what it cannot say is a warning."""

from __future__ import annotations

import json

import pytest
from botocore.validate import validate_parameters

from allocations.interop import hyperpod, shapes
from allocations.models import Cluster

pytestmark = pytest.mark.django_db


def _requests(bundle):
    yield hyperpod.SCHEDULER_OPERATION, bundle["ClusterSchedulerConfig"]
    for request in bundle["ComputeQuotas"]:
        yield hyperpod.QUOTA_OPERATION, request


@pytest.mark.parametrize("inexpressible", [False, True], ids=["expressible", "with-inexpressible"])
def test_every_exported_request_passes_sagemakers_model(rich_policy, inexpressible):
    if inexpressible:
        rich_policy.add_inexpressible()
    export = hyperpod.export_policy()
    assert export.problems == []
    assert len(export.bundle["ComputeQuotas"]) == 3
    for operation, request in _requests(export.bundle):
        # botocore's own check (raises ParamValidationError) and the maximum/enum/pattern walk.
        validate_parameters(request, shapes.input_shape(operation))
        assert shapes.check_request(operation, request) == []
    # The bundle is what --cli-input-json takes: plain JSON.
    assert json.loads(export.json()) == export.bundle


def test_exports_the_cluster_policy_and_priority_classes(rich_policy):
    scheduler = hyperpod.export_policy().bundle["ClusterSchedulerConfig"]
    assert scheduler["ClusterArn"] == hyperpod.PLACEHOLDER_CLUSTER_ARN
    assert scheduler["SchedulerConfig"] == {
        "PriorityClasses": [
            {"Name": "inference", "Weight": 100},
            {"Name": "training", "Weight": 70},
            {"Name": "fine-tuning", "Weight": 50},
            {"Name": "experimentation", "Weight": 10},
        ],
        "FairShare": "Disabled",
        "IdleResourceSharing": "Disabled",
    }


def test_uses_the_configured_cluster_arn_without_a_warning(rich_policy):
    arn = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcdef123456"
    Cluster.objects.filter(pk=1).update(backend_settings={"hyperpod_cluster_arn": arn})
    export = hyperpod.export_policy()
    assert {request["ClusterArn"] for _, request in _requests(export.bundle)} == {arn}
    assert not [w for w in export.warnings if "ClusterArn" in w]
    assert export.problems == []


def test_maps_each_team_to_a_compute_quota(rich_policy):
    quotas = {
        q["ComputeQuotaTarget"]["TeamName"]: q for q in hyperpod.export_policy().bundle["ComputeQuotas"]
    }
    research = quotas["research"]
    assert research["Name"] == "research-quota"
    assert research["ActivationState"] == "Enabled"
    assert research["ComputeQuotaTarget"]["FairShareWeight"] == 30
    assert research["ComputeQuotaConfig"] == {
        "ComputeQuotaResources": [
            {"InstanceType": "ml.g5.12xlarge", "Accelerators": 4},
            {"InstanceType": "ml.p5.48xlarge", "Accelerators": 16},
        ],
        "ResourceSharingConfig": {
            "Strategy": "LendAndBorrow",
            "BorrowLimit": 100,
            "AbsoluteBorrowLimits": [{"InstanceType": "ml.g5.12xlarge", "Accelerators": 2}],
        },
        "PreemptTeamTasks": "LowerPriority",
    }
    serving = quotas["serving"]["ComputeQuotaConfig"]
    assert serving["ResourceSharingConfig"]["Strategy"] == "DontLend"
    assert serving["PreemptTeamTasks"] == "Never"
    interns = quotas["interns"]
    assert interns["ActivationState"] == "Disabled"
    assert interns["ComputeQuotaConfig"]["ResourceSharingConfig"]["Strategy"] == "Lend"
    assert interns["ComputeQuotaConfig"]["ResourceSharingConfig"]["AbsoluteBorrowLimits"] == [
        {"InstanceType": "ml.g5.12xlarge", "Accelerators": hyperpod.unlimited_accelerators()}
    ]


def test_every_inexpressible_setting_is_a_warning(rich_policy):
    rich_policy.add_inexpressible()
    warnings = "\n".join(hyperpod.export_policy().warnings)
    for expected in (
        "research / ml.p5.48xlarge: lend limit 10 GPUs",
        "research: reclaim lower-priority",
        "research: preempt_while_borrowing (never)",
        "research: preempt_team_tasks lower-or-newer-equal-priority",
        "serving: preempt_while_borrowing (default, max priority 40)",
        "serving / ml.g5.12xlarge: borrow limit 75% differs from the team's 0%",
        "interns is inactive",
        "interns / ml.g5.12xlarge: unlimited borrowing is approximated",
        "task_ranking is first-come-first-serve",
        "queueing is strict-fifo",
        "half-life 86400 s, 50% history",
        "at most 10 priority classes",
        "extra-1 (1), extra-0 (0)",
        "ClusterArn is the placeholder",
    ):
        assert expected in warnings


def test_a_second_percentage_becomes_the_same_absolute_cap(rich_policy):
    rich_policy.add_inexpressible()
    quotas = {
        q["ComputeQuotaTarget"]["TeamName"]: q for q in hyperpod.export_policy().bundle["ComputeQuotas"]
    }
    sharing = quotas["serving"]["ComputeQuotaConfig"]["ResourceSharingConfig"]
    # 75% of 4 GPUs is 3 GPUs: the same max_use as POLICY.md section 2's floor(quota * pct / 100).
    assert sharing["BorrowLimit"] == 0
    assert sharing["AbsoluteBorrowLimits"] == [{"InstanceType": "ml.g5.12xlarge", "Accelerators": 3}]


def test_an_instance_type_sagemaker_does_not_know_is_left_out_with_a_warning(rich_policy):
    from tests import factories as f

    local = f.make_instance_type("gpu-a100-local", 4)
    rich_policy.quota(rich_policy.research, local, quota=4)
    export = hyperpod.export_policy()
    assert export.problems == []
    assert "research: quota of 4 GPUs of gpu-a100-local left out" in "\n".join(export.warnings)


def test_an_empty_installation_exports_a_valid_scheduler_config(db):
    export = hyperpod.export_policy()
    assert export.problems == []
    assert export.bundle["ComputeQuotas"] == []
    assert export.bundle["ClusterSchedulerConfig"]["SchedulerConfig"]["FairShare"] == "Enabled"


def test_a_malformed_configured_arn_is_reported_with_its_path(rich_policy):
    Cluster.objects.filter(pk=1).update(backend_settings={"hyperpod_cluster_arn": "my-cluster"})
    problems = [str(p) for p in hyperpod.export_policy().problems]
    assert problems[0].startswith(
        "ClusterSchedulerConfig.ClusterArn: 'my-cluster' does not match the pattern"
    )
    assert len(problems) == 4  # the scheduler config and the three compute quotas


def test_control_characters_of_a_display_name_are_not_exported(rich_policy):
    from allocations.models import Team

    Team.objects.filter(name="research").update(display_name="Research\tlab\u200b")
    export = hyperpod.export_policy()
    assert export.problems == []
    quotas = {q["ComputeQuotaTarget"]["TeamName"]: q for q in export.bundle["ComputeQuotas"]}
    assert quotas["research"]["Description"] == "Researchlab"
