"""Per-job times and pending reasons from a replay's result (no database)."""

from __future__ import annotations

from allocations.engine.snapshot import PendingCode, PendingReason, Plan
from allocations.simulation.result import JobResult, PreemptionRecord
from allocations.whatif.figures import ReasonRecorder, job_times


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
        recorder(None, now)  # type: ignore[arg-type]
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
        recorder(None, now)  # type: ignore[arg-type]
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
