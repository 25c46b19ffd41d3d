"""The what-if policy lab (issue 10), for cluster administrators.

Drafts are edited with the console's own forms, bound to unsaved rows built from the draft's
body (``whatif.drafts``), so a draft meets exactly the rules of the live policy. A run's page
polls ``whatif_run_status`` (JSON) for its progress bar and shows the results once done.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_POST

from allocations.access import cluster_admin_required
from allocations.forms import policy as policy_forms
from allocations.models import InstanceType, PolicyDraft, PriorityClass, Team, WhatIfRun, WhatIfRunState
from allocations.views.dashboards import plotly_url
from allocations.whatif import charts, figures, runs, services
from allocations.whatif import drafts as bodies
from allocations.whatif.forms import DraftNameForm, RunForm

RECENT_RUNS = 20


# --- The lab's home: drafts and runs ---------------------------------------------------------------
@cluster_admin_required
def index(request: HttpRequest) -> HttpResponse:
    name_form = DraftNameForm(request.POST or None, prefix="draft")
    if request.method == "POST" and name_form.is_valid():
        try:
            draft = services.draft_create(actor=request.user, name=name_form.cleaned_data["name"])
        except ValidationError as exc:
            policy_forms.apply_errors(name_form, exc)
        else:
            messages.success(request, f"Draft {draft.name} created: a copy of the live policy.")
            return redirect("allocations:whatif_draft", pk=draft.pk)
    return _index(request, name_form, RunForm(prefix="run"))


def _index(
    request: HttpRequest, name_form: DraftNameForm, run_form: RunForm, status: int = 200
) -> HttpResponse:
    drafts = PolicyDraft.objects.select_related("created_by").order_by("name")
    recent = (
        WhatIfRun.objects.select_related("created_by").prefetch_related("drafts").defer("scenario", "results")
    )
    return render(
        request,
        "whatif/index.html",
        {"drafts": drafts, "runs": recent[:RECENT_RUNS], "name_form": name_form, "run_form": run_form},
        status=status,
    )


# --- A draft -----------------------------------------------------------------------------------
def _draft(pk: int) -> PolicyDraft:
    draft = get_object_or_404(PolicyDraft, pk=pk)
    try:
        bodies.check_body(draft.body)
    except bodies.BodyError as exc:
        raise Http404(f"Draft {draft.name} is not a complete policy: {exc}") from exc
    return draft


def _class_form(body: dict[str, Any], name: str, data: Any = None) -> policy_forms.PriorityClassForm:
    form = policy_forms.PriorityClassForm(
        data, instance=bodies.priority_class_row(body, name), prefix=f"pc-{name}"
    )
    form.fields["name"].disabled = True
    form.fields["description"].disabled = True
    return form


def _new_class_row(name: Any) -> PriorityClass:
    """The unsaved row a class added to the draft is bound to: a class removed from the draft
    but still live may come back (it is that row, not a duplicate of it)."""
    live = PriorityClass.objects.filter(name=name).values_list("pk", flat=True).first() if name else None
    row = PriorityClass(pk=live)
    row._state.adding = live is None
    return row


@cluster_admin_required
def draft_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """The draft's diff from the live policy, its cluster policy and priority classes, and
    links to its teams. ``form`` says which of the page's forms was posted."""
    draft = _draft(pk)
    body = draft.body
    which = request.POST.get("form") if request.method == "POST" else None
    policy_form = policy_forms.ClusterPolicyForm(
        request.POST if which == "policy" else None, instance=bodies.cluster_policy_row(body), prefix="policy"
    )
    new_class = policy_forms.PriorityClassForm(
        request.POST if which == "new-class" else None,
        instance=_new_class_row(request.POST.get("new-class-name") if which == "new-class" else None),
        prefix="new-class",
    )
    new_class.fields["description"].disabled = True
    name_form = DraftNameForm(
        request.POST if which == "name" else None, prefix="name", initial={"name": draft.name}
    )
    class_forms = [
        _class_form(body, pc["name"], request.POST if which == f"class:{pc['name']}" else None)
        for pc in body["priority_classes"]
    ]
    new_body = None
    if which == "policy" and policy_form.is_valid():
        new_body = bodies.with_cluster_policy(body, policy_form.service_values())
    elif which == "new-class" and new_class.is_valid():
        name = new_class.cleaned_data["name"]
        if any(pc["name"] == name for pc in body["priority_classes"]):
            new_class.add_error("name", f"The draft already has a priority class named {name!r}.")
        else:
            new_body = bodies.with_priority_class(
                body,
                name,
                new_class.cleaned_data["weight"],
                new_class.cleaned_data.get("min_runtime_s"),
                new_class.cleaned_data.get("preemption_grace_s"),
            )
    elif which and which.startswith("class:"):
        name = which.split(":", 1)[1]
        form = next((f for f in class_forms if f.instance.name == name), None)
        if form is None:
            raise Http404(f"The draft has no priority class {name!r}.")
        if request.POST.get("action") == "delete":
            new_body = bodies.with_priority_class(body, name, None)
        elif form.is_valid():
            new_body = bodies.with_priority_class(
                body,
                name,
                form.cleaned_data["weight"],
                form.cleaned_data.get("min_runtime_s"),
                form.cleaned_data.get("preemption_grace_s"),
            )
    elif which == "name" and name_form.is_valid():
        try:
            services.draft_rename(draft=draft, name=name_form.cleaned_data["name"])
        except ValidationError as exc:
            policy_forms.apply_errors(name_form, exc)
        else:
            messages.success(request, f"Draft renamed to {name_form.cleaned_data['name']}.")
            return redirect("allocations:whatif_draft", pk=draft.pk)
    if new_body is not None:
        services.draft_update(draft=draft, body=new_body)
        messages.success(request, f"Draft {draft.name} saved.")
        return redirect("allocations:whatif_draft", pk=draft.pk)
    return render(
        request,
        "whatif/draft.html",
        {
            "draft": draft,
            "changes": bodies.diff(body),
            "policy_form": policy_form,
            "class_forms": class_forms,
            "new_class": new_class,
            "name_form": name_form,
            "teams": body["teams"],
        },
        status=400 if which else 200,
    )


