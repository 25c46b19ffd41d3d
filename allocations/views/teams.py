"""Team self-service pages: my teams, a team's queue, submitting, a job's history, members.

Each view: access (``access.py``: 404 for what the user may not see, 403 for what they see but
may not change) -> form/service -> redirect or render. The queue and job pages poll their
``live`` fragment (``static/js/live.js``) so they update without a reload.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from allocations import access
from allocations.choices import ACTIVE_JOB_STATES, PENDING_CODE_WORDS, JobState, Role
from allocations.forms.jobs import JobSubmitForm, MembershipAddForm, MembershipRoleForm
from allocations.forms.policy import apply_errors
from allocations.models import Job, Membership, Team
from allocations.selectors import jobs as job_selectors
from allocations.selectors import live as live_selectors
from allocations.selectors.estimates import job_estimates
from allocations.selectors.fairness import team_borrowed_lately
from allocations.selectors.snapshot import build_snapshot
from allocations.services import jobs as job_services
from allocations.services import memberships
from allocations.views.feedback import run_and_tell

# How often the queue and job pages poll their fragment (milliseconds).
LIVE_INTERVAL_MS = 3000


def _team(request: HttpRequest, name: str) -> Team:
    return access.get_visible_or_404(request.user, Team.objects.all(), name=name)


def _job(request: HttpRequest, pk: int) -> Job:
    return access.get_visible_or_404(
        request.user,
        Job.objects.select_related("team", "instance_type", "priority_class", "submitter"),
        pk=pk,
    )


@login_required
@require_GET
def my_teams(request: HttpRequest) -> HttpResponse:
    rows = job_selectors.my_teams(request.user)
    labels = dict(Role.choices)
    for row in rows:
        row["role_label"] = labels.get(row["role"], row["role"])
    return render(request, "teams/my_teams.html", {"rows": rows, **_free_capacity(request)})


def _free_capacity(request: HttpRequest) -> dict[str, Any]:
    """The cluster's free capacity for the page, if the user may see it (``access.py``)."""
    if not access.can_see_free_capacity(request.user):
        return {"free_capacity": None}
    return {"free_capacity": live_selectors.free_capacity()}


def _queue_context(request: HttpRequest, team: Team) -> dict[str, Any]:
    now = timezone.now()
    snapshot = build_snapshot(now)
    queue = job_selectors.team_queue(team, now=now, snapshot=snapshot, estimates=job_estimates(snapshot, now))
    return {
        "team": team,
        "queue": queue,
        "now": now,
        "can_submit": access.can_submit(request.user, team),
        "can_manage_members": access.can_manage_members(request.user, team),
        "manageable": {
            row.job.pk
            for row in (*queue.running, *queue.pending)
            if access.can_manage_job(request.user, row.job)
        },
        "live_interval": LIVE_INTERVAL_MS,
        "limits": job_selectors.limits_in_force(team, request.user),
        "borrowed_lately": team_borrowed_lately(snapshot, team.name),
    }


@login_required
@require_GET
def team_queue(request: HttpRequest, team: str, live: bool = False) -> HttpResponse:
    """The team's queue; ``live``: only its fragment, which the page polls every few seconds."""
    template = "teams/_queue.html" if live else "teams/queue.html"
    return render(request, template, _queue_context(request, _team(request, team)))


