"""Estimated start times: a forward simulation with the engine from the current state."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from itertools import pairwise

from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocations import engine
from allocations.choices import JobState
from allocations.engine import allocate
from allocations.selectors.estimates import estimated_starts, forecast, forecast_starts
from allocations.selectors.snapshot import build_snapshot
from tests import factories as f

NODE8 = [engine.Node(name=f"n{i}", instance_type="p5", gpus=8) for i in (1, 2)]


def snapshot(*jobs: engine.Job) -> engine.Snapshot:
    return engine.Snapshot(
        instance_types=(engine.InstanceType("p5", 8),),
        nodes=tuple(NODE8),
        teams=(
            engine.Team("a", quotas={"p5": engine.Quota(quota=8)}),
            engine.Team("b", quotas={"p5": engine.Quota(quota=8)}),
        ),
        policy=engine.ClusterPolicy(),
        jobs=jobs,
    )


def running(job_id: str, team: str, node: str, started: float) -> engine.Job:
    return engine.Job(job_id, team, "p5", 8, submit_time=0, nodes=((node, 8),), started_at=started)


def pending(job_id: str, team: str, gpus: int, submitted: float) -> engine.Job:
    return engine.Job(job_id, team, "p5", gpus, submit_time=submitted)


def test_a_job_that_fits_now_starts_now():
    starts = forecast_starts(snapshot(pending("p", "a", 8, 50)), 100.0, {"p": 10.0}, allocate)
    assert starts == {"p": 100.0}


def test_a_waiting_job_starts_when_the_job_holding_its_gpus_ends():
    snap = snapshot(running("r1", "a", "n1", 0), running("r2", "b", "n2", 0), pending("p", "a", 8, 10))
    starts = forecast_starts(snap, 100.0, {"r1": 600.0, "r2": 900.0, "p": 60.0}, allocate)
    assert starts == {"p": 600.0}


def test_jobs_queue_behind_each_other():
    snap = snapshot(
        running("r1", "a", "n1", 0),
        running("r2", "b", "n2", 0),
        pending("p1", "a", 8, 10),
        pending("p2", "a", 8, 20),
    )
    # p1 takes n1 at 600; p2 needs team a's room: at 900 b's job ends, a may borrow up to 12
    # (8 + 50%) only, so p2 (8 more) waits until p1 ends at 600 + 100.
    starts = forecast_starts(snap, 100.0, {"r1": 600.0, "r2": 900.0, "p1": 100.0, "p2": 5.0}, allocate)
    assert starts == {"p1": 600.0, "p2": 700.0}


def test_unknown_when_a_running_job_has_no_duration():
    snap = snapshot(running("r1", "a", "n1", 0), running("r2", "b", "n2", 0), pending("p", "a", 8, 10))
    assert forecast_starts(snap, 100.0, {"r1": None, "r2": 900.0, "p": 60.0}, allocate) == {"p": None}


def test_a_job_that_waits_for_a_victims_minimum_runtime_starts_when_it_ends():
    """docs/preemption.md section 4: b borrows team a's quota; a's job reclaims it as soon as
    b's older job has run its minimum runtime (600 s from 0), not when b's jobs end."""
    snap = replace(
        snapshot(running("r1", "b", "n1", 0), running("r2", "b", "n2", 50), pending("p", "a", 8, 10)),
        policy=engine.ClusterPolicy(min_runtime_s=600.0),
    )
    starts = forecast_starts(snap, 100.0, {"r1": 10_000.0, "r2": 10_000.0, "p": 60.0}, allocate)
    assert starts == {"p": 600.0}


def test_unknown_beyond_the_horizon():
    snap = snapshot(running("r1", "a", "n1", 0), running("r2", "b", "n2", 0), pending("p", "a", 8, 10))
    starts = forecast_starts(
        snap, 100.0, {"r1": 10_000.0, "r2": 10_000.0, "p": 1.0}, allocate, horizon_s=1000
    )
    assert starts == {"p": None}


def test_estimated_starts_from_the_database(personas):
    now = timezone.now()
    it = personas.instance_type
    n1, n2 = (node.name for node in personas.nodes)
    f.make_job(
        personas.team,
        it,
        8,
        state=JobState.RUNNING,
        nodes=[[n1, 8]],
        started_at=now - timedelta(seconds=600),
        requested_duration=3600,
    )
    f.make_job(
        personas.other_team,
        it,
        8,
        state=JobState.RUNNING,
        nodes=[[n2, 8]],
        started_at=now,
        requested_duration=7200,
    )
    waiting = f.make_job(personas.team, it, 8, requested_duration=60)
    estimates = estimated_starts(build_snapshot(now), now)
    expected = now - timedelta(seconds=600) + timedelta(seconds=3600)
    assert abs((estimates[waiting.pk] - expected).total_seconds()) < 0.01


def test_a_job_resumed_from_a_checkpoint_is_expected_to_run_only_the_rest(personas):
    """docs/preemption.md section 2: a job that kept 1,800 s of a 3,600 s run ends 1,800 s
    after it started again, and so frees its GPUs then."""
    now = timezone.now()
    it = personas.instance_type
    n1, n2 = (node.name for node in personas.nodes)
    for team, node in ((personas.team, n1), (personas.other_team, n2)):
        f.make_job(
            team,
            it,
            8,
            state=JobState.RUNNING,
            nodes=[[node, 8]],
            started_at=now,
            requested_duration=3600,
            progress_kept_s=1800.0 if node == n1 else 0.0,
        )
    waiting = f.make_job(personas.team, it, 8, requested_duration=60)
    estimates = estimated_starts(build_snapshot(now), now)
    assert abs((estimates[waiting.pk] - (now + timedelta(seconds=1800))).total_seconds()) < 0.01


# --- Estimates agree with positions ----------------------------------------------------------------
PRIORITY_CLASSES = (engine.PriorityClass("low", 0), engine.PriorityClass("high", 10))
TYPES = ("p5", "g6")


@st.composite
def busy_cluster(draw: st.DrawFn) -> tuple[engine.Snapshot, dict[str, float | None]]:
    """A random cluster at t=100: a few nodes of two types, three teams with random settings,
    some running jobs and a queue of pending ones (some preempted recently, in their back-off)."""
    nodes = [engine.Node(f"{it}-{i}", it, 8) for it in TYPES for i in range(draw(st.integers(1, 3)))]
    teams = tuple(
        engine.Team(
            name,
            quotas={it: engine.Quota(quota=draw(st.sampled_from([0, 4, 8, 16]))) for it in TYPES},
            reclaim=draw(st.sampled_from(list(engine.Reclaim))),
            sharing=draw(st.sampled_from(list(engine.Sharing))),
        )
        for name in "abc"
    )
    jobs: list[engine.Job] = []
    durations: dict[str, float | None] = {}
    free = {node.name: 8 for node in nodes}
    for seq in range(1, draw(st.integers(0, 4)) + 1):
        node = draw(st.sampled_from(nodes))
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        if free[node.name] < gpus:
            continue
        free[node.name] -= gpus
        job_id = str(seq)
        jobs.append(
            engine.Job(
                job_id,
                draw(st.sampled_from("abc")),
                node.instance_type,
                gpus,
                submit_time=0,
                seq=seq,
                priority_class=draw(st.sampled_from([None, "low", "high"])),
                nodes=((node.name, gpus),),
                started_at=draw(st.sampled_from([0.0, 50.0])),
            )
        )
        durations[job_id] = draw(st.sampled_from([100.0, 300.0, 1000.0]))
    for seq in range(10, 10 + draw(st.integers(1, 10))):
        job_id = str(seq)
        backoff = draw(st.sampled_from([{}, {}, {"preemptions": 3, "last_preempted_at": 99.0}]))
        jobs.append(
            engine.Job(
                job_id,
                draw(st.sampled_from("abc")),
                draw(st.sampled_from(TYPES)),
                draw(st.sampled_from([1, 2, 4, 8, 16])),
                submit_time=float(draw(st.integers(0, 90))),
                seq=seq,
                priority_class=draw(st.sampled_from([None, "low", "high"])),
                **backoff,
            )
        )
        durations[job_id] = draw(st.sampled_from([60.0, 200.0, 500.0, None]))
    policy = engine.ClusterPolicy(
        priority_classes=PRIORITY_CLASSES,
        queueing=draw(st.sampled_from(list(engine.Queueing))),
        idle_allocation=draw(st.sampled_from(list(engine.IdleAllocation))),
        task_ranking=draw(st.sampled_from(list(engine.TaskRanking))),
    )
    snap = engine.Snapshot(
        instance_types=tuple(engine.InstanceType(it, 8) for it in TYPES),
        nodes=tuple(nodes),
        teams=teams,
        policy=policy,
        jobs=tuple(jobs),
    )
    return snap, durations


def in_team_order(snap: engine.Snapshot, jobs: list[engine.Job]) -> list[engine.Job]:
    """POLICY.md section 3 step 1, written again here from the policy (not from the code)."""
    weights = {pc.name: pc.weight for pc in snap.policy.priority_classes}
    fcfs = snap.policy.task_ranking is engine.TaskRanking.FIRST_COME_FIRST_SERVE
    return sorted(
        jobs, key=lambda j: (0 if fcfs else -weights.get(j.priority_class or "", 0), j.submit_time, j.seq)
    )


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(busy_cluster())
def test_no_estimate_is_earlier_than_the_job_ahead_without_saying_why(cluster):
    snap, durations = cluster
    result = forecast(snap, 100.0, durations, allocate)
    pending_jobs = [job for job in snap.jobs if not job.running]
    for team, it in {(job.team, job.instance_type) for job in pending_jobs}:
        queue = in_team_order(snap, [j for j in pending_jobs if (j.team, j.instance_type) == (team, it)])
        for ahead, job in pairwise(queue):
            mine, theirs = result.starts[job.id], result.starts[ahead.id]
            if mine is None or (theirs is not None and theirs <= mine):
                continue
            # Earlier than the job ahead (or that one unknown): the page must say why.
            assert job.id in result.ahead, (ahead, job, result)
            why = result.ahead[job.id]
            if job.gpus < ahead.gpus and not ahead.preemptions:
                assert "smaller job" in why, why
    # "unknown" always says why.
    assert set(result.unknown) == {job_id for job_id, start in result.starts.items() if start is None}
    assert all(result.unknown.values())


def test_a_smaller_job_that_fits_sooner_says_so():
    # n1 has 4 GPUs free: the 4-GPU job behind the 8-GPU head starts now, the head at 600.
    snap = snapshot(
        engine.Job("r1", "a", "p5", 4, submit_time=0, nodes=(("n1", 4),), started_at=0),
        running("r2", "b", "n2", 0),
        pending("big", "a", 8, 10),
        pending("small", "a", 4, 20),
    )
    durations: dict[str, float | None] = {"r1": 600.0, "r2": 900.0, "big": 60.0, "small": 60.0}
    result = forecast(snap, 100.0, durations, allocate)
    assert result.starts == {"small": 100.0, "big": 600.0}
    assert result.ahead == {"small": "a smaller job (4 GPUs) that fits sooner than #big ahead of it (8 GPUs)"}


def test_a_job_behind_one_in_its_back_off_says_so():
    # b borrows n1; a's head was preempted 3 times just now and may not preempt until 103;
    # the job behind it may, reclaims a's quota at once, and says why it goes first.
    snap = snapshot(
        running("r1", "b", "n1", 0),
        running("r2", "b", "n2", 0),
        engine.Job("head", "a", "p5", 8, submit_time=10, preemptions=3, last_preempted_at=99.0),
        pending("next", "a", 8, 20),
    )
    durations: dict[str, float | None] = {"r1": 1000.0, "r2": 1000.0, "head": 60.0, "next": 60.0}
    result = forecast(snap, 100.0, durations, allocate)
    assert result.starts["next"] == 100.0
    assert result.starts["head"] is not None and result.starts["head"] > 100.0
    assert "back-off" in result.ahead["next"] and "#head" in result.ahead["next"]


def test_unknown_says_which_job_has_no_duration():
    snap = snapshot(running("r1", "a", "n1", 0), running("r2", "b", "n2", 0), pending("p", "a", 8, 10))
    result = forecast(snap, 100.0, {"r1": None, "r2": 900.0, "p": 60.0}, allocate)
    assert result.unknown == {"p": "job #r1 runs with no requested duration, so when it ends is unknown"}


def test_unknown_says_the_start_lies_beyond_the_horizon():
    snap = snapshot(running("r1", "a", "n1", 0), running("r2", "b", "n2", 0), pending("p", "a", 8, 10))
    durations: dict[str, float | None] = {"r1": 10 * 86400.0, "r2": 10 * 86400.0, "p": 1.0}
    result = forecast(snap, 100.0, durations, allocate, horizon_s=86400)
    assert result.unknown == {"p": "it would not start within 1 days"}


def test_unknown_says_nothing_frees_room_for_a_job_of_an_inactive_team():
    snap = snapshot(pending("p", "a", 8, 10))
    snap = replace(snap, teams=(replace(snap.teams[0], active=False), snap.teams[1]))
    result = forecast(snap, 100.0, {"p": 60.0}, allocate)
    assert result.unknown == {"p": "no job that runs or waits frees room for it"}


def test_one_gpu_is_said_in_the_singular():
    snap = snapshot(
        engine.Job("r1", "a", "p5", 7, submit_time=0, nodes=(("n1", 7),), started_at=0),
        running("r2", "b", "n2", 0),
        pending("big", "a", 8, 10),
        pending("one", "a", 1, 20),
    )
    durations: dict[str, float | None] = {"r1": 600.0, "r2": 900.0, "big": 60.0, "one": 60.0}
    result = forecast(snap, 100.0, durations, allocate)
    assert result.ahead == {"one": "a smaller job (1 GPU) that fits sooner than #big ahead of it (8 GPUs)"}


def test_unknown_says_the_forecast_stopped_after_its_cycles():
    snap = snapshot(running("r1", "a", "n1", 0), running("r2", "b", "n2", 0), pending("p", "a", 8, 10))
    durations: dict[str, float | None] = {"r1": 600.0, "r2": 900.0, "p": 60.0}
    result = forecast(snap, 100.0, durations, allocate, max_steps=1)
    assert result.unknown == {"p": "the forecast stopped after 1 allocation cycle"}


def test_unknown_says_the_forecast_ran_out_of_time():
    snap = snapshot(running("r1", "a", "n1", 0), running("r2", "b", "n2", 0), pending("p", "a", 8, 10))
    durations: dict[str, float | None] = {"r1": 600.0, "r2": 900.0, "p": 60.0}
    result = forecast(snap, 100.0, durations, allocate, budget_s=-1.0)
    assert result.unknown == {"p": "the forecast ran out of its time budget before this job started"}


# --- Preemption grace (docs/preemption.md section 5) ----------------------------------------------
def with_grace(snap: engine.Snapshot, grace: float) -> engine.Snapshot:
    return replace(snap, policy=engine.ClusterPolicy(preemption_grace_s=grace))


def test_a_reclaim_with_a_grace_starts_when_the_grace_runs_out():
    """b borrows team a's node; a's job reclaims it at 100, but the victim keeps its GPUs until
    its grace of 300 s runs out: the job is expected at 400, not at once."""
    snap = with_grace(
        snapshot(running("r1", "b", "n1", 0), running("r2", "b", "n2", 50), pending("p", "a", 8, 10)), 300.0
    )
    starts = forecast_starts(snap, 100.0, {"r1": 10_000.0, "r2": 10_000.0, "p": 60.0}, allocate)
    assert starts == {"p": 400.0}


def test_a_victim_that_ends_within_its_grace_frees_its_gpus_then():
    snap = with_grace(
        snapshot(running("r1", "b", "n1", 0), running("r2", "b", "n2", 50), pending("p", "a", 8, 10)), 300.0
    )
    # r2, the most recently started, is the victim; it ends by itself at 50 + 200.
    starts = forecast_starts(snap, 100.0, {"r1": 10_000.0, "r2": 200.0, "p": 60.0}, allocate)
    assert starts == {"p": 250.0}


def test_a_victim_already_terminating_is_killed_when_its_grace_runs_out():
    """A victim signalled before the forecast (its ``terminating_since``) keeps its GPUs until
    then; a job of another team that needs them waits for the kill."""
    victim = replace(running("r2", "b", "n2", 50), terminating_since=80.0)
    snap = replace(
        with_grace(snapshot(running("r1", "a", "n1", 0), victim, pending("p", "a", 8, 10)), 300.0),
        teams=(
            engine.Team("a", quotas={"p5": engine.Quota(quota=16)}),
            engine.Team("b", quotas={"p5": engine.Quota(quota=0, borrow_unlimited=True)}),
        ),
    )
    starts = forecast_starts(snap, 100.0, {"r1": 10_000.0, "r2": 10_000.0, "p": 60.0}, allocate)
    assert starts == {"p": 380.0}


def test_a_held_preemptor_is_expected_when_its_victims_grace_ends(personas):
    """The loop leaves a preemptor out of the snapshot while its victim terminates; its
    estimate is when the victim's grace runs out (or the victim's own end, if sooner)."""
    now = timezone.now()
    it = personas.instance_type
    n1, _ = (node.name for node in personas.nodes)
    preemptor = f.make_job(personas.team, it, 8, requested_duration=60)
    f.make_job(
        personas.other_team,
        it,
        8,
        state=JobState.RUNNING,
        nodes=[[n1, 8]],
        started_at=now - timedelta(seconds=500),
        requested_duration=3600,
        terminating_since=now - timedelta(seconds=10),
        grace_ends_at=now + timedelta(seconds=120),
        preempted_for=preemptor,
        preempted_reason="reclaim",
    )
    estimates = estimated_starts(build_snapshot(now), now)
    assert abs((estimates[preemptor.pk] - (now + timedelta(seconds=120))).total_seconds()) < 0.01
