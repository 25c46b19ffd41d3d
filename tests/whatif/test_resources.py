"""The what-if lab on a cluster that counts vCPU, memory and GPU partitions (docs/resources.md):
the history replays each node's and each job's resources, a draft carries a quota's resources
from the live policy through the team form, the diff and applying, and a draft saved before
the resource fields existed still loads and replays as GPUs alone."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import yaml
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from allocations.choices import JobState
from allocations.models import InstanceType, TeamQuota, WhatIfRun, WhatIfRunState
from allocations.services import policy as policy_services
from allocations.simulation import parse_scenario
from allocations.whatif import drafts as bodies
from allocations.whatif import history, services
from allocations.whatif.runs import execute, export_yaml, scenario_data, unpack
from tests import factories as f
from tests.conftest import PASSWORD

TYPE = "ml.p5.48xlarge"
RESOURCE_KEYS = ("vcpus", "memory_gib", "partitions", "borrow_limit_vcpus", "borrow_limit_memory_gib")


def counted(personas, partitions: dict[str, int] | None = None) -> None:
    """The personas' instance type with 192 vCPU and 2,048 GiB per 8-GPU node (docs/resources.md 1)."""
    InstanceType.objects.filter(pk=personas.instance_type.pk).update(
        vcpus_per_node=192, memory_gib_per_node=2048, partitions_per_node=partitions or {}
    )
    personas.instance_type.refresh_from_db()


def memory_bound_history(personas) -> tuple[Any, Any]:
    """team-a may hold 512 GiB on the type (borrowing nothing) and submits six 1-GPU jobs of
    256 GiB at once, each running an hour: its GPUs would run all six, its memory runs two."""
    counted(personas)
    policy_services.team_quota_set(
        actor=None,
        team=personas.team,
        instance_type=personas.instance_type,
        quota=8,
        memory_gib=512,
        borrow_limit_percent=0,
    )
    end = timezone.now().replace(microsecond=0)
    start = end - timedelta(days=1)
    submitted = start + timedelta(hours=1)
    for _ in range(6):
        f.make_job(
            personas.team,
            personas.instance_type,
            1,
            submitted_at=submitted,
            started_at=submitted,
            finished_at=submitted + timedelta(hours=1),
            state=JobState.FINISHED,
            memory_gib=256,
        )
    return start, end


def run(personas, start, end, *drafts) -> WhatIfRun:
    created = services.whatif_run_create(
        actor=personas.cluster_admin, drafts=drafts, window_start=start, window_end=end
    )
    assert execute(created.pk) == WhatIfRunState.DONE, WhatIfRun.objects.get(pk=created.pk).error
    created.refresh_from_db()
    return created


def with_quota(draft, team: str, **changes: Any):
    """The draft with ``team``'s quota on the type changed (the rest as the draft has it)."""
    entry = bodies.team_entry(draft.body, team)
    current = next(q for q in entry["quotas"] if q["instance_type"] == TYPE)
    body = bodies.with_team(draft.body, team, entry, {TYPE: {**current, **changes}})
    return services.draft_update(draft=draft, body=body)


def test_the_history_gives_nodes_and_jobs_their_resources(personas):
    """docs/resources.md section 8: nodes carry their type's resources, jobs what they asked."""
    counted(personas, {"mig-1g.10gb": 7})
    now = timezone.now().replace(microsecond=0)
    asked = f.make_job(personas.team, personas.instance_type, 2, submitted_at=now, memory_gib=300, vcpus=8)
    mig = f.make_job(
        personas.team, personas.instance_type, 0, submitted_at=now, partitions={"mig-1g.10gb": 3}
    )
    ratio = f.make_job(personas.team, personas.instance_type, 1, submitted_at=now)
    too_many = f.make_job(
        personas.team, personas.instance_type, 0, submitted_at=now, partitions={"mig-1g.10gb": 9}
    )
    built = history.build(now - timedelta(hours=1), now + timedelta(hours=1))
    node = built.data["cluster"]["nodes"][0]
    assert (node["vcpus"], node["memory_gib"], node["partitions"]) == (192, 2048, {"mig-1g.10gb": 7})
    jobs = {j["id"]: j for j in built.data["jobs"]}
    assert (jobs[str(asked.pk)]["vcpus"], jobs[str(asked.pk)]["memory_gib"]) == (8, 300)
    assert jobs[str(mig.pk)]["partitions"] == {"mig-1g.10gb": 3} and jobs[str(mig.pk)]["gpus"] == 0
    # Left out, a job asks its GPUs' share of the node (section 3): the scenario says nothing.
    assert not {"vcpus", "memory_gib", "partitions"} & jobs[str(ratio.pk)].keys()
    # More partitions than a node has today would make the scenario refuse the window: skipped.
    assert str(too_many.pk) not in jobs
    assert built.skipped == {"asks partitions its instance type's nodes do not have today": 1}


