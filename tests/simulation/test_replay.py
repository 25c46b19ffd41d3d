"""The replay's clock, events and metrics, on scenarios whose outcome is worked out by hand."""

from __future__ import annotations

import gc
import pickle
import random
import textwrap
from itertools import chain

import pytest
import yaml

from allocations.engine.session import Session
from allocations.engine.snapshot import (
    Job,
    PendingCode,
    PendingReason,
    Plan,
    Preemption,
    PreemptionReason,
    Snapshot,
    Start,
)
from allocations.simulation import SimulationError, parse_scenario, replay
from allocations.simulation.replay import COLLECT_AFTER_EVENTS, Replay, SnapshotJobs
from allocations.simulation.result import percentile
from allocations.whatif.figures import ReasonRecorder
from tests.engine.test_session import random_scenario


def load(text: str, **kwargs: object):
    return parse_scenario(yaml.safe_load(textwrap.dedent(text)), **kwargs)  # type: ignore[arg-type]


ONE_LENDER = """
cluster:
  node_pools: [{instance_type: ml.p5.48xlarge, count: 1, gpus_per_node: 8}]
teams:
  - {name: a, quota: {ml.p5.48xlarge: 8}}
  - {name: b, quota: {ml.p5.48xlarge: 0}, borrow_limit: unlimited}
jobs:
  - {id: b1, team: b, gpus: 4, submit: 0, duration: 1800}
horizon: 3600
"""


def test_a_team_lending_4_gpus_for_30_minutes_has_lent_2_gpu_hours() -> None:
    result = replay(load(ONE_LENDER))
    a, b = result.teams["a"], result.teams["b"]
    assert a.lent_gpu_hours == pytest.approx(2.0)
    assert a.idle_quota_gpu_hours == pytest.approx(6.0)  # 8 GPU-hours of quota, 2 lent
    assert a.gpu_hours == 0
    assert (b.gpu_hours, b.borrowed_gpu_hours, b.lent_gpu_hours) == (
        pytest.approx(2.0),
        pytest.approx(2.0),
        0,
    )
    c = result.cluster
    assert result.end_time == 3600  # the horizon, though nothing happens after 1800
    assert (c.capacity_gpu_hours, c.allocated_gpu_hours, c.utilization) == (
        8,
        pytest.approx(2.0),
        pytest.approx(0.25),
    )
    assert result.jobs["b1"].state == "finished" and result.jobs["b1"].finished_at == 1800


WAITING = """
cluster:
  node_pools: [{instance_type: ml.g5.8xlarge, count: 1, gpus_per_node: 4}]
teams:
  - {name: a, quota: {ml.g5.8xlarge: 4}}
jobs:
  - {id: j1, team: a, gpus: 2, submit: 0, duration: 3600}
  - {id: j2, team: a, gpus: 4, submit: 0, duration: 600}
"""


def test_idle_gpus_while_a_job_waits_are_counted_and_waits_run_from_submit_to_start() -> None:
    result = replay(load(WAITING))
    # 2 GPUs idle for an hour while j2 asks for 4: min(2, 4) x 1 h.
    assert result.cluster.idle_while_waiting_gpu_hours == pytest.approx(2.0)
    assert result.jobs["j2"].admitted_at == (3600,)
    assert result.end_time == 4200  # j2's finish: the last thing that happens
    assert result.cluster.allocated_gpu_hours == pytest.approx(2 + 4 * 600 / 3600)
    assert result.cluster.capacity_gpu_hours == pytest.approx(4 * 4200 / 3600)
    team = result.teams["a"]
    assert (team.wait_p50_s, team.wait_p95_s, team.starts) == (0, 3600, 2)
    assert result.cluster.wait_mean_s == 1800


def test_until_stops_at_that_time_and_reports_the_pending_reason() -> None:
    result = replay(load(WAITING), until=100)
    assert result.end_time == 100
    assert result.jobs["j1"].state == "running"
    j2 = result.jobs["j2"]
    assert j2.state == "pending" and j2.pending_reason is not None and j2.admitted_at == ()
    assert result.cluster.idle_while_waiting_gpu_hours == pytest.approx(2 * 100 / 3600)


