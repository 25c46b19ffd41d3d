"""Every policy change is audited: each update service, driven one field at a time, writes
exactly one AuditEntry naming that field with its old and new value; creates and deletes write
theirs too. The table below lists every field of every service's FIELDS tuple, and a test
checks that it does, so a field added to a service without an audit case fails here."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from allocations import policy_fields
from allocations.choices import AuditAction
from allocations.models import AuditEntry, Membership, Node, PriorityClass
from allocations.services import audit, memberships
from allocations.services import policy as services
from tests import factories as f


def _team(p: Any) -> dict[str, Any]:
    return {"team": p.team}


def _node(p: Any) -> dict[str, Any]:
    return {"node": Node.objects.filter(instance_type=p.instance_type).first()}


def _instance_type(p: Any) -> dict[str, Any]:
    return {"instance_type": p.instance_type}


def _priority_class(p: Any) -> dict[str, Any]:
    return {"priority_class": PriorityClass.objects.order_by("weight").first()}


def _membership(p: Any) -> dict[str, Any]:
    return {"membership": Membership.objects.get(user=p.member)}


def _quota(p: Any) -> dict[str, Any]:
    return {"team": p.team, "instance_type": p.instance_type}


def _nothing(p: Any) -> dict[str, Any]:
    return {}


# (service, fields tuple, target, field, new value as passed, the audit's new_value text)
CASES: list[tuple[Any, tuple[str, ...], Any, str, Any, str]] = [
    (services.team_update, policy_fields.TEAM_FIELDS, _team, "name", "team-renamed", "team-renamed"),
    (services.team_update, policy_fields.TEAM_FIELDS, _team, "display_name", "The A team", "The A team"),
    (services.team_update, policy_fields.TEAM_FIELDS, _team, "active", False, "no"),
    (services.team_update, policy_fields.TEAM_FIELDS, _team, "fair_share_weight", 7, "7"),
    (services.team_update, policy_fields.TEAM_FIELDS, _team, "sharing", "dont-lend", "dont-lend"),
    (
        services.team_update,
        policy_fields.TEAM_FIELDS,
        _team,
        "preempt_team_tasks",
        "lower-or-newer-equal-priority",
        "lower-or-newer-equal-priority",
    ),
    (services.team_update, policy_fields.TEAM_FIELDS, _team, "reclaim", "lower-priority", "lower-priority"),
    (services.team_update, policy_fields.TEAM_FIELDS, _team, "preempt_while_borrowing", "never", "never"),
    (
        services.team_update,
        policy_fields.TEAM_FIELDS,
        _team,
        "preempt_while_borrowing_max_priority",
        50,
        "50",
    ),
    # What a team may ask for (docs/limits.md).
    (
        services.team_update,
        policy_fields.TEAM_FIELDS,
        _team,
        "allowed_priority_classes",
        ["training", "experimentation"],
        '["training", "experimentation"]',
    ),
    (services.team_update, policy_fields.TEAM_FIELDS, _team, "max_gpus_per_job", 16, "16"),
    (services.team_update, policy_fields.TEAM_FIELDS, _team, "max_pending_jobs_per_member", 5, "5"),
    (services.team_update, policy_fields.TEAM_FIELDS, _team, "max_pending_jobs", 20, "20"),
    (services.team_update, policy_fields.TEAM_FIELDS, _team, "max_running_gpus_per_member", 8, "8"),
    (services.team_quota_set, policy_fields.QUOTA_FIELDS, _quota, "quota", 4, "4"),
    (
        services.team_quota_set,
        policy_fields.QUOTA_FIELDS,
        _quota,
        "borrow_limit_kind",
        "unlimited",
        "unlimited",
    ),
    (services.team_quota_set, policy_fields.QUOTA_FIELDS, _quota, "borrow_limit_percent", 30, "30"),
    (services.team_quota_set, policy_fields.QUOTA_FIELDS, _quota, "lend_limit", 3, "3"),
    (services.node_update, policy_fields.NODE_FIELDS, _node, "name", "node-renamed", "node-renamed"),
    (services.node_update, policy_fields.NODE_FIELDS, _node, "gpus", 4, "4"),
    (services.node_update, policy_fields.NODE_FIELDS, _node, "state", "draining", "draining"),
    (services.node_update, policy_fields.NODE_FIELDS, _node, "reason", "maintenance", "maintenance"),
    (
        services.instance_type_update,
        policy_fields.INSTANCE_TYPE_FIELDS,
        _instance_type,
        "name",
        "ml.x",
        "ml.x",
    ),
    (
        services.instance_type_update,
        policy_fields.INSTANCE_TYPE_FIELDS,
        _instance_type,
        "gpus_per_node",
        16,
        "16",
    ),
    (
        services.instance_type_update,
        policy_fields.INSTANCE_TYPE_FIELDS,
        _instance_type,
        "price_per_gpu_hour",
        Decimal("2.5"),
        "2.5",
    ),
    (
        services.instance_type_update,
        policy_fields.INSTANCE_TYPE_FIELDS,
        _instance_type,
        "description",
        "H100",
        "H100",
    ),
    (
        services.priority_class_update,
        policy_fields.PRIORITY_CLASS_FIELDS,
        _priority_class,
        "name",
        "renamed",
        "renamed",
    ),
    (services.priority_class_update, policy_fields.PRIORITY_CLASS_FIELDS, _priority_class, "weight", 3, "3"),
    (
        services.priority_class_update,
        policy_fields.PRIORITY_CLASS_FIELDS,
        _priority_class,
        "description",
        "d",
        "d",
    ),
    (
        services.priority_class_update,
        policy_fields.PRIORITY_CLASS_FIELDS,
        _priority_class,
        "min_runtime_s",
        600,
        "600",
    ),
    (
        services.priority_class_update,
        policy_fields.PRIORITY_CLASS_FIELDS,
        _priority_class,
        "preemption_grace_s",
        45,
        "45",
    ),
    (memberships.membership_update, memberships.MEMBERSHIP_FIELDS, _membership, "role", "viewer", "viewer"),
    (memberships.membership_update, memberships.MEMBERSHIP_FIELDS, _membership, "weekly_report", False, "no"),
    (services.cluster_update, policy_fields.CLUSTER_FIELDS, _nothing, "name", "gpu-west", "gpu-west"),
    (
        services.cluster_update,
        policy_fields.CLUSTER_FIELDS,
        _nothing,
        "time_zone",
        "Europe/Paris",
        "Europe/Paris",
    ),
    (
        services.cluster_update,
        policy_fields.CLUSTER_FIELDS,
        _nothing,
        "backend_settings",
        {"seed": 7},
        '{"seed": 7}',
    ),
    (
        services.cluster_policy_update,
        policy_fields.CLUSTER_POLICY_FIELDS,
        _nothing,
        "idle_allocation",
        "first-come-first-serve",
        "first-come-first-serve",
    ),
    (
        services.cluster_policy_update,
        policy_fields.CLUSTER_POLICY_FIELDS,
        _nothing,
        "task_ranking",
        "first-come-first-serve",
        "first-come-first-serve",
    ),
    (
        services.cluster_policy_update,
        policy_fields.CLUSTER_POLICY_FIELDS,
        _nothing,
        "share_unallocated",
        False,
        "no",
    ),
    (
        services.cluster_policy_update,
        policy_fields.CLUSTER_POLICY_FIELDS,
        _nothing,
        "queueing",
        "strict-fifo",
        "strict-fifo",
    ),
    (
        services.cluster_policy_update,
        policy_fields.CLUSTER_POLICY_FIELDS,
        _nothing,
        "min_runtime_s",
        600,
        "600",
    ),
    (
        services.cluster_policy_update,
        policy_fields.CLUSTER_POLICY_FIELDS,
        _nothing,
        "preemption_grace_s",
        30,
        "30",
    ),
    (
        services.cluster_policy_update,
        policy_fields.CLUSTER_POLICY_FIELDS,
        _nothing,
        "fair_share_half_life_s",
        3600,
        "3600",
    ),
    (
        services.cluster_policy_update,
        policy_fields.CLUSTER_POLICY_FIELDS,
        _nothing,
        "fair_share_history_percent",
        50,
        "50",
    ),
]
# Fields whose change needs another one set with it (a rule), audited in their own tests:
# borrow_limit only counts with the absolute kind; backend_kind slurm needs its settings;
# a node's instance_type must hold its GPUs.
# default_priority_class's value is a row, audited in its own test below.
COMBINED = {
    ("team_update", "default_priority_class"),
    ("team_quota_set", "borrow_limit"),
    ("cluster_update", "backend_kind"),
    ("node_update", "instance_type"),
}


def test_every_field_of_every_service_has_a_case():
    covered = {(service.__name__, field) for service, _, _, field, _, _ in CASES} | COMBINED
    wanted = {(service.__name__, field) for service, fields, *_ in CASES for field in fields}
    assert wanted - covered == set()


@pytest.mark.parametrize(
    ("service", "fields", "target", "field", "value", "text"),
    CASES,
    ids=[f"{case[0].__name__}-{case[3]}" for case in CASES],
)
def test_a_changed_field_writes_one_audit_entry(personas, service, fields, target, field, value, text):
    services.cluster_policy_update(actor=personas.cluster_admin)  # the policy row exists first
    services.team_quota_set(
        actor=personas.cluster_admin, team=personas.team, instance_type=personas.instance_type, quota=8
    )
    AuditEntry.objects.all().delete()
    service(actor=personas.cluster_admin, **target(personas), **{field: value})
    entries = list(AuditEntry.objects.all())
    assert [(e.action, e.field, e.new_value) for e in entries] == [(AuditAction.UPDATE, field, text)]
    assert entries[0].actor == personas.cluster_admin
    assert entries[0].old_value != entries[0].new_value


def test_combined_changes_are_audited_field_by_field(personas):
    AuditEntry.objects.all().delete()
    services.team_quota_set(
        actor=personas.cluster_admin,
        team=personas.team,
        instance_type=personas.instance_type,
        borrow_limit_kind="absolute",
        borrow_limit=5,
    )
    assert set(AuditEntry.objects.values_list("field", "new_value")) >= {
        ("borrow_limit_kind", "absolute"),
        ("borrow_limit", "5"),
    }
    other = f.make_instance_type("ml.g5.xlarge", 4)
    node = Node.objects.filter(instance_type=personas.instance_type).first()
    AuditEntry.objects.all().delete()
    services.node_update(actor=personas.cluster_admin, node=node, instance_type=other, gpus=4)
    assert set(AuditEntry.objects.values_list("field", "new_value")) == {
        ("instance_type", audit.value_text(other)),
        ("gpus", "4"),
    }


def test_a_teams_default_class_is_audited_by_name(personas):
    """docs/limits.md: the team's default class is in the trail with its name and weight."""
    AuditEntry.objects.all().delete()
    training = personas.priority_classes["training"]
    services.team_update(actor=personas.cluster_admin, team=personas.team, default_priority_class=training)
    assert list(AuditEntry.objects.values_list("field", "old_value", "new_value")) == [
        ("default_priority_class", "(none)", "training (70)")
    ]


