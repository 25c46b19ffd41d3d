"""HyperPod import: parse, preview, apply through the policy services; bad input changes nothing."""

from __future__ import annotations

import copy
import json

import pytest

from allocations.interop import hyperpod
from allocations.interop import policy as interop_policy
from allocations.interop import services as interop_services
from allocations.models import AuditEntry, Cluster, ClusterPolicy, PriorityClass, Team, TeamQuota
from tests import factories as f

pytestmark = pytest.mark.django_db


def policy_as_data() -> dict:
    """The policy in plain values; a quota row that says only the defaults counts as missing."""
    policy = ClusterPolicy.objects.filter(cluster_id=1).first()
    quotas: dict[str, dict] = {}
    for q in TeamQuota.objects.select_related("team", "instance_type"):
        if (
            q.quota == 0
            and q.borrow_limit_kind == "percent"
            and q.borrow_limit_percent == 50
            and q.lend_limit is None
        ):
            continue
        quotas.setdefault(q.team.name, {})[q.instance_type.name] = (
            q.quota,
            q.borrow_limit_kind,
            q.borrow_limit_percent if q.borrow_limit_kind == "percent" else None,
            q.borrow_limit,
            q.lend_limit,
        )
    return {
        "policy": (policy.idle_allocation, policy.share_unallocated) if policy else None,
        "classes": dict(PriorityClass.objects.values_list("name", "weight")),
        "teams": {
            t.name: (t.display_name, t.active, t.fair_share_weight, t.sharing, t.preempt_team_tasks)
            for t in Team.objects.all()
        },
        "quotas": quotas,
    }


def empty_the_policy() -> None:
    """No cluster, policy, team or priority class: only the instance types and nodes remain."""
    TeamQuota.objects.all().delete()
    Team.objects.all().delete()
    PriorityClass.objects.all().delete()
    Cluster.objects.all().delete()


def test_round_trip_into_an_empty_database_gives_the_same_policy(rich_policy, personas_admin):
    before = policy_as_data()
    text = hyperpod.export_policy().json()
    empty_the_policy()
    assert policy_as_data()["teams"] == {}

    imported = hyperpod.parse(text)
    preview = interop_policy.diff(imported)
    applied = interop_services.policy_import_apply(actor=personas_admin, imported=imported)

    assert applied == preview
    after = policy_as_data()
    # Unlimited borrowing travels as the model's maximum and comes back as unlimited.
    assert after == before
    assert AuditEntry.objects.filter(actor=personas_admin).exists()


def test_importing_the_export_into_the_same_database_changes_nothing(rich_policy, personas_admin):
    rich_policy.add_inexpressible()
    imported = hyperpod.parse(hyperpod.export_policy().json())
    # Only the two priority classes beyond HyperPod's 10 go: the approximations (a second
    # percentage as its absolute cap, lower-or-newer-equal-priority as LowerPriority) read back
    # as what they approximate.
    changes = interop_policy.diff(imported)
    assert {(c.action, c.object_repr) for c in changes} == {("delete", "extra-0"), ("delete", "extra-1")}
    # What HyperPod cannot express is kept: reclaim, lend limit, max priority.
    interop_services.policy_import_apply(actor=personas_admin, imported=imported)
    research = Team.objects.get(name="research")
    assert research.reclaim == "lower-priority"
    assert research.preempt_while_borrowing == "never"
    assert TeamQuota.objects.get(team=research, instance_type__name="ml.p5.48xlarge").lend_limit == 10
    assert research.preempt_team_tasks == "lower-or-newer-equal-priority"
    serving_g5 = TeamQuota.objects.get(team__name="serving", instance_type__name="ml.g5.12xlarge")
    assert (serving_g5.borrow_limit_kind, serving_g5.borrow_limit_percent) == ("percent", 75)
    assert Team.objects.get(name="serving").preempt_while_borrowing_max_priority == 40
    assert interop_policy.diff(hyperpod.parse(hyperpod.export_policy().json())) == []


