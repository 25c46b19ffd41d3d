"""The weekly report email: HTML with inline PNG charts, a plain-text alternative, the daily
figures as a CSV attachment.

MIME structure (what mail clients expect of an HTML mail with inline images)::

    multipart/mixed
      multipart/alternative
        text/plain
        multipart/related            (text/html alone when there are no images)
          text/html                  <img src="cid:trend@gpugov">
          image/png                  Content-ID: <trend@gpugov>, inline
      text/csv                       attachment
"""

from __future__ import annotations

import base64
import csv
import io
from dataclasses import dataclass, field
from email.mime.image import MIMEImage
from typing import Any
from urllib.parse import urljoin

from django.conf import settings
from django.core.mail import EmailMessage
from django.core.mail.message import SafeMIMEMultipart, SafeMIMEText
from django.template.loader import render_to_string
from django.urls import reverse

from allocations.charts import Chart

from . import charts as report_charts
from .figures import ClusterReport, DailyRow, TeamReport, Usage, hours
from .recipients import CLUSTER, Recipient, unsubscribe_token
from .render import render_pngs

CID_DOMAIN = "gpugov"


# --- Content -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Table:
    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""


@dataclass(frozen=True, slots=True)
class ReportContent:
    """Everything an email shows, formatted once for its HTML and its text."""

    subject: str
    heading: str
    period: str
    summary: tuple[tuple[str, str], ...]
    tables: tuple[Table, ...]
    recommendations: tuple[tuple[str, str], ...]
    charts: tuple[Chart, ...]
    csv_name: str
    csv_text: str
    dashboard_url: str
    notes: tuple[str, ...] = field(default_factory=tuple)


def _h(value: float) -> str:
    return f"{value:,.1f}"


def _money(value: float) -> str:
    return f"{value:,.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _absolute(path: str) -> str:
    return urljoin(settings.GPUGOV_BASE_URL.rstrip("/") + "/", path.lstrip("/"))


USAGE_HEADERS = ("GPU-h quota", "used within quota", "borrowed", "lent", "idle quota", "quota used")


def _usage_cells(usage: Usage) -> tuple[str, ...]:
    return (
        _h(usage.quota),
        _h(usage.used_within_quota),
        _h(usage.borrowed),
        _h(usage.lent),
        _h(usage.idle_quota),
        _pct(usage.quota_utilization),
    )


def _summary(usage: Usage, report: TeamReport | ClusterReport) -> list[tuple[str, str]]:
    jobs = report.jobs
    suffered = ", ".join(f"{reason} {n}" for reason, n in sorted(jobs.preemptions_suffered.items()))
    return [
        ("GPU-hours used within quota", _h(usage.used_within_quota)),
        ("GPU-hours borrowed", _h(usage.borrowed)),
        ("GPU-hours lent", _h(usage.lent)),
        ("GPU-hours of idle quota", _h(usage.idle_quota)),
        ("Quota utilization", _pct(usage.quota_utilization)),
        ("Jobs run (started)", str(jobs.started)),
        ("Jobs finished / failed", f"{jobs.finished} / {jobs.failed}"),
        ("Mean wait", hours(jobs.mean_wait)),
        ("95th percentile wait", hours(jobs.p95_wait)),
        ("Preemptions suffered", f"{jobs.preempted}" + (f" ({suffered})" if suffered else "")),
        ("Preemptions caused", str(jobs.preemptions_caused)),
        ("GPU-hours lost to preemption", _h(jobs.gpu_hours_lost)),
        ("Cost: own quota", _money(usage.cost_own)),
        ("Cost: borrowed", _money(usage.cost_borrowed)),
        ("Cost: total", _money(usage.cost)),
    ]


def _trend_table(report: TeamReport | ClusterReport) -> Table:
    rows = tuple((w.week, *_usage_cells(w.usage), _money(w.usage.cost)) for w in report.trend)
    return Table("The last 8 weeks", ("week", *USAGE_HEADERS, "cost"), rows)


def _reasons_table(report: TeamReport | ClusterReport) -> Table:
    rows = tuple((r.code, _h(r.job_hours), _h(r.gpu_hours)) for r in report.pending_reasons[:3])
    note = ""
    if not rows:
        # The history counts waiting jobs every minute; the reasons are sampled apart (and a
        # history written without samples has none): "nobody waited" only when nobody did.
        note = (
            f"Jobs waited {_h(report.pending_job_hours)} job-hours this week, but no pending reason "
            "was sampled: why they waited is not known."
            if report.pending_job_hours >= 0.05
            else "No job waited this week."
        )
    return Table(
        "Most frequent pending reasons", ("reason", "job-hours pending", "GPU-hours pending"), rows, note
    )


