"""``manage.py load_demo``: the demo cluster, written through the services, idempotent."""

from __future__ import annotations

import re
from decimal import Decimal
from io import StringIO

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command

from allocations.models import (
    AuditEntry,
    Cluster,
    ClusterPolicy,
    InstanceType,
    Job,
    Membership,
    Node,
    PriorityClass,
    Team,
    TeamQuota,
)
from allocations.selectors.policy import capacity_overview, overcommit_warnings
from allocations.services import policy

pytestmark = pytest.mark.django_db
MODELS = [Cluster, ClusterPolicy, InstanceType, Node, PriorityClass, Team, TeamQuota, Membership, AuditEntry]


def load_demo() -> str:
    out = StringIO()
    call_command("load_demo", stdout=out)
    return out.getvalue()


def counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in [*MODELS, get_user_model()]}


def test_demo_cluster_has_the_promised_shape():
    load_demo()
    cluster = Cluster.objects.get()
    assert (cluster.name, cluster.backend_kind, cluster.backend_settings) == (
        "demo",
        "simulated",
        {"speedup": 60, "demo_workload": True},
    )
    by_type = {row.instance_type.name: row for row in capacity_overview()}
    assert {name: (row.nodes_total, row.ready_gpus) for name, row in by_type.items()} == {
        "ml.p5.48xlarge": (16, 128),
        "ml.p4d.24xlarge": (24, 192),
        "ml.g5.12xlarge": (24, 96),
    }
    assert InstanceType.objects.get(name="ml.p5.48xlarge").price_per_gpu_hour == Decimal("12.29")
    assert all(row.unallocated > 0 for row in by_type.values())  # some capacity in no quota
    assert overcommit_warnings() == []
    assert dict(PriorityClass.objects.values_list("name", "weight")) == {
        "inference": 100,
        "training": 70,
        "fine-tuning": 50,
        "experimentation": 10,
    }
    teams = {team.name: team for team in Team.objects.all()}
    assert set(teams) == {"llm-research", "vision", "speech", "recsys", "platform-infra", "interns"}
    assert {t.sharing for t in teams.values()} == {"lend-and-borrow", "lend", "dont-lend"}
    assert len({t.fair_share_weight for t in teams.values()}) >= 4
    assert {"lower-priority", "never", "any"} <= {t.reclaim for t in teams.values()}
    kinds = set(TeamQuota.objects.values_list("borrow_limit_kind", flat=True))
    assert kinds == {"percent", "absolute", "unlimited"}
    assert TeamQuota.objects.filter(lend_limit__isnull=False).exists()
    for team in teams.values():
        roles = set(Membership.objects.filter(team=team).values_list("role", flat=True))
        assert roles == {"team-admin", "member"}
    assert not Job.objects.exists()  # the loop's workload generator submits jobs


def test_demo_is_written_through_the_services_so_it_is_audited():
    load_demo()
    assert set(AuditEntry.objects.values_list("actor_name", flat=True)) == {"system"}
    created = set(AuditEntry.objects.filter(action="create").values_list("object_type", flat=True))
    assert created == {
        "cluster",
        "cluster policy",
        "instance type",
        "node",
        "priority class",
        "team",
        "team quota",
        "membership",
    }


def test_running_twice_creates_nothing_twice_and_prints_the_password_once():
    first = load_demo()
    after_first = counts()
    match = re.search(r"Created user 'admin' with the password: (\S+)", first)
    assert match, first
    password = match.group(1)
    admin = authenticate(username="admin", password=password)
    assert admin is not None and admin.is_staff

    second = load_demo()
    assert counts() == after_first
    assert password not in second
    assert "the password:" not in second
    assert "Demo already loaded: nothing to create." in second
    assert "manage.py changepassword admin" in second


def test_rerun_keeps_an_administrators_changes_and_fills_in_what_is_missing():
    load_demo()
    vision = Team.objects.get(name="vision")
    policy.team_update(actor=None, team=vision, fair_share_weight=77)
    Node.objects.filter(name="g5-024").delete()
    out = load_demo()
    assert "created 1 nodes" in out
    assert Team.objects.get(name="vision").fair_share_weight == 77
    assert Node.objects.filter(name="g5-024").exists()
    assert Node.objects.count() == 64


def test_history_days_give_a_fresh_demo_a_past_once_and_never_overwrite_one():
    from allocations.models import CapacityMinute, CapacityRollup

    out = StringIO()
    call_command("load_demo", "--history-days", "1", stdout=out)
    assert "backfilled 1 days" in out.getvalue()
    minutes = CapacityMinute.objects.count()
    assert minutes > 0 and CapacityRollup.objects.exists()
    assert Job.objects.filter(name__startswith="backfill-", state="finished").exists()
    last = CapacityMinute.objects.order_by("-minute").values_list("pk", flat=True).first()

    out = StringIO()
    call_command("load_demo", "--history-days", "1", stdout=out)
    assert "has a capacity history already: no synthetic history written" in out.getvalue()
    assert CapacityMinute.objects.count() == minutes
    assert CapacityMinute.objects.order_by("-minute").values_list("pk", flat=True).first() == last


def test_history_days_out_of_range_are_refused_naming_the_option():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--history-days: expected 0 to 3650 days, got -1"):
        call_command("load_demo", "--history-days", "-1", stdout=StringIO())
    assert not Cluster.objects.exists()
