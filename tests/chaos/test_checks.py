"""The chaos run's checks catch what they are meant to catch (no database, no services).

A check that cannot fail proves nothing: each is shown a state that breaks it and one that
does not.
"""

from __future__ import annotations

import random

import pytest

from tests.chaos.driver import (
    QuotaRow,
    history_violations,
    invariant_violations,
    iter_schedule,
    kept,
    max_use,
    slurm_view_violations,
)

P5 = "ml.p5.48xlarge"
NODES = {f"node{i}": (P5, 8) for i in range(1, 5)}
QUOTAS = [QuotaRow("team-a", P5, 16, lend_limit=8), QuotaRow("team-b", P5, 16)]
READY = {P5: 32}


@pytest.mark.parametrize(
    ("row", "limit", "kept_gpus"),
    [
        (QuotaRow("t", P5, 16), 24, 0),
        (QuotaRow("t", P5, 16, lend_limit=8), 24, 8),
        (QuotaRow("t", P5, 16, sharing="lend"), 16, 0),
        (QuotaRow("t", P5, 16, sharing="dont-lend"), 16, 16),
        (QuotaRow("t", P5, 16, borrow_limit_kind="absolute", borrow_limit=4), 20, 0),
        (QuotaRow("t", P5, 16, borrow_limit_kind="unlimited"), None, 0),
        (QuotaRow("t", P5, 5, borrow_limit_percent=50), 7, 0),  # floor(5 * 50 / 100) = 2
    ],
)
def test_max_use_and_kept_follow_policy_section_2(row: QuotaRow, limit: int | None, kept_gpus: int) -> None:
    assert (max_use(row), kept(row)) == (limit, kept_gpus)


def test_a_state_within_every_limit_has_no_violation() -> None:
    running = [
        (1, "team-a", P5, 16, [["node1", 8], ["node2", 8]]),
        (2, "team-b", P5, 8, [["node3", 8]]),
        (3, "team-b", P5, 4, [["node4", 4]]),
    ]
    assert invariant_violations(nodes=NODES, running=running, quotas=QUOTAS, ready_gpus=READY) == []


@pytest.mark.parametrize(
    ("running", "expected"),
    [
        (
            [(1, "team-a", P5, 8, [["node1", 8]]), (2, "team-b", P5, 4, [["node1", 4]])],
            "inv 1: node node1 holds 12",
        ),
        ([(1, "team-a", P5, 8, [["node9", 8]])], "inv 1: job 1 runs on unknown node node9"),
        ([(1, "team-a", P5, 8, [["node1", 4]])], "inv 1: job 1 runs 8 GPUs but is placed on"),
        (
            [(i, "team-b", P5, 8, [[f"node{i}", 8]]) for i in range(1, 5)],
            "inv 2: team-b uses 32 GPUs of ml.p5.48xlarge, max_use 24",
        ),
    ],
)
def test_each_broken_invariant_is_named(
    running: list[tuple[int, str, str, int, list[list[object]]]], expected: str
) -> None:
    problems = invariant_violations(nodes=NODES, running=running, quotas=QUOTAS, ready_gpus=READY)
    assert any(problem.startswith(expected) for problem in problems), problems


def test_borrowing_into_a_teams_kept_quota_breaks_invariant_3() -> None:
    # team-a keeps 8 (lend_limit 8): the pool is 8 + 16 = 24. team-b at its max_use (24) is
    # within invariant 2, yet with team-a's 8 of kept quota idle the 32 GPUs would need 8 of it.
    nodes = {**NODES, "node5": (P5, 8)}
    running = [(i, "team-b", P5, 8, [[f"node{i}", 8]]) for i in range(1, 4)]
    running.append((9, "team-a", P5, 8, [["node4", 8]]))
    quotas = [
        QuotaRow("team-a", P5, 16, lend_limit=8),
        QuotaRow("team-b", P5, 16, borrow_limit_kind="unlimited"),
    ]
    running.append((10, "team-b", P5, 8, [["node5", 8]]))

    problems = invariant_violations(nodes=nodes, running=running, quotas=quotas, ready_gpus={P5: 32})

    assert problems == ["inv 3: ml.p5.48xlarge: borrowers use 32 GPUs of a pool of 24"]


def test_history_catches_a_second_start_and_a_preemption_ring() -> None:
    at = "2026-01-01T00:00:00+00:00"
    fine = [(1, 7, "submitted", None, at), (2, 7, "started", None, at), (3, 7, "preempted", 8, at),
            (4, 7, "requeued", None, at), (5, 7, "started", None, at), (6, 7, "finished", None, at)]  # fmt: skip
    assert history_violations(fine) == []

    twice = [(1, 7, "started", None, at), (2, 7, "started", None, at)]
    assert history_violations(twice) == ["job 7 started again (event 2) while it ran"]

    ring = [(1, 7, "preempted", 8, at), (2, 8, "preempted", 7, at)]
    assert history_violations(ring) == [f"inv 7: jobs 7 and 8 preempted each other at {at}"]
    later = [(1, 7, "preempted", 8, at), (2, 8, "preempted", 7, "2026-01-01T00:00:05+00:00")]
    assert history_violations(later) == []


def test_slurm_view_catches_two_running_copies_of_one_job() -> None:
    lines = [
        "10|gpugovchaos-1-5|RUNNING",
        "11|gpugovchaos-1-5|PENDING",
        "12|gpugovchaos-1-6|RUNNING",
        "13|other|RUNNING",
    ]
    assert slurm_view_violations(lines, "gpugovchaos-1-") == []
    assert slurm_view_violations([*lines, "14|gpugovchaos-1-6|RUNNING"], "gpugovchaos-1-") == [
        "job 6 runs twice in Slurm: ['12', '14']"
    ]


def test_the_schedule_has_every_fault_and_the_kills_inside_the_window() -> None:
    schedule = list(iter_schedule(random.Random(1), 150, 20))
    kinds = [what for _, what in schedule]
    assert kinds.count("kill-worker") == 20
    assert {"restart-redis", "restart-postgres", "stop-slurmctld", "start-slurmctld"} <= set(kinds)
    assert kinds.index("stop-slurmctld") < kinds.index("start-slurmctld")
    assert kinds.index("drain node3") < kinds.index("resume node3")
    assert all(0 < at < 150 for at, _ in schedule) and schedule == sorted(schedule)