def test_until_0_applies_only_what_happens_at_0() -> None:
    scenario = load(WAITING.replace("submit: 0, duration: 600", "submit: 5, duration: 600"))
    result = replay(scenario, until=0)
    assert result.end_time == 0
    assert result.jobs["j1"].state == "running"
    assert result.not_submitted == ("j2",)
    assert result.cluster.cycles == 1


def test_the_run_ends_with_the_last_happening_when_jobs_run_forever() -> None:
    scenario = load(
        ONE_LENDER.replace(
            "duration: 1800}", "duration: null}\n  - {id: a1, team: a, gpus: 2, submit: 70}"
        ).replace("horizon: 3600", "")
    )
    result = replay(scenario)
    assert result.end_time == 70
    assert {j.id: j.state for j in result.jobs.values()} == {"b1": "running", "a1": "running"}


def test_running_since_jobs_run_at_0_and_end_at_running_since_plus_duration() -> None:
    scenario = load(
        WAITING.replace(
            "{id: j1, team: a, gpus: 2, submit: 0, duration: 3600}",
            "{id: j1, team: a, gpus: 2, submit: -900, running_since: -600, duration: 1000}",
        )
    )
    result = replay(scenario)
    j1 = result.jobs["j1"]
    assert (j1.admitted_at, j1.finished_at) == ((), 400)
    assert result.jobs["j2"].admitted_at == (400,)


def test_a_cancelled_running_job_frees_its_gpus_at_once() -> None:
    scenario = load(WAITING + "events: [{at: 100, cancel: j1}]\n")
    result = replay(scenario)
    assert (result.jobs["j1"].state, result.jobs["j1"].cancelled_at) == ("cancelled", 100)
    assert result.jobs["j2"].admitted_at == (100,)
    assert result.counts["cancelled"] == 1 and result.counts["finished"] == 1


def test_a_job_cancelled_before_its_submit_time_never_runs() -> None:
    scenario = load(
        WAITING.replace("submit: 0, duration: 600", "submit: 50, duration: 600")
        + "events: [{at: 10, cancel: j2}]\n"
    )
    result = replay(scenario)
    assert result.jobs["j2"].state == "cancelled" and result.jobs["j2"].admitted_at == ()


NODES = """
cluster:
  node_pools: [{instance_type: ml.g5.12xlarge, count: 3, gpus_per_node: 4}]
teams:
  - {name: a, quota: {ml.g5.12xlarge: 12}}
jobs:
  - {id: big, team: a, gpus: 4, submit: 0, duration: null}
  - {id: small, team: a, gpus: 1, submit: 0, duration: null}
events:
  - {at: 100, node_down: {instance_type: ml.g5.12xlarge, count: 1}}
  - {at: 200, node_down: {count: 1}}
  - {at: 300, node_up: {count: 2}}
"""


def test_node_down_takes_the_least_used_nodes_first_and_their_jobs_return_to_pending() -> None:
    result = replay(load(NODES), until=250)
    # At 100 the empty node goes (no job touched); at 200 the node with 1 GPU in use goes.
    big, small = result.jobs["big"], result.jobs["small"]
    assert (big.state, big.evicted_at) == ("running", ())
    assert (small.state, small.evicted_at, small.preempted) == ("pending", (200,), ())
    assert result.cluster.capacity_gpu_hours == pytest.approx((12 * 100 + 8 * 100 + 4 * 50) / 3600)
    assert result.cluster.node_down_lost_gpu_hours == pytest.approx(1 * 200 / 3600)
    assert result.cluster.preemptions == 0


def test_node_up_brings_capacity_back_and_the_evicted_job_restarts() -> None:
    result = replay(load(NODES))
    small = result.jobs["small"]
    assert (small.state, small.admitted_at) == ("running", (0, 300))
    assert result.end_time == 300


def test_a_job_of_duration_0_starts_and_finishes_at_once() -> None:
    scenario = load(WAITING.replace("duration: 600", "duration: 0"))
    result = replay(scenario)
    assert (result.jobs["j2"].admitted_at, result.jobs["j2"].finished_at) == ((3600,), 3600)


