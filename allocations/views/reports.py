"""Weekly report pages: the list of reports, the preview of any past week's email, send now,
the user's report settings and the unsubscribe link of the emails.

* preview: cluster admins any report, team members (any role) their team's; another team's
  report answers 404 like a missing one. The page is the email's HTML itself, with its images
  as ``data:`` URIs instead of ``cid:`` references, for the viewing user as its recipient;
* unsubscribe: the emails' signed link, without login: GET shows what it stops, POST stops it
  (also the RFC 8058 one-click POST of mail clients, hence no CSRF token: the signed token is
  the credential and it only ever turns a report off).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import path, reverse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from allocations.access import cluster_admin_required, get_visible_or_404, is_cluster_admin, visible_teams
from allocations.models import Membership, ReportPreference, Team
from allocations.reports import email as report_email
from allocations.reports import services as report_service
from allocations.reports.figures import TREND_WEEKS, weekly_figures
from allocations.reports.recipients import CLUSTER, Recipient, read_unsubscribe_token, team_key
from allocations.reports.weeks import Week, WeekOutOfRange

RECENT_WEEKS = 8


def _bad_request(request: HttpRequest, error: str) -> HttpResponse:
    return render(request, "reports/error.html", {"error": error}, status=400)


def _past_week(text: str) -> Week:
    """A week that has ended, in the cluster's calendar; ValueError names ``week`` (a
    WeekOutOfRange when the week, or the trend before it that the report charts, falls outside
    the calendar Python can compute)."""
    week = Week.parse(text, report_service.cluster_time_zone(), weeks_before=TREND_WEEKS - 1)
    if week.end > timezone.now():
        raise ValueError(f"week: {text!r} has not ended yet")
    return week


@login_required
def reports_index(request: HttpRequest) -> HttpResponse:
    """The reports the user may preview, for the recent weeks; send now for cluster admins."""
    last = Week.last_complete(timezone.now(), report_service.cluster_time_zone())
    weeks = [last.shifted(-i) for i in range(RECENT_WEEKS)]
    context: dict[str, Any] = {
        "weeks": weeks,
        "teams": list(visible_teams(request.user).order_by("name")),
        "show_cluster": is_cluster_admin(request.user),
    }
    return render(request, "reports/index.html", context)


def _preview(request: HttpRequest, week_text: str, report: str, team: Team | None) -> HttpResponse:
    try:
        week = _past_week(week_text)
    except WeekOutOfRange as exc:
        raise Http404(str(exc)) from exc  # no such report can exist, as for a missing team
    except ValueError as exc:
        return _bad_request(request, str(exc))
    figures = weekly_figures(week)
    content = report_service.report_content(figures, report, team.name if team else "")
    recipient = Recipient(
        report,
        team.name if team else "",
        team.pk if team else None,
        request.user.pk,
        request.user.get_username(),
        request.user.email,
    )
    images = report_email.chart_images(content)
    return HttpResponse(report_email.render_html(content, recipient, images, inline=False))


@cluster_admin_required
def cluster_preview(request: HttpRequest, week: str) -> HttpResponse:
    return _preview(request, week, CLUSTER, None)


@login_required
def team_preview(request: HttpRequest, week: str, team: str) -> HttpResponse:
    team_obj = get_visible_or_404(request.user, Team.objects.all(), name=team)
    return _preview(request, week, team_key(team_obj.pk), team_obj)


@cluster_admin_required
@require_POST
def send_now(request: HttpRequest) -> HttpResponse:
    """Send a past week's reports now (``report``: ``all``, ``cluster`` or a team's name);
    recipients who already had it are not sent it again."""
    report = request.POST.get("report", "all")
    try:
        week = _past_week(request.POST.get("week", ""))
        if report not in ("all", CLUSTER) and not Team.objects.filter(name=report).exists():
            raise ValueError(f"report: no team is named {report!r}")
    except ValueError as exc:
        return _bad_request(request, str(exc))
    result = report_service.weekly_reports_send(
        week=week,
        teams={"all": None, CLUSTER: []}.get(report, [report]),
        cluster=report in ("all", CLUSTER),
    )
    messages.success(request, f"Weekly reports {result}.")
    for failure in result.failed:
        messages.error(request, f"Not sent: {failure}")
    return HttpResponseRedirect(reverse("allocations:reports"))


@login_required
@require_http_methods(["GET", "POST"])
def subscriptions(request: HttpRequest) -> HttpResponse:
    """Which weekly reports the user receives: each of their teams', and the cluster's."""
    user = request.user
    memberships = list(Membership.objects.filter(user=user).select_related("team").order_by("team__name"))
    admin = is_cluster_admin(user)
    if request.method == "POST":
        chosen = set(request.POST.getlist("team"))
        unknown = chosen - {str(m.team_id) for m in memberships}
        if unknown:
            return _bad_request(request, f"team: {sorted(unknown)[0]!r} is not one of your teams")
        report_service.report_subscriptions_update(
            user=user,
            team_ids={int(t) for t in chosen},
            cluster_report=(request.POST.get("cluster") == "on") if admin else None,
        )
        messages.success(request, "Report settings saved.")
        return HttpResponseRedirect(reverse("allocations:report_subscriptions"))
    preference = ReportPreference.objects.filter(user=user).first()
    context = {
        "memberships": memberships,
        "show_cluster": admin,
        "cluster_report": preference.cluster_report if preference else True,
        "has_email": bool(user.email),
    }
    return render(request, "reports/subscriptions.html", context)


@csrf_exempt
@require_http_methods(["GET", "POST"])
def unsubscribe(request: HttpRequest, token: str) -> HttpResponse:
    try:
        target = read_unsubscribe_token(token)
    except ValueError as exc:
        return _bad_request(request, str(exc))
    if request.method == "POST":
        report_service.report_unsubscribe(target=target)
        return render(request, "reports/unsubscribe.html", {"target": target, "done": True})
    return render(request, "reports/unsubscribe.html", {"target": target, "done": False})


urlpatterns = [
    path("reports/", reports_index, name="reports"),
    path("reports/send/", send_now, name="reports_send"),
    path("reports/settings/", subscriptions, name="report_subscriptions"),
    path("reports/unsubscribe/<str:token>/", unsubscribe, name="report_unsubscribe"),
    path("reports/<str:week>/cluster/", cluster_preview, name="report_preview_cluster"),
    path("reports/<str:week>/teams/<slug:team>/", team_preview, name="report_preview_team"),
]