def daily_csv(rows: list[DailyRow]) -> str:
    """The CSV attachment: one row per local day, team and instance type (team empty: the
    cluster's capacity of that type). GPU-hours and cost in the instance type's price unit."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(
        (
            "date", "team", "instance_type", "quota_gpu_hours", "used_within_quota_gpu_hours",
            "borrowed_gpu_hours", "lent_gpu_hours", "idle_quota_gpu_hours", "cost_own", "cost_borrowed",
            "preemptions", "capacity_gpu_hours", "idle_gpu_hours", "idle_while_waiting_gpu_hours",
        )
    )  # fmt: skip
    for row in rows:
        u = row.usage
        writer.writerow(
            (
                row.day.isoformat(), row.team, row.instance_type, f"{u.quota:.2f}",
                f"{u.used_within_quota:.2f}", f"{u.borrowed:.2f}", f"{u.lent:.2f}", f"{u.idle_quota:.2f}",
                f"{u.cost_own:.2f}", f"{u.cost_borrowed:.2f}", u.preemptions, f"{row.capacity:.2f}",
                f"{row.idle:.2f}", f"{row.idle_while_waiting:.2f}",
            )
        )  # fmt: skip
    return buffer.getvalue()


def _notes(report: TeamReport | ClusterReport) -> tuple[str, ...]:
    """What the figures cover: the hours sampled, preemptions the history counted without a
    job record (their GPU-hours lost and their preemptors are not in the figures) and, for the
    cluster, recorded preemptions that name no preemptor (no team caused them)."""
    notes = [f"{report.hours_sampled:.0f} of {7 * 24} hours of the week were sampled."]
    jobs = report.jobs
    if jobs.unrecorded:
        notes.append(
            f"{jobs.unrecorded:,} of the {jobs.preempted:,} preemptions have no job record: "
            "the GPU-hours lost to preemption and the preemptions caused count the other "
            f"{jobs.preemptions_recorded:,}."
        )
    unnamed = jobs.preemptions_recorded - jobs.preemptions_caused
    if isinstance(report, ClusterReport) and unnamed > 0:
        notes.append(
            f"{unnamed:,} of the {jobs.preemptions_recorded:,} preemptions recorded name no "
            "preemptor: no team's preemptions caused count them."
        )
    return tuple(notes)


def _period(report: TeamReport | ClusterReport) -> str:
    week = report.week
    days = week.days()
    return f"{days[0]:%a %d %b} to {days[-1]:%a %d %b %Y} ({week.time_zone})"


def team_content(report: TeamReport) -> ReportContent:
    """What a team's email says."""
    types = Table(
        "By instance type",
        ("instance type", *USAGE_HEADERS, "price / GPU-h", "cost own", "cost borrowed"),
        tuple(
            (t.instance_type, *_usage_cells(t.usage), _money(t.price_per_gpu_hour), _money(t.usage.cost_own),
             _money(t.usage.cost_borrowed))
            for t in report.by_type
        ),
        "" if report.by_type else "No quota or usage this week.",
    )  # fmt: skip
    return ReportContent(
        subject=f"[gpugov] Weekly report {report.week.label}: team {report.team}",
        heading=f"{report.display_name} (team {report.team}): week {report.week.label}",
        period=_period(report),
        summary=tuple(_summary(report.usage, report)),
        tables=(types, _reasons_table(report), _trend_table(report)),
        recommendations=(),
        charts=tuple(report_charts.team_charts(report)),
        csv_name=f"gpugov-{report.team}-{report.week.label}-daily.csv",
        csv_text=daily_csv(list(report.daily)),
        dashboard_url=_absolute(reverse("allocations:dashboard_team", args=[report.team])),
        notes=_notes(report),
    )


def cluster_content(report: ClusterReport) -> ReportContent:
    """What the cluster report says: the teams' figures plus capacity and recommendations."""
    teams = Table(
        "Teams",
        ("team", *USAGE_HEADERS, "jobs run", "p95 wait", "preempted", "GPU-h lost", "cost"),
        tuple(
            (t.team, *_usage_cells(t.usage), str(t.jobs.started), hours(t.jobs.p95_wait), str(t.jobs.preempted),
             _h(t.jobs.gpu_hours_lost), _money(t.usage.cost))
            for t in report.teams
        ),
    )  # fmt: skip
    lending = Table(
        "Who lent and who borrowed most",
        ("", "team", "GPU-hours"),
        tuple(("lent", team, _h(h)) for team, h in report.top_lenders)
        # What teams borrowed beyond what teams lent came from capacity in no team's quota.
        + (
            (
                (
                    "borrowed from",
                    "unallocated capacity (in no team's quota)",
                    _h(report.borrowed_from_unallocated),
                ),
            )
            if report.borrowed_from_unallocated >= 0.005
            else ()
        )
        + tuple(("borrowed", team, _h(h)) for team, h in report.top_borrowers),
        "" if report.top_lenders or report.top_borrowers else "Nobody borrowed this week.",
    )
    summary = [
        ("GPU-hours of ready capacity", _h(report.capacity)),
        ("GPU-hours allocated", _h(report.allocated)),
        ("GPU-hours idle", _h(report.idle)),
        ("GPU-hours idle while jobs waited", _h(report.idle_while_waiting)),
        *_summary(report.usage, report),
    ]
    team_rows = [row for t in report.teams for row in t.daily]
    return ReportContent(
        subject=f"[gpugov] Weekly cluster report {report.week.label}",
        heading=f"Cluster report: week {report.week.label}",
        period=_period(report),
        summary=tuple(summary),
        tables=(teams, lending, _reasons_table(report), _trend_table(report)),
        recommendations=tuple((r.text, r.evidence) for r in report.recommendations),
        charts=tuple(report_charts.cluster_charts(report)),
        csv_name=f"gpugov-cluster-{report.week.label}-daily.csv",
        csv_text=daily_csv(
            sorted([*team_rows, *report.daily], key=lambda r: (r.day, r.team, r.instance_type))
        ),
        dashboard_url=_absolute(reverse("allocations:dashboard_cluster")),
        notes=_notes(report),
    )


