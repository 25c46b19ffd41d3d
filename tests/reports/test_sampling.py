"""Pending-reason samples and the beat entries of the weekly reports."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings

from allocations.models import PendingReasonSample
from allocations.reports.services import PENDING_SAMPLE_DAYS, pending_reasons_sample
from allocations.tasks import sample_pending_reasons, send_weekly_reports
from tests import factories as f

AT = datetime(2026, 11, 16, 9, 7, 31, tzinfo=UTC)


def test_pending_jobs_are_counted_by_team_type_and_reason(personas):
    a, b, p5 = personas.team, personas.other_team, personas.instance_type
    f.make_job(a, p5, 4, pending_reason_code="borrow-limit")
    f.make_job(a, p5, 2, pending_reason_code="borrow-limit")
    f.make_job(a, p5, 1, pending_reason_code="fragmented")
    f.make_job(b, p5, 8, pending_reason_code="borrow-limit")
    f.make_job(b, p5, 8)  # no reason yet (never seen by a cycle): not counted
    f.make_job(a, p5, 8, state="running", pending_reason_code="")
    assert pending_reasons_sample(now=AT) == 3
    rows = {
        (s.team.name, s.code): (s.jobs, s.gpus, s.minutes, s.at)
        for s in PendingReasonSample.objects.select_related("team")
    }
    slot = datetime(2026, 11, 16, 9, 5, tzinfo=UTC)
    assert rows == {
        ("team-a", "borrow-limit"): (2, 6, 5, slot),
        ("team-a", "fragmented"): (1, 1, 5, slot),
        ("team-b", "borrow-limit"): (1, 8, 5, slot),
    }
    # The same slot again writes nothing new; the next slot does.
    pending_reasons_sample(now=AT + timedelta(minutes=1))
    assert PendingReasonSample.objects.count() == 3
    pending_reasons_sample(now=AT + timedelta(minutes=5))
    assert PendingReasonSample.objects.count() == 6


def test_old_samples_are_pruned(personas):
    f.make_job(personas.team, personas.instance_type, 1, pending_reason_code="borrow-limit")
    pending_reasons_sample(now=AT - timedelta(days=PENDING_SAMPLE_DAYS + 1))
    pending_reasons_sample(now=AT)
    assert list(PendingReasonSample.objects.values_list("at", flat=True)) == [AT.replace(minute=5, second=0)]


def test_beat_runs_the_sampler_and_the_weekly_check(personas):
    schedule = settings.CELERY_BEAT_SCHEDULE
    assert schedule["pending-reasons"]["task"] == sample_pending_reasons.name
    assert schedule["pending-reasons"]["schedule"] == 60.0 * 5
    assert schedule["weekly-reports"]["task"] == send_weekly_reports.name
    assert schedule["weekly-reports"]["schedule"] == 3600.0
    f.make_job(personas.team, personas.instance_type, 1, pending_reason_code="borrow-limit")
    assert sample_pending_reasons.apply().get() == 1


def test_an_unknown_cluster_time_zone_falls_back_to_utc(personas, caplog):
    from allocations.models import Cluster
    from allocations.reports.services import cluster_time_zone

    Cluster.objects.filter(pk=1).update(time_zone="Mars/Olympus_Mons")
    assert cluster_time_zone() == "UTC"
    assert "time_zone: unknown time zone 'Mars/Olympus_Mons'" in caplog.text
