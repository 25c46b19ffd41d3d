"""The admin console: pages for cluster administrators to see capacity and change the policy.

Each view is access -> form -> service -> redirect (with a message) or render. Every page but
the home page is ``cluster_admin_required``; the home page sends other signed-in users to their
own teams. Console pages live under ``console/`` so that they never collide with team pages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import ValidationError
from django.core.paginator import Page, Paginator
from django.db import transaction
from django.db.models import Count, Prefetch
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, path, reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from allocations.access import cluster_admin_required, is_cluster_admin
from allocations.choices import JobState, NodeState
from allocations.forms import policy as forms
from allocations.forms.policy import JOB_SORTS
from allocations.models import InstanceType, Job, Membership, Node, PriorityClass, Team, TeamQuota
from allocations.selectors import live as live_selectors
from allocations.selectors import policy as selectors
from allocations.selectors.estimates import job_estimates
from allocations.selectors.fairness import team_borrowed_lately_now
from allocations.selectors.jobs import QueuePlace, pending_positions, queue_place
from allocations.selectors.snapshot import build_snapshot
from allocations.services import memberships
from allocations.services import policy as services
from allocations.views.feedback import run_and_tell
from allocations.views.teams import LIVE_INTERVAL_MS  # the capacity page polls at the queue's pace

PAGE_SIZE = 50


def _save(request: HttpRequest, form: Any, service: Callable[..., Any], **kwargs: Any) -> Any:
    """Run ``service`` with the form's values; a refused change puts its errors on the form.

    Returns what the service returned, or None when the form or the service refused it.
    """
    if not form.is_valid():
        return None
    try:
        return service(actor=request.user, **kwargs, **form.service_values())
    except ValidationError as exc:
        forms.apply_errors(form, exc)
        return None


def _posted(
    request: HttpRequest,
    form: Any,
    service: Callable[..., Any],
    done: str,
    back: str,
    after: Callable[[Any], None] | None = None,
    **kwargs: Any,
) -> HttpResponse | None:
    """A POSTed ``form`` saved through ``service``: the user told ``done`` (``{}``: the saved
    object's name), ``after`` called with what was saved, and a redirect to the URL named ``back``.

    None on a GET, or when the form or the service refused it: the page is drawn again, the
    errors on the form.
    """
    if request.method != "POST":
        return None
    saved = _save(request, form, service, **kwargs)
    if saved is None:
        return None
    messages.success(request, done.format(saved.name))
    if after is not None:
        after(saved)
    return redirect(back)


def _edit_page(
    request: HttpRequest,
    obj: Any,
    kwarg: str,
    form_class: type[forms.PolicyForm],
    update: Callable[..., Any],
    delete: Callable[..., Any],
    *,
    noun: str,
    back: str,
    delete_what: str,
    deleted: str = "deleted",
    after: Callable[[Any], None] | None = None,
) -> HttpResponse:
    """``console/edit.html`` for one policy object: its form saved through ``update``, or
    ``action=delete`` through ``delete`` (both take the object as ``kwarg``); either goes
    ``back`` to the list with a message that starts with ``noun``, then calls ``after`` with
    the object. A refused delete comes back to this page saying why."""
    if request.method == "POST" and request.POST.get("action") == "delete":
        done = f"{noun} {obj.name} {deleted}."
        if not run_and_tell(request, done, delete, actor=request.user, **{kwarg: obj}):
            return redirect(request.resolver_match.view_name, pk=obj.pk)  # this page, saying why
        if after is not None:
            after(obj)
        return redirect(back)
    # A copy for the form, which writes the posted values into its instance as it validates.
    form = form_class(request.POST or None, instance=type(obj).objects.get(pk=obj.pk))
    saved = _posted(request, form, update, f"{noun} {{}} saved.", back, after, **{kwarg: obj})
    if saved is not None:
        return saved
    return render(
        request,
        "console/edit.html",
        {
            "form": form,
            "title": f"{noun} {obj.name}",
            "back": back,
            "can_delete": True,
            "delete_what": delete_what,
        },
    )


def _warn_overcommit(request: HttpRequest, instance_types: Iterable[int] | None = None) -> None:
    """Tell the administrator, with both numbers, where quotas now exceed ready capacity."""
    for warning in selectors.overcommit_warnings(instance_types):
        messages.warning(request, warning)


def _page(request: HttpRequest, rows: Any) -> Page:
    return Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))


# --- Home and capacity ------------------------------------------------------------------------------
def home(request: HttpRequest) -> HttpResponse:
    """Cluster administrators see the capacity overview; anyone else signed in goes to their teams."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if not is_cluster_admin(request.user):
        try:
            return redirect(reverse("allocations:my_teams"))
        except NoReverseMatch:
            return render(request, "console/ask_admin.html")
    return _capacity(request)


def _capacity(request: HttpRequest, live: bool = False) -> HttpResponse:
    """The capacity page: per instance type and team, use now beside quota, borrow cap and
    lend limit; ``live``: only its fragment, which the page polls (``static/js/live.js``)."""
    now = timezone.now()
    types_now = live_selectors.cluster_now(now)
    overview = [row.capacity for row in types_now]
    totals = {
        "ready_gpus": sum(row.ready_gpus for row in overview),
        "gpus_total": sum(row.gpus_total for row in overview),
        "quota_sum": sum(row.quota_sum for row in overview),
        "nodes_total": sum(row.nodes_total for row in overview),
        "nodes_ready": sum(row.nodes_ready for row in overview),
        "used_gpus": sum(row.usage.allocated for row in types_now),
        "pending_gpus": sum(row.usage.pending_gpus for row in types_now),
        "teams": Team.objects.count(),
    }
    template = "console/_capacity.html" if live else "console/capacity.html"
    context = {
        "overview": overview,
        "types_now": types_now,
        "totals": totals,
        "now": now,
        "live_interval": LIVE_INTERVAL_MS,
    }
    return render(request, template, context)


@cluster_admin_required
def capacity_live(request: HttpRequest) -> HttpResponse:
    return _capacity(request, live=True)


# --- Teams ------------------------------------------------------------------------------------------
@cluster_admin_required
def teams(request: HttpRequest) -> HttpResponse:
    rows = Team.objects.annotate(member_count=Count("memberships")).prefetch_related(
        Prefetch("quotas", queryset=TeamQuota.objects.select_related("instance_type"))
    )
    return render(request, "console/teams.html", {"teams": rows})


@cluster_admin_required
def team_create(request: HttpRequest) -> HttpResponse:
    """A new team with its settings and its quota of each instance type, in one form."""
    form = forms.TeamForm(request.POST or None)
    quotas = forms.TeamQuotaFormSet(
        request.POST or None, initial=forms.quota_formset_initial(None), prefix="quota"
    )
    if request.method == "POST" and quotas.is_valid():
        team = _save(
            request,
            form,
            services.team_create,
            quotas={q.cleaned_data["instance_type"]: q.quota_settings() for q in quotas.forms},
        )
        if team is not None:
            messages.success(request, f"Team {team.name} created.")
            _warn_overcommit(request)
            return redirect("allocations:team_detail", name=team.name)
    elif request.method == "POST":
        form.is_valid()  # show the team's errors too, not only the quotas'
    return render(
        request,
        "console/team_form.html",
        {"form": form, "quotas": quotas, "quota_rows": quotas.rows(InstanceType.objects.all())},
    )


@cluster_admin_required
def team_detail(request: HttpRequest, name: str) -> HttpResponse:
    """A team's settings and quotas (saved together), its members, and the over-commit warning."""
    team = get_object_or_404(Team, name=name)
    form = forms.TeamForm(request.POST or None, instance=Team.objects.get(pk=team.pk))
    quotas = forms.TeamQuotaFormSet(
        request.POST or None, initial=forms.quota_formset_initial(team), prefix="quota"
    )
    if request.method == "POST":
        settings_ok = form.is_valid()
        quotas_ok = quotas.is_valid()
        if settings_ok and quotas_ok:
            saved = _save_team(request, team, form, quotas)
            if saved is not None:
                messages.success(request, f"Team {saved.name} saved.")
                _warn_overcommit(request)
                return redirect("allocations:team_detail", name=saved.name)
    members = Membership.objects.filter(team=team).select_related("user").order_by("user__username")
    return render(
        request,
        "console/team_detail.html",
        {
            "team": team,
            "form": form,
            "quotas": quotas,
            "quota_rows": quotas.rows(InstanceType.objects.all()),
            "members": [(m, forms.MembershipRoleForm(instance=m, prefix=f"m{m.pk}")) for m in members],
            "member_form": forms.MembershipForm(team=team),
            "overview": [row for row in selectors.capacity_overview() if row.over_committed],
            "borrowed_lately": team_borrowed_lately_now(team.name, timezone.now()),
        },
    )


class _Refused(Exception):
    """A service refused part of a form that is saved whole: undo the parts saved before it."""


def _save_team(request: HttpRequest, team: Team, form: Any, quotas: Any) -> Team | None:
    """Save the team's settings and then each quota row, all or nothing: a refused row (its
    errors put on its form) rolls back the settings and rows saved before it, audit included."""
    try:
        with transaction.atomic():
            saved = _save(request, form, services.team_update, team=team)
            if saved is None:
                raise _Refused
            for quota_form in quotas.forms:
                try:
                    services.team_quota_set(
                        actor=request.user,
                        team=saved,
                        instance_type=quota_form.cleaned_data["instance_type"],
                        **quota_form.quota_settings(),
                    )
                except ValidationError as exc:
                    forms.apply_errors(quota_form, exc)
                    raise _Refused from exc
    except _Refused:
        return None
    return saved


@cluster_admin_required
@require_POST
def team_delete(request: HttpRequest, name: str) -> HttpResponse:
    team = get_object_or_404(Team, name=name)
    done = f"Team {name} deleted."
    if not run_and_tell(request, done, services.team_delete, actor=request.user, team=team):
        return redirect("allocations:team_detail", name=team.name)
    return redirect("allocations:console_teams")


@cluster_admin_required
@require_POST
def member_add(request: HttpRequest, name: str) -> HttpResponse:
    team = get_object_or_404(Team, name=name)
    form = forms.MembershipForm(request.POST, team=team)
    membership = _save(request, form, memberships.membership_add, team=team)
    if membership is not None:
        messages.success(request, f"{membership.user.get_username()} added to {team.name}.")
        return redirect("allocations:team_detail", name=team.name)
    for field, errors in form.errors.items():
        label = form.fields[field].label if field in form.fields else "Member"
        messages.error(request, f"{label}: {' '.join(errors)}")
    return redirect("allocations:team_detail", name=team.name)


@cluster_admin_required
@require_POST
def member_update(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    """Change a member's role (``action=save``) or remove them (``action=remove``)."""
    membership = get_object_or_404(Membership.objects.select_related("user", "team"), pk=pk, team__name=name)
    username = membership.user.get_username()
    if request.POST.get("action") == "remove":
        done = f"{username} removed from {name}."
        run_and_tell(request, done, memberships.membership_remove, actor=request.user, membership=membership)
        return redirect("allocations:team_detail", name=name)
    form = forms.MembershipRoleForm(request.POST, instance=membership, prefix=f"m{pk}")
    if _save(request, form, memberships.membership_update, membership=membership) is not None:
        messages.success(request, f"{username} is now {form.cleaned_data['role']} of {name}.")
    else:
        messages.error(request, " ".join(e for errors in form.errors.values() for e in errors))
    return redirect("allocations:team_detail", name=name)


# --- Priority classes ---------------------------------------------------------------------------------
@cluster_admin_required
def priority_classes(request: HttpRequest) -> HttpResponse:
    form = forms.PriorityClassForm(request.POST or None)
    created = _posted(
        request,
        form,
        services.priority_class_create,
        "Priority class {} created.",
        "allocations:priority_classes",
    )
    if created is not None:
        return created
    rows = PriorityClass.objects.annotate(job_count=Count("jobs"))
    return render(request, "console/priority_classes.html", {"classes": rows, "form": form})


@cluster_admin_required
def priority_class_edit(request: HttpRequest, pk: int) -> HttpResponse:
    return _edit_page(
        request,
        get_object_or_404(PriorityClass, pk=pk),
        "priority_class",
        forms.PriorityClassForm,
        services.priority_class_update,
        services.priority_class_delete,
        noun="Priority class",
        back="allocations:priority_classes",
        delete_what="this priority class (its jobs keep running with priority 0)",
    )


# --- Cluster policy and settings ----------------------------------------------------------------------
@cluster_admin_required
def policy(request: HttpRequest) -> HttpResponse:
    """The cluster policy and the cluster's own settings, two forms on one page."""
    cluster = selectors.get_cluster()
    cluster_policy = getattr(cluster, "policy", None) if cluster is not None else None
    which = request.POST.get("form") if request.method == "POST" else None
    policy_form = forms.ClusterPolicyForm(
        request.POST if which == "policy" else None, instance=cluster_policy, prefix="policy"
    )
    cluster_form = forms.ClusterForm(
        request.POST if which == "cluster" else None, instance=cluster, prefix="cluster"
    )
    if which == "policy" and _save(request, policy_form, services.cluster_policy_update) is not None:
        messages.success(request, "Cluster policy saved.")
        return redirect("allocations:policy")
    if which == "cluster" and _save(request, cluster_form, services.cluster_update) is not None:
        messages.success(request, "Cluster settings saved.")
        return redirect("allocations:policy")
    return render(
        request,
        "console/policy.html",
        {"policy_form": policy_form, "cluster_form": cluster_form, "cluster_policy": cluster_policy},
    )


# --- Nodes --------------------------------------------------------------------------------------------
@cluster_admin_required
def nodes(request: HttpRequest) -> HttpResponse:
    form = forms.NodeForm(request.POST or None, prefix="new")
    added = _posted(request, form, services.node_create, "Node {} added.", "allocations:nodes")
    if added is not None:
        return added
    state = request.GET.get("state", "")
    instance_type = request.GET.get("instance_type", "")
    rows = Node.objects.select_related("instance_type")
    if state:
        rows = rows.filter(state=state)
    if instance_type:
        rows = rows.filter(instance_type__name=instance_type)
    page = _page(request, rows)
    jobs_on = live_selectors.node_jobs([node.name for node in page])
    rows_now = []
    for node in page:
        on_node = jobs_on.get(node.name, [])
        rows_now.append((node, on_node, sum(job.gpus for job in on_node)))
    return render(
        request,
        "console/nodes.html",
        {
            "page": page,
            "rows": rows_now,  # (node, the jobs on it, GPUs they use there)
            "form": form,
            "state_form": forms.NodeStateForm(),
            "states": NodeState.choices,
            "instance_types": InstanceType.objects.all(),
            "selected_state": state,
            "selected_type": instance_type,
            "overview": selectors.capacity_overview(),
        },
    )


@cluster_admin_required
@require_POST
def node_state(request: HttpRequest, pk: int) -> HttpResponse:
    """Drain, take down or return a node to service (with a reason)."""
    node = get_object_or_404(Node, pk=pk)
    form = forms.NodeStateForm(request.POST)
    if form.is_valid():
        try:
            node = services.node_update(
                actor=request.user,
                node=node,
                state=form.cleaned_data["state"],
                reason=form.cleaned_data["reason"],
            )
        except ValidationError as exc:
            messages.error(request, f"{node.name}: {' '.join(exc.messages)}")
        else:
            messages.success(request, f"Node {node.name} is {node.state}.")
            _warn_overcommit(request, [node.instance_type_id])
    else:
        messages.error(
            request, f"{node.name}: {' '.join(e for errors in form.errors.values() for e in errors)}"
        )
    back = request.POST.get("next", "")
    # Only a path of this site: never off-site, and never a bare word, which redirect() would
    # take for a URL name and fail on (NoReverseMatch: a 500; tests/fuzz/test_form_regressions.py
    # keeps the case).
    if not back.startswith("/") or not url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}
    ):
        back = reverse("allocations:nodes")  # never send an administrator off-site
    return HttpResponseRedirect(back)


