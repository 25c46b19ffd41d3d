"""Weekly reports: sampling pending reasons, sending each week's reports once, subscriptions.

1. ``pending_reasons_sample(now=...)`` (beat, every ``PENDING_SAMPLE_MINUTES``) counts the
   pending jobs per team, instance type and pending reason: jobs lose their reason when they
   start, and the reports rank reasons over the whole week.
2. ``weekly_reports_tick(now=...)`` (beat, hourly, in UTC) sends the last complete week's
   reports once it is ``WEEKLY_REPORT_WEEKDAY`` >= ``WEEKLY_REPORT_HOUR``:00 in the cluster's
   time zone and nothing of that week was sent yet.
3. ``weekly_reports_send(week=...)`` sends a week's reports. Each (week, report, recipient)
   is claimed by inserting its ``ReportDelivery`` row in its own transaction *before* the email
   goes out: the unique constraint lets exactly one sender win, however many run at once, so a
   report goes out once. A failed send is marked failed and retried by the next run; a sender
   that dies between claim and send leaves the row ``sending`` and the email is not sent again
   (at most once, never twice).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core import mail
from django.db import IntegrityError, transaction
from django.db.models import Count, Sum
from django.utils import timezone

from allocations.choices import JobState
from allocations.models import (
    Cluster,
    Job,
    PendingReasonSample,
    ReportDelivery,
    ReportDeliveryState,
    ReportPreference,
)
from allocations.reports import email as report_email
from allocations.reports.figures import ClusterReport, weekly_figures
from allocations.reports.recipients import CLUSTER, Recipient, UnsubscribeTarget, recipients
from allocations.reports.render import render_pngs
from allocations.reports.weeks import Week, zone
from allocations.services import memberships

log = logging.getLogger(__name__)

PENDING_SAMPLE_MINUTES = 5  # allocations/schedule.py runs the sampler this often
PENDING_SAMPLE_DAYS = 9 * 7  # kept: the reported week, with room for a late resend


def cluster_time_zone() -> str:
    """The cluster's IANA zone; UTC (logged) when none is configured or the name is unknown,
    so that a bad setting delays reports by hours instead of stopping them."""
    name = Cluster.objects.filter(pk=1).values_list("time_zone", flat=True).first() or "UTC"
    try:
        zone(name)
    except ValueError as exc:
        log.warning("weekly reports use UTC: %s", exc)
        return "UTC"
    return name


# --- 1. Pending reasons ------------------------------------------------------------------------
def pending_reasons_sample(*, now: datetime) -> int:
    """Record the pending jobs' reasons for the slot ``now`` falls in; returns rows written.
    Idempotent: a slot sampled twice is written once (unique constraint)."""
    slot = now.replace(second=0, microsecond=0)
    slot -= timedelta(minutes=slot.minute % PENDING_SAMPLE_MINUTES)
    rows = (
        Job.objects.filter(state=JobState.PENDING)
        .exclude(pending_reason_code="")
        .values("team_id", "instance_type_id", "pending_reason_code")
        .annotate(jobs=Count("id"), gpus=Sum("gpus"))
        .order_by()
    )
    samples = [
        PendingReasonSample(
            at=slot,
            team_id=row["team_id"],
            instance_type_id=row["instance_type_id"],
            code=row["pending_reason_code"],
            jobs=row["jobs"],
            gpus=row["gpus"] or 0,
            minutes=PENDING_SAMPLE_MINUTES,
        )
        for row in rows
    ]
    with transaction.atomic():
        PendingReasonSample.objects.bulk_create(samples, ignore_conflicts=True)
        PendingReasonSample.objects.filter(at__lt=now - timedelta(days=PENDING_SAMPLE_DAYS)).delete()
    return len(samples)


# --- 2 and 3. Sending --------------------------------------------------------------------------
@dataclass
class SendResult:
    """What a run did: emails sent, recipients already served, failures (with reasons)."""

    week: str
    sent: list[str] = field(default_factory=list)  # "report -> email"
    already_sent: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    planned: list[str] = field(default_factory=list)  # dry run: what would be sent
    images: bool = False

    def __str__(self) -> str:
        if self.planned:
            return f"{self.week}: would send {len(self.planned)} email(s)"
        return (
            f"{self.week}: {len(self.sent)} sent, {len(self.already_sent)} already sent, "
            f"{len(self.failed)} failed"
        )


def _label(recipient: Recipient) -> str:
    return f"{recipient.report if recipient.report == CLUSTER else 'team ' + recipient.team} -> {recipient.email}"


def _claim(week: Week, recipient: Recipient, now: datetime) -> ReportDelivery | None:
    """Insert the delivery row (this sender wins), or take over a failed one; None when
    another sender has it or it was sent."""
    try:
        with transaction.atomic():
            return ReportDelivery.objects.create(
                week=week.monday,
                report=recipient.report,
                team_id=recipient.team_id,
                user_id=recipient.user_id,
                email=recipient.email,
                state=ReportDeliveryState.SENDING,
                claimed_at=now,
            )
    except IntegrityError:
        retry = ReportDelivery.objects.filter(
            week=week.monday,
            report=recipient.report,
            user_id=recipient.user_id,
            state=ReportDeliveryState.FAILED,
        )
        # A conditional UPDATE: of two senders retrying the same failure, one gets 1 row.
        if retry.update(state=ReportDeliveryState.SENDING, claimed_at=now, error="", email=recipient.email):
            return ReportDelivery.objects.get(
                week=week.monday, report=recipient.report, user_id=recipient.user_id
            )
        return None


def report_content(figures: ClusterReport, report: str, team: str) -> report_email.ReportContent:
    """The content of one report (``cluster`` or a team's) of a week's figures."""
    if report == CLUSTER:
        return report_email.cluster_content(figures)
    return report_email.team_content(figures.team(team))


def weekly_reports_send(
    *,
    week: Week,
    teams: list[str] | None = None,
    cluster: bool = True,
    dry_run: bool = False,
    now: datetime | None = None,
) -> SendResult:
    """Send ``week``'s reports (only ``teams``' and, with ``cluster``, the cluster's) to every
    subscribed recipient who has not had it yet."""
    now = now or timezone.now()
    result = SendResult(week.label)
    # 1. Who gets what; the week's figures (a constant number of queries).
    wanted = recipients(teams=teams, cluster=cluster)
    if dry_run:
        result.planned = [_label(r) for r in wanted]
        return result
    # 2. Claim before anything is sent.
    claimed: list[tuple[Recipient, ReportDelivery]] = []
    for recipient in wanted:
        delivery = _claim(week, recipient, now)
        if delivery is None:
            result.already_sent.append(_label(recipient))
        else:
            claimed.append((recipient, delivery))
    if not claimed:
        return result
    # 3. Content and charts, once per report (one browser renders them all). Should this fail,
    # the claims are released as failed (the next run retries) rather than left "sending".
    try:
        figures = weekly_figures(week)
        contents: dict[str, report_email.ReportContent] = {}
        for recipient, _ in claimed:
            if recipient.report not in contents:
                contents[recipient.report] = report_content(figures, recipient.report, recipient.team)
    except Exception as exc:
        for recipient, delivery in claimed:
            _failed(result, recipient, delivery, exc)
        raise
    images = _render_all(contents)
    result.images = any(v is not None for v in images.values())
    # 4. Send over one connection; record each outcome.
    by_report: dict[str, list[tuple[Recipient, ReportDelivery]]] = defaultdict(list)
    for recipient, delivery in claimed:
        by_report[recipient.report].append((recipient, delivery))
    connection = mail.get_connection()
    try:
        connection.open()
    except Exception as exc:  # the SMTP server is unreachable: every claim failed, retried next run
        log.exception("weekly reports %s: cannot reach the mail server", week.label)
        for recipient, delivery in claimed:
            _failed(result, recipient, delivery, exc)
        return result
    try:
        for report, pairs in by_report.items():
            for recipient, delivery in pairs:
                try:
                    message = report_email.build_message(
                        contents[report], recipient, images[report], connection=connection
                    )
                    message.send()
                except Exception as exc:  # refused by the server, or unbuildable: retried next run
                    log.exception("weekly report %s to %s failed", report, recipient.email)
                    _failed(result, recipient, delivery, exc)
                    continue
                delivery.state, delivery.sent_at = ReportDeliveryState.SENT, timezone.now()
                delivery.save(update_fields=["state", "sent_at"])
                result.sent.append(_label(recipient))
    finally:
        connection.close()
    log.info("weekly reports %s", result)
    return result


def _failed(result: SendResult, recipient: Recipient, delivery: ReportDelivery, exc: Exception) -> None:
    delivery.state, delivery.error = ReportDeliveryState.FAILED, f"{type(exc).__name__}: {exc}"[:2000]
    delivery.save(update_fields=["state", "error"])
    result.failed.append(f"{_label(recipient)}: {exc}")


def _render_all(contents: dict[str, report_email.ReportContent]) -> dict[str, list[bytes] | None]:
    """Every report's charts in one renderer call; a report without images on failure."""
    figures = [chart.figure for content in contents.values() for chart in content.charts]
    pngs = render_pngs(figures) if figures else []
    images: dict[str, list[bytes] | None] = {}
    at = 0
    for report, content in contents.items():
        n = len(content.charts)
        images[report] = None if pngs is None else pngs[at : at + n]
        at += n
    return images


def weekly_report_due(now: datetime, time_zone: str, weekday: int, hour: int) -> Week | None:
    """The week whose reports are due at ``now``: the last complete one, from ``weekday`` at
    ``hour`` o'clock local time of the following week on (a beat that was down on Monday
    catches up later in the week); None before that."""
    current = Week.containing(now, time_zone)
    local = now.astimezone(zone(time_zone))
    if (local.date(), local.hour) < (current.monday + timedelta(days=weekday), hour):
        return None
    return current.shifted(-1)


def weekly_reports_tick(*, now: datetime) -> SendResult | None:
    """What beat runs hourly: send the due week, unless its reports went out already (some
    were sent or are being sent, and none failed: failures are retried each hour)."""
    week = weekly_report_due(
        now, cluster_time_zone(), settings.WEEKLY_REPORT_WEEKDAY, settings.WEEKLY_REPORT_HOUR
    )
    if week is None:
        return None
    deliveries = ReportDelivery.objects.filter(week=week.monday)
    if deliveries.exists() and not deliveries.filter(state=ReportDeliveryState.FAILED).exists():
        return None
    return weekly_reports_send(week=week, now=now)


# --- Subscriptions -----------------------------------------------------------------------------
def report_subscriptions_update(*, user: object, team_ids: set[int], cluster_report: bool | None) -> None:
    """Set which of the user's team reports they receive (``team_ids``: on, others off) and,
    for cluster admins (``cluster_report`` not None), the cluster report."""
    with transaction.atomic():
        memberships.membership_weekly_reports_choose(user=user, team_ids=team_ids)
        if cluster_report is not None:
            ReportPreference.objects.update_or_create(user=user, defaults={"cluster_report": cluster_report})


def report_unsubscribe(*, target: UnsubscribeTarget) -> None:
    """Stop the report a signed unsubscribe link names (idempotent)."""
    if target.team is None:
        ReportPreference.objects.update_or_create(user=target.user, defaults={"cluster_report": False})
    else:
        memberships.membership_weekly_report_stop(user=target.user, team=target.team)