def test_rejected_jobs_end_rejected_with_their_reason() -> None:
    scenario = load(WAITING + "  - {id: huge, team: a, gpus: 16, submit: 5}\n", keep_unfit=True)
    result = replay(scenario)
    huge = result.jobs["huge"]
    assert huge.state == "rejected" and huge.admitted_at == ()
    assert huge.pending_reason is not None and huge.pending_reason.code == PendingCode.EXCEEDS_MAX


def test_percentiles_are_nearest_rank() -> None:
    assert percentile([], 95) == 0
    assert percentile([5], 50) == 5
    assert percentile([1, 2, 3, 4], 50) == 2
    assert percentile(list(range(1, 101)), 95) == 95


# Plans no correct engine gives: the replay refuses them with a clear error, never corrupts.


def _scenario_with_two_jobs():
    return load(WAITING)


def test_a_plan_that_overfills_a_node_is_refused() -> None:
    def overfill(snapshot: Snapshot, now: float) -> Plan:
        node = snapshot.nodes[0].name
        starts = tuple(Start(j.id, ((node, j.gpus),)) for j in snapshot.jobs if not j.running)
        return Plan(starts=starts)

    with pytest.raises(
        SimulationError, match=r"t=0: the plan starting job 'j2' puts 4 GPUs on node '.*', which has 2 free"
    ):
        replay(_scenario_with_two_jobs(), allocate=overfill)


def test_a_plan_that_preempts_a_pending_job_is_refused() -> None:
    def wrong(snapshot: Snapshot, now: float) -> Plan:
        return Plan(preemptions=(Preemption("j2", PreemptionReason.IN_TEAM, "j1"),))

    with pytest.raises(SimulationError, match="preempts job 'j2', which is pending, not running"):
        replay(_scenario_with_two_jobs(), allocate=wrong)


def test_cycles_that_never_come_to_rest_stop_with_a_clear_error() -> None:
    def flip_flop(snapshot: Snapshot, now: float) -> Plan:
        running = [j for j in snapshot.jobs if j.running]
        pending = [j for j in snapshot.jobs if not j.running]
        node = snapshot.nodes[0].name
        preempt = tuple(Preemption(j.id, PreemptionReason.IN_TEAM, pending[0].id) for j in running)
        return Plan(
            starts=(Start(pending[0].id, ((node, pending[0].gpus),)),),
            preemptions=preempt,
            pending={j.id: PendingReason(PendingCode.NO_IDLE_CAPACITY, "x") for j in pending[1:]},
        )

    scenario = load(WAITING.replace("gpus: 2, submit", "gpus: 4, submit"))
    with pytest.raises(SimulationError, match="did not come to rest after 1000 cycles"):
        replay(scenario, allocate=flip_flop)


RECLAIM = """
cluster:
  node_pools: [{instance_type: ml.g5.8xlarge, count: 8, gpus_per_node: 1}]
teams:
  - {name: team-a, quota: {ml.g5.8xlarge: 4}}
  - {name: team-b, quota: {ml.g5.8xlarge: 4}, borrow_limit_percent: 100}
jobs:
  - {id: b1, team: team-b, gpus: 4, submit: -100, running_since: -100, duration: null}
  - {id: b2, team: team-b, gpus: 2, submit: 0, duration: 1000}
  - {id: a1, team: team-a, gpus: 4, submit: 5, duration: 100}
"""


def test_a_preempted_job_loses_its_progress_and_waits_again_from_the_requeue() -> None:
    result = replay(load(RECLAIM))
    b2 = result.jobs["b2"]
    assert [(p.at, p.reason, p.by) for p in b2.preempted] == [(5, "reclaim", "a1")]
    # Back at 105 when a1 finishes, from scratch: it ends 1000 s later.
    assert (b2.admitted_at, b2.finished_at, b2.state) == ((0, 105), 1105, "finished")
    team_b = result.teams["team-b"]
    assert team_b.lost_gpu_hours == pytest.approx(2 * 5 / 3600)
    assert (team_b.preemptions, team_b.starts, team_b.wait_p50_s, team_b.wait_p95_s) == (1, 2, 0, 100)
    assert result.cluster.lost_gpu_hours == pytest.approx(2 * 5 / 3600)
    assert result.cluster.preemptions == 1