@cluster_admin_required
@require_GET
def node_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """A node: its state and since when, the jobs running on it, and its history of states."""
    node = get_object_or_404(Node.objects.select_related("instance_type"), pk=pk)
    jobs = live_selectors.node_jobs([node.name]).get(node.name, [])
    return render(
        request,
        "console/node.html",
        {
            "node": node,
            "jobs": jobs,
            "used_gpus": sum(job.gpus for job in jobs),
            "history": list(node.state_changes.all()[:PAGE_SIZE]),
            "history_limit": PAGE_SIZE,
            "state_form": forms.NodeStateForm(),
            "states": NodeState.choices,
            "now": timezone.now(),
        },
    )


@cluster_admin_required
def node_edit(request: HttpRequest, pk: int) -> HttpResponse:
    return _edit_page(
        request,
        get_object_or_404(Node, pk=pk),
        "node",
        forms.NodeForm,
        services.node_update,
        services.node_delete,
        noun="Node",
        back="allocations:nodes",
        delete_what="this node (its capacity goes with it)",
        deleted="removed",
        after=lambda node: _warn_overcommit(request, [node.instance_type_id]),
    )


# --- Instance types -----------------------------------------------------------------------------------
@cluster_admin_required
def instance_types(request: HttpRequest) -> HttpResponse:
    form = forms.InstanceTypeForm(request.POST or None)
    added = _posted(
        request, form, services.instance_type_create, "Instance type {} added.", "allocations:instance_types"
    )
    if added is not None:
        return added
    return render(
        request, "console/instance_types.html", {"overview": selectors.capacity_overview(), "form": form}
    )


