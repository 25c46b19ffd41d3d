"""Kueue export of vCPU, memory and GPU partitions (docs/resources.md 1, 2 and 4): ``cpu``,
``memory`` in Gi, ``nvidia.com/gpu`` and ``nvidia.com/mig-<profile>``, each team's quota as the
ratio rule resolves it, validated against the CRDs."""

from __future__ import annotations

import pytest

from allocations.interop import kueue
from allocations.models import TeamQuota
from tests import factories as f
from tests.conftest import require_shared
from tests.interop.test_kueue_export import by_kind, crd_validators, schema_errors

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(db):
    f.make_cluster()
    p4d = f.make_instance_type(
        "ml.p4d.24xlarge",
        6,
        vcpus_per_node=96,
        memory_gib_per_node=1152,
        partitions_per_node={"mig-1g.5gb": 14},
    )
    g5 = f.make_instance_type("ml.g5.12xlarge", 4)
    f.make_nodes(p4d, 2)
    f.make_nodes(g5, 1)
    research = f.make_team("research")
    # docs/resources.md 2's table: 4 GPUs, 64 vCPU, 768 GiB by the ratio, 7 partitions.
    TeamQuota.objects.create(
        team=research,
        instance_type=p4d,
        quota=4,
        vcpus=64,
        partitions={"mig-1g.5gb": 7},
        borrow_limit_memory_gib=256,
    )
    TeamQuota.objects.create(team=research, instance_type=g5, quota=4)
    infra = f.make_team("infra", sharing="dont-lend")
    TeamQuota.objects.create(team=infra, instance_type=p4d, quota=6, instances=1)
    return p4d


def _resources(queue, flavor):
    (group,) = queue["spec"]["resourceGroups"]
    (entry,) = [fl for fl in group["flavors"] if fl["name"] == flavor]
    return {r["name"]: {k: v for k, v in r.items() if k != "name"} for r in entry["resources"]}


def test_every_manifest_validates_against_its_crd(cluster):
    validators = crd_validators(require_shared("interop/kueue-crds"))
    export = kueue.export_manifests()
    for manifest in export.manifests:
        assert schema_errors(validators, manifest) == [], manifest
        assert kueue.structural_problems(manifest) == [], manifest
    assert export.problems == []


def test_the_resource_group_covers_cpu_memory_gpus_and_partitions(cluster):
    queue = by_kind(kueue.export_manifests(), "ClusterQueue")["research"]
    (group,) = queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu", "cpu", "memory", "nvidia.com/mig-1g.5gb"]
    # 50% of each resource may be borrowed, but memory has its own absolute limit.
    assert _resources(queue, "ml.p4d.24xlarge") == {
        "nvidia.com/gpu": {"nominalQuota": 4, "borrowingLimit": 2},
        "cpu": {"nominalQuota": 64, "borrowingLimit": 32},
        "memory": {"nominalQuota": "768Gi", "borrowingLimit": "256Gi"},
        "nvidia.com/mig-1g.5gb": {"nominalQuota": 7, "borrowingLimit": 3},
    }
    # A type of GPUs alone: 0 of what it does not count, and a warning says so.
    assert _resources(queue, "ml.g5.12xlarge") == {
        "nvidia.com/gpu": {"nominalQuota": 4, "borrowingLimit": 2},
        "cpu": {"nominalQuota": 0, "borrowingLimit": 0},
        "memory": {"nominalQuota": "0Gi", "borrowingLimit": "0Gi"},
        "nvidia.com/mig-1g.5gb": {"nominalQuota": 0, "borrowingLimit": 0},
    }
    assert any(
        w.startswith("ml.g5.12xlarge does not count cpu or memory") for w in kueue.export_manifests().warnings
    )


def test_instances_give_a_nodes_worth_and_dont_lend_lends_nothing(cluster):
    queue = by_kind(kueue.export_manifests(), "ClusterQueue")["infra"]
    assert _resources(queue, "ml.p4d.24xlarge") == {
        "nvidia.com/gpu": {"nominalQuota": 6, "borrowingLimit": 0, "lendingLimit": 0},
        "cpu": {"nominalQuota": 96, "borrowingLimit": 0, "lendingLimit": 0},
        "memory": {"nominalQuota": "1152Gi", "borrowingLimit": "0Gi", "lendingLimit": "0Gi"},
        "nvidia.com/mig-1g.5gb": {"nominalQuota": 14, "borrowingLimit": 0, "lendingLimit": 0},
    }


def test_the_cohort_holds_what_no_quota_takes_of_each_resource(cluster):
    cohort = next(iter(by_kind(kueue.export_manifests(), "Cohort").values()))
    (group,) = cohort["spec"]["resourceGroups"]
    (p4d,) = [fl for fl in group["flavors"] if fl["name"] == "ml.p4d.24xlarge"]
    # Two ready nodes: 12 GPUs, 192 vCPU, 2,304 GiB, 28 partitions; quotas take 10, 160, 1,920, 21.
    assert {r["name"]: r["nominalQuota"] for r in p4d["resources"]} == {
        "nvidia.com/gpu": 2,
        "cpu": 32,
        "memory": "384Gi",
        "nvidia.com/mig-1g.5gb": 7,
    }
