"""Resources beyond GPUs in the data model, the services and the loop's snapshot
(docs/resources.md sections 1 to 3, 8 and 9): rows of GPUs alone keep their meaning, the rules
name the field and the value, every field is audited, and the over-commit warning is per
resource."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from allocations import engine
from allocations.models import AuditEntry, Job, TeamQuota
from allocations.selectors import policy as selectors
from allocations.selectors.snapshot import build_snapshot, policy_snapshot
from allocations.services import jobs, policy
from tests import factories as f

pytestmark = pytest.mark.django_db


def errors_of(excinfo: pytest.ExceptionInfo[ValidationError]) -> dict[str, list[str]]:
    return excinfo.value.message_dict


@pytest.fixture
def p4d(personas):
    """docs/resources.md 2's table: 6 GPUs, 96 vCPU, 1,152 GiB and 14 mig-1g.5gb per node."""
    it = policy.instance_type_create(
        actor=personas.cluster_admin,
        name="ml.p4d.24xlarge",
        gpus_per_node=6,
        vcpus_per_node=96,
        memory_gib_per_node=1152,
        partitions_per_node={"mig-1g.5gb": 14},
    )
    f.make_nodes(it, 2)
    return it


# --- docs/resources.md 1 and 9: GPUs alone, as before --------------------------------------------
def test_rows_of_gpus_alone_map_onto_the_engines_defaults(personas):
    """A cluster of GPUs alone gives the snapshot it gave before the resources existed."""
    f.make_job(personas.team, personas.instance_type, 2, submitter=personas.member)
    snapshot = build_snapshot(timezone.now())
    assert snapshot.instance_types == (engine.InstanceType("ml.p5.48xlarge", 8),)
    team = next(t for t in snapshot.teams if t.name == "team-a")
    assert team.quotas["ml.p5.48xlarge"] == engine.Quota(quota=8)
    (job,) = snapshot.jobs
    assert (job.vcpus, job.memory_gib, job.partitions) == (None, None, ())


def test_the_snapshot_carries_every_resource_field_as_sorted_tuples(personas, p4d):
    admin = personas.cluster_admin
    policy.team_quota_set(
        actor=admin,
        team=personas.team,
        instance_type=p4d,
        quota=4,
        vcpus=64,
        partitions={"mig-1g.5gb": 7},
        borrow_limit_memory_gib=256,
    )
    policy.team_quota_set(actor=admin, team=personas.other_team, instance_type=p4d, instances=1)
    jobs.job_submit(
        user=personas.member,
        team=personas.team,
        name="mig",
        instance_type=p4d,
        gpus=0,
        partitions={"mig-1g.5gb": 3},
        vcpus=8,
        command="run",
    )
    snapshot = build_snapshot(timezone.now())
    assert snapshot.instance_types[0] == engine.InstanceType(
        "ml.p4d.24xlarge", 6, 96, 1152, (("mig-1g.5gb", 14),)
    )
    teams = {t.name: t for t in snapshot.teams}
    research = teams["team-a"].quotas["ml.p4d.24xlarge"]
    assert research.quota == 4
    assert research.resources == (("mig-1g.5gb", 7), ("vcpus", 64))
    assert research.borrow_limits == (("memory_gib", 256),)
    # docs/resources.md 2's table: 4 GPUs, 64 vCPU, 768 GiB by the ratio, 7 partitions.
    resolved = engine.resources.quota_resources(snapshot.instance_types[0], research)
    assert resolved == {"gpus": 4, "vcpus": 64, "memory_gib": 768, "mig-1g.5gb": 7}
    infra = teams["team-b"].quotas["ml.p4d.24xlarge"]
    assert (infra.quota, infra.instances, infra.resources) == (6, 1, ())
    (job,) = snapshot.jobs
    assert (job.gpus, job.vcpus, job.memory_gib, job.partitions) == (0, 8, None, (("mig-1g.5gb", 3),))


# --- docs/resources.md 1 and 8: instance types ---------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"vcpus_per_node": -1}, "vcpus_per_node", "got -1"),
        ({"memory_gib_per_node": "lots"}, "memory_gib_per_node", "'lots'"),
        ({"partitions_per_node": {"MIG-1g": 2}}, "partitions_per_node", "'MIG-1g' is no partition profile"),
        ({"partitions_per_node": {"gpus": 2}}, "partitions_per_node", "'gpus' is no partition profile"),
        ({"partitions_per_node": {"mig-1g.5gb": 0}}, "partitions_per_node", "got 0"),
        ({"partitions_per_node": ["mig-1g.5gb"]}, "partitions_per_node", "['mig-1g.5gb']"),
    ],
)
def test_instance_type_resources_are_refused_naming_the_field_and_value(personas, changes, field, words):
    with pytest.raises(ValidationError) as excinfo:
        policy.instance_type_update(
            actor=personas.cluster_admin, instance_type=personas.instance_type, **changes
        )
    assert any(words in message for message in errors_of(excinfo)[field]), errors_of(excinfo)