@cluster_admin_required
def instance_type_edit(request: HttpRequest, pk: int) -> HttpResponse:
    return _edit_page(
        request,
        get_object_or_404(InstanceType, pk=pk),
        "instance_type",
        forms.InstanceTypeForm,
        services.instance_type_update,
        services.instance_type_delete,
        noun="Instance type",
        back="allocations:instance_types",
        delete_what="this instance type",
    )


# --- Jobs and audit -----------------------------------------------------------------------------------
@cluster_admin_required
def jobs(request: HttpRequest) -> HttpResponse:
    """Every team's jobs: searched, filtered, sorted (newest first unless told), 50 a page, with
    each pending job's queue position and estimated start.

    A bad parameter (a sort this list does not have, a team that does not exist) is named with
    its value above the list, which is drawn with the parameters that were good (status 400).
    """
    form = forms.JobFilterForm(request.GET or None)
    filters: dict[str, Any] = {}
    if request.GET:
        form.is_valid()
        data = form.cleaned_data  # the fields that were valid
        named = {name: data.get(name) for name in ("team", "instance_type", "priority_class")}
        filters = {
            "query": (data.get("q") or "").strip(),
            "submitter": (data.get("submitter") or "").strip(),
            "state": data.get("state") or "",
            "sort": data.get("sort") or "-submitted",
            **{name: value.name if value else "" for name, value in named.items()},
        }
    page = _page(request, selectors.console_jobs(**filters))
    places = _queue_places([job for job in page if job.state == JobState.PENDING])
    try:
        reverse("allocations:job_detail", kwargs={"pk": 1})
        job_links = True
    except NoReverseMatch:
        job_links = False
    return render(
        request,
        "console/jobs.html",
        {
            "form": form,
            "page": page,
            "rows": [(job, places.get(job.pk)) for job in page],
            "job_links": job_links,
            "headers": _sort_headers(filters.get("sort", "-submitted")),
            "now": timezone.now(),
        },
        status=400 if form.errors else 200,
    )


