"""Property test of the job figures (``_jobs_by_team``): any lifecycle of any jobs gives waits
that are never negative and one per start in the week, preemptions that add up, and GPU-hours
lost equal to the preempted runs' GPU-hours. No database: the function walks plain rows."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from allocations.reports.figures import _jobs_by_team
from allocations.reports.weeks import Week

WEEK = Week.parse("2026-W47", "UTC")
ORIGIN = WEEK.start - timedelta(days=3)


@st.composite
def lifecycle(draw: st.DrawFn, job_id: int) -> list[tuple]:
    """One job's events in order: submitted, then (started, (preempted, requeued | finished))*."""
    team = draw(st.integers(1, 3))
    gpus = draw(st.integers(1, 8))
    at = ORIGIN + timedelta(minutes=draw(st.integers(0, 14 * 24 * 60)))
    submitted = at
    rows = [(job_id, team, gpus, submitted, "submitted", at, "", None)]
    for _ in range(draw(st.integers(0, 4))):
        at += timedelta(minutes=draw(st.integers(0, 3000)))
        rows.append((job_id, team, gpus, submitted, "started", at, "", None))
        at += timedelta(minutes=draw(st.integers(0, 3000)))
        if draw(st.booleans()):
            reason = draw(st.sampled_from(["in-team", "reclaim", "fair-share"]))
            preemptor = draw(st.sampled_from([None, 1, 2, 3]))
            rows.append((job_id, team, gpus, submitted, "preempted", at, reason, preemptor))
            rows.append((job_id, team, gpus, submitted, "requeued", at, reason, None))
        else:
            rows.append(
                (job_id, team, gpus, submitted, draw(st.sampled_from(["finished", "failed"])), at, "", None)
            )
            break
    return rows


@st.composite
def histories(draw: st.DrawFn) -> list[tuple]:
    rows = []
    for job_id in range(draw(st.integers(0, 6))):
        rows += draw(lifecycle(job_id))
    # What the query returns: events up to the week's end, by job, in time order.
    return [row for row in rows if row[5] < WEEK.end]


def in_week(at: datetime) -> bool:
    return WEEK.start <= at < WEEK.end


@settings(max_examples=200, deadline=None)
@given(histories())
def test_job_figures_add_up(rows: list[tuple]) -> None:
    jobs = _jobs_by_team(WEEK, rows)
    for team, figures in jobs.items():
        mine = [r for r in rows if r[1] == team]
        starts = [r for r in mine if r[4] == "started" and in_week(r[5])]
        assert len(figures.waits) == len(starts)
        assert all(wait >= 0 for wait in figures.waits)
        assert figures.started == len({r[0] for r in starts})
        preempted = [r for r in mine if r[4] == "preempted" and in_week(r[5])]
        assert figures.preempted == len(preempted)
        assert figures.preemptions_caused == sum(
            1 for r in rows if r[4] == "preempted" and in_week(r[5]) and r[7] == team
        )
        # Each preempted run: the GPUs times the time since that job's previous start (in order).
        lost = 0.0
        for i, r in enumerate(rows):
            if r[1] == team and r[4] == "preempted" and in_week(r[5]):
                start = next(s[5] for s in reversed(rows[:i]) if s[0] == r[0] and s[4] == "started")
                lost += r[2] * (r[5] - start).total_seconds() / 3600
        assert abs(figures.gpu_hours_lost - lost) < 1e-6
        if figures.waits:
            assert min(figures.waits) <= figures.mean_wait <= max(figures.waits)
            assert figures.p95_wait in figures.waits
