"""A team written as a scenario entry (``team_scenario``) reads back (``read_team``) as the same
team: the what-if lab writes the draft's teams so, and ``manage.py simulate`` on its export must
replay what the run replayed."""

from __future__ import annotations

import random

import pytest

from allocations.engine.snapshot import (
    ClusterPolicy,
    InstanceType,
    PreemptTeamTasks,
    PreemptWhileBorrowing,
    Quota,
    Reclaim,
    Sharing,
    Team,
)
from allocations.simulation.cluster import read_team, team_scenario
from allocations.simulation.reading import Reader

TYPES = {name: InstanceType(name=name, gpus_per_node=8) for name in ("ml.a", "ml.b", "ml.c")}


def _random_quota(rng: random.Random) -> Quota:
    quota = rng.randrange(0, 40)
    kind = rng.choice(["percent", "absolute", "unlimited"])
    return Quota(
        quota=quota,
        lend_limit=rng.choice([None, rng.randrange(0, quota + 1)]),
        borrow_limit_percent=rng.choice([0, 25, 50, 50, 100, 300]),
        borrow_limit=rng.randrange(0, 50) if kind == "absolute" else None,
        borrow_unlimited=kind == "unlimited",
    )


def _random_team(rng: random.Random) -> Team:
    reclaim = rng.choice(list(Reclaim))
    choices = [None, PreemptWhileBorrowing.NEVER]
    if reclaim is not Reclaim.NEVER:
        choices.append(PreemptWhileBorrowing.LOWER_PRIORITY)
    preempt_while_borrowing = rng.choice(choices)
    return Team(
        name=f"team-{rng.randrange(1000)}",
        quotas={t: _random_quota(rng) for t in TYPES if rng.random() < 0.8},
        active=rng.random() < 0.9,
        sharing=rng.choice(list(Sharing)),
        fair_share_weight=rng.randrange(0, 101),
        preempt_team_tasks=rng.choice(list(PreemptTeamTasks)),
        reclaim=reclaim,
        preempt_while_borrowing=preempt_while_borrowing,
        preempt_while_borrowing_max_priority=(
            rng.choice([None, rng.randrange(0, 101)]) if preempt_while_borrowing is not None else None
        ),
        max_running_gpus_per_member=rng.choice([None, None, rng.randrange(1, 65)]),
    )


def _borrow_cap(q: Quota) -> int | None:
    """What a quota lets its team borrow (None: no limit), POLICY.md section 2's ``max_use``."""
    if q.borrow_unlimited:
        return None
    return q.borrow_limit if q.borrow_limit is not None else q.quota * q.borrow_limit_percent // 100


@pytest.mark.parametrize("seed", range(300))
def test_a_team_written_as_a_scenario_entry_reads_back_the_same(seed: int) -> None:
    team = _random_team(random.Random(seed))
    reader = Reader()
    read = read_team(reader, team_scenario(team, list(TYPES)), "teams[0]", TYPES, ClusterPolicy(), None)
    assert reader.errors == []
    assert read is not None
    settings = (
        "name",
        "active",
        "sharing",
        "fair_share_weight",
        "preempt_team_tasks",
        "reclaim",
        "max_running_gpus_per_member",
    )
    assert [getattr(read, f) for f in settings] == [getattr(team, f) for f in settings]
    assert read.preempt_while_borrowing == team.preempt_while_borrowing
    assert read.preempt_while_borrowing_max_priority == team.preempt_while_borrowing_max_priority
    for name in TYPES:
        written, back = team.quotas.get(name, Quota()), read.quotas[name]
        assert (back.quota, back.lend_limit, _borrow_cap(back)) == (
            written.quota,
            written.lend_limit,
            _borrow_cap(written),
        )