def _sort_headers(sort: str) -> dict[str, dict[str, str]]:
    """For each sortable column: the ``sort`` its header links to (the other direction when it
    is the column sorted by) and the arrow it shows."""
    key, descending = sort.lstrip("-"), sort.startswith("-")
    headers = {}
    for column in JOB_SORTS:
        if column == key:
            headers[column] = {
                "link": column if descending else f"-{column}",
                "arrow": "▼" if descending else "▲",
            }
        else:
            headers[column] = {"link": column, "arrow": ""}
    return headers


def _queue_places(pending: list[Job]) -> dict[int, QueuePlace]:
    """Position and estimated start of each pending job shown (none: no query at all)."""
    if not pending:
        return {}
    now = timezone.now()
    estimates = job_estimates(build_snapshot(now), now)
    positions = pending_positions({job.team_id for job in pending})
    return {job.pk: queue_place(job, estimates, positions) for job in pending}


@cluster_admin_required
def audit(request: HttpRequest) -> HttpResponse:
    """Who changed what, from what to what, and when: filter by object, actor and date range."""
    form = forms.AuditFilterForm(
        request.GET or None, object_types=selectors.audit_object_types(), actors=selectors.audit_actors()
    )
    filters: dict[str, Any] = {}
    if form.is_valid():
        data = form.cleaned_data
        filters = {
            "object_type": data["object_type"],
            "object_query": data["object"].strip(),
            "actor": data["actor"],
            "since": data["since"],
            "until": data["until"],
        }
    page = _page(request, selectors.audit_entries(**filters))
    return render(request, "console/audit.html", {"form": form, "page": page})