@cluster_admin_required
def draft_team(request: HttpRequest, pk: int, name: str) -> HttpResponse:
    """One team of the draft: the console's team form and quota formset, saved into the draft."""
    draft = _draft(pk)
    team = bodies.team_row(draft.body, name)
    if team is None:
        raise Http404(f"The draft has no team {name!r}.")
    # A draft holds what the engine decides with; a team's limits are checked at submission.
    form = policy_forms.TeamForm(request.POST or None, instance=team, limits=False)
    form.fields["name"].disabled = True  # a renamed team would be another team
    instance_types = list(InstanceType.objects.order_by("name"))
    quotas = policy_forms.TeamQuotaFormSet(
        request.POST or None, initial=bodies.quota_initial(draft.body, name, instance_types), prefix="quota"
    )
    if request.method == "POST":
        settings_ok, quotas_ok = form.is_valid(), quotas.is_valid()
        if settings_ok and quotas_ok:
            values = form.service_values()
            new_quotas = {q.cleaned_data["instance_type"].name: q.quota_settings() for q in quotas.forms}
            services.draft_update(draft=draft, body=bodies.with_team(draft.body, name, values, new_quotas))
            messages.success(request, f"Team {name} saved in draft {draft.name}.")
            return redirect("allocations:whatif_draft", pk=draft.pk)
    quota_rows = quotas.rows(instance_types)
    return render(
        request,
        "whatif/draft_team.html",
        {"draft": draft, "team": team, "form": form, "quotas": quotas, "quota_rows": quota_rows},
        status=400 if request.method == "POST" else 200,
    )


