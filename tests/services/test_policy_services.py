"""Policy services: rules refused with field errors, one audit entry per changed field, and the
capacity overview with its over-commit warning (POLICY.md sections 1 and 2)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from allocations.choices import AuditAction
from allocations.models import AuditEntry, ClusterPolicy, Node, PriorityClass, Team, TeamQuota
from allocations.selectors import policy as selectors
from allocations.services import cycle_requests, policy
from tests import factories as f

pytestmark = pytest.mark.django_db


def field_errors(excinfo: pytest.ExceptionInfo[ValidationError]) -> dict[str, list[str]]:
    return excinfo.value.message_dict


def test_team_update_writes_one_audit_entry_per_changed_field_with_old_and_new_values(personas):
    policy.team_update(
        actor=personas.cluster_admin,
        team=personas.team,
        fair_share_weight=5,
        sharing="lend",
        display_name=personas.team.display_name,  # unchanged: no entry
    )
    entries = AuditEntry.objects.filter(object_type="team", object_id=str(personas.team.pk)).order_by("field")
    assert [(e.action, e.field, e.old_value, e.new_value) for e in entries] == [
        (AuditAction.UPDATE, "fair_share_weight", "1", "5"),
        (AuditAction.UPDATE, "sharing", "lend-and-borrow", "lend"),
    ]
    assert {e.actor_name for e in entries} == {"admin"}
    assert all(e.actor == personas.cluster_admin for e in entries)


def test_create_and_delete_are_audited_with_the_settings(db):
    instance_type = policy.instance_type_create(actor=None, name="ml.g5.12xlarge", gpus_per_node=4)
    policy.instance_type_delete(actor=None, instance_type=instance_type)
    created, deleted = AuditEntry.objects.order_by("id")
    assert (created.action, created.actor_name, created.object_repr) == ("create", "system", "ml.g5.12xlarge")
    assert "gpus_per_node: 4" in created.new_value
    assert deleted.action == "delete"
    assert "gpus_per_node: 4" in deleted.old_value


def test_quota_set_creates_then_audits_each_changed_limit(personas):
    admin = personas.cluster_admin
    policy.team_quota_set(
        actor=admin, team=personas.team, instance_type=personas.instance_type, quota=12, lend_limit=4
    )
    entries = AuditEntry.objects.filter(object_type="team quota").order_by("field")
    assert [(e.field, e.old_value, e.new_value) for e in entries] == [
        ("lend_limit", "(none)", "4"),
        ("quota", "8", "12"),
    ]
    assert entries[0].object_repr == "team-a / ml.p5.48xlarge"
    policy.team_quota_set(
        actor=admin,
        team=personas.team,
        instance_type=personas.instance_type,
        borrow_limit_kind="absolute",
        borrow_limit=6,
    )
    row = TeamQuota.objects.get(team=personas.team, instance_type=personas.instance_type)
    assert (row.quota, row.lend_limit, row.borrow_limit_kind, row.borrow_limit) == (12, 4, "absolute", 6)


def test_quota_set_of_all_defaults_creates_no_row(personas):
    other_type = f.make_instance_type("ml.g5.12xlarge", 4)
    assert policy.team_quota_set(actor=None, team=personas.team, instance_type=other_type, quota=0) is None
    assert not TeamQuota.objects.filter(instance_type=other_type).exists()
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize(
    ("settings", "field", "words"),
    [
        ({"quota": -3}, "quota", "Quota must be 0 or more GPUs; got -3."),
        ({"quota": 4, "lend_limit": 6}, "lend_limit", "at most the quota (4 GPUs); got 6"),
        ({"borrow_limit_kind": "absolute"}, "borrow_limit", "Give the borrow limit in GPUs"),
        ({"borrow_limit_percent": 10001}, "borrow_limit_percent", "at most 10000; got 10001"),
        ({"borrow_limit_kind": "lots"}, "borrow_limit_kind", "got 'lots'"),
        ({"quota": "eight"}, "quota", "Quota must be a whole number of GPUs; got 'eight'"),
    ],
)
def test_quota_rules_are_refused_naming_the_field_and_value(personas, settings, field, words):
    with pytest.raises(ValidationError) as excinfo:
        policy.team_quota_set(
            actor=None, team=personas.team, instance_type=personas.instance_type, **settings
        )
    assert words in " ".join(field_errors(excinfo)[field])
    assert TeamQuota.objects.get(team=personas.team).quota == 8
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize(
    ("settings", "field", "words"),
    [
        ({"name": "Bad_Name"}, "name", "got 'Bad_Name'"),
        ({"name": "x" * 41}, "name", "at most 40 characters"),
        ({"name": "team-a"}, "name", "A team named 'team-a' already exists."),
        ({"fair_share_weight": 101}, "fair_share_weight", "Fair-share weight must be at most 100; got 101."),
        ({"sharing": "hoard"}, "sharing", "got 'hoard'"),
        (
            {"reclaim": "never", "preempt_while_borrowing": "lower-priority"},
            "preempt_while_borrowing",
            "needs reclaim",
        ),
        ({"preempt_while_borrowing_max_priority": 101}, "preempt_while_borrowing_max_priority", "got 101"),
    ],
)
def test_team_rules_are_refused_naming_the_field_and_value(personas, settings, field, words):
    with pytest.raises(ValidationError) as excinfo:
        policy.team_create(actor=None, **{"name": "new-team", **settings})
    assert words in " ".join(field_errors(excinfo)[field])
    assert not Team.objects.filter(name="new-team").exists()


def test_reclaim_never_with_the_default_preempt_while_borrowing_is_accepted(db):
    team = policy.team_create(actor=None, name="careful", reclaim="never", preempt_while_borrowing="never")
    assert (team.reclaim, team.preempt_while_borrowing) == ("never", "never")
    team = policy.team_create(actor=None, name="careful-2", reclaim="never")
    assert team.preempt_while_borrowing == ""


def test_team_update_to_reclaim_never_keeps_an_earlier_lower_priority_refused(personas):
    policy.team_update(actor=None, team=personas.team, preempt_while_borrowing="lower-priority")
    with pytest.raises(ValidationError) as excinfo:
        policy.team_update(actor=None, team=personas.team, reclaim="never")
    assert "preempt_while_borrowing" in field_errors(excinfo)
    assert Team.objects.get(pk=personas.team.pk).reclaim == "any"


def test_unknown_setting_is_refused_by_name(personas):
    with pytest.raises(ValidationError) as excinfo:
        policy.team_update(actor=None, team=personas.team, quota_everything=3)
    assert "quota_everything" in field_errors(excinfo)


def test_team_create_with_quotas(db):
    gpu_type = f.make_instance_type("ml.p5.48xlarge", 8)
    team = policy.team_create(
        actor=None, name="vision", fair_share_weight=3, quotas={gpu_type: {"quota": 16}}
    )
    assert TeamQuota.objects.get(team=team).quota == 16
    assert set(AuditEntry.objects.values_list("object_type", flat=True)) == {"team", "team quota"}


def test_team_with_jobs_cannot_be_deleted(personas):
    f.make_job(personas.team, personas.instance_type, 8)
    with pytest.raises(ValidationError) as excinfo:
        policy.team_delete(actor=None, team=personas.team)
    assert "deactivate it instead" in str(excinfo.value)
    policy.team_delete(actor=None, team=personas.other_team)
    assert not Team.objects.filter(name="team-b").exists()
    assert AuditEntry.objects.filter(action="delete", object_type="team quota").count() == 1
    assert AuditEntry.objects.filter(action="delete", object_type="membership").count() == 1


def test_at_most_32_priority_classes(db):
    for i in range(32):
        PriorityClass.objects.create(name=f"class-{i}", weight=i)
    with pytest.raises(ValidationError) as excinfo:
        policy.priority_class_create(actor=None, name="one-too-many", weight=5)
    assert "at most 32 priority classes" in str(excinfo.value)
    assert PriorityClass.objects.count() == 32


@pytest.mark.parametrize(
    ("settings", "field", "words"),
    [({"weight": 101}, "weight", "at most 100; got 101"), ({"name": "Urgent!"}, "name", "got 'Urgent!'")],
)
def test_priority_class_rules(db, settings, field, words):
    with pytest.raises(ValidationError) as excinfo:
        policy.priority_class_create(actor=None, **{"name": "urgent", "weight": 90, **settings})
    assert words in " ".join(field_errors(excinfo)[field])


def test_node_gpus_must_fit_the_instance_type(personas):
    with pytest.raises(ValidationError) as excinfo:
        policy.node_create(actor=None, name="big-node", instance_type=personas.instance_type, gpus=16)
    assert field_errors(excinfo)["gpus"] == ["A node of ml.p5.48xlarge has at most 8 GPUs; got 16."]
    node = policy.node_create(actor=None, name="p5-new", instance_type=personas.instance_type)
    assert node.gpus == 8


def test_instance_type_cannot_shrink_below_its_nodes(personas):
    with pytest.raises(ValidationError) as excinfo:
        policy.instance_type_update(actor=None, instance_type=personas.instance_type, gpus_per_node=4)
    assert "have 8 GPUs" in field_errors(excinfo)["gpus_per_node"][0]


def test_instance_type_in_use_cannot_be_deleted(personas):
    with pytest.raises(ValidationError) as excinfo:
        policy.instance_type_delete(actor=None, instance_type=personas.instance_type)
    assert "2 nodes, 2 quotas still refer to it" in str(excinfo.value)


def test_node_state_change_restarts_state_since_and_ready_clears_the_reason(personas):
    node = personas.nodes[0]
    before = node.state_since
    drained = policy.node_update(actor=None, node=node, state="draining", reason="GPU 3 ECC errors")
    assert drained.state_since > before
    assert (drained.state, drained.reason) == ("draining", "GPU 3 ECC errors")
    ready = policy.node_update(actor=None, node=node, state="ready")
    assert (ready.state, ready.reason) == ("ready", "")
    fields = list(
        AuditEntry.objects.filter(object_type="node").order_by("id").values_list("field", "new_value")
    )
    assert fields == [
        ("state", "draining"),
        ("reason", "GPU 3 ECC errors"),
        ("state", "ready"),
        ("reason", "(none)"),
    ]


def test_node_renamed_keeps_state_since(personas):
    node = personas.nodes[0]
    renamed = policy.node_update(actor=None, node=node, name="renamed")
    assert renamed.state_since == Node.objects.get(pk=node.pk).state_since == node.state_since


@pytest.mark.parametrize(
    ("settings", "field", "words"),
    [
        ({"time_zone": "Mars/Olympus"}, "time_zone", "got 'Mars/Olympus'"),
        ({"time_zone": "../etc/passwd"}, "time_zone", "IANA name"),
        ({"backend_kind": "kubernetes"}, "backend_kind", "got 'kubernetes'"),
        ({"backend_settings": [1, 2]}, "backend_settings", "must be a JSON object"),
        (
            {"backend_kind": "simulated", "backend_settings": {"speedup": -1}},
            "backend_settings",
            "not valid for simulated: backend_settings.speedup must be above 0",
        ),
        ({"name": ""}, "name", "1 to 100 characters"),
    ],
)
def test_cluster_settings_are_validated(personas, settings, field, words):
    with pytest.raises(ValidationError) as excinfo:
        policy.cluster_update(actor=None, **settings)
    assert words in " ".join(field_errors(excinfo)[field])


def test_cluster_update_accepts_an_iana_time_zone_and_creates_the_cluster_when_missing(db):
    cluster = policy.cluster_update(actor=None, name="prod", time_zone="Europe/Berlin")
    assert (cluster.pk, cluster.name, cluster.time_zone) == (1, "prod", "Europe/Berlin")
    policy.cluster_policy_update(actor=None, queueing="strict-fifo")
    assert ClusterPolicy.objects.get(cluster=cluster).queueing == "strict-fifo"


def test_cluster_policy_update_audits_the_change(personas):
    policy.cluster_policy_update(actor=personas.cluster_admin, idle_allocation="first-come-first-serve")
    entry = AuditEntry.objects.get(object_type="cluster policy")
    assert (entry.field, entry.old_value, entry.new_value) == (
        "idle_allocation",
        "fair-share",
        "first-come-first-serve",
    )


def test_a_committed_change_requests_an_allocation_cycle(personas, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        policy.team_quota_set(actor=None, team=personas.team, instance_type=personas.instance_type, quota=4)
    assert cycle_requests.request_cycle in callbacks


def test_a_refused_change_requests_no_cycle(personas, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks, pytest.raises(ValidationError):
        policy.team_quota_set(actor=None, team=personas.team, instance_type=personas.instance_type, quota=-1)
    assert callbacks == []


# --- The capacity overview ------------------------------------------------------------------------
def test_overview_counts_ready_capacity_quotas_and_unallocated(personas):
    policy.node_update(actor=None, node=personas.nodes[0], state="down", reason="PSU")
    f.make_team("team-c", {personas.instance_type: 0})
    (row,) = selectors.capacity_overview()
    assert (row.nodes_total, row.nodes_ready, row.nodes_down) == (2, 1, 1)
    assert (row.gpus_total, row.ready_gpus, row.quota_sum, row.unallocated) == (16, 8, 16, 0)
    assert row.warning == "Quotas of ml.p5.48xlarge add up to 16 GPUs, more than its 8 ready GPUs."


def test_overview_borrow_caps_as_gpus_and_as_configured(personas):
    gpu_type = personas.instance_type
    f.make_nodes(gpu_type, 6)
    policy.team_quota_set(actor=None, team=personas.team, instance_type=gpu_type, borrow_limit_percent=50)
    policy.team_quota_set(
        actor=None,
        team=personas.other_team,
        instance_type=gpu_type,
        borrow_limit_kind="absolute",
        borrow_limit=8,
    )
    unlimited = f.make_team("team-c")
    policy.team_quota_set(
        actor=None, team=unlimited, instance_type=gpu_type, quota=8, borrow_limit_kind="unlimited"
    )
    lender = f.make_team("team-d", sharing="dont-lend")
    policy.team_quota_set(actor=None, team=lender, instance_type=gpu_type, quota=8, lend_limit=2)
    (row,) = selectors.capacity_overview()
    by_team = {r.team.name: r for r in row.teams}
    assert by_team["team-a"].borrow_cap_text == "50% = 4 GPUs"
    assert by_team["team-a"].max_use_text == "12 GPUs"
    assert by_team["team-b"].borrow_cap_text == "8 GPUs"
    assert by_team["team-c"].borrow_cap_text == "unlimited"
    assert by_team["team-c"].max_use_text == "unlimited"
    assert by_team["team-d"].borrow_cap_gpus == 0
    assert by_team["team-d"].lend_limit_text == "nothing (don't lend)"
    assert (row.ready_gpus, row.quota_sum, row.unallocated, row.warning) == (64, 32, 32, "")


def test_overview_query_count_does_not_grow_with_teams_and_nodes(personas):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            rows = selectors.capacity_overview()
            for row in rows:
                [(r.team.name, r.quota.instance_type.name, r.borrow_cap_text) for r in row.teams]
        return len(captured.captured_queries)

    small = queries()
    other_type = f.make_instance_type("ml.g5.12xlarge", 4, price_per_gpu_hour=Decimal("1.42"))
    f.make_nodes(other_type, 20)
    f.make_nodes(personas.instance_type, 10)
    for i in range(10):
        f.make_team(f"extra-{i}", {personas.instance_type: 1, other_type: 2})
    assert queries() == small
