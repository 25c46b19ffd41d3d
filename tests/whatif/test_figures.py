"""Per-job times and pending reasons from a replay's result (no database)."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from typing import Any

import pytest

from allocations.engine.session import Session
from allocations.engine.snapshot import (
    ClusterPolicy,
    Job,
    JobChanges,
    PendingCode,
    PendingReason,
    PendingReasons,
    Plan,
    Snapshot,
    Start,
)
from allocations.simulation import parse_scenario, replay
from allocations.simulation.result import JobResult, PreemptionRecord
from allocations.whatif.figures import ReasonRecorder, job_times
from tests.engine.test_session import random_scenario

EMPTY = Snapshot(instance_types=(), nodes=(), teams=(), policy=ClusterPolicy(), jobs=())


def job(**fields) -> JobResult:
    base = {"id": "7", "team": "team-a", "instance_type": "p5", "gpus": 8, "priority": None, "submit": 100.0}
    return JobResult(**{**base, **fields})


def test_a_preempted_job_waits_from_submit_and_from_its_requeue():
    result = job(
        state="finished",
        admitted_at=(160.0, 500.0),
        preempted=(PreemptionRecord(300.0, "reclaim", "9"),),
        finished_at=900.0,
    )
    times = job_times(result, None, 1000.0)
    assert times.waits == (60.0, 200.0)
    assert times.runs == ((160.0, 300.0), (500.0, 900.0))
    assert times.total_wait == 260.0


def test_a_job_preempted_and_restarted_at_one_instant_has_two_runs_and_no_wait_between():
    result = job(
        state="running", admitted_at=(100.0, 300.0), preempted=(PreemptionRecord(300.0, "fair-share", "9"),)
    )
    times = job_times(result, None, 1000.0)
    assert times.runs == ((100.0, 300.0), (300.0, 1000.0))
    assert times.waits == (0.0, 0.0)


def test_a_job_running_at_the_start_or_still_pending_at_the_end():
    assert job_times(job(state="finished", finished_at=50.0), -600.0, 1000.0).runs == ((0.0, 50.0),)
    pending = job_times(job(state="pending"), None, 1000.0)
    assert pending.waits == () and pending.total_wait == 900.0 and pending.queued == ((100.0, 1000.0),)
    assert job_times(job(state="rejected"), None, 1000.0).total_wait == 0


def test_the_recorder_keeps_the_reason_a_job_waited_longest_with():
    plans = iter(
        [
            Plan(pending={"7": PendingReason(PendingCode("no-idle-capacity"), "no idle GPUs")}),
            Plan(pending={"7": PendingReason(PendingCode("borrow-limit"), "over its borrow cap")}),
            Plan(),
        ]
    )
    recorder = ReasonRecorder(lambda snapshot, now: next(plans))
    for now in (0.0, 10.0, 400.0):
        recorder(EMPTY, now)
    recorder.finish(400.0)
    assert recorder.seconds == {"7": {"no-idle-capacity": 10.0, "borrow-limit": 390.0}}
    assert recorder.main_reason("7") == {"code": "borrow-limit", "message": "over its borrow cap"}
    assert recorder.main_reason("8") is None


def test_the_recorder_counts_only_the_last_plan_of_an_instant():
    """Cycles at one time take none: a reason seen only between two of them is not recorded,
    and the last plan of the instant holds until the next one."""
    capacity = PendingReason(PendingCode("no-idle-capacity"), "no idle GPUs")
    limit = PendingReason(PendingCode("borrow-limit"), "over its borrow cap")
    plans = iter(
        [
            Plan(pending={"7": capacity, "8": capacity}),  # t=0, first cycle
            Plan(pending={"7": limit}),  # t=0, the cycle at rest: 8 started, 7 now at its cap
            Plan(pending={"7": limit}),  # t=30
        ]
    )
    recorder = ReasonRecorder(lambda snapshot, now: next(plans))
    for now in (0.0, 0.0, 30.0):
        recorder(EMPTY, now)
    recorder.finish(100.0)
    assert recorder.seconds == {"7": {"borrow-limit": 100.0}}
    assert recorder.main_reason("8") is None


def test_a_policy_whose_jobs_preempt_each_other_back_and_forth_is_warned_of() -> None:
    from allocations.whatif.figures import churn_warning

    warning = churn_warning("draft", {"preemptions": 300, "starts": 1000, "lost_gpu_hours": 42.25})
    assert warning is not None
    assert "preempted 300 times for 1,000 starts (30%)" in warning and "42.2 GPU-hours" in warning
    assert churn_warning("live", {"preemptions": 240, "starts": 1000, "lost_gpu_hours": 1}) is None
    assert churn_warning("live", {"preemptions": 19, "starts": 20, "lost_gpu_hours": 1}) is None
    assert churn_warning("live", {}) is None  # a result of an older release: no figures, no warning


class Plainly:
    """The session's plans with their reasons as a plain dict, and snapshots without their
    changes: what the recorder reads job by job, the reference for its shortcuts."""

    def __init__(self) -> None:
        self.session = Session()

    def __call__(self, snapshot: Snapshot, now: float) -> Plan:
        plan = self.session(snapshot, now)
        return dataclasses.replace(plan, pending=dict(plan.pending))


def disjoint(pending: PendingReasons) -> None:
    """No job in two runs, nor in a run and the singles unless it is gone from the runs."""
    runs, singles, gone = pending.parts()
    seen = Counter(job_id for ids, _ in runs for job_id in ids)
    assert not [job_id for job_id, n in seen.items() if n > 1]
    assert not [job_id for job_id in singles if job_id in seen and job_id not in gone]


@pytest.mark.parametrize("seed", range(40))
def test_the_recorder_reading_runs_and_changes_adds_up_what_reading_every_job_does(seed: int) -> None:
    """The recorder passes over runs of twins whose code stands and learns which jobs left
    from the snapshots' changes; on random replays (preemptions, back-offs, cancellations,
    nodes lost, quiet cycles) it must find, job by job and code by code, the seconds and the
    messages found by reading every pending job of every plan."""
    scenario = parse_scenario(random_scenario(random.Random(seed)))
    session = Session()

    def checked(snapshot: Snapshot, now: float) -> Plan:
        plan = session(snapshot, now)
        assert isinstance(plan.pending, PendingReasons)
        disjoint(plan.pending)
        return plan

    fast = ReasonRecorder(checked)
    result = replay(scenario, allocate=fast)
    assert fast.left is not None  # it followed the snapshots' changes to the end
    fast.finish(result.end_time)
    plain = ReasonRecorder(Plainly())
    unchanged = replay(
        scenario, allocate=lambda snapshot, now: plain(dataclasses.replace(snapshot, changes=None), now)
    )
    assert unchanged.end_time == result.end_time
    plain.finish(result.end_time)
    assert fast.seconds == plain.seconds
    assert fast.messages == plain.messages


def test_a_job_that_starts_and_is_preempted_between_two_plans_recorded_waits_on() -> None:
    """The recorder learns which jobs left from the snapshots' changes: a job removed as
    pending (started) and added back as pending (preempted) at the same instant has not left,
    and one the recorded plan starts has."""
    waiting = PendingReason(PendingCode("no-idle-capacity"), "no idle GPUs")
    b, c = (Job(name, "team-a", "p5", 8, 0.0) for name in "bc")
    b_running = dataclasses.replace(b, nodes=(("n1", 8),), started_at=10.0)
    c_running = dataclasses.replace(c, nodes=(("n2", 8),), started_at=10.0)

    def snapshot(serial: int, removed: tuple[Job, ...] = (), added: tuple[Job, ...] = ()) -> Snapshot:
        changes = None if serial == 1 else JobChanges(serial - 1, added, removed)
        return dataclasses.replace(EMPTY, serial=serial, changes=changes)

    def plan(*ids: str, starts: tuple[Start, ...] = ()) -> Plan:
        return Plan(starts=starts, pending=PendingReasons([(list(ids), waiting)]))

    cycles = [  # (time, snapshot, plan)
        (0.0, snapshot(1), plan("a", "b", "c")),
        (10.0, snapshot(2, (b,), (b_running,)), plan("a", "c")),  # b started
        (10.0, snapshot(3, (b_running,), (b,)), plan("a", "b", "c")),  # b preempted
        (10.0, snapshot(4), plan("a", "b", starts=(Start("c", (("n2", 8),)),))),  # the last of t=10
        (30.0, snapshot(5, (c,), (c_running,)), plan("a", "b")),
    ]
    plans = iter(p for _, _, p in cycles)
    recorder = ReasonRecorder(lambda snap, now: next(plans))
    for now, snap, _ in cycles:
        recorder(snap, now)
    recorder.finish(40.0)
    assert recorder.seconds == {
        "a": {"no-idle-capacity": 40.0},
        "b": {"no-idle-capacity": 40.0},  # it waited on
        "c": {"no-idle-capacity": 10.0},
    }


# --- What preemption cost (docs/preemption.md section 2) ----------------------------------------
# A victim that had run less than this was preempted before it did much (docs/preemption.md 8).
SHORT_RUN_S = 600.0


def victim_runs(job: Any, running_since: float | None) -> list[float]:
    """How long each of the job's runs cut short by a preemption had lasted, in seconds, one per
    preemption, from its last start (before the replay's window for a job running at its start:
    that work is lost too). Stops are paired with starts as ``job_times`` pairs them."""
    stops = sorted(
        [(p.at, True) for p in job.preempted]
        + [(t, False) for t in job.evicted_at]
        + ([(job.finished_at, False)] if job.finished_at is not None else [])
        + ([(job.cancelled_at, False)] if job.cancelled_at is not None else [])
    )
    starts = ([running_since] if running_since is not None else []) + list(job.admitted_at)
    ran: list[float] = []
    s = 0
    for start in starts:
        while s < len(stops) and stops[s][0] < start:
            s += 1
        if s < len(stops) and stops[s][1]:
            ran.append(stops[s][0] - start)
        s += 1
    return ran


def test_a_victim_ran_from_its_last_start_to_its_preemption() -> None:
    twice = job(
        state="finished",
        admitted_at=(160.0, 500.0, 700.0),
        preempted=(PreemptionRecord(300.0, "reclaim", "9"), PreemptionRecord(600.0, "fair-share", "9")),
        finished_at=900.0,
    )
    assert victim_runs(twice, None) == [140.0, 100.0]
    # Running before the window: the run since its start before the window is lost too.
    assert victim_runs(
        job(state="pending", preempted=(PreemptionRecord(100.0, "reclaim", "9"),)), -500.0
    ) == [600.0]
    # Preempted and restarted at one instant, then finished: one victim run, not two.
    again = job(
        state="finished",
        admitted_at=(100.0, 300.0),
        preempted=(PreemptionRecord(300.0, "fair-share", "9"),),
        finished_at=400.0,
    )
    assert victim_runs(again, None) == [200.0]
    # A node lost under it is not a preemption.
    assert victim_runs(job(state="pending", admitted_at=(100.0,), evicted_at=(200.0,)), None) == []


@pytest.mark.parametrize("seed", range(6))
def test_a_replays_figures_count_preemptions_per_job_and_the_share_of_short_victims(seed: int) -> None:
    """On random replays: one victim run per preemption the simulator counts, paired here from
    each job's starts and stops, and the lab shows the simulator's share of them under 10
    minutes and its preemptions over the jobs."""
    from allocations.whatif.figures import figures

    scenario = parse_scenario(random_scenario(random.Random(seed)))
    result = replay(scenario)
    out, _ = figures(result, scenario, {})
    since = {j.id: j.running_since for j in scenario.jobs if j.running_since is not None}
    runs = [ran for j in result.jobs.values() for ran in victim_runs(j, since.get(j.id))]
    cluster = out["cluster"]
    assert len(runs) == cluster["preemptions"] and all(ran >= 0 for ran in runs)
    assert cluster["preemptions_per_job"] == pytest.approx(
        cluster["preemptions"] / len(result.jobs), abs=1e-4
    )
    short = sum(1 for ran in runs if ran < SHORT_RUN_S) / len(runs) if runs else 0.0
    assert cluster["short_victims_share"] == pytest.approx(short, abs=1e-4)
