"""Random small scenarios replay without error and their figures add up (hypothesis)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocations.simulation import parse_scenario, replay

IT = "ml.g5.12xlarge"  # 4 GPUs a node


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    nodes = draw(st.integers(1, 4))
    teams = []
    for i in range(draw(st.integers(1, 3))):
        team: dict[str, Any] = {
            "name": f"t{i}",
            "quota": {IT: draw(st.integers(0, 8))},
            "sharing": draw(st.sampled_from(["lend-and-borrow", "lend", "dont-lend"])),
            "fair_share_weight": draw(st.integers(0, 3)),
        }
        if draw(st.booleans()):
            team["borrow_limit"] = "unlimited"
        teams.append(team)
    jobs = []
    for j in range(draw(st.integers(1, 10))):
        jobs.append(
            {
                "id": f"j{j}",
                "team": f"t{draw(st.integers(0, len(teams) - 1))}",
                "gpus": draw(st.sampled_from([1, 2, 3, 4, 8])),
                "priority": draw(st.sampled_from([None, "low", "high"])),
                "submit": draw(st.integers(0, 50)),
                "duration": draw(st.sampled_from([None, 5, 10, 30])),
            }
        )
    events = []
    if nodes > 1 and draw(st.booleans()):
        events = [
            {"at": draw(st.integers(0, 40)), "node_down": {"count": 1}},
            {"at": 45, "node_up": {"count": 1}},
        ]
    return {
        "cluster": {"node_pools": [{"instance_type": IT, "count": nodes, "gpus_per_node": 4}]},
        "policy": {
            "idle_allocation": draw(st.sampled_from(["fair-share", "first-come-first-serve"])),
            "queueing": draw(st.sampled_from(["best-effort-fifo", "strict-fifo"])),
            "priority_classes": [{"name": "high", "weight": 80}, {"name": "low", "weight": 10}],
        },
        "teams": teams,
        "jobs": jobs,
        "events": events,
        "options": {"keep_unfit": True},
        "horizon": 120,
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_a_random_scenario_replays_and_its_figures_add_up(data: dict[str, Any]) -> None:
    result = replay(parse_scenario(data))
    c = result.cluster
    teams = result.teams.values()
    assert sum(t.gpu_hours for t in teams) == pytest.approx(c.allocated_gpu_hours)
    assert c.allocated_gpu_hours <= c.capacity_gpu_hours + 1e-9
    assert c.idle_while_waiting_gpu_hours <= c.capacity_gpu_hours - c.allocated_gpu_hours + 1e-9
    # Every borrowed GPU-hour is somebody's lent quota or capacity in no quota.
    assert sum(t.lent_gpu_hours for t in teams) <= sum(t.borrowed_gpu_hours for t in teams) + 1e-9
    for job in result.jobs.values():
        assert len(job.admitted_at) <= 1 + len(job.preempted) + len(job.evicted_at)
        if job.state == "pending":
            assert job.pending_reason is not None, job
        if job.state == "finished":
            assert job.finished_at is not None and job.finished_at <= result.end_time
    assert (
        sum(t.preemptions for t in teams)
        == c.preemptions
        == sum(len(j.preempted) for j in result.jobs.values())
    )
