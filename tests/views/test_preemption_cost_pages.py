"""The console and team pages' side of preemption cost (docs/preemption.md): the policy and
class forms set minimum runtimes (help texts point at the policy text), the policy form
refuses a bad grace naming it, the submit form takes a checkpoint interval, and the
job page shows the interval, the progress kept and the work lost."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.test import Client
from django.utils import timezone

from allocations.choices import PENDING_CODE_WORDS
from allocations.forms.jobs import JobSubmitForm
from allocations.forms.policy import ClusterPolicyForm, PriorityClassForm
from allocations.models import AuditEntry, ClusterPolicy, Job, JobEvent, PriorityClass
from tests import factories as f

POLICY = {
    "form": "policy",
    "policy-idle_allocation": "fair-share",
    "policy-task_ranking": "priority",
    "policy-share_unallocated": "on",
    "policy-queueing": "best-effort-fifo",
}
JOB = {"name": "train", "instance_type": "ml.p5.48xlarge", "gpus": "4", "command": "python train.py"}


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def field_error(html: str, name: str) -> str:
    """The text of the errors shown with field ``name`` (the console's and the submit form's)."""
    found = re.search(rf'<span class="error" id="error-{name}">(.*?)</span>', html, re.S)
    if found:
        return unescape(found.group(1))
    block = re.search(rf'name="{re.escape(name)}".*?(<ul class="errorlist.*?</ul>)', html, re.S)
    return unescape(block.group(1)) if block else ""


@pytest.mark.parametrize(
    ("form", "names"),
    [
        (ClusterPolicyForm, ["min_runtime_s", "preemption_grace_s"]),
        (PriorityClassForm, ["min_runtime_s", "preemption_grace_s"]),
        (JobSubmitForm, ["checkpoint_interval_s"]),
    ],
)
def test_the_forms_point_at_the_policy_text(db, form, names):
    for name in names:
        assert "docs/preemption.md section" in str(form().fields[name].help_text)


def test_the_policy_page_sets_the_minimum_runtime(personas):
    response = client_for(personas.cluster_admin).post(
        "/console/policy/", {**POLICY, "policy-min_runtime_s": "600", "policy-preemption_grace_s": "0"}
    )
    assert response.status_code == 302
    assert ClusterPolicy.objects.get().min_runtime_s == 600
    assert AuditEntry.objects.filter(field="min_runtime_s", old_value="0", new_value="600").exists()


def test_the_policy_page_left_without_the_new_fields_keeps_todays_behaviour(personas):
    response = client_for(personas.cluster_admin).post("/console/policy/", POLICY)
    assert response.status_code == 302
    policy = ClusterPolicy.objects.get()
    assert (policy.min_runtime_s, policy.preemption_grace_s) == (0, 0)


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"policy-preemption_grace_s": "86401"}, "preemption_grace_s", ["Preemption grace", "86401"]),
        ({"policy-preemption_grace_s": "-3"}, "preemption_grace_s", ["Preemption grace", "-3"]),
        ({"policy-min_runtime_s": "-5"}, "min_runtime_s", ["-5"]),
        ({"policy-min_runtime_s": "ten minutes"}, "min_runtime_s", ["Minimum runtime", "ten minutes"]),
    ],
)
def test_the_policy_page_refuses_bad_values_naming_field_and_value(personas, changes, field, words):
    response = client_for(personas.cluster_admin).post("/console/policy/", {**POLICY, **changes})
    assert response.status_code == 200
    form = response.context["policy_form"]
    text = " ".join(form.errors[field])
    for word in words:
        assert word in text, (word, text)
    policy = ClusterPolicy.objects.get()
    assert (policy.min_runtime_s, policy.preemption_grace_s) == (0, 0)


def test_a_priority_class_gets_its_own_minimum_runtime_or_the_policys(personas):
    admin = client_for(personas.cluster_admin)
    response = admin.post(
        "/console/priority-classes/", {"name": "urgent", "weight": "99", "min_runtime_s": "60"}
    )
    assert response.status_code == 302
    assert PriorityClass.objects.get(name="urgent").min_runtime_s == 60
    html = unescape(admin.get("/console/priority-classes/").content.decode())
    assert "60 s" in html and "the policy's" in html  # the other classes use the policy's
    bad = admin.post("/console/priority-classes/", {"name": "later", "weight": "9", "min_runtime_s": "-1"})
    assert bad.status_code == 200
    assert "-1" in " ".join(bad.context["form"].errors["min_runtime_s"])
    assert not PriorityClass.objects.filter(name="later").exists()


def test_a_job_is_submitted_with_its_checkpoint_interval(personas):
    response = client_for(personas.member).post(
        "/teams/team-a/submit/", {**JOB, "checkpoint_interval_s": "1800"}
    )
    assert response.status_code == 302
    assert Job.objects.get().checkpoint_interval_s == 1800


@pytest.mark.parametrize(("value", "words"), [("0", ["(got 0)"]), ("often", ["often"]), ("-60", ["-60"])])
def test_a_bad_checkpoint_interval_is_shown_on_its_field(personas, value, words):
    response = client_for(personas.member).post(
        "/teams/team-a/submit/", {**JOB, "checkpoint_interval_s": value}
    )
    assert response.status_code == 400
    error = field_error(response.content.decode(), "checkpoint_interval_s")
    assert "Checkpoint interval" in error
    for word in words:
        assert word in error, (word, error)
    assert not Job.objects.exists()


def test_the_job_page_shows_the_checkpoint_interval_progress_kept_and_lost_work(personas):
    job = f.make_job(
        personas.team,
        personas.instance_type,
        8,
        submitter=personas.member,
        checkpoint_interval_s=1800,
        preemption_count=1,
        progress_kept_s=1800.0,
        lost_gpu_seconds=7200.0,
    )
    JobEvent.objects.create(
        job=job, kind="preempted", at=timezone.now(), reason="reclaim", ran_s=2700.0, lost_gpu_seconds=7200.0
    )
    html = client_for(personas.member).get(f"/jobs/{job.pk}/").content.decode()
    assert re.search(r'id="job-checkpoint-interval">every 1800 s<', html)
    assert re.search(r'id="job-progress-kept">1800 s of work kept', html)
    assert re.search(r'id="job-lost-work">2.00 GPU-hours \(7200 GPU-seconds\)', html)
    assert "after 2700 s running; 7200 GPU-seconds lost" in html


def test_a_job_without_checkpoints_says_a_preemption_loses_its_run(personas):
    job = f.make_job(personas.team, personas.instance_type, 8, submitter=personas.member)
    html = unescape(client_for(personas.member).get(f"/jobs/{job.pk}/").content.decode())
    assert "none: a preemption loses all of a run's work" in html
    assert 'id="job-lost-work"' not in html  # never preempted: nothing lost


def test_the_min_runtime_reason_has_plain_words(personas):
    job = f.make_job(
        personas.team,
        personas.instance_type,
        8,
        submitter=personas.member,
        pending_reason_code="min-runtime",
        pending_reason_message="reclaims 8 GPUs from team-b's job 7 in 6 min: minimum runtime",
    )
    html = client_for(personas.member).get(f"/jobs/{job.pk}/").content.decode()
    assert unescape(PENDING_CODE_WORDS["min-runtime"]) in unescape(html)
    assert "minimum runtime" in PENDING_CODE_WORDS["min-runtime"]


def test_the_queue_page_says_the_min_runtime_code_in_plain_words(personas):
    f.make_job(
        personas.team,
        personas.instance_type,
        8,
        submitter=personas.member,
        pending_reason_code="min-runtime",
        pending_reason_message="reclaims 8 GPUs from team-b's job 7 in 6 min: minimum runtime",
    )
    html = unescape(client_for(personas.member).get("/teams/team-a/").content.decode())
    assert f'<code title="{PENDING_CODE_WORDS["min-runtime"]}">min-runtime</code>' in html