# --- Rendering ---------------------------------------------------------------------------------
def cid(chart: Chart) -> str:
    return f"{chart.key}@{CID_DOMAIN}"


def chart_images(content: ReportContent) -> list[bytes] | None:
    """The content's charts as PNGs (None: no renderer; the email goes without images)."""
    return render_pngs([chart.figure for chart in content.charts])


def _context(content: ReportContent, recipient: Recipient, sources: list[str] | None) -> dict[str, Any]:
    token = unsubscribe_token(recipient.user_id, recipient.report)
    return {
        "content": content,
        "charts": [
            {"title": c.title, "src": src} for c, src in zip(content.charts, sources or [], strict=False)
        ],
        "recipient": recipient,
        "is_cluster": recipient.report == CLUSTER,
        "unsubscribe_url": _absolute(reverse("allocations:report_unsubscribe", args=[token])),
        "subscriptions_url": _absolute(reverse("allocations:report_subscriptions")),
    }


def render_html(
    content: ReportContent, recipient: Recipient, images: list[bytes] | None, *, inline: bool
) -> str:
    """The email's HTML. ``inline``: images as ``cid:`` references (the email); otherwise as
    ``data:`` URIs (the preview page, which must show exactly what is sent)."""
    sources = None
    if images is not None:
        if inline:
            sources = [f"cid:{cid(c)}" for c in content.charts]
        else:
            sources = [f"data:image/png;base64,{base64.b64encode(png).decode()}" for png in images]
    return render_to_string("email/weekly_report.html", _context(content, recipient, sources))


def render_text(content: ReportContent, recipient: Recipient) -> str:
    return render_to_string("email/weekly_report.txt", _context(content, recipient, None))


class ReportMessage(EmailMessage):
    """An EmailMessage whose body is multipart/alternative (text, related(HTML, images))."""

    def __init__(self, *, html: str, images: list[tuple[str, bytes]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.html = html
        self.images = images

    def _create_message(self, msg: Any) -> Any:
        # Django builds the text/plain part; wrap it with the HTML before the attachments.
        encoding = self.encoding or settings.DEFAULT_CHARSET
        alternative = SafeMIMEMultipart(_subtype="alternative", encoding=encoding)
        alternative.attach(msg)
        html = SafeMIMEText(self.html, "html", encoding)
        if self.images:
            related = SafeMIMEMultipart(_subtype="related", encoding=encoding)
            related.attach(html)
            for content_id, png in self.images:
                image = MIMEImage(png, "png")
                image.add_header("Content-ID", f"<{content_id}>")
                image.add_header("Content-Disposition", "inline", filename=content_id.split("@")[0] + ".png")
                related.attach(image)
            alternative.attach(related)
        else:
            alternative.attach(html)
        return self._create_attachments(alternative)


def build_message(
    content: ReportContent, recipient: Recipient, images: list[bytes] | None, *, connection: Any = None
) -> ReportMessage:
    """The email of ``content`` for ``recipient`` (``images``: ``chart_images(content)``)."""
    token = unsubscribe_token(recipient.user_id, recipient.report)
    unsubscribe = _absolute(reverse("allocations:report_unsubscribe", args=[token]))
    message = ReportMessage(
        subject=content.subject,
        body=render_text(content, recipient),
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[recipient.email],
        html=render_html(content, recipient, images, inline=True),
        images=[(cid(c), png) for c, png in zip(content.charts, images or [], strict=False)],
        # RFC 2369 / RFC 8058: mail clients offer a one-click unsubscribe.
        headers={
            "List-Unsubscribe": f"<{unsubscribe}>",
            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
        },
        connection=connection,
    )
    message.attach(content.csv_name, content.csv_text, "text/csv")
    return message