def test_a_profile_a_quota_names_cannot_be_removed(personas, p4d):
    policy.team_quota_set(
        actor=personas.cluster_admin, team=personas.team, instance_type=p4d, partitions={"mig-1g.5gb": 2}
    )
    with pytest.raises(ValidationError) as excinfo:
        policy.instance_type_update(actor=personas.cluster_admin, instance_type=p4d, partitions_per_node={})
    assert "mig-1g.5gb" in errors_of(excinfo)["partitions_per_node"][0]
    # No quota names vCPU: 0 is allowed; once one does, it is not.
    policy.instance_type_update(actor=personas.cluster_admin, instance_type=p4d, vcpus_per_node=0)
    policy.instance_type_update(actor=personas.cluster_admin, instance_type=p4d, vcpus_per_node=96)
    policy.team_quota_set(actor=personas.cluster_admin, team=personas.team, instance_type=p4d, vcpus=8)
    with pytest.raises(ValidationError) as excinfo:
        policy.instance_type_update(actor=personas.cluster_admin, instance_type=p4d, vcpus_per_node=0)
    assert errors_of(excinfo)["vcpus_per_node"] == [
        "Vcpus per node cannot be 0: the quotas of team-a name vcpus."
    ]


def test_instance_type_resources_are_audited_per_field(personas):
    policy.instance_type_update(
        actor=personas.cluster_admin,
        instance_type=personas.instance_type,
        vcpus_per_node=192,
        partitions_per_node={"mig-1g.10gb": 7},
    )
    entries = AuditEntry.objects.filter(object_type="instance type").order_by("field")
    assert [(e.field, e.old_value, e.new_value) for e in entries] == [
        ("partitions_per_node", "{}", '{"mig-1g.10gb": 7}'),
        ("vcpus_per_node", "0", "192"),
    ]


# --- docs/resources.md 2: quotas -----------------------------------------------------------------
def test_quota_resources_are_audited_per_field(personas, p4d):
    admin = personas.cluster_admin
    policy.team_quota_set(actor=admin, team=personas.team, instance_type=p4d, quota=4)
    policy.team_quota_set(
        actor=admin,
        team=personas.team,
        instance_type=p4d,
        vcpus=64,
        partitions={"mig-1g.5gb": 7},
        borrow_limit_vcpus=8,
    )
    entries = AuditEntry.objects.filter(
        object_type="team quota", object_repr="team-a / ml.p4d.24xlarge", action="update"
    ).order_by("field")
    assert [(e.field, e.old_value, e.new_value) for e in entries] == [
        ("borrow_limit_vcpus", "(none)", "8"),
        ("partitions", "{}", '{"mig-1g.5gb": 7}'),
        ("vcpus", "(none)", "64"),
    ]


@pytest.mark.parametrize(
    ("settings", "field", "words"),
    [
        ({"partitions": {"mig-7g.80gb": 1}}, "partitions", "Unknown partition profile 'mig-7g.80gb'"),
        ({"borrow_limit_partitions": {"mig-2g": 1}}, "borrow_limit_partitions", "'mig-2g'"),
        ({"vcpus": -4}, "vcpus", "got -4"),
        ({"instances": 1, "vcpus": 8}, "instances", "also given: vcpus"),
    ],
)
def test_quota_resources_are_refused_naming_the_field_and_value(personas, p4d, settings, field, words):
    with pytest.raises(ValidationError) as excinfo:
        policy.team_quota_set(actor=personas.cluster_admin, team=personas.team, instance_type=p4d, **settings)
    assert any(words in message for message in errors_of(excinfo)[field]), errors_of(excinfo)


def test_a_resource_the_type_does_not_declare_is_refused(personas):
    """docs/resources.md 1: a type of GPUs alone has no vCPU nor partitions to give."""
    it = personas.instance_type
    with pytest.raises(ValidationError) as excinfo:
        policy.team_quota_set(actor=personas.cluster_admin, team=personas.team, instance_type=it, vcpus=8)
    assert errors_of(excinfo)["vcpus"] == [
        "ml.p5.48xlarge declares no vcpus (set its vcpus_per_node); got 8."
    ]
    with pytest.raises(ValidationError) as excinfo:
        policy.team_quota_set(
            actor=personas.cluster_admin, team=personas.team, instance_type=it, partitions={"mig-1g.5gb": 1}
        )
    assert "has no partitions" in errors_of(excinfo)["partitions"][0]


def test_a_quota_in_instances_follows_the_gpus_per_node(personas, p4d):
    """docs/resources.md 2: instances are N nodes' worth of every resource, GPUs too."""
    admin = personas.cluster_admin
    quota = policy.team_quota_set(actor=admin, team=personas.team, instance_type=p4d, instances=2)
    assert quota is not None and quota.quota == 12
    policy.instance_type_update(actor=admin, instance_type=p4d, gpus_per_node=8)
    quota.refresh_from_db()
    assert quota.quota == 16


