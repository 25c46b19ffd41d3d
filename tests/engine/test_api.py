"""The engine's public helpers and its answers to bad input (POLICY.md sections 1 and 2)."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import allocations.engine as engine
from allocations.engine import (
    ClusterPolicy,
    InstanceType,
    Job,
    Node,
    PendingCode,
    PriorityClass,
    Quota,
    Snapshot,
    TaskRanking,
    Team,
    allocate,
    job_priority,
    never_fits,
)
from allocations.engine.ranking import history_terms, share_key, share_units

P5 = "ml.p5.48xlarge"
POLICY = ClusterPolicy(priority_classes=(PriorityClass("inference", 100), PriorityClass("training", 50)))
SNAPSHOT = Snapshot(
    instance_types=(InstanceType(P5, 8),),
    nodes=(Node("n1", P5, 8), Node("n2", P5, 8, ready=False)),
    teams=(
        Team("team-a", {P5: Quota(quota=8, borrow_limit_percent=100)}),
        Team("team-b", {P5: Quota(quota=8)}),
    ),
    policy=POLICY,
    jobs=(),
)


def job(gpus: int, team: str = "team-a", priority: str | None = None, instance_type: str = P5) -> Job:
    return Job("j", team, instance_type, gpus, 0.0, priority_class=priority)


def test_public_api_is_exported() -> None:
    assert {"allocate", "never_fits", "job_priority"} <= set(engine.__all__)


@pytest.mark.parametrize(
    ("priority", "ranking", "expected"),
    [
        ("inference", TaskRanking.PRIORITY, 100),
        ("training", TaskRanking.PRIORITY, 50),
        (None, TaskRanking.PRIORITY, 0),
        ("gone", TaskRanking.PRIORITY, 0),
        ("inference", TaskRanking.FIRST_COME_FIRST_SERVE, 0),
    ],
)
def test_s1_effective_priority(priority: str | None, ranking: TaskRanking, expected: int) -> None:
    policy = dataclasses.replace(POLICY, task_ranking=ranking)
    assert job_priority(policy, job(1, priority=priority)) == expected


def test_s2_never_fits_is_none_for_a_job_that_may_fit_some_day() -> None:
    # 16 = two whole nodes, one of them not ready now: it may come back.
    assert never_fits(SNAPSHOT, job(16)) is None


def test_s2_never_fits_beyond_max_use_names_the_numbers() -> None:
    reason = never_fits(SNAPSHOT, job(24, team="team-b"))
    assert reason is not None
    assert reason.code == PendingCode.EXCEEDS_MAX
    assert "team-b may use at most 12" in reason.message


def test_s2_never_fits_a_job_that_is_not_a_whole_number_of_nodes() -> None:
    reason = never_fits(SNAPSHOT, job(12))
    assert reason is not None
    assert reason.code == PendingCode.EXCEEDS_MAX
    assert "not a whole number of nodes" in reason.message
    assert "multiple of 8" in reason.message


def test_s2_never_fits_more_than_the_nodes_hold() -> None:
    # A quota above the cluster: limits and pool allow 24, the two nodes (ready or not) do not.
    big = Team("team-c", {P5: Quota(quota=32, borrow_limit_percent=0)})
    snapshot = dataclasses.replace(SNAPSHOT, teams=(*SNAPSHOT.teams, big))
    reason = never_fits(snapshot, job(24, team="team-c"))
    assert reason is not None
    assert "the cluster has 16" in reason.message


@pytest.mark.parametrize(
    ("bad", "field", "value"),
    [
        (job(1, team="nobody"), "job.team", "nobody"),
        (job(1, instance_type="ml.none"), "job.instance_type", "ml.none"),
        (job(0), "job.gpus", "0"),
    ],
)
def test_never_fits_rejects_bad_input_naming_field_and_value(bad: Job, field: str, value: str) -> None:
    with pytest.raises(ValueError, match=field) as info:
        never_fits(SNAPSHOT, bad)
    assert value in str(info.value)


def test_allocate_rejects_an_inconsistent_snapshot_naming_the_path() -> None:
    snapshot = dataclasses.replace(SNAPSHOT, jobs=(job(1), dataclasses.replace(job(1, team="ghost"), id="k")))
    with pytest.raises(ValueError, match=r"jobs\[1\]\.team: unknown team 'ghost'"):
        allocate(snapshot, 0.0)


def test_allocate_rejects_a_job_on_an_unknown_node() -> None:
    snapshot = dataclasses.replace(SNAPSHOT, jobs=(dataclasses.replace(job(1), nodes=(("n9", 1),)),))
    with pytest.raises(ValueError, match=r"jobs\[0\]\.nodes: unknown node 'n9'"):
        allocate(snapshot, 0.0)


def _jobs(*specs: tuple[str, Job]) -> tuple[Job, ...]:
    return tuple(dataclasses.replace(j, id=job_id) for job_id, j in specs)


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        # The pending jobs are checked by group, not one by one: the error still names the
        # first bad job by its index, pending or running.
        (
            _jobs(("a", job(1)), ("b", job(1, instance_type="ml.none"))),
            r"jobs\[1\]\.instance_type: unknown instance type 'ml.none'",
        ),
        (_jobs(("a", job(1)), ("b", job(0))), r"jobs\[1\]\.gpus: must be above 0, got 0"),
        (_jobs(("a", job(1)), ("b", job(2)), ("a", job(2))), r"jobs\[2\]\.id: duplicate job id 'a'"),
        (
            _jobs(("a", dataclasses.replace(job(1), nodes=(("n1", 1),))), ("a", job(1))),
            r"jobs\[1\]\.id: duplicate job id 'a'",
        ),
        (
            _jobs(("a", job(1, team="ghost")), ("b", dataclasses.replace(job(1), nodes=(("n9", 1),)))),
            r"jobs\[0\]\.team: unknown team 'ghost'",
        ),
        (
            _jobs(("a", dataclasses.replace(job(1), nodes=(("n9", 1),))), ("b", job(1, team="ghost"))),
            r"jobs\[0\]\.nodes: unknown node 'n9'",
        ),
    ],
)
def test_allocate_names_the_first_bad_job_pending_or_running(jobs: tuple[Job, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        allocate(dataclasses.replace(SNAPSHOT, jobs=jobs), 0.0)


@pytest.mark.parametrize("weight", [101, -1])
def test_allocate_rejects_a_fair_share_weight_out_of_0_to_100(weight: int) -> None:
    teams = (SNAPSHOT.teams[0], dataclasses.replace(SNAPSHOT.teams[1], fair_share_weight=weight))
    with pytest.raises(ValueError, match=r"teams\[1\]\.fair_share_weight: must be 0\.\.100, got "):
        allocate(dataclasses.replace(SNAPSHOT, teams=teams), 0.0)


def test_allocate_refuses_a_fair_share_weight_that_is_not_a_whole_number() -> None:
    # Outside the declared type (``int``): the sources raise ValueError naming the field, the
    # compiled build TypeError when it reads the attribute. Neither computes a share with it.
    teams = (SNAPSHOT.teams[0], dataclasses.replace(SNAPSHOT.teams[1], fair_share_weight=1.5))
    with pytest.raises((ValueError, TypeError)):
        allocate(dataclasses.replace(SNAPSHOT, teams=teams), 0.0)


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 100)), min_size=2, max_size=8))
@settings(max_examples=300, deadline=None)
def test_s3_2_share_keys_order_teams_as_the_exact_ratio_borrowed_over_weight(
    teams: list[tuple[int, int]],
) -> None:
    """POLICY.md 3.2: shares compare as ``borrowed / weight`` exactly, a team of weight 0 that
    borrows after every other, between those the unweighted ``borrowed``; the units come from
    the weights of the cycle's teams only (``share_units``)."""
    units = share_units(w for _, w in teams)

    def exact(borrowed: int, weight: int) -> tuple[int, Fraction]:
        if borrowed <= 0:
            return (0, Fraction(0))
        return (1, Fraction(borrowed)) if weight == 0 else (0, Fraction(borrowed, weight))

    for b1, w1 in teams:
        for b2, w2 in teams:
            mine, theirs = share_key(b1, units[w1], 1), share_key(b2, units[w2], 1)
            assert (mine < theirs) == (exact(b1, w1) < exact(b2, w2))
            assert (mine == theirs) == (exact(b1, w1) == exact(b2, w2))