def test_preview_lists_creates_updates_and_deletes_with_old_and_new_values(rich_policy):
    bundle = hyperpod.export_policy().bundle
    bundle["ClusterSchedulerConfig"]["SchedulerConfig"]["FairShare"] = "Enabled"
    bundle["ClusterSchedulerConfig"]["SchedulerConfig"]["PriorityClasses"] = [
        {"Name": "inference", "Weight": 90},
        {"Name": "batch", "Weight": 5},
    ]
    research = bundle["ComputeQuotas"][
        [q["ComputeQuotaTarget"]["TeamName"] for q in bundle["ComputeQuotas"]].index("research")
    ]
    research["ComputeQuotaConfig"]["ComputeQuotaResources"] = [{"InstanceType": "ml.p5.48xlarge", "Count": 3}]
    research["ComputeQuotaConfig"]["ResourceSharingConfig"].pop("AbsoluteBorrowLimits")
    bundle["ComputeQuotas"].append(
        {
            "Name": "newteam-quota",
            "ClusterArn": hyperpod.PLACEHOLDER_CLUSTER_ARN,
            "ComputeQuotaConfig": {
                "ComputeQuotaResources": [{"InstanceType": "ml.g5.12xlarge", "Accelerators": 4}]
            },
            "ComputeQuotaTarget": {"TeamName": "newteam", "FairShareWeight": 5},
        }
    )
    changes = {
        (c.action, c.object_type, c.object_repr, c.field): (c.old, c.new)
        for c in interop_policy.diff(hyperpod.parse(json.dumps(bundle)))
    }
    assert changes[("update", "cluster policy", "cluster policy", "idle_allocation")] == (
        "first-come-first-serve",
        "fair-share",
    )
    assert changes[("update", "priority class", "inference", "weight")] == ("100", "90")
    assert changes[("create", "priority class", "batch", "weight")] == ("", "5")
    assert changes[("delete", "priority class", "training", "weight")] == ("70", "")
    # Count is in instances: 3 x 8 GPUs.
    assert changes[("update", "team quota", "research / ml.p5.48xlarge", "quota")] == ("16", "24")
    assert changes[("delete", "team quota", "research / ml.g5.12xlarge", "quota")] == ("4", "")
    assert changes[("create", "team", "newteam", "fair_share_weight")] == ("", "5")
    assert changes[("create", "team quota", "newteam / ml.g5.12xlarge", "quota")] == ("", "4")


def test_a_lowered_quota_lowers_the_lend_limit_with_it(rich_policy, personas_admin):
    TeamQuota.objects.filter(team=rich_policy.research, instance_type=rich_policy.p5).update(lend_limit=10)
    bundle = hyperpod.export_policy().bundle
    for request in bundle["ComputeQuotas"]:
        if request["ComputeQuotaTarget"]["TeamName"] == "research":
            request["ComputeQuotaConfig"]["ComputeQuotaResources"][1]["Accelerators"] = 6
    changes = interop_services.policy_import_apply(
        actor=personas_admin, imported=hyperpod.parse(json.dumps(bundle))
    )
    assert ("research / ml.p5.48xlarge", "lend_limit", "10", "6") in {
        (c.object_repr, c.field, c.old, c.new) for c in changes
    }
    quota = TeamQuota.objects.get(team=rich_policy.research, instance_type=rich_policy.p5)
    assert (quota.quota, quota.lend_limit) == (6, 6)


def test_a_single_compute_quota_request_touches_only_its_team(rich_policy, personas_admin):
    request = {
        "Name": "serving-quota",
        "ClusterArn": hyperpod.PLACEHOLDER_CLUSTER_ARN,
        "ComputeQuotaConfig": {
            "ComputeQuotaResources": [{"InstanceType": "ml.p5.48xlarge", "Accelerators": 12}],
            "ResourceSharingConfig": {"Strategy": "DontLend", "BorrowLimit": 0},
            "PreemptTeamTasks": "Never",
        },
        "ComputeQuotaTarget": {"TeamName": "serving", "FairShareWeight": 70},
    }
    before = policy_as_data()
    changes = interop_services.policy_import_apply(
        actor=personas_admin, imported=hyperpod.parse(json.dumps(request))
    )
    assert [(c.object_repr, c.field, c.old, c.new) for c in changes] == [
        ("serving / ml.p5.48xlarge", "quota", "8", "12")
    ]
    after = policy_as_data()
    assert after["classes"] == before["classes"] and after["policy"] == before["policy"]


