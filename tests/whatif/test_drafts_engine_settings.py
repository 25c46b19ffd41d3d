"""A what-if draft holds every setting the engine decides with, and applying it sets each one
live: the most GPUs running per member (docs/limits.md section 3, enforced by the engine at
each cycle, unlike the limits checked at submission) and a priority class's minimum runtime and
grace (docs/preemption.md sections 1 and 5). A draft that dropped either would replay a policy other than
the one it shows, and applying it would lose the change."""

from __future__ import annotations

import pytest
from django.urls import reverse

from allocations.models import PolicyDraft, PriorityClass, Team
from allocations.services import policy as policy_services
from allocations.whatif import drafts as bodies
from allocations.whatif import services as whatif
from tests.whatif.test_views import quota_post, signed_in

pytestmark = pytest.mark.django_db


def test_a_draft_copies_edits_replays_and_applies_the_member_cap(personas):
    policy_services.team_update(actor=None, team=personas.team, max_running_gpus_per_member=8)
    draft = whatif.draft_create(actor=personas.cluster_admin, name="cap")
    assert bodies.team_entry(draft.body, "team-a")["max_running_gpus_per_member"] == 8
    assert bodies.team_row(draft.body, "team-a").max_running_gpus_per_member == 8

    admin = signed_in(personas.cluster_admin)
    url = reverse("allocations:whatif_draft_team", kwargs={"pk": draft.pk, "name": "team-b"})
    assert "Most GPUs running per member" in admin.get(url).content.decode()
    assert admin.post(url, quota_post(max_running_gpus_per_member="4")).status_code == 302
    body = PolicyDraft.objects.get(pk=draft.pk).body
    assert bodies.team_entry(body, "team-b")["max_running_gpus_per_member"] == 4
    bad = admin.post(url, quota_post(max_running_gpus_per_member="0"))
    assert bad.status_code == 400 and "Most GPUs running per member" in bad.content.decode()

    scenario = {t["name"]: t for t in bodies.scenario_teams(body, ["ml.p5.48xlarge"])}
    assert scenario["team-b"]["max_running_gpus_per_member"] == 4
    assert scenario["team-a"]["max_running_gpus_per_member"] == 8
    assert any(c.field == "max_running_gpus_per_member" for c in bodies.diff(body))

    whatif.draft_apply(actor=personas.cluster_admin, draft=PolicyDraft.objects.get(pk=draft.pk))
    assert Team.objects.get(name="team-b").max_running_gpus_per_member == 4
    assert Team.objects.get(name="team-a").max_running_gpus_per_member == 8


def test_a_draft_saved_before_the_member_cap_leaves_the_live_cap_alone(personas):
    draft = whatif.draft_create(actor=personas.cluster_admin, name="old")
    body = dict(draft.body)
    for team in body["teams"]:
        del team["max_running_gpus_per_member"]
    bodies.check_body(body)
    PolicyDraft.objects.filter(pk=draft.pk).update(body=body)
    policy_services.team_update(actor=None, team=personas.team, max_running_gpus_per_member=8)
    assert bodies.team_row(body, "team-a").max_running_gpus_per_member is None
    whatif.draft_apply(actor=personas.cluster_admin, draft=PolicyDraft.objects.get(pk=draft.pk))
    assert Team.objects.get(name="team-a").max_running_gpus_per_member == 8


def test_applying_a_draft_sets_a_classs_minimum_runtime_and_grace(personas):
    draft = whatif.draft_create(actor=personas.cluster_admin, name="protect")
    body = bodies.with_priority_class(draft.body, "inference", 100, 600, 30)
    body = bodies.with_priority_class(body, "batch", 5, 60)
    changes = {(c.object_repr, c.field, c.new) for c in bodies.diff(body)}
    assert ("inference", "min_runtime_s", "600") in changes
    assert ("inference", "preemption_grace_s", "30") in changes
    draft = whatif.draft_update(draft=draft, body=body)
    whatif.draft_apply(actor=personas.cluster_admin, draft=draft)
    inference = PriorityClass.objects.get(name="inference")
    assert (inference.min_runtime_s, inference.preemption_grace_s) == (600, 30)
    assert (
        PriorityClass.objects.get(name="batch").weight,
        PriorityClass.objects.get(name="batch").min_runtime_s,
    ) == (5, 60)
    assert not bodies.diff(PolicyDraft.objects.get(pk=draft.pk).body)
