"""A what-if draft holds what the engine decides with, not what a team may ask for
(docs/limits.md): applying a draft leaves the teams' limits as they are, and a draft that would
delete a class a team's limits name is refused with the teams."""

from __future__ import annotations

import pytest

from allocations.models import PriorityClass, Team
from allocations.services import policy as policy_services
from allocations.whatif import drafts as bodies
from allocations.whatif import services as whatif


def test_applying_a_draft_leaves_the_limits_as_they_are(personas):
    policy_services.team_update(
        actor=None,
        team=personas.team,
        allowed_priority_classes=["training"],
        default_priority_class=personas.priority_classes["training"],
        max_gpus_per_job=8,
        max_pending_jobs=3,
    )
    draft = whatif.draft_create(actor=personas.cluster_admin, name="heavier")
    assert "max_gpus_per_job" not in bodies.team_entry(draft.body, "team-a")
    entry = bodies.team_entry(draft.body, "team-a")
    body = bodies.with_team(
        draft.body,
        "team-a",
        {**entry, "fair_share_weight": 9},
        {
            "ml.p5.48xlarge": {
                "quota": 8,
                "borrow_limit_kind": "percent",
                "borrow_limit_percent": 50,
                "borrow_limit": None,
                "lend_limit": None,
            }
        },
    )
    draft = whatif.draft_update(draft=draft, body=body)
    whatif.draft_apply(actor=personas.cluster_admin, draft=draft)
    team = Team.objects.get(pk=personas.team.pk)
    assert team.fair_share_weight == 9
    assert (team.allowed_priority_classes, team.default_priority_class.name) == (["training"], "training")
    assert (team.max_gpus_per_job, team.max_pending_jobs) == (8, 3)


def test_a_draft_deleting_a_class_a_team_may_use_is_refused(personas):
    draft = whatif.draft_create(actor=personas.cluster_admin, name="before-urgent")
    urgent = policy_services.priority_class_create(actor=None, name="urgent", weight=90)
    policy_services.team_update(actor=None, team=personas.team, allowed_priority_classes=["urgent"])
    with pytest.raises(whatif.DraftRefused) as caught:
        whatif.draft_apply(actor=personas.cluster_admin, draft=draft)
    assert any("team(s) team-a may use it" in message for message in caught.value.messages)
    assert PriorityClass.objects.filter(pk=urgent.pk).exists()