@cluster_admin_required
@require_POST
def draft_apply(request: HttpRequest, pk: int) -> HttpResponse:
    draft = _draft(pk)
    try:
        changes = services.draft_apply(actor=request.user, draft=draft)
    except services.DraftRefused as exc:
        for message in exc.messages:
            messages.error(request, f"Not applied: {message}")
        return redirect("allocations:whatif_draft", pk=draft.pk)
    if changes:
        messages.success(
            request,
            f"Draft {draft.name} is now the live policy: {len(changes)} change(s), each in the audit trail.",
        )
    else:
        messages.info(request, f"Draft {draft.name} is the same as the live policy: nothing changed.")
    return redirect("allocations:whatif_draft", pk=draft.pk)


@cluster_admin_required
@require_POST
def draft_delete(request: HttpRequest, pk: int) -> HttpResponse:
    draft = get_object_or_404(PolicyDraft, pk=pk)
    services.draft_delete(draft=draft)
    messages.success(request, f"Draft {draft.name} deleted.")
    return redirect("allocations:whatif")


# --- Runs --------------------------------------------------------------------------------------
@cluster_admin_required
@require_POST
def run_start(request: HttpRequest) -> HttpResponse:
    form = RunForm(request.POST, prefix="run")
    if form.is_valid():
        try:
            run = services.whatif_run_create(
                actor=request.user,
                drafts=form.cleaned_data["drafts"],
                window_start=form.cleaned_data["window_start"],
                window_end=form.cleaned_data["window_end"],
                time_step=form.cleaned_data["time_step"],
            )
        except ValidationError as exc:
            policy_forms.apply_errors(form, exc)
        else:
            return redirect("allocations:whatif_run", pk=run.pk)
    return _index(request, DraftNameForm(prefix="draft"), form, status=400)


def _run(pk: int, *, scenario: bool = False) -> WhatIfRun:
    """The run; its scenario (megabytes for a long window) only when asked for."""
    rows = WhatIfRun.objects.prefetch_related("drafts")
    return get_object_or_404(rows if scenario else rows.defer("scenario"), pk=pk)


def _status(run: WhatIfRun) -> dict[str, Any]:
    return {
        "id": run.pk,
        "state": run.state,
        "progress": round(run.progress, 4),
        "message": run.progress_message,
        "error": run.error,
        "cancel_requested": run.cancel_requested,
        "finished": run.state in (WhatIfRunState.DONE, WhatIfRunState.FAILED, WhatIfRunState.CANCELLED),
    }


@cluster_admin_required
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = _run(pk)
    context: dict[str, Any] = {"run": run, "status": _status(run), "late_teams": _late_teams(run)}
    policies = run.results.get("policies") if run.state == WhatIfRunState.DONE else None
    if policies:
        drafts = policies[1:]
        chart_list = charts.run_charts(run.window_start, policies)
        comparisons = {c["key"]: c["jobs"] for c in run.results.get("comparisons", [])}
        context.update(
            {
                "policies": policies,
                "summary_rows": _rows(CLUSTER_FIGURES, [p["cluster"] for p in policies]),
                "churn_warnings": [
                    (p["key"], warning)
                    for p in policies
                    if (warning := figures.churn_warning(p["name"], p["cluster"])) is not None
                ],
                "team_rows": [
                    (team, _rows(_team_figures(policies), [p["teams"].get(team, {}) for p in policies]))
                    for team in sorted({t for p in policies for t in p["teams"]})
                ],
                "class_rows": [
                    (name, _rows(CLASS_FIGURES, [p["priority_classes"].get(name, {}) for p in policies]))
                    for name in sorted({c for p in policies for c in p["priority_classes"]})
                ],
                "comparisons": [(p, _linked(comparisons.get(p["key"], []))) for p in drafts],
                "charts": [
                    (chart, reverse("allocations:whatif_run_csv", kwargs={"pk": run.pk, "chart": chart.key}))
                    for chart in chart_list
                ],
                "charts_data": {chart.key: chart.figure for chart in chart_list},
                "plotly_url": plotly_url(),
            }
        )
    return render(request, "whatif/run.html", context)