HISTORY_POLICY = dataclasses.replace(POLICY, fair_share_half_life_s=3600.0, fair_share_history_percent=50)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"borrowed_history": {"ghost": 1.0}}, r"borrowed_history\['ghost'\]: unknown team 'ghost'"),
        (
            {"borrowed_history": {"team-a": -1.0}},
            r"borrowed_history\['team-a'\]: must be 0 or more, got -1\.0",
        ),
        ({"borrowed_history": {"team-a": float("nan")}}, r"borrowed_history\['team-a'\]: must be 0 or more"),
        (
            {"policy": dataclasses.replace(HISTORY_POLICY, fair_share_history_percent=101)},
            r"policy\.fair_share_history_percent: must be 0\.\.100, got 101",
        ),
        (
            {"policy": dataclasses.replace(HISTORY_POLICY, fair_share_half_life_s=-5.0)},
            r"policy\.fair_share_half_life_s: must be 0 or more, got -5\.0",
        ),
    ],
)
def test_allocate_rejects_bad_history_naming_field_and_value(
    changes: dict[str, object], message: str
) -> None:
    fields: dict[str, object] = {"policy": HISTORY_POLICY, "jobs": (job(1),), **changes}
    snapshot = dataclasses.replace(SNAPSHOT, **fields)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        allocate(snapshot, 0.0)