def _bundle_with(mutate):
    def build():
        bundle = copy.deepcopy(hyperpod.export_policy().bundle)
        mutate(bundle)
        return json.dumps(bundle)

    return build


def _set(path, value):
    def mutate(bundle):
        target = bundle
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return mutate


def _delete(path):
    def mutate(bundle):
        target = bundle
        for step in path[:-1]:
            target = target[step]
        del target[path[-1]]

    return mutate


QUOTA = ["ComputeQuotas", 1, "ComputeQuotaConfig"]  # research (teams are in name order)
INVALID = {
    "not-json": (lambda: "{'ClusterSchedulerConfig': ", "(document)", "is not valid JSON"),
    "empty": (lambda: "  ", "(document)", "is empty"),
    "a-list": (lambda: "[1, 2]", "(document)", "must be a JSON object, not list"),
    "unknown-bundle-member": (
        _bundle_with(_set(["Teams"], [])),
        "Teams",
        "is not a member of a gpugov-hyperpod/1 bundle",
    ),
    "wrong-format": (
        _bundle_with(_set(["Format"], "other/2")),
        "Format",
        "'other/2' is not 'gpugov-hyperpod/1'",
    ),
    "quotas-not-a-list": (_bundle_with(_set(["ComputeQuotas"], {})), "ComputeQuotas", "must be a list"),
    "bad-strategy": (
        _bundle_with(_set([*QUOTA, "ResourceSharingConfig", "Strategy"], "Borrow")),
        "ComputeQuotas[1].ComputeQuotaConfig.ResourceSharingConfig.Strategy",
        "'Borrow' is not one of Lend, DontLend, LendAndBorrow",
    ),
    "borrow-limit-above-max": (
        _bundle_with(_set([*QUOTA, "ResourceSharingConfig", "BorrowLimit"], 10001)),
        "ComputeQuotas[1].ComputeQuotaConfig.ResourceSharingConfig.BorrowLimit",
        "10001 is above the maximum 10000",
    ),
    "negative-accelerators": (
        _bundle_with(_set([*QUOTA, "ComputeQuotaResources", 0, "Accelerators"], -1)),
        "ComputeQuotas[1].ComputeQuotaConfig.ComputeQuotaResources[0].Accelerators",
        "-1 is below the minimum 0",
    ),
    "accelerators-as-text": (
        _bundle_with(_set([*QUOTA, "ComputeQuotaResources", 0, "Accelerators"], "4")),
        "ComputeQuotas[1].ComputeQuotaConfig.ComputeQuotaResources[0].Accelerators",
        "'4' has the wrong type (expected int)",
    ),
    "accelerators-as-boolean": (
        _bundle_with(_set([*QUOTA, "ComputeQuotaResources", 0, "Accelerators"], True)),
        "ComputeQuotas[1].ComputeQuotaConfig.ComputeQuotaResources[0].Accelerators",
        "True is a boolean",
    ),
    "unknown-member": (
        _bundle_with(_set([*QUOTA, "LendLimit"], 3)),
        "ComputeQuotas[1].ComputeQuotaConfig.LendLimit",
        "is not a known member",
    ),
    "missing-team-name": (
        _bundle_with(_delete(["ComputeQuotas", 0, "ComputeQuotaTarget", "TeamName"])),
        "ComputeQuotas[0].ComputeQuotaTarget.TeamName",
        "is required",
    ),
    "bad-team-name": (
        _bundle_with(_set(["ComputeQuotas", 2, "ComputeQuotaTarget", "TeamName"], "Serving_Team")),
        "ComputeQuotas[2].ComputeQuotaTarget.TeamName",
        "does not match the pattern",
    ),
    "team-name-too-long": (
        _bundle_with(_set(["ComputeQuotas", 2, "ComputeQuotaTarget", "TeamName"], "t" * 41)),
        "ComputeQuotas[2].ComputeQuotaTarget.TeamName",
        "longer than 40 characters",
    ),
    "weight-above-100": (
        _bundle_with(_set(["ComputeQuotas", 2, "ComputeQuotaTarget", "FairShareWeight"], 101)),
        "ComputeQuotas[2].ComputeQuotaTarget.FairShareWeight",
        "101 is above the maximum 100",
    ),
    "team-twice": (
        _bundle_with(_set(["ComputeQuotas", 2, "ComputeQuotaTarget", "TeamName"], "research")),
        "ComputeQuotas[2].ComputeQuotaTarget.TeamName",
        "team 'research' is already given at ComputeQuotas[1].ComputeQuotaTarget.TeamName",
    ),
    "unknown-instance-type-of-sagemaker": (
        _bundle_with(_set([*QUOTA, "ComputeQuotaResources", 0, "InstanceType"], "ml.h100")),
        "ComputeQuotas[1].ComputeQuotaConfig.ComputeQuotaResources[0].InstanceType",
        "'ml.h100' is not one of",
    ),
    "instance-type-not-in-this-cluster": (
        _bundle_with(_set([*QUOTA, "ComputeQuotaResources", 0, "InstanceType"], "ml.p4d.24xlarge")),
        "ComputeQuotas[1].ComputeQuotaConfig.ComputeQuotaResources[0].InstanceType",
        "'ml.p4d.24xlarge' is not an instance type of this cluster",
    ),
    "instance-type-twice": (
        _bundle_with(_set([*QUOTA, "ComputeQuotaResources", 1, "InstanceType"], "ml.g5.12xlarge")),
        "ComputeQuotas[1].ComputeQuotaConfig.ComputeQuotaResources[1].InstanceType",
        "'ml.g5.12xlarge' is given twice",
    ),
    "count-disagrees": (
        _bundle_with(_set([*QUOTA, "ComputeQuotaResources", 1, "Count"], 5)),
        "ComputeQuotas[1].ComputeQuotaConfig.ComputeQuotaResources[1].Accelerators",
        "16 disagrees with Count 5 x 8 GPUs per node",
    ),
    # docs/resources.md 1: a type of GPUs alone has no vCPU to give.
    "vcpu-quota-of-a-type-of-gpus-alone": (
        _bundle_with(_set([*QUOTA, "ComputeQuotaResources", 1, "VCpu"], 8.0)),
        "ComputeQuotas[1].ComputeQuotaConfig.ComputeQuotaResources[1].VCpu",
        "ml.p5.48xlarge declares no vcpus",
    ),
    "priority-weight-above-100": (
        _bundle_with(
            _set(["ClusterSchedulerConfig", "SchedulerConfig", "PriorityClasses", 1, "Weight"], 300)
        ),
        "ClusterSchedulerConfig.SchedulerConfig.PriorityClasses[1].Weight",
        "300 is above the maximum 100",
    ),
    "priority-class-twice": (
        _bundle_with(
            _set(["ClusterSchedulerConfig", "SchedulerConfig", "PriorityClasses", 1, "Name"], "inference")
        ),
        "ClusterSchedulerConfig.SchedulerConfig.PriorityClasses[1].Name",
        "priority class 'inference' is given twice",
    ),
    "fair-share-word": (
        _bundle_with(_set(["ClusterSchedulerConfig", "SchedulerConfig", "FairShare"], "On")),
        "ClusterSchedulerConfig.SchedulerConfig.FairShare",
        "'On' is not one of Enabled, Disabled",
    ),
    "bad-cluster-arn": (
        _bundle_with(_set(["ClusterSchedulerConfig", "ClusterArn"], "my-cluster")),
        "ClusterSchedulerConfig.ClusterArn",
        "does not match the pattern",
    ),
    "eleven-priority-classes": (
        _bundle_with(
            _set(
                ["ClusterSchedulerConfig", "SchedulerConfig", "PriorityClasses"],
                [{"Name": f"c{i}", "Weight": i} for i in range(11)],
            )
        ),
        "ClusterSchedulerConfig.SchedulerConfig.PriorityClasses",
        "has 11 items, more than the maximum 10",
    ),
}