def _linked(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The compared jobs, each with the URL of its job page (a replayed job's id is its pk)."""
    return [
        {**job, "url": reverse("allocations:job_detail", kwargs={"pk": int(job["id"])})}
        if str(job["id"]).isdigit()
        else job
        for job in jobs
    ]


def _late_teams(run: WhatIfRun) -> list[Team]:
    """The run's teams created after its window's start: the replay gives each its quota from
    the window's start, as if it had existed all along, so the page says so."""
    names = {team["name"] for policy in run.policies for team in policy.get("body", {}).get("teams", [])}
    return list(Team.objects.filter(name__in=names, created_at__gt=run.window_start).order_by("created_at"))


def _hours(seconds: Any) -> str:
    seconds = float(seconds or 0)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _gpu_hours(value: Any) -> str:
    return f"{float(value or 0):,.1f}"


def _or_dash(show: Any) -> Any:
    """``show`` for a figure a result may lack (one stored by an older release, or a share of no
    preemptions): a dash instead of a zero that would look measured."""
    return lambda v: "\u2013" if v is None else show(v)


# (key, label, format) of the figures in the results tables.
CLUSTER_FIGURES = [
    ("utilization", "Utilization", lambda v: f"{100 * float(v or 0):.1f}%"),
    ("idle_while_waiting_gpu_hours", "GPU-hours idle while jobs waited", _gpu_hours),
    ("wait_mean_s", "Mean wait", _hours),
    ("wait_p95_s", "p95 wait", _hours),
    ("preemptions", "Preemptions", lambda v: str(v or 0)),
    ("lost_gpu_hours", "GPU-hours lost to preemption", _gpu_hours),
    ("preemptions_per_job", "Preemptions per job", _or_dash(lambda v: f"{float(v):.2f}")),
    (
        "short_victims_share",
        "Victims that had run under 10 min",
        _or_dash(lambda v: f"{100 * float(v):.0f}%"),
    ),
    ("allocated_gpu_hours", "GPU-hours allocated", _gpu_hours),
    ("capacity_gpu_hours", "GPU-hours of capacity", _gpu_hours),
    ("cost", "Cost ($)", lambda v: f"{float(v or 0):,.2f}"),
]
TEAM_FIGURES = [
    ("wait_mean_s", "Mean wait", _hours),
    ("wait_p95_s", "p95 wait", _hours),
    ("gpu_hours", "GPU-hours used", _gpu_hours),
    ("borrowed_gpu_hours", "GPU-hours borrowed", _gpu_hours),
    # Fairness over time (docs/fairness.md): 0 under a policy without a half-life.
    ("borrowed_lately_gpu_hours", "GPU-hours borrowed lately (decayed, at the end)", _gpu_hours),
    ("lent_gpu_hours", "GPU-hours lent", _gpu_hours),
    ("preemptions", "Preemptions", lambda v: str(v or 0)),
    ("lost_gpu_hours", "GPU-hours lost", _gpu_hours),
    ("cost", "Cost ($)", lambda v: f"{float(v or 0):,.2f}"),
]
# docs/resources.md: beside GPU-hours, the vCPU-hours and memory GiB-hours used, shown only when
# the run's cluster counts them (``figures.RESOURCE_HOURS``).
RESOURCE_FIGURES = [
    ("vcpu_hours", "vCPU-hours used", lambda v: f"{float(v or 0):,.1f}"),
    ("memory_gib_hours", "Memory GiB-hours used", lambda v: f"{float(v or 0):,.1f}"),
]


def _team_figures(policies: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
    """The per-team rows: GPU figures, and each resource's hours after GPU-hours used where a
    replay counted them."""
    keys = {key for p in policies for team in p["teams"].values() for key in team}
    shown = [row for row in RESOURCE_FIGURES if row[0] in keys]
    at = next(i for i, row in enumerate(TEAM_FIGURES) if row[0] == "gpu_hours") + 1
    return [*TEAM_FIGURES[:at], *shown, *TEAM_FIGURES[at:]]


CLASS_FIGURES = [
    ("starts", "Starts", lambda v: str(v or 0)),
    ("wait_mean_s", "Mean wait", _hours),
    ("wait_p95_s", "p95 wait", _hours),
]


def _rows(figures: list[tuple[str, str, Any]], columns: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(label, [the figure under each policy]) for each figure."""
    return [(label, [show(column.get(key)) for column in columns]) for key, label, show in figures]


@cluster_admin_required
def run_status(request: HttpRequest, pk: int) -> JsonResponse:
    run = get_object_or_404(WhatIfRun.objects.defer("scenario", "results", "policies"), pk=pk)
    return JsonResponse(_status(run))


@cluster_admin_required
@require_POST
def run_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    run = services.whatif_run_cancel(run=_run(pk))
    if run.state == WhatIfRunState.CANCELLED:
        messages.info(request, "Run cancelled.")
    elif run.state == WhatIfRunState.RUNNING:
        messages.info(request, "The run stops at its next progress check.")
    else:
        messages.info(request, f"The run is {run.state}: nothing to cancel.")
    return redirect("allocations:whatif_run", pk=run.pk)


@cluster_admin_required
def run_scenario(request: HttpRequest, pk: int, key: str) -> HttpResponse:
    """The scenario replayed under policy ``key`` (``live`` or ``draft-<id>``) as YAML."""
    run = _run(pk, scenario=True)
    try:
        text = runs.export_yaml(run, key)
    except KeyError as exc:
        raise Http404(f"Run {run.pk} has no scenario for {key!r} (yet).") from exc
    response = HttpResponse(text, content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="whatif-{run.pk}-{key}.yaml"'
    return response


@cluster_admin_required
def run_csv(request: HttpRequest, pk: int, chart: str) -> HttpResponse:
    run = _run(pk)
    policies = run.results.get("policies")
    if run.state != WhatIfRunState.DONE or not policies or chart not in charts.CHART_KEYS:
        raise Http404(f"Run {run.pk} has no chart {chart!r}.")
    found = next(c for c in charts.run_charts(run.window_start, policies) if c.key == chart)
    response = HttpResponse(found.to_csv(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="whatif-{run.pk}-{chart}.csv"'
    return response


@cluster_admin_required
@require_POST
def run_delete(request: HttpRequest, pk: int) -> HttpResponse:
    services.whatif_run_delete(run=_run(pk))
    messages.success(request, "Run deleted.")
    return redirect("allocations:whatif")


urlpatterns = [
    path("whatif/", index, name="whatif"),
    path("whatif/drafts/<int:pk>/", draft_detail, name="whatif_draft"),
    path("whatif/drafts/<int:pk>/teams/<slug:name>/", draft_team, name="whatif_draft_team"),
    path("whatif/drafts/<int:pk>/apply/", draft_apply, name="whatif_draft_apply"),
    path("whatif/drafts/<int:pk>/delete/", draft_delete, name="whatif_draft_delete"),
    path("whatif/runs/", run_start, name="whatif_run_start"),
    path("whatif/runs/<int:pk>/", run_detail, name="whatif_run"),
    path("whatif/runs/<int:pk>/status/", run_status, name="whatif_run_status"),
    path("whatif/runs/<int:pk>/cancel/", run_cancel, name="whatif_run_cancel"),
    path("whatif/runs/<int:pk>/delete/", run_delete, name="whatif_run_delete"),
    path("whatif/runs/<int:pk>/scenario/<slug:key>.yaml", run_scenario, name="whatif_run_scenario"),
    path("whatif/runs/<int:pk>/charts/<slug:chart>.csv", run_csv, name="whatif_run_csv"),
]