def test_back_off_retry_cycles_run_before_the_end_but_do_not_extend_the_run() -> None:
    forever = load(
        RECLAIM.replace("duration: 1000", "duration: null").replace("duration: 100}", "duration: null}")
    )
    # Nothing but b2's retry cycle (at 5 + 2^0) is left after 5: the run ends at 5.
    assert replay(forever).end_time == 5
    at_5, at_20 = replay(forever, until=5), replay(forever, until=20)
    assert at_20.cluster.cycles == at_5.cluster.cycles + 1  # the retry cycle at 6
    assert at_20.jobs["b2"].state == "pending"


def test_a_retry_cycle_is_skipped_when_its_job_no_longer_waits_out_that_back_off() -> None:
    # b3 waits all along (all its team may use, with b1 running for ever), so every time
    # something happens has cycles.
    waiting = RECLAIM + "  - {id: b3, team: team-b, gpus: 8, submit: 1, duration: null}\n"
    assert replay(load(waiting), until=20).jobs["b3"].state == "pending"
    # a1 runs half a second: b2, preempted at 5, starts again at 5.5, before its back-off ends
    # at 6. Nothing happens at 6 (the engine reads the time only for back-offs, POLICY.md
    # 3.5), so no cycle runs then: the cycles are those of a run that stops at 5.9.
    restarted = load(waiting.replace("duration: 100}", "duration: 0.5}"))
    before, after = replay(restarted, until=5.9), replay(restarted, until=20)
    assert after.jobs["b2"].admitted_at == (0, 5.5)
    assert after.cluster.cycles == before.cluster.cycles
    # Cancelled at 5.5 instead: no cycle at 6 either.
    cancelled = load(waiting + "events:\n  - {at: 5.5, cancel: b2}\n")
    before, after = replay(cancelled, until=5.9), replay(cancelled, until=20)
    assert after.jobs["b2"].state == "cancelled"
    assert after.cluster.cycles == before.cluster.cycles
    # Preempted again before its first back-off ends, the job's retry is at its second one.
    again = load(
        waiting.replace("duration: 100}", "duration: 0.5}")
        + "  - {id: a2, team: team-a, gpus: 4, submit: 5.75, duration: null}\n"
    )
    result = replay(again, until=20)
    assert [p.at for p in result.jobs["b2"].preempted] == [5, 5.75]
    assert replay(again, until=6.5).cluster.cycles == replay(again, until=5.9).cluster.cycles
    at_7, at_8 = replay(again, until=7.7), replay(again, until=7.75)
    assert at_8.cluster.cycles == at_7.cluster.cycles + 1  # the retry at 5.75 + 2^1, not at 6


INTERVAL = """
cluster:
  node_pools: [{instance_type: ml.g5.8xlarge, count: 1, gpus_per_node: 4}]
teams:
  - {name: a, quota: {ml.g5.8xlarge: 4}}
jobs:
  - {id: j1, team: a, gpus: 2, submit: 0, duration: 3601}
  - {id: j2, team: a, gpus: 4, submit: 0, duration: 600}
  - {id: j3, team: a, gpus: 1, submit: 30, duration: 60}
options: {cycle_interval: 60}
"""


def test_with_a_cycle_interval_what_happens_between_two_cycles_is_decided_at_the_next() -> None:
    result = replay(load(INTERVAL))
    jobs = result.jobs
    # j3, submitted at 30, starts at the next cycle (60) beside j1; j2 needs all 4 GPUs.
    assert (jobs["j1"].admitted_at, jobs["j3"].admitted_at) == ((0,), (60,))
    # j1 ends at 3601 and gives its GPUs back then, but j2 starts at the next cycle, 3660;
    # that cycle runs although nothing happens after 3601 but it.
    assert jobs["j1"].finished_at == 3601
    assert (jobs["j2"].admitted_at, jobs["j2"].finished_at, result.end_time) == ((3660,), 4260, 4260)
    c = result.cluster
    assert c.allocated_gpu_hours == pytest.approx((2 * 3601 + 60 + 4 * 600) / 3600)
    # Idle GPUs while j2 waits: 2 until 60, 1 while j3 runs (to 120), 2 until 3601, then all 4 until 3660.
    assert c.idle_while_waiting_gpu_hours == pytest.approx((2 * 60 + 60 + 2 * 3481 + 4 * 59) / 3600)
    assert (result.teams["a"].wait_p50_s, c.wait_mean_s) == (30, pytest.approx((30 + 3660) / 3))
    # Without the interval (or with 0) the same jobs start as soon as something happens.
    for exact in (
        load(INTERVAL.replace("cycle_interval: 60", "cycle_interval: 0")),
        load(INTERVAL, cycle_interval=0),
    ):
        jobs = replay(exact).jobs
        assert (jobs["j3"].admitted_at, jobs["j2"].admitted_at) == ((30,), (3601,))


