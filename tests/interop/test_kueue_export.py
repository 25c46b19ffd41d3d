"""Kueue export: every manifest validates against its CRD's schema; the mapping of each setting."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from allocations.interop import kueue
from allocations.models import ClusterPolicy, Node, Team, TeamQuota
from tests.conftest import require_shared

pytestmark = pytest.mark.django_db

CRD_FILES = {
    "ClusterQueue": "kueue.x-k8s.io_clusterqueues.yaml",
    "Cohort": "kueue.x-k8s.io_cohorts.yaml",
    "LocalQueue": "kueue.x-k8s.io_localqueues.yaml",
    "ResourceFlavor": "kueue.x-k8s.io_resourceflavors.yaml",
    "WorkloadPriorityClass": "kueue.x-k8s.io_workloadpriorityclasses.yaml",
}


def crd_validators(directory: Path) -> dict[str, jsonschema.protocols.Validator]:
    """A validator per kind from the openAPIV3Schema of the CRD's v1beta2 version."""
    validators = {}
    for kind, filename in CRD_FILES.items():
        crd = yaml.safe_load((directory / filename).read_text())
        assert crd["spec"]["names"]["kind"] == kind
        (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta2"]
        schema = version["schema"]["openAPIV3Schema"]
        # OpenAPI v3.0 schemas are close to JSON Schema draft 4; x-kubernetes-* keywords are ignored.
        validators[kind] = jsonschema.Draft4Validator(schema)
    return validators


@pytest.fixture
def validators():
    return crd_validators(require_shared("interop/kueue-crds"))


def schema_errors(validators, manifest) -> list[str]:
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validators[manifest["kind"]].iter_errors(manifest)
    ]


def by_kind(export, kind):
    return {m["metadata"]["name"]: m for m in export.manifests if m["kind"] == kind}


@pytest.mark.parametrize("inexpressible", [False, True], ids=["plain", "with-every-setting"])
def test_every_manifest_validates_against_its_crd_schema(rich_policy, validators, inexpressible):
    if inexpressible:
        rich_policy.add_inexpressible()
    export = kueue.export_manifests()
    assert {m["kind"] for m in export.manifests} == set(CRD_FILES)
    for manifest in export.manifests:
        assert schema_errors(validators, manifest) == [], manifest
    # The YAML and JSON forms hold the same objects.
    assert list(yaml.safe_load_all(export.yaml())) == export.manifests
    assert json.loads(export.json())["items"] == export.manifests


def test_the_crd_schemas_do_refuse_a_bad_manifest(rich_policy, validators):
    queue = copy.deepcopy(by_kind(kueue.export_manifests(), "ClusterQueue")["research"])
    queue["spec"]["preemption"]["reclaimWithinCohort"] = "Sometimes"
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "lots"
    errors = "\n".join(schema_errors(validators, queue))
    assert "'Sometimes' is not one of ['Never', 'LowerPriority', 'Any']" in errors
    assert "'lots' does not match" in errors


@pytest.mark.parametrize("inexpressible", [False, True], ids=["plain", "with-every-setting"])
def test_every_manifest_passes_the_structural_checks(rich_policy, inexpressible):
    """Runs without ../shared: names, references and the CRDs' CEL rules that apply."""
    if inexpressible:
        rich_policy.add_inexpressible()
    export = kueue.export_manifests()
    for manifest in export.manifests:
        assert kueue.structural_problems(manifest) == []
    flavors = set(by_kind(export, "ResourceFlavor"))
    (cohort,) = by_kind(export, "Cohort")
    for queue in by_kind(export, "ClusterQueue").values():
        assert queue["spec"]["cohortName"] == cohort
        for group in queue["spec"]["resourceGroups"]:
            assert group["coveredResources"] == ["nvidia.com/gpu"]
            assert {f["name"] for f in group["flavors"]} == flavors
    for name, local in by_kind(export, "LocalQueue").items():
        assert local["spec"]["clusterQueue"] == name
        assert local["metadata"]["namespace"] == name


def test_the_structural_checks_catch_what_the_api_server_would_refuse():
    bad = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "Team_A"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "x",
                            "resources": [
                                {"name": "nvidia.com/gpu", "nominalQuota": -1, "borrowingLimit": 2}
                            ],
                        }
                    ],
                }
            ],
            "preemption": {"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}},
        },
    }
    problems = "\n".join(kueue.structural_problems(bad))
    assert "apiVersion 'kueue.x-k8s.io/v1beta1'" in problems
    assert "metadata.name 'Team_A' is not a DNS subdomain" in problems
    assert "nominalQuota -1 must be a whole number >= 0" in problems
    assert "borrowingLimit without a cohortName" in problems
    assert "borrowWithinCohort needs reclaimWithinCohort" in problems