def test_the_over_commit_warning_is_per_resource(personas, p4d):
    """Two ready nodes hold 192 vCPU; quotas of 4 GPUs (64 vCPU) and 1 instance (96 vCPU) fit,
    a third of 48 vCPU does not, while the GPUs (4 + 6 of 12) still fit."""
    admin = personas.cluster_admin
    policy.team_quota_set(actor=admin, team=personas.team, instance_type=p4d, quota=4, vcpus=64)
    policy.team_quota_set(actor=admin, team=personas.other_team, instance_type=p4d, instances=1)
    assert selectors.overcommit_warnings([p4d.pk]) == []
    third = f.make_team("team-c")
    policy.team_quota_set(actor=admin, team=third, instance_type=p4d, vcpus=48)
    (warning,) = selectors.overcommit_warnings([p4d.pk])
    assert warning == (
        "Quotas of ml.p4d.24xlarge add up to 208 vCPU, more than its ready nodes' 192 vCPU. "
        "Quotas of ml.p4d.24xlarge add up to 2,496 GiB memory, more than its ready nodes' 2,304 GiB memory."
    )


def test_gpu_overview_of_a_gpu_only_cluster_is_unchanged(personas):
    (row,) = selectors.capacity_overview()
    assert (row.resource_quota_sums, row.over_committed, row.warning) == ({}, False, "")


# --- docs/resources.md 3: jobs -------------------------------------------------------------------
def _submit(personas, it, **fields):
    return jobs.job_submit(
        user=personas.member, team=personas.team, name="j", instance_type=it, command="run", **fields
    )


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        (
            {"gpus": 1, "partitions": {"mig-7g.80gb": 1}},
            "partitions",
            "unknown partition profile 'mig-7g.80gb'",
        ),
        (
            {"gpus": 1, "memory_gib": 2000},
            "memory_gib",
            "2,000 is more than one ml.p4d.24xlarge node has (1,152",
        ),
        ({"gpus": 12, "vcpus": 200}, "vcpus", "more than 2 ml.p4d.24xlarge nodes have"),
        ({"gpus": 12, "partitions": {"mig-1g.5gb": 1}}, "partitions", "whole nodes asks for no partitions"),
        ({"gpus": 0, "partitions": {"mig-1g.5gb": 15}}, "partitions", "15 is more than one"),
        ({"gpus": 0}, "gpus", "at least 1 GPU, or partitions (got 0)"),
    ],
)
def test_a_job_asking_what_no_node_has_is_refused(personas, p4d, fields, field, words):
    if fields.get("gpus") == 12:
        words = words.replace("nodes have", "nodes has")
    with pytest.raises(ValidationError) as excinfo:
        _submit(personas, p4d, **fields)
    assert any(words in message for message in errors_of(excinfo)[field]), errors_of(excinfo)


def test_a_partition_asked_of_a_type_with_none_is_refused(personas):
    with pytest.raises(ValidationError) as excinfo:
        _submit(personas, personas.instance_type, gpus=1, partitions={"mig-1g.5gb": 1})
    assert errors_of(excinfo)["partitions"] == ["ml.p5.48xlarge has no partitions; got {'mig-1g.5gb': 1}."]
    with pytest.raises(ValidationError) as excinfo:
        _submit(personas, personas.instance_type, gpus=1, memory_gib=10)
    assert errors_of(excinfo)["memory_gib"] == ["ml.p5.48xlarge declares no memory_gib; got 10."]


def test_a_job_of_partitions_alone_is_stored_and_resubmitted(personas, p4d):
    job = _submit(personas, p4d, gpus=0, partitions={"mig-1g.5gb": 2}, memory_gib=64)
    job.refresh_from_db()
    assert (job.gpus, job.vcpus, job.memory_gib, job.partitions) == (0, None, 64, {"mig-1g.5gb": 2})
    job = jobs.job_cancel(user=personas.member, job=job)
    copy, made = jobs.job_resubmit(user=personas.member, job=job)
    assert made and (copy.gpus, copy.memory_gib, copy.partitions) == (0, 64, {"mig-1g.5gb": 2})


# --- The database's own rules --------------------------------------------------------------------
def test_the_database_refuses_a_job_asking_for_nothing(personas):
    with pytest.raises(IntegrityError), transaction.atomic():
        f.make_job(personas.team, personas.instance_type, 0)
    f.make_job(personas.team, personas.instance_type, 0, partitions={"mig-1g.5gb": 1})
    assert Job.objects.filter(gpus=0).count() == 1


def test_the_database_refuses_instances_beside_another_resource(personas):
    with pytest.raises(IntegrityError), transaction.atomic():
        TeamQuota.objects.filter(team=personas.team).update(instances=1, vcpus=4)


def test_policy_snapshot_reads_resources_in_a_constant_number_of_queries(
    personas, p4d, django_assert_max_num_queries
):
    with django_assert_max_num_queries(6):
        snapshot = policy_snapshot()
    assert [it.name for it in snapshot.instance_types] == ["ml.p4d.24xlarge", "ml.p5.48xlarge"]
