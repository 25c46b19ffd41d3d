"""The weekly reports give each team the GPU-hours its jobs lost to preemption, and the cluster
report the total and each team's (docs/reports.md, docs/preemption.md section 2): what each
preempted event records it lost (the work since the last checkpoint), or for an event recorded
without it, the whole run it cut short."""

from __future__ import annotations

import html
import re

from allocations.reports.figures import weekly_figures
from allocations.reports.services import weekly_reports_send
from tests import factories as f
from tests.reports.conftest import event, hour, utc
from tests.reports.test_sending import NOW, html_of, text_of, week


def _checkpointed_preemption(personas) -> None:  # type: ignore[no-untyped-def]
    """team-b's 8-GPU job ran an hour in W47; its last checkpoint was 10 minutes before the
    preemption: 8 x 600 s = 4,800 GPU-seconds, 1.3 GPU-hours, lost (not 8 GPU-hours)."""
    job = f.make_job(personas.other_team, personas.instance_type, 8, submitted_at=utc(2026, 11, 18, 9))
    event(job, "submitted", utc(2026, 11, 18, 9))
    event(job, "started", utc(2026, 11, 18, 10))
    event(job, "preempted", utc(2026, 11, 18, 11), reason="reclaim", ran_s=3600.0, lost_gpu_seconds=4800.0)
    # As the sampler counts it: in the sample of 11:01, in the hour of 11:00.
    hour(
        personas.other_team,
        personas.instance_type,
        utc(2026, 11, 18, 11),
        preempted_reclaim=1,
        lost_gpu_seconds=4800.0,
        preempted_ran_over_1h=1,
    )


def test_each_team_and_the_cluster_get_their_lost_gpu_hours(week_of_history) -> None:  # type: ignore[no-untyped-def]
    _checkpointed_preemption(week_of_history)
    report = weekly_figures(week())
    # team-a: job1's event has no figures (recorded before them): its 2-hour run on 2 GPUs.
    assert report.team("team-a").jobs.gpu_hours_lost == 4.0
    assert report.team("team-b").jobs.gpu_hours_lost == 4800 / 3600
    assert report.jobs.gpu_hours_lost == 4.0 + 4800 / 3600


def test_the_emails_say_the_lost_gpu_hours_of_each_team(week_of_history, smtp, no_charts) -> None:  # type: ignore[no-untyped-def]
    _checkpointed_preemption(week_of_history)
    weekly_reports_send(week=week(), now=NOW)
    for address, lost in (("bob@example.com", "4.0"), ("olga@example.com", "1.3")):
        [message] = smtp.to(address)
        text = text_of(message)
        assert f"  {'GPU-hours lost to preemption':<34} {lost}\r\n" in text, address
        page = html.unescape(re.sub(r"\s+", " ", html_of(message)))
        assert re.search(rf"GPU-hours lost to preemption\s*</t[hd]>\s*<td[^>]*>\s*{lost}\b", page), address
    cluster = smtp.to("admin@example.com")[0]
    text = text_of(cluster)
    assert f"  {'GPU-hours lost to preemption':<34} 5.3\r\n" in text
    # The teams table: each team's own, beside its preemptions.
    assert "| preempted | GPU-h lost | cost" in text
    assert re.search(r"team-a \|[^\n]*\| 1 \| 4\.0 \| ", text) and re.search(
        r"team-b \|[^\n]*\| 1 \| 1\.3 \| ", text
    )
    assert "GPU-h lost" in html_of(cluster)
