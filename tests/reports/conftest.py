"""Fixtures of the report tests: a hand-worked week of history and a real SMTP server.

The fixture cluster lives in Europe/Berlin (UTC+1 in November), so week 2026-W47 runs from
2026-11-15T23:00Z to 2026-11-22T23:00Z: the hours just outside it belong to W46 and W48.
"""

from __future__ import annotations

import email
import email.policy
import socket
from datetime import UTC, datetime
from email.message import EmailMessage

import pytest
from aiosmtpd.controller import Controller

from allocations.models import (
    CapacityRollup,
    Cluster,
    InstanceType,
    JobEvent,
    PendingReasonSample,
    TeamUsageRollup,
)
from tests import factories as f


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def hour(team, instance_type, start, **sums) -> TeamUsageRollup:
    return TeamUsageRollup.objects.create(
        period="hour", start=start, team=team, instance_type=instance_type, **sums
    )


def event(job, kind, at, **fields) -> JobEvent:
    return JobEvent.objects.create(job=job, kind=kind, at=at, **fields)


@pytest.fixture
def week_of_history(personas):
    """The hand-worked week (numbers in the comments are what the assertions expect)."""
    Cluster.objects.filter(pk=1).update(time_zone="Europe/Berlin")
    p5 = personas.instance_type
    InstanceType.objects.filter(pk=p5.pk).update(price_per_gpu_hour=10)
    a, b = personas.team, personas.other_team
    # team-a: the first hour of W47 (Monday 00:00 Berlin) and its last hour (Sunday 23:00).
    hour(
        a,
        p5,
        utc(2026, 11, 15, 23),
        quota_gpu_minutes=480,
        used_within_quota_gpu_minutes=240,
        borrowed_gpu_minutes=120,
        idle_quota_gpu_minutes=240,
        preempted_reclaim=1,
    )
    hour(
        a,
        p5,
        utc(2026, 11, 22, 22),
        quota_gpu_minutes=480,
        used_within_quota_gpu_minutes=60,
        idle_quota_gpu_minutes=420,
    )
    # Just outside W47: Sunday 23:00 Berlin of W46 (fully used), and Monday 00:00 of W48.
    hour(a, p5, utc(2026, 11, 15, 22), quota_gpu_minutes=480, used_within_quota_gpu_minutes=480)
    hour(a, p5, utc(2026, 11, 22, 23), quota_gpu_minutes=480, used_within_quota_gpu_minutes=480)
    # team-b lends 2 GPUs for an hour of W47 and uses none of its quota in W44 to W47.
    hour(
        b, p5, utc(2026, 11, 16, 10), quota_gpu_minutes=480, lent_gpu_minutes=120, idle_quota_gpu_minutes=360
    )
    for monday in (utc(2026, 10, 26, 12), utc(2026, 11, 2, 12), utc(2026, 11, 9, 12)):
        hour(b, p5, monday, quota_gpu_minutes=480, idle_quota_gpu_minutes=480)
    CapacityRollup.objects.create(
        period="hour",
        start=utc(2026, 11, 15, 23),
        instance_type=p5,
        minutes=60,
        capacity_gpu_minutes=960,
        allocated_gpu_minutes=360,
        idle_gpu_minutes=600,
        idle_while_waiting_gpu_minutes=120,
    )
    # Jobs. job1 (2 GPUs): waits 30 min, runs 2 h, preempted by team-b, requeued, waits 30 min.
    job1 = f.make_job(a, p5, 2, submitted_at=utc(2026, 11, 16, 8))
    preemptor = f.make_job(b, p5, 8, submitted_at=utc(2026, 11, 16, 10))
    event(job1, "submitted", utc(2026, 11, 16, 8))
    event(job1, "started", utc(2026, 11, 16, 8, 30))
    event(job1, "preempted", utc(2026, 11, 16, 10, 30), reason="reclaim", preemptor=preemptor)
    event(job1, "requeued", utc(2026, 11, 16, 10, 30), reason="reclaim")
    event(job1, "started", utc(2026, 11, 16, 11))
    event(job1, "finished", utc(2026, 11, 16, 12))
    # job2 (1 GPU): submitted in W46, starts 6 h later in W47, ends in W48.
    job2 = f.make_job(a, p5, 1, submitted_at=utc(2026, 11, 15, 20))
    event(job2, "submitted", utc(2026, 11, 15, 20))
    event(job2, "started", utc(2026, 11, 16, 2))
    event(job2, "finished", utc(2026, 11, 23, 1))
    # job3: started in W46, finished in W47 (counts as finished, not as started).
    job3 = f.make_job(a, p5, 1, submitted_at=utc(2026, 11, 14))
    event(job3, "started", utc(2026, 11, 14, 1))
    event(job3, "finished", utc(2026, 11, 17))
    # Pending reasons: 5-minute samples in the week, and one before it (ignored).
    for at, code, jobs, gpus in [
        (utc(2026, 11, 16, 9), "borrow-limit", 2, 4),
        (utc(2026, 11, 16, 9, 5), "borrow-limit", 1, 2),
        (utc(2026, 11, 16, 9), "waiting-for-quota", 1, 1),
        (utc(2026, 11, 15, 22), "borrow-limit", 50, 50),
    ]:
        PendingReasonSample.objects.create(
            at=at, team=a, instance_type=p5, code=code, jobs=jobs, gpus=gpus, minutes=5
        )
    return personas


class Inbox:
    """An aiosmtpd handler that keeps what it receives."""

    def __init__(self) -> None:
        self.received: list[tuple[list[str], bytes]] = []

    async def handle_DATA(self, server, session, envelope) -> str:
        self.received.append((list(envelope.rcpt_tos), envelope.content))
        return "250 Message accepted for delivery"

    @property
    def messages(self) -> list[EmailMessage]:
        return [email.message_from_bytes(raw, policy=email.policy.default) for _, raw in self.received]

    def to(self, address: str) -> list[EmailMessage]:
        return [m for m in self.messages if m["To"] == address]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def smtp(settings):
    """A real SMTP server on localhost; Django's SMTP backend pointed at it."""
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    settings.EMAIL_USE_TLS = False
    settings.GPUGOV_BASE_URL = "https://gpugov.example.org"
    try:
        yield inbox
    finally:
        controller.stop()


@pytest.fixture
def no_charts(settings):
    """Emails without images: no browser start (the image tests use the real renderer)."""
    settings.REPORT_CHART_BROWSER = "off"
