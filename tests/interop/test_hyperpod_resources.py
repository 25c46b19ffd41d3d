"""HyperPod import and export of every field of ``ComputeQuotaResourceConfig`` (``Count``,
``Accelerators``, ``VCpu``, ``MemoryInGiB``, ``AcceleratorPartition``) and of
``AbsoluteBorrowLimits`` (docs/resources.md 2 and 8), checked against botocore's model."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from allocations.interop import hyperpod
from allocations.interop import policy as interop_policy
from allocations.interop import services as interop_services
from allocations.interop.shapes import check_request
from allocations.models import Cluster, TeamQuota
from tests import factories as f

pytestmark = pytest.mark.django_db
FIXTURES = Path(__file__).parent / "fixtures"
ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcde12345fg"


@pytest.fixture
def cluster(db):
    f.make_cluster(backend_settings={"hyperpod_cluster_arn": ARN})
    p4d = f.make_instance_type(
        "ml.p4d.24xlarge",
        8,
        vcpus_per_node=96,
        memory_gib_per_node=1152,
        partitions_per_node={"mig-1g.5gb": 14},
    )
    p5 = f.make_instance_type(
        "ml.p5.48xlarge", 8, vcpus_per_node=192, memory_gib_per_node=2048, partitions_per_node={}
    )
    f.make_nodes(p4d, 2)
    f.make_nodes(p5, 2)
    f.make_team("vision")
    f.make_team("speech")
    return Cluster.objects.get()


def _admin():
    return f.make_user("root", staff=True)


def test_the_fixture_passes_sagemakers_model(cluster):
    document = json.loads((FIXTURES / "hyperpod-resources.json").read_text())
    for i, request in enumerate(document["ComputeQuotas"]):
        assert check_request(hyperpod.QUOTA_OPERATION, request, f"ComputeQuotas[{i}]") == []


def test_every_resource_field_imports_into_the_quota_rows(cluster):
    imported = hyperpod.parse((FIXTURES / "hyperpod-resources.json").read_text())
    interop_services.policy_import_apply(actor=_admin(), imported=imported)
    rows = {
        (q.team.name, q.instance_type.name): q
        for q in TeamQuota.objects.select_related("team", "instance_type")
    }
    p4d = rows["vision", "ml.p4d.24xlarge"]
    assert (p4d.quota, p4d.vcpus, p4d.memory_gib, p4d.partitions, p4d.instances) == (
        4,
        64,
        600,
        {"mig-1g.5gb": 7},
        None,
    )
    assert (p4d.borrow_limit_kind, p4d.borrow_limit) == ("absolute", 2)
    assert (p4d.borrow_limit_vcpus, p4d.borrow_limit_memory_gib, p4d.borrow_limit_partitions) == (
        16,
        256,
        {"mig-1g.5gb": 3},
    )
    p5 = rows["vision", "ml.p5.48xlarge"]
    # Count is instances: a node's worth of everything, 8 GPUs among them.
    assert (p5.instances, p5.quota, p5.vcpus) == (1, 8, None)
    # An entry without Accelerators leaves the GPUs to the team's percentage.
    assert (p5.borrow_limit_kind, p5.borrow_limit_percent, p5.borrow_limit_memory_gib) == ("percent", 50, 512)
    speech = rows["speech", "ml.p4d.24xlarge"]
    assert (speech.quota, speech.vcpus, speech.memory_gib) == (0, 48, None)


def test_import_then_export_gives_back_the_same_requests(cluster):
    """The round trip: every field of the fixture is exported back as it was."""
    document = json.loads((FIXTURES / "hyperpod-resources.json").read_text())
    imported = hyperpod.parse(json.dumps(document))
    interop_services.policy_import_apply(actor=_admin(), imported=imported)
    export = hyperpod.export_policy()
    assert export.problems == []
    by_team = {r["ComputeQuotaTarget"]["TeamName"]: r for r in export.bundle["ComputeQuotas"]}
    for request in document["ComputeQuotas"]:
        assert by_team[request["ComputeQuotaTarget"]["TeamName"]] == request
    # And importing the export again changes no quota.
    changes = interop_policy.diff(hyperpod.parse(export.json()))
    assert [c for c in changes if c.object_type == "team quota"] == []


def _with(change):
    document = json.loads((FIXTURES / "hyperpod-resources.json").read_text())
    change(document["ComputeQuotas"][0]["ComputeQuotaConfig"])
    return json.dumps(document)


RESOURCES = "ComputeQuotas[0].ComputeQuotaConfig.ComputeQuotaResources"


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        (
            lambda c: c["ComputeQuotaResources"][0]["AcceleratorPartition"].update(Type="mig-7g.80gb"),
            f"{RESOURCES}[0].AcceleratorPartition.Type",
            "'mig-7g.80gb' is no partition profile of ml.p4d.24xlarge (it has: mig-1g.5gb)",
        ),
        (
            lambda c: c["ComputeQuotaResources"][1].update(
                AcceleratorPartition={"Type": "mig-1g.10gb", "Count": 1}
            ),
            f"{RESOURCES}[1].AcceleratorPartition.Type",
            "'mig-1g.10gb' is no partition profile of ml.p5.48xlarge (it has: none)",
        ),
        (
            lambda c: c["ComputeQuotaResources"][0].update(VCpu=1.5),
            f"{RESOURCES}[0].VCpu",
            "1.5: gpugov counts whole vcpus",
        ),
        (
            lambda c: c["ComputeQuotaResources"][1].update(VCpu=8),
            f"{RESOURCES}[1].Count",
            "instances stand alone",
        ),
        (
            lambda c: (
                c["ComputeQuotaResources"][0].pop("Accelerators")
                and [
                    c["ComputeQuotaResources"][0].pop(k)
                    for k in ("VCpu", "MemoryInGiB", "AcceleratorPartition")
                ]
            ),
            f"{RESOURCES}[0].Accelerators",
            "is required",
        ),
    ],
)
def test_bad_resources_are_refused_with_their_path_and_value(cluster, change, path, words):
    with pytest.raises(hyperpod.ImportRefused) as excinfo:
        hyperpod.parse(_with(change))
    problems = [str(p) for p in excinfo.value.problems]
    assert any(p.startswith(path) and words in p for p in problems), problems


def test_a_vcpu_quota_of_a_type_of_gpus_alone_is_refused(cluster):
    f.make_instance_type("ml.g5.12xlarge", 4)
    document = json.loads((FIXTURES / "hyperpod-resources.json").read_text())
    request = copy.deepcopy(document["ComputeQuotas"][1])
    request["ComputeQuotaConfig"]["ComputeQuotaResources"] = [{"InstanceType": "ml.g5.12xlarge", "VCpu": 8}]
    with pytest.raises(hyperpod.ImportRefused) as excinfo:
        hyperpod.parse(json.dumps(request))
    assert [str(p) for p in excinfo.value.problems] == [
        "ComputeQuotaConfig.ComputeQuotaResources[0].VCpu: 8: ml.g5.12xlarge declares no vcpus "
        "(set its vcpus_per_node first)"
    ]


def test_several_partition_profiles_export_the_largest_with_a_warning(cluster):
    it = f.make_instance_type(
        "ml.p4de.24xlarge", 8, vcpus_per_node=96, partitions_per_node={"mig-1g.10gb": 14, "mig-3g.40gb": 2}
    )
    team = f.make_team("nlp")
    TeamQuota.objects.create(
        team=team, instance_type=it, quota=2, partitions={"mig-1g.10gb": 7, "mig-3g.40gb": 1}
    )
    export = hyperpod.export_policy()
    assert export.problems == []
    (request,) = [r for r in export.bundle["ComputeQuotas"] if r["ComputeQuotaTarget"]["TeamName"] == "nlp"]
    assert request["ComputeQuotaConfig"]["ComputeQuotaResources"] == [
        {
            "InstanceType": "ml.p4de.24xlarge",
            "Accelerators": 2,
            "AcceleratorPartition": {"Type": "mig-1g.10gb", "Count": 7},
        }
    ]
    assert any("left out: mig-3g.40gb: 1" in w for w in export.warnings)
