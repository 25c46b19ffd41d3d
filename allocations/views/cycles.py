"""Allocation cycles for cluster administrators: how long each phase took, what each cycle
started, preempted and corrected, and the backend's outages."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.db.models import Avg, Max, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import path

from allocations.access import cluster_admin_required
from allocations.models import CycleRun

PAGE_SIZE = 50
PHASES = ("sync", "snapshot", "engine", "apply", "record")
# ?show=problems: cycles with an error, a correction or a backend outage.
PROBLEMS = Q(ok=False) | Q(corrections__gt=0) | Q(backend_outage=True)


@cluster_admin_required
def cycles(request: HttpRequest) -> HttpResponse:
    """The newest cycles first, with the duration of each phase; averages of the last hundred."""
    problems_only = request.GET.get("show") == "problems"
    runs = CycleRun.objects.filter(PROBLEMS) if problems_only else CycleRun.objects.all()
    page = Paginator(runs.order_by("-started_at", "-id"), PAGE_SIZE).get_page(request.GET.get("page"))
    recent = CycleRun.objects.order_by("-started_at", "-id").values_list("pk", flat=True)[:100]
    summary = CycleRun.objects.filter(pk__in=list(recent)).aggregate(
        **{f"avg_{phase}": Avg(f"{phase}_ms") for phase in PHASES},
        **{f"max_{phase}": Max(f"{phase}_ms") for phase in PHASES},
    )
    phases = [
        {"name": phase, "avg": summary[f"avg_{phase}"], "max": summary[f"max_{phase}"]} for phase in PHASES
    ]
    return render(
        request,
        "cycles/list.html",
        {
            "page": page,
            "phases": phases,
            "problems_only": problems_only,
            "problem_count": CycleRun.objects.filter(PROBLEMS).count(),
        },
    )


@cluster_admin_required
def cycle_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One cycle: its phases, counts, corrections (one line each) and errors."""
    run = get_object_or_404(CycleRun, pk=pk)
    phases = [(phase, getattr(run, f"{phase}_ms")) for phase in PHASES]
    total = sum(ms for _, ms in phases)
    return render(request, "cycles/detail.html", {"run": run, "phases": phases, "total_ms": total})


urlpatterns = [
    path("console/cycles/", cycles, name="cycles"),
    path("console/cycles/<int:pk>/", cycle_detail, name="cycle_detail"),
]