def test_s3_2_history_counts_beside_borrowing_now_by_its_percentage() -> None:
    """docs/fairness.md: at 25%, 4 GPUs borrowed now and none lately weigh 3, as 0 now and 12
    lately do; at 100, history alone decides and each GPU now only breaks a tie."""
    quarter = dataclasses.replace(HISTORY_POLICY, fair_share_history_percent=25)
    a = share_key(4, 1, 10, *history_terms(quarter, 0.0))
    b = share_key(0, 1, 10, *history_terms(quarter, 12.0))
    assert a == b
    whole = dataclasses.replace(HISTORY_POLICY, fair_share_history_percent=100)
    assert share_key(50, 1, 10, *history_terms(whole, 1.0)) < share_key(0, 1, 10, *history_terms(whole, 1.5))
    assert share_key(2, 1, 10, *history_terms(whole, 1.0)) > share_key(1, 1, 10, *history_terms(whole, 1.0))
    assert history_terms(dataclasses.replace(whole, fair_share_half_life_s=0.0), 9.0) == (0, 1)


def test_min_runtime_of_takes_the_class_override_else_the_policy() -> None:
    """docs/preemption.md 1 and 7: ``min_runtime_s`` on a class (None: the policy's)."""
    policy = ClusterPolicy(
        min_runtime_s=600,
        priority_classes=(PriorityClass("inference", 100, min_runtime_s=0), PriorityClass("training", 50)),
    )
    job = Job("j", "team-a", P5, 1, 0.0)
    assert engine.min_runtime_of(policy, job) == 600
    assert engine.min_runtime_of(policy, dataclasses.replace(job, priority_class="inference")) == 0
    assert engine.min_runtime_of(policy, dataclasses.replace(job, priority_class="training")) == 600
    assert engine.min_runtime_of(policy, dataclasses.replace(job, priority_class="gone")) == 600


def test_lost_work_is_the_time_since_the_last_checkpoint() -> None:
    """docs/preemption.md 2: without checkpoints the whole run is lost; with them, the time
    since the last one, and the rest of the run is kept."""
    job = Job("j", "team-a", P5, 2, 0.0, nodes=(("n1", 2),), started_at=100.0)
    assert engine.lost_work_s(job, 1100.0) == 1000.0
    assert engine.last_checkpoint_s(job, 1100.0) == 0.0
    saved = dataclasses.replace(job, checkpoint_interval_s=300.0)
    assert engine.lost_work_s(saved, 1100.0) == 100.0
    assert engine.last_checkpoint_s(saved, 1100.0) == 900.0
    assert engine.lost_work_s(saved, 250.0) == 150.0
    assert engine.lost_work_s(dataclasses.replace(job, started_at=None), 1100.0) == 0.0