urlpatterns = [
    path("", home, name="home"),
    path("console/teams/", teams, name="console_teams"),
    path("console/teams/new/", team_create, name="team_create"),
    path("console/teams/<slug:name>/", team_detail, name="team_detail"),
    path("console/teams/<slug:name>/delete/", team_delete, name="team_delete"),
    path("console/teams/<slug:name>/members/", member_add, name="member_add"),
    path("console/teams/<slug:name>/members/<int:pk>/", member_update, name="member_update"),
    path("console/priority-classes/", priority_classes, name="priority_classes"),
    path("console/priority-classes/<int:pk>/", priority_class_edit, name="priority_class_edit"),
    path("console/policy/", policy, name="policy"),
    path("console/nodes/", nodes, name="nodes"),
    path("console/live/", capacity_live, name="capacity_live"),
    path("console/nodes/<int:pk>/", node_detail, name="node_detail"),
    path("console/nodes/<int:pk>/edit/", node_edit, name="node_edit"),
    path("console/nodes/<int:pk>/state/", node_state, name="node_state"),
    path("console/instance-types/", instance_types, name="instance_types"),
    path("console/instance-types/<int:pk>/", instance_type_edit, name="instance_type_edit"),
    path("console/jobs/", jobs, name="console_jobs"),
    path("console/audit/", audit, name="audit"),
]
