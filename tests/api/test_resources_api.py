"""The API's instance types, quotas and jobs with resources beyond GPUs (docs/resources.md
sections 1 to 3 and 8): readable and writable with the services' rules, bad input a 400 naming
the field and the value, and a cluster of GPUs alone answering as before."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from allocations.models import InstanceType, Job, TeamQuota

pytestmark = pytest.mark.django_db


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def p4d(personas) -> InstanceType:
    response = client_for(personas.cluster_admin).post(
        "/api/v1/instance-types/",
        {
            "name": "ml.p4d.24xlarge",
            "gpus_per_node": 8,
            "vcpus_per_node": 192,
            "memory_gib_per_node": 2048,
            "partitions_per_node": {"mig-1g.10gb": 14},
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    return InstanceType.objects.get(name="ml.p4d.24xlarge")


def test_instance_types_read_their_resources_and_gpus_alone_reads_zero(personas, p4d):
    rows = {
        r["name"]: r for r in client_for(personas.member).get("/api/v1/instance-types/").json()["results"]
    }
    assert rows["ml.p4d.24xlarge"]["partitions_per_node"] == {"mig-1g.10gb": 14}
    assert rows["ml.p4d.24xlarge"]["vcpus_per_node"] == 192
    gpu_only = rows["ml.p5.48xlarge"]
    assert (gpu_only["vcpus_per_node"], gpu_only["memory_gib_per_node"], gpu_only["partitions_per_node"]) == (
        0,
        0,
        {},
    )


@pytest.mark.parametrize(
    ("data", "field", "word"),
    [
        ({"partitions_per_node": {"MIG": 2}}, "partitions_per_node", "'MIG'"),
        ({"partitions_per_node": {"mig-1g.10gb": 0}}, "partitions_per_node", "1"),
        ({"partitions_per_node": "mig=2"}, "partitions_per_node", "mig=2"),
        ({"vcpus_per_node": -1}, "vcpus_per_node", "-1"),
        ({"memory_gib_per_node": 10**12}, "memory_gib_per_node", str(10**12)),
    ],
)
def test_bad_instance_type_resources_answer_400_naming_field_and_value(personas, data, field, word):
    response = client_for(personas.cluster_admin).post(
        "/api/v1/instance-types/", {"name": "ml.x", "gpus_per_node": 4, **data}, format="json"
    )
    assert response.status_code == 400
    assert word in str(response.json()[field]), response.json()


def test_a_quota_per_resource_is_set_and_read(personas, p4d):
    client = client_for(personas.cluster_admin)
    body = {
        "team": "team-a",
        "instance_type": "ml.p4d.24xlarge",
        "quota": 4,
        "vcpus": 64,
        "partitions": {"mig-1g.10gb": 7},
        "borrow_limit_memory_gib": 256,
    }
    response = client.post("/api/v1/quotas/", body, format="json")
    assert response.status_code == 201, response.json()
    read = response.json()
    assert (read["vcpus"], read["memory_gib"], read["partitions"], read["instances"]) == (
        64,
        None,
        {"mig-1g.10gb": 7},
        None,
    )
    assert read["borrow_limit_memory_gib"] == 256
    response = client.post(
        "/api/v1/quotas/",
        {"team": "team-b", "instance_type": "ml.p4d.24xlarge", "instances": 2},
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert (response.json()["quota"], response.json()["instances"]) == (16, 2)


@pytest.mark.parametrize(
    ("data", "field", "word"),
    [
        ({"partitions": {"mig-7g.80gb": 1}}, "partitions", "mig-7g.80gb"),
        ({"instances": 1, "memory_gib": 10}, "instances", "memory_gib"),
        ({"vcpus": "many"}, "vcpus", "many"),
        ({"borrow_limit_partitions": {"mig-1g.10gb": -1}}, "borrow_limit_partitions", "-1"),
    ],
)
def test_bad_quota_resources_answer_400_naming_field_and_value(personas, p4d, data, field, word):
    body = {"team": "team-a", "instance_type": "ml.p4d.24xlarge", **data}
    response = client_for(personas.cluster_admin).post("/api/v1/quotas/", body, format="json")
    assert response.status_code == 400
    assert word in str(response.json()[field]), response.json()
    assert not TeamQuota.objects.filter(instance_type=p4d).exists()


def test_a_vcpu_quota_on_a_type_of_gpus_alone_is_refused(personas):
    body = {"team": "team-a", "instance_type": "ml.p5.48xlarge", "quota": 8, "vcpus": 8}
    response = client_for(personas.cluster_admin).post("/api/v1/quotas/", body, format="json")
    assert response.status_code == 400
    assert response.json()["vcpus"] == ["ml.p5.48xlarge declares no vcpus (set its vcpus_per_node); got 8."]


JOB = {"team": "team-a", "name": "train", "command": "python train.py"}


def test_a_job_of_partitions_is_submitted_and_read(personas, p4d):
    body = {**JOB, "instance_type": "ml.p4d.24xlarge", "partitions": {"mig-1g.10gb": 2}, "memory_gib": 64}
    response = client_for(personas.member).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.json()
    read = response.json()
    assert (read["gpus"], read["vcpus"], read["memory_gib"], read["partitions"]) == (
        0,
        None,
        64,
        {"mig-1g.10gb": 2},
    )
    assert Job.objects.get().partitions == {"mig-1g.10gb": 2}


@pytest.mark.parametrize(
    ("data", "field", "word"),
    [
        ({"gpus": 1, "partitions": {"mig-9g": 1}}, "partitions", "unknown partition profile 'mig-9g'"),
        ({"gpus": 1, "memory_gib": 4096}, "memory_gib", "4,096 is more than one ml.p4d.24xlarge node has"),
        ({}, "gpus", "required (or partitions)"),
        ({"gpus": 0}, "gpus", "at least 1 GPU, or partitions (got 0)"),
        ({"gpus": 1, "partitions": {"mig-1g.10gb": "x"}}, "partitions", "x"),
    ],
)
def test_a_job_asking_what_no_node_has_answers_400(personas, p4d, data, field, word):
    body = {**JOB, "instance_type": "ml.p4d.24xlarge", **data}
    response = client_for(personas.member).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    assert word in str(response.json()[field]), response.json()
    assert not Job.objects.exists()


def test_a_partition_asked_of_a_type_with_none_answers_400(personas):
    body = {**JOB, "instance_type": "ml.p5.48xlarge", "gpus": 1, "partitions": {"mig-1g.10gb": 1}}
    response = client_for(personas.member).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    assert response.json()["partitions"] == ["ml.p5.48xlarge has no partitions; got {'mig-1g.10gb': 1}."]