def test_an_unchanged_save_writes_nothing(personas):
    AuditEntry.objects.all().delete()
    services.team_update(actor=personas.cluster_admin, team=personas.team, fair_share_weight=1)
    assert not AuditEntry.objects.exists()


def test_create_and_delete_write_entries(personas):
    AuditEntry.objects.all().delete()
    pc = services.priority_class_create(actor=personas.cluster_admin, name="urgent", weight=99)
    services.priority_class_delete(actor=personas.cluster_admin, priority_class=pc)
    actions = list(AuditEntry.objects.order_by("id").values_list("action", flat=True).distinct())
    assert actions == [AuditAction.CREATE, AuditAction.DELETE]
    assert AuditEntry.objects.filter(action=AuditAction.CREATE, new_value__contains="weight: 99").exists()


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (-1, "must be 0 or more seconds; got -1."),
        (86_401, "must be at most 86400 seconds; got 86401."),
        ("30", "must be a whole number of seconds; got '30'."),
        (True, "must be a whole number of seconds; got True."),
        (2.5, "must be a whole number of seconds; got 2.5."),
    ],
)
def test_a_bad_preemption_grace_is_refused_naming_the_value_and_not_audited(personas, value, words):
    """docs/preemption.md section 5: a grace is whole seconds, a day at most; a bad one is
    refused naming the field and the value, on the policy and on a class, and the trail
    records nothing."""
    services.cluster_policy_update(actor=personas.cluster_admin)
    AuditEntry.objects.all().delete()
    with pytest.raises(ValidationError) as refused:
        services.cluster_policy_update(actor=personas.cluster_admin, preemption_grace_s=value)
    assert refused.value.message_dict["preemption_grace_s"] == [f"Preemption grace {words}"]
    with pytest.raises(ValidationError) as refused:
        services.priority_class_update(
            actor=personas.cluster_admin,
            priority_class=personas.priority_classes["training"],
            preemption_grace_s=value,
        )
    assert refused.value.message_dict["preemption_grace_s"] == [f"Preemption grace {words}"]
    assert not AuditEntry.objects.exists()


def test_a_class_grace_set_back_to_the_policys_is_audited(personas):
    training = personas.priority_classes["training"]
    services.priority_class_update(
        actor=personas.cluster_admin, priority_class=training, preemption_grace_s=45
    )
    AuditEntry.objects.all().delete()
    services.priority_class_update(
        actor=personas.cluster_admin, priority_class=training, preemption_grace_s=None
    )
    assert list(AuditEntry.objects.values_list("field", "old_value", "new_value")) == [
        ("preemption_grace_s", "45", audit.value_text(None))
    ]