def test_a_live_quota_of_vcpu_and_partitions_replays(personas):
    """The gap: a live quota naming vCPU or partitions on a type whose nodes the history wrote
    with GPUs alone was refused by the simulator (docs/resources.md section 1)."""
    counted(personas, {"mig-1g.10gb": 7})
    policy_services.team_quota_set(
        actor=None,
        team=personas.team,
        instance_type=personas.instance_type,
        quota=4,
        vcpus=64,
        partitions={"mig-1g.10gb": 3},
        borrow_limit_memory_gib=256,
    )
    end = timezone.now().replace(microsecond=0)
    start = end - timedelta(days=1)
    at = start + timedelta(hours=2)
    f.make_job(
        personas.team,
        personas.instance_type,
        0,
        submitted_at=at,
        started_at=at,
        finished_at=at + timedelta(hours=1),
        state=JobState.FINISHED,
        partitions={"mig-1g.10gb": 2},
    )
    draft = services.draft_create(actor=personas.cluster_admin, name="as live")
    done = run(personas, start, end, draft)
    scenario = scenario_data(unpack(done.scenario), done.policies, "live")
    team_a = next(t for t in scenario["teams"] if t["name"] == "team-a")
    assert team_a["quota"][TYPE] == {"gpus": 4, "vcpus": 64, "mig-1g.10gb": 3}
    assert team_a["borrow_limit"][TYPE]["memory_gib"] == 256
    for policy in done.results["policies"]:
        assert policy["job_counts"]["finished"] == 1
    # The exported file (manage.py simulate) reads back with the same resources.
    exported = parse_scenario(yaml.safe_load(export_yaml(done, "live")))
    assert exported.instance_types[0].partitions_per_node == (("mig-1g.10gb", 7),)


def test_a_draft_raising_a_memory_bound_teams_memory_quota_starts_more_of_its_jobs(personas):
    """docs/resources.md section 4: a job fits when every resource it asks fits its team's quota."""
    start, end = memory_bound_history(personas)
    draft = services.draft_create(actor=personas.cluster_admin, name="more memory")
    draft = with_quota(draft, "team-a", memory_gib=2048)
    done = run(personas, start, end, draft)
    by_key = {p["key"]: p for p in done.results["policies"]}
    live, more = by_key["live"]["teams"]["team-a"], by_key[f"draft-{draft.pk}"]["teams"]["team-a"]
    # Live: two at a time (waits 0, 0, 1 h, 1 h, 2 h, 2 h: 1 h on average); the draft: all at once.
    assert live["wait_mean_s"] == pytest.approx(3600, abs=120)
    assert more["wait_mean_s"] == 0
    changed = done.results["comparisons"][0]["jobs"]
    assert len(changed) == 4 and all(job["change_s"] < 0 for job in changed)
    # The GPUs alone would not have held them back: the same GPU-hours either way.
    assert more["gpu_hours"] == pytest.approx(live["gpu_hours"])
    # Beside GPU-hours, the hours of each resource the cluster counts: six 1-hour runs of 256 GiB
    # and the ratio's 24 vCPU (1 of 8 GPUs of 192 vCPU, docs/resources.md section 3).
    for figures in (live, more):
        assert (figures["memory_gib_hours"], figures["vcpu_hours"]) == (6 * 256, 6 * 24)
    admin = Client()
    assert admin.login(username=personas.cluster_admin.username, password=PASSWORD)
    page = admin.get(reverse("allocations:whatif_run", kwargs={"pk": done.pk})).content.decode()
    assert "Memory GiB-hours used" in page and "1,536.0" in page and "vCPU-hours used" in page


def quota_row(instance_type: InstanceType, **changes: str) -> dict[str, str]:
    """team-a's page POST: its settings and its one quota row."""
    data = {
        "name": "team-a",
        "display_name": "Team A",
        "active": "on",
        "fair_share_weight": "1",
        "sharing": "lend-and-borrow",
        "preempt_team_tasks": "lower-priority",
        "reclaim": "any",
        "preempt_while_borrowing": "",
        "quota-TOTAL_FORMS": "1",
        "quota-INITIAL_FORMS": "1",
        "quota-0-instance_type": str(instance_type.pk),
        "quota-0-quota": "8",
        "quota-0-borrow_limit_kind": "percent",
        "quota-0-borrow_limit_percent": "50",
        "quota-0-borrow_limit": "",
        "quota-0-lend_limit": "",
        "quota-0-vcpus": "96",
        "quota-0-memory_gib": "512",
        "quota-0-partitions": "mig-1g.10gb=3",
        "quota-0-instances": "",
        "quota-0-borrow_limit_vcpus": "",
        "quota-0-borrow_limit_memory_gib": "128",
        "quota-0-borrow_limit_partitions": "",
    }
    data.update(changes)
    return data