@login_required
def job_submit(request: HttpRequest, team: str) -> HttpResponse:
    obj = _team(request, team)
    access.require(access.can_submit(request.user, obj), f"Viewers of {obj.name} cannot submit jobs.")
    form = JobSubmitForm(request.POST or None, team=obj)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            job = job_services.job_submit(
                user=request.user,
                team=obj,
                name=data["name"],
                instance_type=data["instance_type"],
                gpus=data["gpus"] or 0,
                vcpus=data["vcpus"],
                memory_gib=data["memory_gib"],
                partitions=data["partitions"] or {},
                priority_class=data["priority_class"],
                command=data["command"],
                image=data["image"],
                requested_duration=data["requested_duration"],
                checkpoint_interval_s=data["checkpoint_interval_s"],
            )
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Job {job.name} (#{job.pk}) submitted.")
            return redirect("allocations:job_detail", pk=job.pk)
    status = 400 if request.method == "POST" else 200
    context = {"team": obj, "form": form, "limits": job_selectors.limits_in_force(obj, request.user)}
    context.update(_free_capacity(request))
    return render(request, "teams/submit.html", context, status=status)


def _job_context(request: HttpRequest, job: Job) -> dict[str, Any]:
    place = None
    if job.state == JobState.PENDING:
        # Its place in its team's queue and its forecast start, as the queue page shows them.
        now = timezone.now()
        place = job_selectors.queue_place(
            job,
            job_estimates(build_snapshot(now), now),
            job_selectors.pending_positions({job.team_id}),
        )
    return {
        "job": job,
        "now": timezone.now(),
        "place": place,
        "reason_words": PENDING_CODE_WORDS.get(job.pending_reason_code, ""),
        "lost_gpu_hours": job.lost_gpu_seconds / 3600,
        "events": job_selectors.job_history(job),
        "can_manage": access.can_manage_job(request.user, job),
        "live_interval": LIVE_INTERVAL_MS,
        # A fresh one each time the form is drawn: the form posted twice makes one job.
        "resubmit_token": secrets.token_urlsafe(24),
    }


@login_required
@require_GET
def job_detail(request: HttpRequest, pk: int, live: bool = False) -> HttpResponse:
    """A job and its history; ``live``: only their fragment, which the page polls."""
    template = "teams/_job.html" if live else "teams/job.html"
    return render(request, template, _job_context(request, _job(request, pk)))


@login_required
@require_http_methods(["GET", "POST"])
def job_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    """Cancel a job, after a confirmation page: a Cancel button posts here without ``confirm``
    and gets the page, whose button posts ``confirm=yes``. It asks without JavaScript, and a
    stray click on a queue row cancels nothing."""
    job = _job(request, pk)
    access.require(
        access.can_manage_job(request.user, job), "Only its submitter or a team admin may cancel it."
    )
    cancellable = job.state in ACTIVE_JOB_STATES
    if cancellable and (request.method == "GET" or request.POST.get("confirm") != "yes"):
        return render(request, "teams/cancel_confirm.html", {"job": job})
    if request.method == "GET":
        return redirect("allocations:job_detail", pk=job.pk)
    done = f"Job {job.name} (#{job.pk}) cancelled."
    run_and_tell(request, done, job_services.job_cancel, user=request.user, job=job)
    return redirect("allocations:job_detail", pk=job.pk)


@login_required
@require_POST
def job_resubmit(request: HttpRequest, pk: int) -> HttpResponse:
    job = _job(request, pk)
    access.require(
        access.can_manage_job(request.user, job), "Only its submitter or a team admin may resubmit it."
    )
    access.require(access.can_submit(request.user, job.team), f"You cannot submit jobs to {job.team.name}.")
    token = request.POST.get("resubmit_token") or None
    try:
        new_job, created = job_services.job_resubmit(user=request.user, job=job, idempotency_key=token)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("allocations:job_detail", pk=job.pk)
    if created:
        messages.success(request, f"Resubmitted as job #{new_job.pk}.")
    else:
        messages.info(request, f"This form was sent already: it resubmitted job #{new_job.pk}.")
    return redirect("allocations:job_detail", pk=new_job.pk)


@login_required
def team_members(request: HttpRequest, team: str) -> HttpResponse:
    """The team's members: everyone who sees the team reads it; team admins add people."""
    obj = _team(request, team)
    can_manage = access.can_manage_members(request.user, obj)
    form = MembershipAddForm(request.POST or None, actor=request.user)
    if request.method == "POST":
        access.require(can_manage, f"Only team admins of {obj.name} manage its members.")
        if form.is_valid():
            try:
                memberships.membership_add(
                    actor=request.user,
                    team=obj,
                    user=form.cleaned_data["username"],
                    role=form.cleaned_data["role"],
                )
            except ValidationError as exc:
                apply_errors(form, exc, {"user": "username"})
            else:
                messages.success(
                    request, f"{form.cleaned_data['username'].get_username()} added to {obj.name}."
                )
                return redirect("allocations:team_members", team=obj.name)
    members = Membership.objects.filter(team=obj).select_related("user").order_by("user__username")
    return render(
        request,
        "teams/members.html",
        {"team": obj, "members": members, "form": form, "can_manage": can_manage, "roles": Role.choices},
        status=400 if request.method == "POST" else 200,
    )


def _membership(request: HttpRequest, team: str, pk: int) -> Membership:
    obj = _team(request, team)
    membership = access.get_visible_or_404(
        request.user, Membership.objects.select_related("team", "user"), pk=pk, team=obj
    )
    access.require(
        access.can_manage_members(request.user, obj), f"Only team admins of {obj.name} manage its members."
    )
    return membership


@login_required
@require_POST
def membership_role(request: HttpRequest, team: str, pk: int) -> HttpResponse:
    membership = _membership(request, team, pk)
    form = MembershipRoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Unknown role {request.POST.get('role', '')!r}.")
    else:
        role = form.cleaned_data["role"]
        done = f"{membership.user.get_username()} is now {role}."
        run_and_tell(
            request, done, memberships.membership_update, actor=request.user, membership=membership, role=role
        )
    return redirect("allocations:team_members", team=team)


@login_required
@require_POST
def membership_remove(request: HttpRequest, team: str, pk: int) -> HttpResponse:
    membership = _membership(request, team, pk)
    done = f"{membership.user.get_username()} removed from {team}."
    run_and_tell(request, done, memberships.membership_remove, actor=request.user, membership=membership)
    return redirect("allocations:team_members", team=team)


urlpatterns = [
    path("my-teams/", my_teams, name="my_teams"),
    path("teams/<slug:team>/", team_queue, name="team_queue"),
    path("teams/<slug:team>/live/", team_queue, {"live": True}, name="team_queue_live"),
    path("teams/<slug:team>/submit/", job_submit, name="job_submit"),
    path("teams/<slug:team>/members/", team_members, name="team_members"),
    path("teams/<slug:team>/members/<int:pk>/role/", membership_role, name="membership_role"),
    path("teams/<slug:team>/members/<int:pk>/remove/", membership_remove, name="membership_remove"),
    path("jobs/<int:pk>/", job_detail, name="job_detail"),
    path("jobs/<int:pk>/live/", job_detail, {"live": True}, name="job_detail_live"),
    path("jobs/<int:pk>/cancel/", job_cancel, name="job_cancel"),
    path("jobs/<int:pk>/resubmit/", job_resubmit, name="job_resubmit"),
]