def test_with_a_cycle_interval_a_back_off_retry_waits_for_the_next_cycle() -> None:
    forever = RECLAIM.replace("duration: 1000", "duration: null").replace("duration: 100}", "duration: null}")
    scenario = load(forever + "options: {cycle_interval: 10}\n")
    result = replay(scenario)
    # a1, submitted at 5, is decided at 10 and preempts b2 then; b2's back-off ends at 11,
    # and its retry cycle is at 20, not 11 (nothing else is left: the run ends at 10).
    assert [(p.at, p.by) for p in result.jobs["b2"].preempted] == [(10, "a1")]
    assert result.end_time == 10
    at_19, at_20 = replay(scenario, until=19), replay(scenario, until=20)
    assert replay(scenario, until=10).cluster.cycles == at_19.cluster.cycles
    assert at_20.cluster.cycles == at_19.cluster.cycles + 1


def test_update_team_applies_at_its_time_and_a_waiting_job_then_fits() -> None:
    scenario = load(
        """
        cluster:
          node_pools: [{instance_type: ml.p5.48xlarge, count: 1, gpus_per_node: 8}]
        teams:
          - {name: a, quota: {ml.p5.48xlarge: 4}, sharing: dont-lend}
        jobs:
          - {id: j1, team: a, gpus: 4, submit: 0, duration: null}
          - {id: j2, team: a, gpus: 2, submit: 0, duration: null}
        events:
          - {at: 50, update_team: {name: a, quota: {ml.p5.48xlarge: 8}}}
        """
    )
    before = replay(scenario, until=49)
    assert before.jobs["j2"].pending_reason is not None
    assert before.jobs["j2"].pending_reason.code == PendingCode.WAITING_FOR_QUOTA
    assert replay(scenario).jobs["j2"].admitted_at == (50,)


def test_update_policy_applies_at_its_time() -> None:
    scenario = load(
        """
        cluster:
          node_pools: [{instance_type: ml.p5.48xlarge, count: 1, gpus_per_node: 8}]
        policy: {queueing: strict-fifo}
        teams:
          - {name: a, quota: {ml.p5.48xlarge: 8}, sharing: dont-lend}
        jobs:
          - {id: big, team: a, gpus: 6, submit: 0, duration: null}
          - {id: head, team: a, gpus: 4, submit: 1, duration: null}
          - {id: small, team: a, gpus: 1, submit: 2, duration: null}
        events:
          - {at: 30, update_policy: {queueing: best-effort-fifo}}
        """
    )
    before = replay(scenario, until=29)
    assert before.jobs["small"].pending_reason is not None
    assert before.jobs["small"].pending_reason.code == PendingCode.BLOCKED_BY_FIFO
    after = replay(scenario)
    assert after.jobs["small"].admitted_at == (30,)
    assert after.jobs["head"].state == "pending"


