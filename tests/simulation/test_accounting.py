"""Accounting (allocations/engine/accounting.py): who uses whose GPUs, worked by hand."""

from __future__ import annotations

import pytest

from allocations.engine.accounting import account, account_snapshot
from allocations.engine.snapshot import ClusterPolicy, InstanceType, Job, Node, Quota, Sharing, Snapshot, Team

P5 = "ml.p5.48xlarge"


def team(name: str, quota: int, **kwargs: object) -> Team:
    lend_limit = kwargs.pop("lend_limit", None)
    return Team(name=name, quotas={P5: Quota(quota=quota, lend_limit=lend_limit)}, **kwargs)  # type: ignore[arg-type]


def run(capacity: int, teams: list[Team], used: dict[str, int], share_unallocated: bool = True):
    return account(
        instance_types=[P5],
        capacity={P5: capacity},
        teams=teams,
        policy=ClusterPolicy(share_unallocated=share_unallocated),
        used={(name, P5): gpus for name, gpus in used.items()},
    )


def test_a_borrower_uses_the_lenders_unused_quota_when_nothing_is_unallocated() -> None:
    acc = run(8, [team("a", 8), team("b", 0)], {"a": 4, "b": 4})
    a, b = acc.team("a", P5), acc.team("b", P5)
    assert (a.used_within_quota, a.borrowed, a.lent, a.idle_quota) == (4, 0, 4, 0)
    assert (b.used, b.used_within_quota, b.borrowed, b.lent) == (4, 0, 4, 0)
    t = acc.instance_type(P5)
    assert (t.capacity, t.allocated, t.idle, t.unallocated, t.unallocated_used) == (8, 8, 0, 0, 0)


def test_borrowing_is_drawn_from_unallocated_capacity_first() -> None:
    acc = run(16, [team("a", 8), team("b", 0)], {"b": 12})
    assert acc.instance_type(P5).unallocated_used == 8
    assert acc.team("a", P5).lent == 4
    assert acc.team("a", P5).idle_quota == 4


def test_without_share_unallocated_lenders_are_drawn_first() -> None:
    acc = run(16, [team("a", 8), team("b", 0)], {"b": 12}, share_unallocated=False)
    assert acc.team("a", P5).lent == 8
    assert acc.instance_type(P5).unallocated_used == 4


def test_lent_is_split_in_proportion_to_unused_lendable_quota() -> None:
    acc = run(8, [team("a", 6), team("c", 2), team("b", 0)], {"b": 4})
    assert acc.team("a", P5).lent == pytest.approx(3)
    assert acc.team("c", P5).lent == pytest.approx(1)
    assert acc.team("a", P5).idle_quota == pytest.approx(3)


def test_dont_lend_and_lend_limit_keep_quota_out_of_the_first_draw() -> None:
    teams = [
        team("keeper", 4, sharing=Sharing.DONT_LEND),
        team("limited", 4, lend_limit=1),
        team("open", 2),
        team("b", 0),
    ]
    acc = run(10, teams, {"b": 3})
    # Lendable unused: keeper 0, limited 1, open 2 -> 3 GPUs cover the borrowing exactly.
    assert acc.team("keeper", P5).lent == 0
    assert acc.team("limited", P5).lent == pytest.approx(1)
    assert acc.team("open", P5).lent == pytest.approx(2)


def test_borrowing_beyond_lendable_quota_is_still_attributed_and_sums_agree() -> None:
    # A team turned dont-lend while b kept its jobs: the rest of the unused quota is drawn.
    acc = run(8, [team("a", 8, sharing=Sharing.DONT_LEND), team("b", 0)], {"b": 6})
    assert acc.team("a", P5).lent == pytest.approx(6)
    assert acc.team("a", P5).idle_quota == pytest.approx(2)


@pytest.mark.parametrize(
    ("capacity", "quotas", "used", "share"),
    [
        (16, [8, 4, 0], [2, 9, 3], True),
        (16, [8, 4, 0], [2, 9, 3], False),
        (12, [8, 8, 0], [10, 0, 2], True),  # fewer ready GPUs than quotas (a node is down)
        (20, [3, 3, 3], [0, 6, 6], True),
        (20, [3, 3, 3], [0, 6, 6], False),
    ],
)
def test_lent_plus_unallocated_used_equals_borrowed(
    capacity: int, quotas: list[int], used: list[int], share: bool
) -> None:
    teams = [team(f"t{i}", q) for i, q in enumerate(quotas)]
    acc = run(capacity, teams, {f"t{i}": u for i, u in enumerate(used)}, share_unallocated=share)
    borrowed = sum(r.borrowed for r in acc.teams)
    lent = sum(r.lent for r in acc.teams)
    assert lent + acc.instance_type(P5).unallocated_used == pytest.approx(borrowed)
    for row in acc.teams:
        assert row.lent + row.idle_quota == pytest.approx(max(0, row.quota - row.used))


def test_account_snapshot_counts_running_and_pending_jobs_and_only_ready_nodes() -> None:
    snapshot = Snapshot(
        instance_types=(InstanceType(P5, 8),),
        nodes=(Node("n1", P5, 8), Node("n2", P5, 8, ready=False)),
        teams=(team("a", 4), team("b", 0)),
        policy=ClusterPolicy(),
        jobs=(
            Job("r1", "a", P5, 2, 0.0, nodes=(("n1", 2),)),
            Job("r2", "b", P5, 4, 0.0, nodes=(("n1", 4),)),
            Job("p1", "b", P5, 8, 0.0),
            Job("p2", "b", P5, 1, 0.0),
        ),
    )
    acc = account_snapshot(snapshot)
    t = acc.instance_type(P5)
    assert (t.capacity, t.allocated, t.idle, t.unallocated, t.pending_gpus, t.pending_jobs) == (
        8,
        6,
        2,
        4,
        9,
        2,
    )
    b = acc.team("b", P5)
    assert (b.used, b.borrowed, b.pending_gpus, b.pending_jobs) == (4, 4, 9, 2)
    assert t.unallocated_used == 4
    assert acc.team("a", P5).lent == 0