@pytest.mark.parametrize("case", INVALID, ids=list(INVALID))
def test_invalid_input_is_refused_with_its_path_and_nothing_changes(rich_policy, personas_admin, case):
    build, path, message = INVALID[case]
    text = build()
    before, audit_rows = policy_as_data(), AuditEntry.objects.count()
    with pytest.raises(hyperpod.ImportRefused) as refused:
        hyperpod.parse(text)
    assert any(
        p.path == ("" if path == "(document)" else path) and message in p.message
        for p in refused.value.problems
    ), [str(p) for p in refused.value.problems]
    assert f"{path}: " in str(refused.value)
    assert policy_as_data() == before
    assert AuditEntry.objects.count() == audit_rows


def test_a_change_refused_while_applying_rolls_back_every_change(rich_policy, personas_admin):
    newer = f.make_instance_type("ml.g5.xlarge", 1)
    bundle = hyperpod.export_policy().bundle
    bundle["ClusterSchedulerConfig"]["SchedulerConfig"]["FairShare"] = "Enabled"
    bundle["ComputeQuotas"].append(
        {
            "Name": "newteam-quota",
            "ClusterArn": hyperpod.PLACEHOLDER_CLUSTER_ARN,
            "ComputeQuotaConfig": {
                "ComputeQuotaResources": [{"InstanceType": "ml.g5.xlarge", "Accelerators": 1}]
            },
            "ComputeQuotaTarget": {"TeamName": "newteam"},
        }
    )
    imported = hyperpod.parse(json.dumps(bundle))
    newer.delete()  # between the preview and the apply
    before, audit_rows = policy_as_data(), AuditEntry.objects.count()
    with pytest.raises(interop_services.ApplyRefused) as refused:
        interop_services.policy_import_apply(actor=personas_admin, imported=imported)
    assert str(refused.value) == (
        "ComputeQuotas[3].ComputeQuotaConfig.ComputeQuotaResources[0]: "
        "'ml.g5.xlarge' is no longer an instance type of this cluster."
    )
    # The cluster policy and the new team, applied before the refusal, are rolled back.
    assert policy_as_data() == before
    assert AuditEntry.objects.count() == audit_rows


@pytest.fixture
def personas_admin(db):
    return f.make_user("interop-admin", staff=True)


def test_an_absolute_limit_that_differs_from_the_percentage_is_applied(rich_policy, personas_admin):
    rich_policy.quota(rich_policy.serving, rich_policy.g5, quota=4, borrow_limit_percent=75)
    bundle = hyperpod.export_policy().bundle
    serving = bundle["ComputeQuotas"][2]["ComputeQuotaConfig"]["ResourceSharingConfig"]
    assert serving["AbsoluteBorrowLimits"] == [{"InstanceType": "ml.g5.12xlarge", "Accelerators": 3}]
    serving["AbsoluteBorrowLimits"][0]["Accelerators"] = 2
    changes = interop_services.policy_import_apply(
        actor=personas_admin, imported=hyperpod.parse(json.dumps(bundle))
    )
    assert {(c.field, c.old, c.new) for c in changes} == {
        ("borrow_limit_kind", "percent", "absolute"),
        ("borrow_limit", "(none)", "2"),
    }
    quota = TeamQuota.objects.get(team=rich_policy.serving, instance_type=rich_policy.g5)
    assert (quota.borrow_limit_kind, quota.borrow_limit) == ("absolute", 2)