def test_maps_quotas_and_limits_of_each_team(rich_policy):
    TeamQuota.objects.filter(team=rich_policy.research, instance_type=rich_policy.p5).update(lend_limit=10)
    queues = by_kind(kueue.export_manifests(), "ClusterQueue")

    def resources(team):
        group = queues[team]["spec"]["resourceGroups"][0]
        return {f["name"]: f["resources"][0] for f in group["flavors"]}

    research = resources("research")
    # 100% of 16 GPUs; an absolute limit of 2; the lend limit.
    assert research["ml.p5.48xlarge"] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 16,
        "borrowingLimit": 16,
        "lendingLimit": 10,
    }
    assert research["ml.g5.12xlarge"] == {"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 2}
    # dont-lend: lends nothing and borrows nothing; no quota row: quota 0.
    assert resources("serving")["ml.p5.48xlarge"] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 8,
        "borrowingLimit": 0,
        "lendingLimit": 0,
    }
    assert resources("serving")["ml.g5.12xlarge"]["nominalQuota"] == 0
    # lend: never borrows, even with an unlimited borrow limit.
    assert resources("interns")["ml.g5.12xlarge"] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 0,
        "borrowingLimit": 0,
    }
    Team.objects.filter(name="interns").update(sharing="lend-and-borrow")
    interns = by_kind(kueue.export_manifests(), "ClusterQueue")["interns"]
    assert (
        "borrowingLimit" not in interns["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    )  # unlimited


def test_maps_preemption_fair_sharing_queueing_and_activation(rich_policy):
    Team.objects.filter(name="research").update(
        reclaim="lower-priority", preempt_while_borrowing_max_priority=40
    )
    Team.objects.filter(name="serving").update(
        reclaim="never", preempt_team_tasks="lower-or-newer-equal-priority"
    )
    ClusterPolicy.objects.update(queueing="strict-fifo")
    queues = by_kind(kueue.export_manifests(), "ClusterQueue")
    research, serving, interns = (queues[n]["spec"] for n in ("research", "serving", "interns"))
    assert research["preemption"] == {
        "reclaimWithinCohort": "LowerPriority",
        "withinClusterQueue": "LowerPriority",
        "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 40},
    }
    # reclaim never: preempt_while_borrowing defaults to never (POLICY.md section 1).
    assert serving["preemption"] == {
        "reclaimWithinCohort": "Never",
        "withinClusterQueue": "LowerOrNewerEqualPriority",
        "borrowWithinCohort": {"policy": "Never"},
    }
    assert research["fairSharing"] == {"weight": 30}
    assert research["queueingStrategy"] == "StrictFIFO"
    assert interns["stopPolicy"] == "Hold" and "stopPolicy" not in research


def test_fair_share_leaves_borrow_within_cohort_to_kueues_fair_sharing(rich_policy):
    ClusterPolicy.objects.update(idle_allocation="fair-share")
    export = kueue.export_manifests()
    for queue in by_kind(export, "ClusterQueue").values():
        assert queue["spec"]["preemption"]["borrowWithinCohort"] == {"policy": "Never"}
    assert any("enable fair sharing in Kueue's controller configuration" in w for w in export.warnings)


def test_the_cohort_holds_unallocated_ready_capacity_when_shared(rich_policy):
    export = kueue.export_manifests()
    (cohort,) = by_kind(export, "Cohort").values()
    assert cohort["spec"] == {}  # share_unallocated is off in this policy
    ClusterPolicy.objects.update(share_unallocated=True)
    down = Node.objects.filter(instance_type=rich_policy.p5).order_by("name").first()
    Node.objects.filter(pk=down.pk).update(state="down")
    (cohort,) = by_kind(kueue.export_manifests(), "Cohort").values()
    nominal = {
        f["name"]: f["resources"][0]["nominalQuota"] for f in cohort["spec"]["resourceGroups"][0]["flavors"]
    }
    # p5: 3 ready nodes x 8 = 24 GPUs, quotas 16 + 8 = 24 -> 0; g5: 2 x 4 = 8, quotas 4 + 0 -> 4.
    assert nominal == {"ml.p5.48xlarge": 0, "ml.g5.12xlarge": 4}


def test_priority_classes_become_workload_priority_classes(rich_policy):
    classes = by_kind(kueue.export_manifests(), "WorkloadPriorityClass")
    assert {name: m["value"] for name, m in classes.items()} == {
        "inference": 100,
        "training": 70,
        "fine-tuning": 50,
        "experimentation": 10,
    }


def test_an_instance_type_that_is_no_dns_name_is_reported(rich_policy):
    from tests import factories as f

    f.make_instance_type("gpu..a100", 8)  # the model allows it; Kubernetes names do not
    export = kueue.export_manifests()
    assert "ResourceFlavor/gpu..a100: metadata.name 'gpu..a100' is not a DNS subdomain" in export.problems


def test_a_clean_policy_exports_without_problems(rich_policy):
    rich_policy.add_inexpressible()
    assert kueue.export_manifests().problems == []


def test_fairness_over_time_is_a_warning_naming_admission_fair_sharing(rich_policy):
    assert not any("over time" in w for w in kueue.export_manifests().warnings)
    rich_policy.add_inexpressible()
    warnings = "\n".join(kueue.export_manifests().warnings)
    assert "half-life 86400 s, 50% history" in warnings
    assert "usageHalfLifeTime: 86400s" in warnings