def test_a_quota_with_resources_goes_from_live_to_draft_form_diff_and_back(personas):
    """docs/resources.md section 2: each of a quota's resources is a setting of the draft."""
    counted(personas, {"mig-1g.10gb": 7})
    policy_services.team_quota_set(
        actor=None,
        team=personas.team,
        instance_type=personas.instance_type,
        quota=8,
        vcpus=96,
        memory_gib=512,
        partitions={"mig-1g.10gb": 3},
        borrow_limit_memory_gib=128,
    )
    draft = services.draft_create(actor=personas.cluster_admin, name="resources")
    quota = bodies.team_entry(draft.body, "team-a")["quotas"][0]
    assert {k: quota[k] for k in RESOURCE_KEYS} == {
        "vcpus": 96,
        "memory_gib": 512,
        "partitions": {"mig-1g.10gb": 3},
        "borrow_limit_vcpus": None,
        "borrow_limit_memory_gib": 128,
    }
    assert bodies.diff(draft.body) == []

    admin = Client()
    assert admin.login(username=personas.cluster_admin.username, password=PASSWORD)
    url = reverse("allocations:whatif_draft_team", kwargs={"pk": draft.pk, "name": "team-a"})
    page = admin.get(url).content.decode()
    assert 'name="quota-0-memory_gib" value="512"' in page and "mig-1g.10gb=3" in page
    response = admin.post(
        url, quota_row(personas.instance_type, **{"quota-0-memory_gib": "1024", "quota-0-partitions": ""})
    )
    assert response.status_code == 302, response.content.decode()
    draft.refresh_from_db()
    quota = bodies.team_entry(draft.body, "team-a")["quotas"][0]
    assert (quota["memory_gib"], quota["partitions"], quota["vcpus"]) == (1024, {}, 96)
    changes = {(c.field, str(c.old), str(c.new)) for c in bodies.diff(draft.body)}
    assert ("memory_gib", "512", "1024") in changes
    assert ("partitions", '{"mig-1g.10gb": 3}', "{}") in changes
    # A value the rules refuse is refused in the draft too, naming the field and the value.
    refused = admin.post(url, quota_row(personas.instance_type, **{"quota-0-partitions": "mig-7g.80gb=1"}))
    assert refused.status_code == 400 and "mig-7g.80gb" in refused.content.decode()

    services.draft_apply(actor=personas.cluster_admin, draft=draft)
    live = TeamQuota.objects.get(team=personas.team, instance_type=personas.instance_type)
    assert (live.memory_gib, live.partitions, live.vcpus, live.borrow_limit_memory_gib) == (1024, {}, 96, 128)


def test_a_draft_saved_before_the_resource_fields_loads_and_replays_as_gpus_alone(personas):
    """A body without the resource keys means their defaults (docs/resources.md section 2's
    first form: GPUs alone, every other resource by the ratio)."""
    counted(personas)
    draft = services.draft_create(actor=personas.cluster_admin, name="old")
    body = draft.body
    for team in body["teams"]:
        for quota in team["quotas"]:
            for key in ("instances", *RESOURCE_KEYS, "borrow_limit_partitions"):
                del quota[key]
    bodies.check_body(body)
    draft = services.draft_update(draft=draft, body=body)
    rows = bodies.quota_initial(draft.body, "team-a", [personas.instance_type])
    assert (rows[0]["quota"], rows[0]["memory_gib"], rows[0]["partitions"]) == (8, None, {})
    assert bodies.diff(draft.body) == []
    types = {TYPE: policy_fields_type(personas.instance_type)}
    team_a = next(t for t in bodies.scenario_teams(draft.body, types) if t["name"] == "team-a")
    assert team_a["quota"] == {TYPE: 8}

    end = timezone.now().replace(microsecond=0)
    start = end - timedelta(days=1)
    at = start + timedelta(hours=1)
    f.make_job(personas.team, personas.instance_type, 4, submitted_at=at, state=JobState.PENDING)
    done = run(personas, start, end, draft)
    parse_scenario(scenario_data(unpack(done.scenario), done.policies, f"draft-{draft.pk}"))
    by_key = {p["key"]: p for p in done.results["policies"]}
    assert by_key[f"draft-{draft.pk}"]["teams"] == by_key["live"]["teams"]

    # A cluster of GPUs alone has no resource hours to show.
    InstanceType.objects.update(vcpus_per_node=0, memory_gib_per_node=0)
    gpus_only = run(personas, start, end, draft)
    assert not {"vcpu_hours", "memory_gib_hours"} & gpus_only.results["policies"][0]["teams"]["team-a"].keys()


def policy_fields_type(instance_type: InstanceType):
    from allocations import policy_fields

    return policy_fields.engine_instance_type(
        {name: getattr(instance_type, name) for name in policy_fields.INSTANCE_TYPE_FIELDS}
    )
