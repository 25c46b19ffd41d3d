"""A what-if draft carries the preemption-cost settings (docs/preemption.md section 7) as it
carries the others: copied from the live policy, edited by the same forms, and written into
the replayed scenario only when not at the default (a default is today's behaviour)."""

from __future__ import annotations

import pytest

from allocations.engine import ClusterPolicy as EngineClusterPolicy
from allocations.models import ClusterPolicy, PriorityClass
from allocations.simulation.cluster import read_policy
from allocations.simulation.reading import Reader
from allocations.whatif import drafts as bodies

pytestmark = pytest.mark.django_db


def test_a_draft_copies_the_minimum_runtimes_of_the_live_policy(personas):
    ClusterPolicy.objects.update(min_runtime_s=600)
    PriorityClass.objects.filter(name="inference").update(min_runtime_s=60)
    body = bodies.live_body()
    assert (body["cluster_policy"]["min_runtime_s"], body["cluster_policy"]["preemption_grace_s"]) == (600, 0)
    classes = {pc["name"]: pc["min_runtime_s"] for pc in body["priority_classes"]}
    assert classes["inference"] == 60 and classes["training"] is None
    assert bodies.cluster_policy_row(body).min_runtime_s == 600
    assert bodies.priority_class_row(body, "inference").min_runtime_s == 60
    scenario = bodies.scenario_policy(body)
    assert scenario["min_runtime_s"] == 600 and "preemption_grace_s" not in scenario
    by_name = {pc["name"]: pc for pc in scenario["priority_classes"]}
    assert by_name["inference"]["min_runtime_s"] == 60 and "min_runtime_s" not in by_name["training"]


def test_a_draft_saved_before_these_settings_existed_means_their_defaults(personas):
    body = bodies.live_body()
    for name in ("min_runtime_s", "preemption_grace_s"):
        del body["cluster_policy"][name]
    bodies.check_body(body)  # still a complete policy
    assert bodies.cluster_policy_values(body)["min_runtime_s"] == 0
    scenario = bodies.scenario_policy(body)
    assert "min_runtime_s" not in scenario and "preemption_grace_s" not in scenario
    assert bodies.as_import(body).cluster_policy["min_runtime_s"] == 0


def test_changing_a_classs_weight_keeps_its_minimum_runtime_unless_given(personas):
    PriorityClass.objects.filter(name="inference").update(min_runtime_s=60)
    body = bodies.live_body()
    kept = bodies.with_priority_class(body, "inference", 90)
    assert next(pc for pc in kept["priority_classes"] if pc["name"] == "inference")["min_runtime_s"] == 60
    changed = bodies.with_priority_class(body, "inference", 90, None)
    assert (
        next(pc for pc in changed["priority_classes"] if pc["name"] == "inference")["min_runtime_s"] is None
    )


def test_a_draft_carries_the_preemption_graces_into_its_replay(personas):
    """docs/preemption.md section 5: the policy's grace and a class's own are copied, kept
    across a weight change, and written into the scenario the simulator replays."""
    ClusterPolicy.objects.update(preemption_grace_s=30)
    PriorityClass.objects.filter(name="inference").update(preemption_grace_s=120)
    body = bodies.with_priority_class(bodies.live_body(), "inference", 90)
    assert bodies.priority_class_row(body, "inference").preemption_grace_s == 120
    scenario = bodies.scenario_policy(body)
    assert scenario["preemption_grace_s"] == 30
    by_name = {pc["name"]: pc for pc in scenario["priority_classes"]}
    assert (
        by_name["inference"]["preemption_grace_s"] == 120 and "preemption_grace_s" not in by_name["training"]
    )

    reader = Reader()
    policy = read_policy(reader, scenario, "policy", EngineClusterPolicy())
    assert reader.errors == []
    assert policy.preemption_grace_s == 30
    assert {pc.name: pc.preemption_grace_s for pc in policy.priority_classes}["inference"] == 120
