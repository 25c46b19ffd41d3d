"""The lab's pages: staff only, drafts edited with the live policy's forms and rules, the diff,
applying through the policy services (audited), runs started, polled, exported."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from allocations.models import AuditEntry, PolicyDraft, TeamQuota, WhatIfRun, WhatIfRunState
from allocations.whatif import services
from allocations.whatif.runs import execute
from tests.conftest import PASSWORD

NON_STAFF = ["team_admin", "member", "viewer", "other_member", "outsider"]


def signed_in(user: Any) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


@pytest.fixture
def admin(personas) -> Client:
    return signed_in(personas.cluster_admin)


@pytest.fixture
def draft(personas) -> PolicyDraft:
    return services.draft_create(actor=personas.cluster_admin, name="lend more")


def quota_post(**changes: Any) -> dict[str, Any]:
    """The team page's POST: team-b's settings and its one quota row (ml.p5.48xlarge)."""
    from allocations.models import InstanceType

    data = {
        "name": "team-b",
        "display_name": "Team B",
        "active": "on",
        "fair_share_weight": "1",
        "sharing": "lend-and-borrow",
        "preempt_team_tasks": "lower-priority",
        "reclaim": "any",
        "preempt_while_borrowing": "",
        "preempt_while_borrowing_max_priority": "",
        "quota-TOTAL_FORMS": "1",
        "quota-INITIAL_FORMS": "1",
        "quota-0-instance_type": str(InstanceType.objects.get().pk),
        "quota-0-quota": "8",
        "quota-0-borrow_limit_kind": "percent",
        "quota-0-borrow_limit_percent": "50",
        "quota-0-borrow_limit": "",
        "quota-0-lend_limit": "",
    }
    data.update(changes)
    return data


def lab_urls(draft: PolicyDraft, run: WhatIfRun) -> dict[str, str]:
    return {
        "index": reverse("allocations:whatif"),
        "draft": reverse("allocations:whatif_draft", kwargs={"pk": draft.pk}),
        "team": reverse("allocations:whatif_draft_team", kwargs={"pk": draft.pk, "name": "team-b"}),
        "apply": reverse("allocations:whatif_draft_apply", kwargs={"pk": draft.pk}),
        "delete": reverse("allocations:whatif_draft_delete", kwargs={"pk": draft.pk}),
        "start": reverse("allocations:whatif_run_start"),
        "run": reverse("allocations:whatif_run", kwargs={"pk": run.pk}),
        "status": reverse("allocations:whatif_run_status", kwargs={"pk": run.pk}),
        "cancel": reverse("allocations:whatif_run_cancel", kwargs={"pk": run.pk}),
        "run_delete": reverse("allocations:whatif_run_delete", kwargs={"pk": run.pk}),
        "scenario": reverse("allocations:whatif_run_scenario", kwargs={"pk": run.pk, "key": "live"}),
        "csv": reverse("allocations:whatif_run_csv", kwargs={"pk": run.pk, "chart": "running"}),
    }


def test_every_lab_url_is_in_the_access_tests():
    from allocations.views import whatif

    names = {p.name for p in whatif.urlpatterns}
    assert names == {
        "whatif",
        "whatif_draft",
        "whatif_draft_team",
        "whatif_draft_apply",
        "whatif_draft_delete",
        "whatif_run_start",
        "whatif_run",
        "whatif_run_status",
        "whatif_run_cancel",
        "whatif_run_delete",
        "whatif_run_scenario",
        "whatif_run_csv",
    }


@pytest.mark.parametrize("persona", NON_STAFF)
@pytest.mark.parametrize("method", ["get", "post"])
def test_only_cluster_admins_may_use_the_lab(personas, draft, persona, method):
    run = WhatIfRun.objects.create(
        window_start=draft.created_at, window_end=draft.created_at.replace(year=2100)
    )
    client = signed_in(getattr(personas, persona))
    for name, url in lab_urls(draft, run).items():
        response = getattr(client, method)(url, quota_post() if method == "post" else None)
        assert response.status_code == 403, (name, response.status_code)
    anonymous = Client()
    for name, url in lab_urls(draft, run).items():
        response = getattr(anonymous, method)(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"], name
    assert PolicyDraft.objects.get(pk=draft.pk).body == draft.body
    assert WhatIfRun.objects.get(pk=run.pk).state == WhatIfRunState.QUEUED
    assert not AuditEntry.objects.exists()


def test_a_draft_is_a_copy_of_the_live_policy_with_no_differences(personas, admin):
    response = admin.post(reverse("allocations:whatif"), {"draft-name": "copy"})
    draft = PolicyDraft.objects.get(name="copy")
    assert response.status_code == 302 and response["Location"].endswith(f"/whatif/drafts/{draft.pk}/")
    assert [t["name"] for t in draft.body["teams"]] == ["team-a", "team-b"]
    assert {pc["name"] for pc in draft.body["priority_classes"]} == {
        "inference",
        "training",
        "fine-tuning",
        "experimentation",
    }
    page = admin.get(response["Location"]).content.decode()
    assert "The draft is the same as the live policy." in page
    # A second draft of the same name is refused, naming it.
    again = admin.post(reverse("allocations:whatif"), {"draft-name": "copy"})
    assert (
        again.status_code == 200
        and "A draft named &#x27;copy&#x27; already exists." in again.content.decode()
    )


def test_editing_a_team_in_the_draft_shows_in_the_diff_and_leaves_the_live_policy(personas, admin, draft):
    url = reverse("allocations:whatif_draft_team", kwargs={"pk": draft.pk, "name": "team-b"})
    assert admin.get(url).status_code == 200
    response = admin.post(url, quota_post(**{"quota-0-lend_limit": "2", "fair_share_weight": "5"}))
    assert response.status_code == 302
    page = admin.get(reverse("allocations:whatif_draft", kwargs={"pk": draft.pk})).content.decode()
    assert "team quota team-b / ml.p5.48xlarge" in page and "lend_limit" in page
    assert "fair_share_weight" in page
    assert TeamQuota.objects.get(team=personas.other_team).lend_limit is None  # live unchanged
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"quota-0-lend_limit": "9"}, "Lend limit must be at most the quota (8 GPUs); got 9."),
        ({"quota-0-quota": "-1"}, "Quota must be 0 or more GPUs; got -1."),
        ({"fair_share_weight": "abc"}, "Fair-share weight must be a whole number; got &#x27;abc&#x27;."),
        ({"sharing": "sometimes"}, "sometimes"),
        (
            {"reclaim": "never", "preempt_while_borrowing": "lower-priority"},
            "Preempt while borrowing &#x27;lower-priority&#x27; needs reclaim",
        ),
    ],
)
def test_a_draft_meets_the_live_policys_rules(admin, draft, changes, message):
    url = reverse("allocations:whatif_draft_team", kwargs={"pk": draft.pk, "name": "team-b"})
    response = admin.post(url, quota_post(**changes))
    assert response.status_code == 400
    assert message in response.content.decode()
    assert PolicyDraft.objects.get(pk=draft.pk).body == draft.body


def test_cluster_policy_and_priority_classes_are_edited_in_the_draft(admin, draft):
    url = reverse("allocations:whatif_draft", kwargs={"pk": draft.pk})
    bad = admin.post(url, {"form": "policy", "policy-idle_allocation": "lottery"})
    assert bad.status_code == 400 and "lottery" in bad.content.decode()
    ok = admin.post(
        url,
        {
            "form": "policy",
            "policy-idle_allocation": "first-come-first-serve",
            "policy-task_ranking": "priority",
            "policy-share_unallocated": "on",
            "policy-queueing": "best-effort-fifo",
        },
    )
    assert ok.status_code == 302
    weight = admin.post(url, {"form": "class:training", "pc-training-weight": "101"})
    assert weight.status_code == 400 and "Weight must be at most 100; got 101." in weight.content.decode()
    assert admin.post(url, {"form": "class:training", "pc-training-weight": "90"}).status_code == 302
    assert (
        admin.post(url, {"form": "new-class", "new-class-name": "batch", "new-class-weight": "5"}).status_code
        == 302
    )
    assert admin.post(url, {"form": "class:experimentation", "action": "delete"}).status_code == 302
    body = PolicyDraft.objects.get(pk=draft.pk).body
    assert body["cluster_policy"]["idle_allocation"] == "first-come-first-serve"
    assert {pc["name"]: pc["weight"] for pc in body["priority_classes"]} == {
        "inference": 100,
        "training": 90,
        "fine-tuning": 50,
        "batch": 5,
    }
    page = admin.get(url).content.decode()
    for text in ("idle_allocation", "first-come-first-serve", "batch", "experimentation"):
        assert text in page
    # The cluster policy is named once in the diff's Object column, not "cluster policy cluster policy".
    assert "<td>cluster policy</td><td>idle_allocation</td>" in page
    assert "cluster policy cluster policy" not in page
    # A class removed from the draft but still live may come back.
    back = admin.post(
        url, {"form": "new-class", "new-class-name": "experimentation", "new-class-weight": "20"}
    )
    assert back.status_code == 302
    again = admin.post(url, {"form": "new-class", "new-class-name": "batch", "new-class-weight": "5"})
    assert (
        again.status_code == 400 and "The draft already has a priority class named" in again.content.decode()
    )
    missing = admin.post(url, {"form": "class:nope", "pc-nope-weight": "1"})
    assert missing.status_code == 404


def test_applying_a_draft_changes_the_live_policy_with_an_audit_entry_per_field(
    personas, admin, draft, django_capture_on_commit_callbacks
):
    team_url = reverse("allocations:whatif_draft_team", kwargs={"pk": draft.pk, "name": "team-b"})
    admin.post(team_url, quota_post(**{"quota-0-lend_limit": "2", "fair_share_weight": "5"}))
    with django_capture_on_commit_callbacks() as callbacks:
        response = admin.post(reverse("allocations:whatif_draft_apply", kwargs={"pk": draft.pk}))
    assert response.status_code == 302
    assert TeamQuota.objects.get(team=personas.other_team).lend_limit == 2
    personas.other_team.refresh_from_db()
    assert personas.other_team.fair_share_weight == 5
    entries = {
        (e.object_type, e.object_repr, e.field, e.old_value, e.new_value) for e in AuditEntry.objects.all()
    }
    assert entries == {
        ("team quota", "team-b / ml.p5.48xlarge", "lend_limit", "(none)", "2"),
        ("team", "team-b", "fair_share_weight", "1", "5"),
    }
    assert all(e.actor == personas.cluster_admin for e in AuditEntry.objects.all())
    assert any("request_cycle" in getattr(c, "__name__", "") for c in callbacks)  # the loop is asked
    page = admin.get(reverse("allocations:whatif_draft", kwargs={"pk": draft.pk})).content.decode()
    assert "The draft is the same as the live policy." in page
    assert PolicyDraft.objects.get(pk=draft.pk).applied_at is not None


def test_a_draft_refused_by_the_live_rules_applies_nothing(personas, admin, draft):
    body = dict(draft.body)
    body["teams"][1]["quotas"][0]["lend_limit"] = 99  # written around the forms
    services.draft_update(draft=draft, body=body)
    response = admin.post(reverse("allocations:whatif_draft_apply", kwargs={"pk": draft.pk}), follow=True)
    assert "Not applied:" in response.content.decode() and "99" in response.content.decode()
    assert TeamQuota.objects.get(team=personas.other_team).lend_limit is None
    assert not AuditEntry.objects.exists()


def test_a_run_is_started_polled_and_exported(personas, admin, draft, week):
    bad = admin.post(
        reverse("allocations:whatif_run_start"), {"run-drafts": [draft.pk], "run-range": "dates"}
    )
    assert (
        bad.status_code == 400
        and "From is required when the window is given by dates." in bad.content.decode()
    )
    bad = admin.post(reverse("allocations:whatif_run_start"), {"run-drafts": ["x"], "run-range": "7"})
    assert bad.status_code == 400 and "&#x27;x&#x27;" in bad.content.decode()
    response = admin.post(
        reverse("allocations:whatif_run_start"), {"run-drafts": [draft.pk], "run-range": "7"}
    )
    run = WhatIfRun.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse(
        "allocations:whatif_run", kwargs={"pk": run.pk}
    )
    status = admin.get(reverse("allocations:whatif_run_status", kwargs={"pk": run.pk})).json()
    assert status["state"] == "queued" and not status["finished"]
    scenario_url = reverse("allocations:whatif_run_scenario", kwargs={"pk": run.pk, "key": "live"})
    assert admin.get(scenario_url).status_code == 404  # nothing replayed yet
    execute(run.pk)
    status = admin.get(reverse("allocations:whatif_run_status", kwargs={"pk": run.pk})).json()
    assert status == {**status, "state": "done", "progress": 1.0, "finished": True}
    page = admin.get(reverse("allocations:whatif_run", kwargs={"pk": run.pk})).content.decode()
    for text in (
        "GPU-hours idle while jobs waited",
        "Preemptions per job",
        "Victims that had run under 10 min",
        "Per priority class",
        "lend more",
        "Jobs whose wait changed most",
    ):
        assert text in page
    assert "churn-warning" not in page  # the week's policies are calm
    # A draft whose jobs keep preempting each other is pointed out, with its numbers.
    churning = WhatIfRun.objects.get(pk=run.pk)
    churning.results["policies"][1]["cluster"].update(
        preemptions=400, starts=900, lost_gpu_hours=12.5, preemptions_per_job=0.8, short_victims_share=0.625
    )
    # A result stored before these figures were: a dash, not a zero.
    for key in ("preemptions_per_job", "short_victims_share"):
        churning.results["policies"][0]["cluster"].pop(key, None)
    churning.save(update_fields=["results"])
    page = admin.get(reverse("allocations:whatif_run", kwargs={"pk": run.pk})).content.decode()
    assert re.search(r"Preemptions per job</th><td[^>]*>\u2013</td><td[^>]*>0\.80</td>", page)
    assert re.search(r"Victims that had run under 10 min</th><td[^>]*>\u2013</td><td[^>]*>62%</td>", page)
    assert 'id="churn-draft-' in page and 'id="churn-live"' not in page
    assert "preempted 400 times for 900 starts (44%)" in page and "12.5 GPU-hours of work were lost" in page
    exported = admin.get(scenario_url)
    assert exported.status_code == 200 and exported["Content-Type"].startswith("application/yaml")
    assert b"horizon: 604800" in exported.content
    csv = admin.get(reverse("allocations:whatif_run_csv", kwargs={"pk": run.pk, "chart": "running"}))
    assert csv.status_code == 200 and csv.content.startswith(b"time,policy,gpus\n")
    assert (
        admin.get(reverse("allocations:whatif_run_csv", kwargs={"pk": run.pk, "chart": "nope"})).status_code
        == 404
    )
    assert (
        admin.get(
            reverse("allocations:whatif_run_scenario", kwargs={"pk": run.pk, "key": "draft-999"})
        ).status_code
        == 404
    )


def test_the_run_page_says_which_teams_were_created_after_the_windows_start(personas, admin, draft):
    from datetime import timedelta

    from allocations.models import Team

    start = timezone.now() - timedelta(days=7)
    Team.objects.filter(name="team-a").update(created_at=start - timedelta(days=30))
    Team.objects.filter(name="team-b").update(created_at=start + timedelta(days=2))
    run = WhatIfRun.objects.create(
        window_start=start,
        window_end=start + timedelta(days=7),
        policies=[{"key": "live", "name": "live policy", "body": draft.body}],
    )
    page = admin.get(reverse("allocations:whatif_run", kwargs={"pk": run.pk})).content.decode()
    notice = page.split('id="late-teams">')[1].split("</p>")[0]
    assert "Team <strong>team-b</strong> was created on" in notice
    assert "team-a" not in notice
    assert "as if it had existed all along" in notice

    Team.objects.filter(name="team-b").update(created_at=start - timedelta(days=1))
    page = admin.get(reverse("allocations:whatif_run", kwargs={"pk": run.pk})).content.decode()
    assert 'id="late-teams"' not in page


def test_the_jobs_whose_wait_changed_link_to_their_pages_with_waits_in_words(personas, admin, week, draft):
    # ``week`` before ``draft``: the draft copies the week's policy, where team-b lends nothing.
    team_url = reverse("allocations:whatif_draft_team", kwargs={"pk": draft.pk, "name": "team-b"})
    assert admin.post(team_url, quota_post()).status_code == 302  # team-b lends its whole quota
    admin.post(reverse("allocations:whatif_run_start"), {"run-drafts": [draft.pk], "run-range": "7"})
    run = WhatIfRun.objects.get()
    execute(run.pk)
    page = admin.get(reverse("allocations:whatif_run", kwargs={"pk": run.pk})).content.decode()
    rows = page.split('class="changed-job"')[1:]
    assert rows, "no job's wait changed"
    for row in rows:
        pk, shown = re.search(r'<a href="/jobs/(\d+)/" class="job-link">#(\d+)</a>', row).groups()
        assert pk == shown
        waits = re.findall(r'<td class="num">([^<]*)</td>', row)[1:3]
        assert all(re.fullmatch(r"\d+ (h|min|s)( \d+ (min|s))?", w) for w in waits), waits
