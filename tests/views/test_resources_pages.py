"""The console's forms for resources beyond GPUs (docs/resources.md sections 1 to 3 and 8): the
instance type's vCPU, memory and partitions, a quota row per resource with the ratio shown
beside what it leaves out, the over-commit warning per resource, and job submission with
vCPU, memory and partitions, refused naming the field and the value."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from allocations.models import InstanceType, Job, TeamQuota
from allocations.services import policy
from tests import factories as f
from tests.views.test_console import team_post

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(personas) -> Client:
    client = Client()
    client.force_login(personas.cluster_admin)
    return client


@pytest.fixture
def member(personas) -> Client:
    client = Client()
    client.force_login(personas.member)
    return client


@pytest.fixture
def p4d(personas) -> InstanceType:
    it = policy.instance_type_create(
        actor=personas.cluster_admin,
        name="ml.p4d.24xlarge",
        gpus_per_node=8,
        vcpus_per_node=192,
        memory_gib_per_node=2048,
        partitions_per_node={"mig-1g.10gb": 14},
    )
    f.make_nodes(it, 1)
    return it


def test_the_instance_type_form_takes_vcpu_memory_and_partition_lines(personas, admin):
    response = admin.post(
        reverse("allocations:instance_types"),
        {
            "name": "ml.p4de.24xlarge",
            "gpus_per_node": 8,
            "price_per_gpu_hour": "",
            "description": "",
            "vcpus_per_node": 96,
            "memory_gib_per_node": "",
            "partitions_per_node": "mig-1g.10gb=7\r\n\r\nmig-3g.40gb = 2\r\n",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    it = InstanceType.objects.get(name="ml.p4de.24xlarge")
    assert (it.vcpus_per_node, it.memory_gib_per_node) == (96, 0)
    assert it.partitions_per_node == {"mig-1g.10gb": 7, "mig-3g.40gb": 2}
    html = admin.get(reverse("allocations:instance_types")).content.decode()
    assert "A node: 96 vCPU, 7 mig-1g.10gb, 2 mig-3g.40gb" in html


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        ("mig-1g.10gb", "line 1 must be \"profile=count\"; got 'mig-1g.10gb'"),
        ("mig-1g.10gb=seven", "the count of 'mig-1g.10gb' must be a whole number; got 'seven'"),
        ("MIG=2", "'MIG' is no partition profile name"),
        ("instances=2", "'instances' is no partition profile name"),
    ],
)
def test_bad_partition_lines_are_refused_naming_the_line_and_value(personas, admin, lines, words):
    """docs/resources.md 8: a profile name is lower case letters, digits, '-' and '.'."""
    response = admin.post(
        reverse("allocations:instance_types"),
        {"name": "ml.bad", "gpus_per_node": 8, "partitions_per_node": lines},
    )
    assert response.status_code == 200
    assert words in response.content.decode().replace("&#x27;", "'").replace("&quot;", '"')
    assert not InstanceType.objects.filter(name="ml.bad").exists()


def test_the_quota_table_shows_the_ratio_beside_each_resource_left_out(personas, admin, p4d):
    """docs/resources.md 2: 4 GPUs of an 8-GPU, 192 vCPU, 2,048 GiB node give 96 vCPU and
    1,024 GiB by the ratio."""
    policy.team_quota_set(actor=personas.cluster_admin, team=personas.team, instance_type=p4d, quota=4)
    html = admin.get(reverse("allocations:team_detail", kwargs={"name": "team-a"})).content.decode()
    assert "ratio: 96 vCPU" in html
    assert "ratio: 1,024 GiB memory" in html
    # A type of GPUs alone has no resource inputs and no ratio.
    assert 'name="quota-1-vcpus"' not in html
    assert "not counted" in html


def test_the_quota_table_saves_a_row_per_resource_and_warns_per_resource(personas, admin, p4d):
    data = team_post(
        personas.team,
        {
            "ml.p5.48xlarge": {"quota": 8},
            "ml.p4d.24xlarge": {
                "quota": 4,
                "vcpus": 200,
                "partitions": "mig-1g.10gb=3",
                "borrow_limit_memory_gib": 256,
            },
        },
    )
    response = admin.post(reverse("allocations:team_detail", kwargs={"name": "team-a"}), data, follow=True)
    quota = TeamQuota.objects.get(team=personas.team, instance_type=p4d)
    assert (quota.quota, quota.vcpus, quota.memory_gib) == (4, 200, None)
    assert (quota.partitions, quota.borrow_limit_memory_gib) == ({"mig-1g.10gb": 3}, 256)
    warning = "Quotas of ml.p4d.24xlarge add up to 200 vCPU, more than its ready nodes' 192 vCPU."
    assert warning in [str(m) for m in response.context["messages"]]


def test_the_quota_table_takes_instances_and_gives_the_gpus(personas, admin, p4d):
    data = team_post(personas.team, {"ml.p5.48xlarge": {"quota": 8}, "ml.p4d.24xlarge": {"instances": 1}})
    admin.post(reverse("allocations:team_detail", kwargs={"name": "team-a"}), data)
    quota = TeamQuota.objects.get(team=personas.team, instance_type=p4d)
    assert (quota.instances, quota.quota) == (1, 8)
    html = admin.get(reverse("allocations:team_detail", kwargs={"name": "team-a"})).content.decode()
    assert "instances: 192 vCPU" in html


@pytest.mark.parametrize(
    ("row", "words"),
    [
        ({"partitions": "mig-7g.80gb=1"}, "Unknown partition profile 'mig-7g.80gb'"),
        ({"instances": 1, "vcpus": 8}, "Instances stands alone"),
        ({"vcpus": "lots"}, "vCPU must be a whole number of vCPU; got 'lots'"),
    ],
)
def test_bad_quota_resources_are_refused_naming_the_field_and_value(personas, admin, p4d, row, words):
    data = team_post(personas.team, {"ml.p5.48xlarge": {"quota": 8}, "ml.p4d.24xlarge": row})
    response = admin.post(reverse("allocations:team_detail", kwargs={"name": "team-a"}), data)
    assert response.status_code == 200
    assert words in response.content.decode().replace("&#x27;", "'")
    assert not TeamQuota.objects.filter(team=personas.team, instance_type=p4d).exists()


def test_a_gpu_only_team_form_posted_as_before_still_saves(personas, admin):
    """A post without the resource inputs (a page drawn before they existed) keeps GPUs alone."""
    data = team_post(personas.team, {"ml.p5.48xlarge": {"quota": 6}})
    response = admin.post(reverse("allocations:team_detail", kwargs={"name": "team-a"}), data)
    assert response.status_code == 302
    quota = TeamQuota.objects.get(team=personas.team, instance_type=personas.instance_type)
    assert (quota.quota, quota.vcpus, quota.partitions, quota.instances) == (6, None, {}, None)


SUBMIT = {"name": "train", "command": "python train.py", "priority_class": "", "requested_duration": ""}


def test_a_job_of_partitions_is_submitted_from_the_queue_page(personas, member, p4d):
    response = member.post(
        "/teams/team-a/submit/",
        {
            **SUBMIT,
            "instance_type": "ml.p4d.24xlarge",
            "gpus": "",
            "partitions": "mig-1g.10gb=2",
            "vcpus": "8",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    job = Job.objects.get()
    assert (job.gpus, job.vcpus, job.memory_gib, job.partitions) == (0, 8, None, {"mig-1g.10gb": 2})
    html = member.get(response["Location"]).content.decode()
    assert '<dd class="job-partitions">2 mig-1g.10gb</dd>' in html
    assert '<dd class="job-vcpus">8</dd>' in html
    assert "job-memory" not in html  # left out: its node share, nothing to show


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"partitions": "mig-9g=1"}, "partitions", "unknown partition profile 'mig-9g'"),
        ({"memory_gib": "4096"}, "memory_gib", "4,096 is more than one ml.p4d.24xlarge node has"),
        ({"gpus": "0"}, "gpus", "at least 1 GPU, or partitions (got 0)"),
        (
            {"instance_type": "ml.p5.48xlarge", "partitions": "mig-1g.10gb=1"},
            "partitions",
            "ml.p5.48xlarge has no partitions",
        ),
    ],
)
def test_a_job_asking_what_no_node_has_is_refused_on_its_field(personas, member, p4d, changes, field, words):
    data = {**SUBMIT, "instance_type": "ml.p4d.24xlarge", "gpus": "1", **changes}
    response = member.post("/teams/team-a/submit/", data)
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert any(words in message for message in errors[field]), errors
    assert not Job.objects.exists()