def test_a_replay_makes_no_reference_cycles() -> None:
    """``Replay.run`` pauses the cyclic garbage collector: it relies on the replay (the
    simulator, the engine's session and its cycles) freeing what it drops by reference
    counting. Random busy replays (preemptions, back-offs, cancels), through the what-if
    lab's reason recorder, leave nothing for the collector to find, the session still held.
    (A node, team or policy change makes the session start again and drop its state, which
    has cycles: the replay collects after every ``COLLECT_AFTER_EVENTS`` of those, and they
    are left out here.)"""

    datas = [random_scenario(random.Random(seed)) for seed in range(16)]
    for data in datas:
        data["events"] = [e for e in data["events"] if "cancel" in e]
    scenarios = [parse_scenario(data, name="random") for data in datas]
    replay(scenarios[0])  # imports and caches made once, outside the count
    gc.collect()
    sessions = [Session() for _ in scenarios]
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        # The what-if lab's replays go through its reason recorder: that too.
        results = [
            replay(s, allocate=ReasonRecorder(session))
            for s, session in zip(scenarios, sessions, strict=True)
        ]
        found = gc.collect()
    finally:
        if was_enabled:
            gc.enable()
    assert sum(r.cluster.preemptions for r in results) >= 10
    assert sum(s.rebuilds for s in sessions) == len(sessions)
    assert found == 0


def test_a_replay_collects_the_states_its_session_drops_after_node_team_and_policy_events() -> None:
    """Each of these events makes the engine's session start again from the snapshot and drop a
    state with cycles; with the collector paused, the replay collects every
    ``COLLECT_AFTER_EVENTS`` of them (and not otherwise)."""

    flaps = 2 * COLLECT_AFTER_EVENTS + 3
    events = "".join(
        f"  - {{at: {10 * i + 5}, node_down: {{instance_type: ml.g5.8xlarge, count: 1}}}}\n"
        f"  - {{at: {10 * i + 8}, node_up: {{instance_type: ml.g5.8xlarge, count: 1}}}}\n"
        for i in range(flaps)
    )
    full: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(1)

    calm, flapping = load(RECLAIM), load(RECLAIM + "events:\n" + events)
    gc.callbacks.append(count)
    try:
        replay(calm, until=10 * flaps + 20)
        calm_collections = len(full)
        result = replay(flapping, until=10 * flaps + 20)
    finally:
        gc.callbacks.remove(count)
    assert calm_collections == 0
    assert len(result.jobs["b1"].evicted_at) > 0
    assert len(full) == (2 * flaps) // COLLECT_AFTER_EVENTS


def test_snapshot_jobs_are_the_running_then_the_pending_jobs_as_they_were_at_each_cycle() -> None:
    """``SnapshotJobs`` gives each snapshot the running jobs then the pending ones, each in the
    order they became so, without copying them all at each cycle: checked against that copy at
    every cycle of random replays, again at the end (a view never moves with the replay), and
    as a tuple (equality, hash, pickle, indexing, slices)."""

    seen: list[tuple[Snapshot, tuple[Job, ...]]] = []
    rebased = 0
    for seed in range(8):
        data = random_scenario(random.Random(seed))
        data["jobs"] = data["jobs"] * 3  # enough coming and going for the views to change base
        for i, job in enumerate(data["jobs"]):
            data["jobs"][i] = {**job, "id": f"j{i}"}
        data["events"] = [e for e in data["events"] if "cancel" not in e]
        session = Session()
        holder: list[Replay] = []

        def allocate(
            snapshot: Snapshot, now: float, holder: list[Replay] = holder, session: Session = session
        ) -> Plan:
            r = holder[0]
            expected = tuple(chain(r.running_jobs.values(), r.pending_jobs.values()))
            seen.append((snapshot, expected))
            return session(snapshot, now)

        replay_ = Replay(parse_scenario(data, name="random"), allocate=allocate)
        holder.append(replay_)
        replay_.run()
        bases = {id(s.jobs._base) for s, _ in seen if isinstance(s.jobs, SnapshotJobs)}
        rebased += len(bases)
    assert len(seen) > 500 and rebased > 20
    views = [s.jobs for s, _ in seen]
    assert all(isinstance(v, SnapshotJobs) for v in views)
    assert sum(1 for v in views if v._removed or v._added_running or v._added_pending) > len(views) / 2
    for snapshot, expected in seen:
        jobs = snapshot.jobs
        assert len(jobs) == len(expected)
        assert jobs == expected and expected == jobs and tuple(jobs) == expected
        assert hash(jobs) == hash(expected)
        assert pickle.loads(pickle.dumps(jobs)) == expected
        if expected:
            assert jobs[0] is expected[0] and jobs[-1] is expected[-1] and jobs[1:] == expected[1:]
    assert views[0] != views[-1] or seen[0][1] == seen[-1][1]
