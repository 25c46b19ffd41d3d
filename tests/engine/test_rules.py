"""Table-driven cases for POLICY.md sections 2 to 5, one named case per rule.

Each case id starts with the section it checks (``s4_...``); where a Kueue scheduler or
preemption test covers the same rule, the docstring names it (``mirrors Kueue preemption_test
'...'``). Kueue's CPU quantities map to GPUs one for one; its priorities -1/0/1 to the classes
low/mid/high below; its ClusterQueues c1/c2 to teams.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from allocations.engine import Plan, allocate

from .scenarios import build, settle

T = "ml.t"
CLASSES = [{"name": "low", "weight": 10}, {"name": "mid", "weight": 20}, {"name": "high", "weight": 30}]


def pool(count: int, per_node: int) -> dict[str, Any]:
    return {"node_pools": [{"instance_type": T, "count": count, "gpus_per_node": per_node}]}


def team(name: str, quota: int, **settings: Any) -> dict[str, Any]:
    """A team spec; ``lend_limit``/``borrow_limit`` given as plain numbers apply to ``T``."""
    spec: dict[str, Any] = {"name": name, "quota": {T: quota}}
    for key, value in settings.items():
        if key in {"lend_limit", "borrow_limit"} and isinstance(value, int):
            value = {T: value}
        spec[key] = value
    return spec


def running(
    job_id: str, team_name: str, gpus: int, prio: str | None = None, since: float = -100, **kw: Any
) -> dict[str, Any]:
    return {
        "id": job_id,
        "team": team_name,
        "gpus": gpus,
        "priority": prio,
        "submit": since,
        "running_since": since,
        **kw,
    }


def pending(
    job_id: str, team_name: str, gpus: int, prio: str | None = None, submit: float = 0, **kw: Any
) -> dict[str, Any]:
    return {"id": job_id, "team": team_name, "gpus": gpus, "priority": prio, "submit": submit, **kw}


def scenario(
    cluster: dict[str, Any], teams: list[dict[str, Any]], jobs: list[dict[str, Any]], **policy: Any
) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "teams": teams,
        "jobs": jobs,
        "policy": {"priority_classes": CLASSES, **policy},
    }


@dataclass
class Case:
    """One cycle at ``now`` (or, with ``settle``, cycles until rest) and what must come out."""

    id: str
    doc: str
    spec: dict[str, Any]
    starts: set[str] | None = None  # exactly these start (with settle: exactly these run at rest)
    preempted: dict[str, tuple[str, str]] = field(default_factory=dict)  # exhaustive
    pending: dict[str, str] = field(default_factory=dict)  # job -> code
    messages: dict[str, str] = field(default_factory=dict)  # job -> substring of its message
    nodes: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    now: float = 0.0
    settle: bool = False


FCFS = {"idle_allocation": "first-come-first-serve"}


def victim_order_one_instant(j1_priority: str = "high") -> dict[str, Any]:
    """docs/examples/victim-order-one-instant.yaml (its classes: high 30, mid 20, low 10)."""
    borrowing = {"policy": "lower-priority", "max_priority": 20}
    return scenario(
        pool(7, 1),
        [
            team(
                "t0",
                2,
                borrow_limit_percent=50,
                preempt_team_tasks="lower-or-newer-equal-priority",
                reclaim="any",
                preempt_while_borrowing=borrowing,
            ),
            team(
                "t1",
                2,
                borrow_limit="unlimited",
                preempt_team_tasks="never",
                reclaim="lower-priority",
                preempt_while_borrowing=borrowing,
            ),
        ],
        [
            running("j1", "t1", 4, j1_priority, since=-48),
            running("j7", "t0", 3, "low", since=-10),
            pending("j3", "t0", 2, "low", submit=-30),
            pending("j6", "t1", 2, "mid", submit=-48),
        ],
        **FCFS,
    )


KUEUE_COHORT = [
    team("c1", 6, borrow_limit=6, preempt_team_tasks="lower-priority", reclaim="lower-priority"),
    team("c2", 6, borrow_limit=6, preempt_team_tasks="never", reclaim="any"),
]

CASES = [
    # -- section 2: accounting and fit ----------------------------------------------------
    Case(
        "s2_percent_borrow_limit_is_floored",
        "quota 5 at 50% may use 5 + floor(2.5) = 7",
        scenario(
            pool(1, 16),
            [team("b", 5, borrow_limit_percent=50), team("o", 11)],
            [pending("b1", "b", 7), pending("b2", "b", 1, submit=1), pending("b3", "b", 8, submit=2)],
        ),
        starts={"b1"},
        pending={"b2": "borrow-limit", "b3": "exceeds-max"},
        messages={"b2": "uses 7 of its 7 GPU limit", "b3": "at most 7"},
    ),
    Case(
        "s2_absolute_borrow_limit_overrides_the_percentage",
        "borrow_limit 1 beats 50% of 4",
        scenario(
            pool(1, 16),
            [team("b", 4, borrow_limit_percent=50, borrow_limit=1), team("o", 12)],
            [pending("b1", "b", 5), pending("b2", "b", 6, submit=1)],
        ),
        starts={"b1"},
        pending={"b2": "exceeds-max"},
        messages={"b2": "at most 5"},
    ),
    Case(
        "s2_unlimited_borrowing_is_bounded_by_the_pool",
        "pool = lendable quota + unallocated capacity",
        scenario(
            pool(1, 8),
            [team("o", 4), team("z", 0, borrow_limit="unlimited")],
            [pending("z1", "z", 8), pending("z2", "z", 1, submit=1)],
        ),
        starts={"z1"},
        pending={"z2": "no-idle-capacity"},
        messages={"z2": "0 GPUs idle in the pool, 1 needed"},
    ),
    Case(
        "s2_lend_limit_keeps_the_rest_of_the_quota",
        "mirrors Kueue lendingLimit: only 2 of team a's 8 are lent; 2 GPUs of a's kept 6 stay idle for a",
        scenario(
            pool(1, 8),
            [team("a", 8, lend_limit=2), team("b", 0, borrow_limit="unlimited")],
            [
                pending("b1", "b", 3),
                pending("b2", "b", 2, submit=1),
                pending("b3", "b", 1, submit=3),
                pending("a1", "a", 4, submit=2),
            ],
        ),
        starts={"a1", "b2"},
        pending={"b1": "exceeds-max", "b3": "no-idle-capacity"},
        messages={"b1": "0 kept + a pool of 2", "b3": "0 GPUs idle in the pool, 1 needed"},
    ),
    Case(
        "s2_lend_team_never_borrows",
        "sharing lend: max_use = quota",
        scenario(
            pool(1, 8),
            [team("l", 2, sharing="lend"), team("o", 6)],
            [pending("l1", "l", 2), pending("l2", "l", 1, submit=1), pending("l3", "l", 3, submit=2)],
        ),
        starts={"l1"},
        pending={"l2": "waiting-for-quota", "l3": "exceeds-max"},
        messages={"l2": "may not borrow"},
    ),
    Case(
        "s2_dont_lend_quota_is_never_in_the_pool",
        "kept + pool = 0 for a team without quota when the only quota is dont-lend: can never fit",
        scenario(
            pool(1, 4),
            [team("a", 4, sharing="dont-lend"), team("z", 0, borrow_limit="unlimited")],
            [pending("z1", "z", 1)],
        ),
        starts=set(),
        pending={"z1": "exceeds-max"},
        messages={"z1": "0 kept + a pool of 0"},
    ),
    Case(
        "s2_unallocated_capacity_is_shared_when_share_unallocated",
        "8 GPUs in no quota join the 2 lendable",
        scenario(
            pool(1, 16),
            [team("a", 8, lend_limit=2), team("z", 0, borrow_limit="unlimited")],
            [pending("z1", "z", 4)],
        ),
        starts={"z1"},
    ),
    Case(
        "s2_unallocated_capacity_is_not_shared_without_share_unallocated",
        "without it the pool is a's 2 lendable GPUs: 4 can never fit",
        scenario(
            pool(1, 16),
            [team("a", 8, lend_limit=2), team("z", 0, borrow_limit="unlimited")],
            [pending("z1", "z", 4)],
            share_unallocated=False,
        ),
        starts=set(),
        pending={"z1": "exceeds-max"},
    ),
    Case(
        "s2_best_fit_takes_the_fullest_node_that_has_room",
        "free 2 / 4 / 8: a 3 goes to the node with 4 free, a 2 to the one with 2, an 8 to the empty one",
        scenario(
            {"nodes": [{"name": n, "instance_type": T, "gpus": 8} for n in ("n1", "n2", "n3")]},
            [team("a", 24)],
            [
                running("r6", "a", 6, on=[["n1", 6]]),
                running("r4", "a", 4, on=[["n2", 4]]),
                pending("j3", "a", 3),
                pending("j2", "a", 2, submit=1),
                pending("j8", "a", 8, submit=2),
            ],
        ),
        starts={"j3", "j2", "j8"},
        nodes={"j3": (("n2", 3),), "j2": (("n1", 2),), "j8": (("n3", 8),)},
    ),
    Case(
        "s2_multi_node_job_takes_whole_free_nodes",
        "16 GPUs on 8-GPU nodes: the two empty nodes; 12 is not a whole number of nodes",
        scenario(
            pool(3, 8),
            [team("a", 24)],
            [running("r2", "a", 2), pending("j16", "a", 16), pending("j12", "a", 12, submit=1)],
        ),
        starts={"j16"},
        nodes={"j16": ((f"{T}-001", 8), (f"{T}-002", 8))},
        pending={"j12": "exceeds-max"},
        messages={"j12": "not a whole number of nodes"},
    ),
    Case(
        "s2_node_not_ready_takes_no_new_job",
        "n1 is not ready: the job goes to n2 although n1 sorts first",
        scenario(
            {
                "nodes": [
                    {"name": "n1", "instance_type": T, "gpus": 8, "ready": False},
                    {"name": "n2", "instance_type": T, "gpus": 8},
                ]
            },
            [team("a", 16)],
            [pending("j8", "a", 8), pending("k8", "a", 8, submit=1)],
        ),
        starts={"j8"},
        nodes={"j8": (("n2", 8),)},
        pending={"k8": "capacity-lost"},
    ),
    # -- section 3: one cycle --------------------------------------------------------------
    Case(
        "s3_1_higher_priority_first_within_a_team",
        "the team's queue is ordered by priority before submit time",
        scenario(
            pool(1, 4),
            [team("a", 4, sharing="dont-lend")],
            [pending("a1", "a", 4, "low", submit=0), pending("a2", "a", 4, "high", submit=1)],
        ),
        starts={"a2"},
        pending={"a1": "waiting-for-quota"},
    ),
    Case(
        "s3_1_first_come_first_serve_ranking_ignores_priority_classes",
        "task_ranking first-come-first-serve: every job is priority 0",
        scenario(
            pool(1, 4),
            [team("a", 4, sharing="dont-lend")],
            [pending("a1", "a", 4, "low", submit=0), pending("a2", "a", 4, "high", submit=1)],
            task_ranking="first-come-first-serve",
        ),
        starts={"a1"},
        pending={"a2": "waiting-for-quota"},
    ),
    Case(
        "s3_2_fcfs_head_within_quota_beats_one_that_borrows",
        "mirrors Kueue scheduler ordering: a request under nominal quota goes first",
        scenario(
            pool(1, 4),
            [team("a", 0, borrow_limit="unlimited"), team("b", 4)],
            [pending("a1", "a", 2, submit=0), pending("b1", "b", 4, submit=5)],
            **FCFS,
        ),
        starts={"b1"},
        pending={"a1": "no-idle-capacity"},
    ),
    Case(
        "s3_2_fcfs_higher_priority_then_earlier_submit",
        "between borrowers: priority first, then submit time",
        scenario(
            pool(1, 4),
            [
                team("o", 4),
                team("a", 0, borrow_limit="unlimited"),
                team("c", 0, borrow_limit="unlimited"),
                team("d", 0, borrow_limit="unlimited"),
            ],
            [
                pending("c1", "c", 2, "low", submit=1),
                pending("a1", "a", 2, "high", submit=5),
                pending("d1", "d", 2, "low", submit=2),
            ],
            **FCFS,
        ),
        starts={"a1", "c1"},
        pending={"d1": "no-idle-capacity"},
    ),
    Case(
        "s3_2_fair_share_non_borrowing_head_first",
        "a head whose team would not borrow wins, whatever its submit time",
        scenario(
            pool(1, 2),
            [team("o", 2), team("x", 0, borrow_limit="unlimited")],
            [pending("x1", "x", 2, submit=0), pending("o1", "o", 2, submit=10)],
        ),
        starts={"o1"},
        pending={"x1": "no-idle-capacity"},
    ),
    Case(
        "s3_2_fair_share_history_ranks_the_bursty_team_first",
        "docs/fairness.md: with the half-life on, b (idle lately) ranks before s, which borrowed "
        "6 GPUs on average lately, though s's head was submitted first and would borrow as much",
        {
            **scenario(
                pool(1, 4),
                [
                    team("o", 4),
                    team("s", 0, borrow_limit="unlimited"),
                    team("b", 0, borrow_limit="unlimited"),
                ],
                [pending("s1", "s", 4, submit=0), pending("b1", "b", 4, submit=10)],
                fair_share_half_life_s=3600,
                fair_share_history_percent=50,
            ),
            "borrowed_history": {"s": 6.0},
        },
        starts={"b1"},
        pending={"s1": "no-idle-capacity"},
    ),
    Case(
        "s3_2_fair_share_history_off_at_zero_percent",
        "docs/fairness.md: the same cluster with the history weighted 0: shares are equal, and "
        "the earlier submit time wins",
        {
            **scenario(
                pool(1, 4),
                [
                    team("o", 4),
                    team("s", 0, borrow_limit="unlimited"),
                    team("b", 0, borrow_limit="unlimited"),
                ],
                [pending("s1", "s", 4, submit=0), pending("b1", "b", 4, submit=10)],
                fair_share_half_life_s=3600,
                fair_share_history_percent=0,
            ),
            "borrowed_history": {"s": 6.0},
        },
        starts={"s1"},
        pending={"b1": "no-idle-capacity"},
    ),
    Case(
        "s3_2_fair_share_history_off_without_half_life",
        "docs/fairness.md: a half-life of 0 turns the history off whatever its weight",
        {
            **scenario(
                pool(1, 4),
                [
                    team("o", 4),
                    team("s", 0, borrow_limit="unlimited"),
                    team("b", 0, borrow_limit="unlimited"),
                ],
                [pending("s1", "s", 4, submit=0), pending("b1", "b", 4, submit=10)],
                fair_share_half_life_s=0,
                fair_share_history_percent=50,
            ),
            "borrowed_history": {"s": 6.0},
        },
        starts={"s1"},
        pending={"b1": "no-idle-capacity"},
    ),
    Case(
        "s3_2_fair_share_weight_zero_team_ranks_last",
        "a weight-0 team that borrows comes after every team of non-zero weight",
        scenario(
            pool(1, 4),
            [
                team("o", 4),
                team("z0", 0, borrow_limit="unlimited", fair_share_weight=0),
                team("w1", 0, borrow_limit="unlimited"),
            ],
            [
                pending("z1", "z0", 2, submit=0),
                pending("w1a", "w1", 2, submit=5),
                pending("w1b", "w1", 2, submit=6),
            ],
        ),
        starts={"w1a", "w1b"},
        pending={"z1": "no-idle-capacity"},
    ),
    Case(
        "s3_3_best_effort_fifo_offers_the_next_job",
        "a head that does not fit lets the team's next job compete",
        scenario(
            pool(1, 8),
            [team("a", 8, sharing="dont-lend", preempt_team_tasks="never")],
            [running("a0", "a", 4), pending("a1", "a", 6), pending("a2", "a", 2, submit=1)],
        ),
        starts={"a2"},
        pending={"a1": "waiting-for-quota"},
    ),
    Case(
        "s3_3_strict_fifo_blocks_behind_the_head",
        "mirrors Kueue StrictFIFO: the blocked head holds back the jobs behind it",
        scenario(
            pool(1, 8),
            [team("a", 8, sharing="dont-lend", preempt_team_tasks="never")],
            [running("a0", "a", 4), pending("a1", "a", 6), pending("a2", "a", 2, submit=1)],
            queueing="strict-fifo",
        ),
        starts=set(),
        pending={"a1": "waiting-for-quota", "a2": "blocked-by-fifo"},
        messages={"a2": "a1"},
    ),
    Case(
        "s3_3_head_of_a_team_whose_reclaim_is_not_any_holds_its_lendable_quota",
        "a1 may not reclaim from b, so a's unused lendable quota is held: c may not borrow it",
        scenario(
            pool(1, 10),
            [
                team("a", 6, reclaim="never"),
                team("b", 4, borrow_limit="unlimited"),
                team("c", 0, borrow_limit="unlimited"),
            ],
            [
                running("b1", "b", 4, since=-100),
                running("b2", "b", 4, since=-50),
                pending("a1", "a", 4, submit=0),
                pending("c1", "c", 2, submit=1),
            ],
        ),
        starts=set(),
        pending={"a1": "waiting-for-quota", "c1": "no-idle-capacity"},
        messages={"a1": "lent out"},
    ),
    Case(
        "s3_3_no_hold_during_back_off",
        "the same head in its back-off does not look for victims and so holds nothing",
        scenario(
            pool(1, 10),
            [
                team("a", 6, reclaim="never"),
                team("b", 4, borrow_limit="unlimited"),
                team("c", 0, borrow_limit="unlimited"),
            ],
            [
                running("b1", "b", 4, since=-100),
                running("b2", "b", 4, since=-50),
                pending("a1", "a", 4, submit=0, preemptions=1, last_preempted_at=0),
                pending("c1", "c", 2, submit=1),
            ],
        ),
        starts={"c1"},
        pending={"a1": "waiting-for-quota"},
    ),
    Case(
        "s3_5_no_preemption_during_back_off",
        "preempted once at 0: preempts nobody before 0 + 2**0 = 1",
        scenario(
            pool(1, 4),
            [team("a", 4, sharing="dont-lend")],
            [running("a0", "a", 4, "low"), pending("a1", "a", 4, "high", preemptions=1, last_preempted_at=0)],
        ),
        now=0.5,
        starts=set(),
        pending={"a1": "waiting-for-quota"},
    ),
    Case(
        "s3_5_preempts_again_once_the_back_off_is_over",
        "at 1 the back-off of one preemption is over",
        scenario(
            pool(1, 4),
            [team("a", 4, sharing="dont-lend")],
            [running("a0", "a", 4, "low"), pending("a1", "a", 4, "high", preemptions=1, last_preempted_at=0)],
        ),
        now=1.0,
        starts={"a1"},
        preempted={"a0": ("in-team", "a1")},
    ),
    Case(
        "s3_5_back_off_doubles_with_each_preemption",
        "preempted 3 times, last at 0: nothing before 4",
        scenario(
            pool(1, 4),
            [team("a", 4, sharing="dont-lend")],
            [running("a0", "a", 4, "low"), pending("a1", "a", 4, "high", preemptions=3, last_preempted_at=0)],
        ),
        now=3.9,
        starts=set(),
        pending={"a1": "waiting-for-quota"},
    ),
    # -- section 4: preemption -------------------------------------------------------------
    Case(
        "s4_in_team_preempt_lowest_priority",
        "mirrors Kueue preemption_test 'preempt lowest priority'",
        scenario(
            pool(1, 6),
            [team("standalone", 6, sharing="dont-lend")],
            [
                running("low", "standalone", 2, "low"),
                running("mid", "standalone", 2, "mid"),
                running("high", "standalone", 2, "high"),
                pending("in", "standalone", 2, "high"),
            ],
        ),
        starts={"in"},
        preempted={"low": ("in-team", "in")},
    ),
    Case(
        "s4_in_team_preempt_multiple",
        "mirrors Kueue preemption_test 'preempt multiple'",
        scenario(
            pool(1, 6),
            [team("standalone", 6, sharing="dont-lend")],
            [
                running("low", "standalone", 2, "low"),
                running("mid", "standalone", 2, "mid"),
                running("high", "standalone", 2, "high"),
                pending("in", "standalone", 3, "high"),
            ],
        ),
        starts={"in"},
        preempted={"low": ("in-team", "in"), "mid": ("in-team", "in")},
    ),
    Case(
        "s4_no_preemption_for_low_priority",
        "mirrors Kueue preemption_test 'no preemption for low priority'",
        scenario(
            pool(1, 6),
            [team("standalone", 6, sharing="dont-lend")],
            [
                running("low", "standalone", 3, "low"),
                running("mid", "standalone", 3, "mid"),
                pending("in", "standalone", 1, "low"),
            ],
        ),
        starts=set(),
        pending={"in": "waiting-for-quota"},
    ),
    Case(
        "s4_not_enough_low_priority_workloads",
        "mirrors Kueue preemption_test 'not enough low priority workloads'",
        scenario(
            pool(1, 6),
            [team("standalone", 6, sharing="dont-lend")],
            [
                running("low", "standalone", 3, "low"),
                running("mid", "standalone", 3, "mid"),
                pending("in", "standalone", 4, "mid"),
            ],
        ),
        starts=set(),
        pending={"in": "waiting-for-quota"},
    ),
    Case(
        "s4_some_free_quota_preempt_low_priority",
        "mirrors Kueue preemption_test 'some free quota, preempt low priority'",
        scenario(
            pool(1, 6),
            [team("standalone", 6, sharing="dont-lend")],
            [
                running("low", "standalone", 1, "low"),
                running("mid", "standalone", 1, "mid"),
                running("high", "standalone", 3, "high"),
                pending("in", "standalone", 2, "high"),
            ],
        ),
        starts={"in"},
        preempted={"low": ("in-team", "in")},
    ),
    Case(
        "s4_minimal_set_gives_back_what_is_not_needed",
        "mirrors Kueue preemption_test 'minimal set excludes low priority': low is taken, then given back",
        scenario(
            pool(1, 6),
            [team("standalone", 6, sharing="dont-lend")],
            [
                running("low", "standalone", 1, "low"),
                running("mid", "standalone", 2, "mid"),
                running("high", "standalone", 3, "high"),
                pending("in", "standalone", 2, "high"),
            ],
        ),
        starts={"in"},
        preempted={"mid": ("in-team", "in")},
    ),
    Case(
        "s4_in_team_lower_or_newer_equal_priority_preempts_a_newer_equal",
        "mirrors Kueue preemption_test 'preempt newer workloads with the same priority'",
        scenario(
            pool(1, 6),
            [team("p", 6, sharing="dont-lend", preempt_team_tasks="lower-or-newer-equal-priority")],
            [running("newer", "p", 6, "mid", since=-10), pending("in", "p", 2, "mid", submit=-20)],
        ),
        starts={"in"},
        preempted={"newer": ("in-team", "in")},
    ),
    Case(
        "s4_in_team_lower_priority_spares_an_equal",
        "the same with preempt_team_tasks lower-priority: equal priority is safe",
        scenario(
            pool(1, 6),
            [team("p", 6, sharing="dont-lend", preempt_team_tasks="lower-priority")],
            [running("newer", "p", 6, "mid", since=-10), pending("in", "p", 2, "mid", submit=-20)],
        ),
        starts=set(),
        pending={"in": "waiting-for-quota"},
    ),
    Case(
        "s4_most_recently_started_goes_first",
        "equal priority and start time: the later start_seq is preempted",
        scenario(
            pool(1, 4),
            [team("a", 4, sharing="dont-lend")],
            [
                running("a1", "a", 2, "low", since=0, start_seq=1),
                running("a2", "a", 2, "low", since=0, start_seq=2),
                pending("ah", "a", 2, "high"),
            ],
        ),
        now=5,
        starts={"ah"},
        preempted={"a2": ("in-team", "ah")},
    ),
    Case(
        "s4_a_job_started_at_this_instant_goes_before_an_older_one",
        "section 4's order at one instant (docs/examples/victim-order-one-instant.yaml): j6 takes "
        "j7 while borrowing and starts; then j3, within t0's quota, reclaims from t1, whose "
        "candidates are j6 (mid, started at this instant) and j1 (high, ran 48 s): lower priority "
        "first and most recently started first both take j6, which is enough, and j1 runs on",
        victim_order_one_instant(),
        settle=True,
        starts={"j1", "j3"},
        preempted={"j6": ("reclaim", "j3"), "j7": ("reclaim-while-borrowing", "j6")},
        pending={"j6": "no-idle-capacity", "j7": "borrow-limit"},
    ),
    Case(
        "s4_a_preemptor_that_would_take_a_job_started_in_its_cycle_waits_for_the_next",
        "the first cycle of the case above: j3's victims would be j6, started earlier in this "
        "cycle, which a plan cannot both start and preempt (its preemptions apply to jobs running "
        "before it); j3 takes nobody, not j1 either, and waits for the next cycle at this instant "
        "(Kueue skips a preemptor that no longer fits after another workload's admission in the "
        "cycle, and retries it in the next)",
        victim_order_one_instant(),
        starts={"j6"},
        preempted={"j7": ("reclaim-while-borrowing", "j6")},
        pending={"j3": "waiting-for-quota"},
    ),
    Case(
        "s4_a_preemptor_takes_jobs_running_before_its_cycle_at_once",
        "the case above with j1 of low priority: j1 now goes before j6 in section 4's order and is "
        "enough, so j3 reclaims it in the first cycle (6.4: within its quota, it starts in that "
        "cycle); only a victim started in the cycle makes a preemptor wait",
        victim_order_one_instant(j1_priority="low"),
        starts={"j6", "j3"},
        preempted={"j7": ("reclaim-while-borrowing", "j6"), "j1": ("reclaim", "j3")},
    ),
    Case(
        "s4_fcfs_reclaim_quota_from_borrower",
        "mirrors Kueue preemption_test 'reclaim quota from borrower'",
        scenario(
            pool(1, 12),
            KUEUE_COHORT,
            [
                running("c1-low", "c1", 3, "low"),
                running("c2-mid", "c2", 3, "mid"),
                running("c2-high", "c2", 6, "high"),
                pending("in", "c1", 3, "high"),
            ],
            **FCFS,
        ),
        starts={"in"},
        preempted={"c2-mid": ("reclaim", "in")},
    ),
    Case(
        "s4_fcfs_reclaim_lower_priority_spares_same_priority",
        "mirrors Kueue preemption_test 'do not reclaim borrowed quota from same priority for "
        "withinCohort=ReclaimFromLowerPriority'",
        scenario(
            pool(1, 12),
            KUEUE_COHORT,
            [
                running("c1", "c1", 2, "mid"),
                running("c2-1", "c2", 4, "mid"),
                running("c2-2", "c2", 4, "mid"),
                pending("in", "c1", 4, "mid"),
            ],
            **FCFS,
        ),
        starts=set(),
        pending={"in": "waiting-for-quota"},
    ),
    Case(
        "s4_fcfs_reclaim_any_takes_same_priority",
        "mirrors Kueue preemption_test 'reclaim borrowed quota from same priority for withinCohort=ReclaimFromAny'",
        scenario(
            pool(1, 12),
            KUEUE_COHORT,
            [
                running("c1-1", "c1", 4, "mid"),
                running("c1-2", "c1", 4, "high"),
                running("c2", "c2", 2, "mid"),
                pending("in", "c2", 4, "mid"),
            ],
            **FCFS,
        ),
        starts={"in"},
        preempted={"c1-1": ("reclaim", "in")},
    ),
    Case(
        "s4_fcfs_preempt_from_every_team",
        "mirrors Kueue preemption_test 'preempt from all ClusterQueues in cohort'",
        scenario(
            pool(1, 12),
            KUEUE_COHORT,
            [
                running("c1-low", "c1", 3, "low"),
                running("c1-mid", "c1", 2, "mid"),
                running("c2-low", "c2", 3, "low"),
                running("c2-mid", "c2", 4, "mid"),
                pending("in", "c1", 4, "mid"),
            ],
            **FCFS,
        ),
        starts={"in"},
        preempted={"c1-low": ("in-team", "in"), "c2-low": ("reclaim", "in")},
    ),
    Case(
        "s4_fcfs_reclaim_while_borrowing",
        "attempt (b), Kueue borrowWithinCohort: a borrowing job takes lower-priority borrowed jobs, "
        "newest first, while that team stays above its quota",
        scenario(
            pool(1, 12),
            [
                team(
                    "a",
                    6,
                    borrow_limit="unlimited",
                    preempt_while_borrowing={"policy": "lower-priority", "max_priority": 10},
                ),
                team("b", 6, borrow_limit="unlimited"),
            ],
            [
                running("b1", "b", 4, "low", since=-30),
                running("b2", "b", 4, "low", since=-20),
                running("b3", "b", 4, "low", since=-10),
                pending("a1", "a", 8, "high"),
            ],
            **FCFS,
        ),
        starts={"a1"},
        preempted={"b3": ("reclaim-while-borrowing", "a1"), "b2": ("reclaim-while-borrowing", "a1")},
    ),
    Case(
        "s4_fcfs_reclaim_while_borrowing_respects_max_priority",
        "Kueue borrowWithinCohort maxPriorityThreshold: jobs above it are safe",
        scenario(
            pool(1, 12),
            [
                team(
                    "a",
                    6,
                    borrow_limit="unlimited",
                    preempt_while_borrowing={"policy": "lower-priority", "max_priority": 5},
                ),
                team("b", 6, borrow_limit="unlimited"),
            ],
            [
                running("b1", "b", 4, "low", since=-30),
                running("b2", "b", 4, "low", since=-20),
                running("b3", "b", 4, "low", since=-10),
                pending("a1", "a", 8, "high"),
            ],
            **FCFS,
        ),
        starts=set(),
        pending={"a1": "no-idle-capacity"},
    ),
    Case(
        "s4_fcfs_preempt_while_borrowing_never",
        "preempt_while_borrowing never: a job that would borrow takes no other team's job",
        scenario(
            pool(1, 12),
            [
                team("a", 6, borrow_limit="unlimited", preempt_while_borrowing="never"),
                team("b", 6, borrow_limit="unlimited"),
            ],
            [
                running("b1", "b", 4, "low", since=-30),
                running("b2", "b", 4, "low", since=-20),
                running("b3", "b", 4, "low", since=-10),
                pending("a1", "a", 8, "high"),
            ],
            **FCFS,
        ),
        starts=set(),
        pending={"a1": "no-idle-capacity"},
    ),
    Case(
        "s4_fcfs_only_a_job_within_quota_or_allowed_to_borrow_may_preempt",
        "g above the quota and preempt_while_borrowing never: not even its own lower-priority job",
        scenario(
            pool(1, 4),
            [team("o", 2), team("a", 2, borrow_limit="unlimited", preempt_while_borrowing="never")],
            [running("o1", "o", 2), running("a0", "a", 2, "low"), pending("ah", "a", 4, "high")],
            **FCFS,
        ),
        starts=set(),
        pending={"ah": "no-idle-capacity"},
    ),
    Case(
        "s4_fcfs_borrowing_preemptor_takes_other_teams_before_its_own",
        "first-come-first-serve order: other teams' jobs as one group, then the own team's",
        scenario(
            pool(1, 8),
            [team("o", 8), team("x", 0, borrow_limit="unlimited"), team("y", 0, borrow_limit="unlimited")],
            [
                running("x1", "x", 2, "low", since=-30),
                running("x2", "x", 2, "low", since=-20),
                running("x3", "x", 2, "low", since=-10),
                running("y1", "y", 2, "low", since=-40),
                pending("xh", "x", 2, "high"),
            ],
            **FCFS,
        ),
        starts={"xh"},
        preempted={"y1": ("reclaim-while-borrowing", "xh")},
    ),
    Case(
        "s4_fair_share_preemptor_team_with_the_highest_share_gives_first",
        "fair share: the preemptor's own team, counted with it admitted, has the highest share",
        scenario(
            pool(1, 8),
            [team("o", 8), team("x", 0, borrow_limit="unlimited"), team("y", 0, borrow_limit="unlimited")],
            [
                running("x1", "x", 2, "low", since=-30),
                running("x2", "x", 2, "low", since=-20),
                running("x3", "x", 2, "low", since=-10),
                running("y1", "y", 2, "low", since=-40),
                pending("xh", "x", 2, "high"),
            ],
        ),
        starts={"xh"},
        preempted={"x3": ("in-team", "xh")},
    ),
    Case(
        "s4_fair_share_rule_a_until_shares_even_out",
        "mirrors Kueue preemption_fair_test strategy LessThanOrEqualToFinalShare: y takes from x "
        "while y's share after stays at most x's share after; settles at 4 and 4",
        scenario(
            pool(1, 12),
            [team("o", 12), team("x", 0, borrow_limit="unlimited"), team("y", 0, borrow_limit="unlimited")],
            [
                running("o1", "o", 4),
                *(running(f"x{k}", "x", 2, since=-50 + 10 * k, submit=-100) for k in range(1, 5)),
                *(pending(f"y{k}", "y", 2) for k in range(1, 4)),
            ],
        ),
        settle=True,
        starts={"o1", "x1", "x2", "y1", "y2"},
        preempted={"x4": ("fair-share", "y1"), "x3": ("fair-share", "y2")},
        pending={"y3": "no-idle-capacity", "x3": "no-idle-capacity", "x4": "no-idle-capacity"},
    ),
    Case(
        "s4_fair_share_history_lets_a_bursty_team_reclaim",
        "docs/fairness.md: x borrows 4 now, y would borrow 4 once y1 runs: equal shares now, so "
        "neither rule lets y preempt without history; with x's 8 GPUs borrowed lately counted at "
        "50%, x's share (6, then 4 after losing both jobs) stays at least y's (2), and rule A takes "
        "x2 then x1",
        {
            **scenario(
                pool(1, 8),
                [
                    team("o", 4),
                    team("x", 0, borrow_limit="unlimited"),
                    team("y", 0, borrow_limit="unlimited"),
                ],
                [
                    running("x1", "x", 2, since=-50),
                    running("x2", "x", 2, since=-40),
                    running("o1", "o", 4),
                    pending("y1", "y", 4),
                ],
                fair_share_half_life_s=3600,
                fair_share_history_percent=50,
            ),
            "borrowed_history": {"x": 8.0},
        },
        starts={"y1"},
        preempted={"x2": ("fair-share", "y1"), "x1": ("fair-share", "y1")},
    ),
    Case(
        "s4_fair_share_without_history_no_reclaim_between_equal_shares",
        "docs/fairness.md: the cluster above with the half-life off: x at 4 and y at 4 after "
        "admission, neither rule lets y preempt",
        scenario(
            pool(1, 8),
            [team("o", 4), team("x", 0, borrow_limit="unlimited"), team("y", 0, borrow_limit="unlimited")],
            [
                running("x1", "x", 2, since=-50),
                running("x2", "x", 2, since=-40),
                running("o1", "o", 4),
                pending("y1", "y", 4),
            ],
        ),
        starts=set(),
        pending={"y1": "no-idle-capacity"},
    ),
    Case(
        "s4_fair_share_rule_b_when_rule_a_rejects",
        "mirrors Kueue preemption_fair_test strategy LessThanInitialShare: 3 after is not at most 0, "
        "but is below x's 5 before",
        scenario(
            pool(1, 8),
            [team("o", 8), team("x", 0, borrow_limit="unlimited"), team("y", 0, borrow_limit="unlimited")],
            [running("o1", "o", 3), running("x1", "x", 5), pending("y1", "y", 3)],
        ),
        starts={"y1"},
        preempted={"x1": ("fair-share", "y1")},
    ),
    Case(
        "s4_fair_share_no_preemption_between_equal_shares",
        "lending-and-limits: z at 4 after admission is above b's 2: neither rule lets z preempt",
        scenario(
            pool(1, 8),
            [team("o", 4), team("b", 2, borrow_limit="unlimited"), team("z", 0, borrow_limit="unlimited")],
            [
                running("o1", "o", 2),
                running("b1", "b", 2, since=-50),
                running("b2", "b", 2, since=-40),
                running("z1", "z", 2),
                pending("z2", "z", 2),
            ],
        ),
        starts=set(),
        pending={"z2": "no-idle-capacity"},
    ),
    Case(
        "s4_fair_share_within_quota_reclaims_without_share_test",
        "within quota under fair share, other teams' jobs go without a share test, whatever their "
        "priority under reclaim any (Kueue: a ClusterQueue under its nominal quota reclaims)",
        scenario(
            pool(1, 8),
            [team("a", 4), team("b", 4, borrow_limit="unlimited")],
            [
                running("b1", "b", 4, "high", since=-30),
                running("b2", "b", 2, "high", since=-20),
                running("b3", "b", 2, "high", since=-10),
                pending("a1", "a", 2, "low"),
            ],
        ),
        starts={"a1"},
        preempted={"b3": ("reclaim", "a1")},
    ),
    # -- section 5: pending reasons --------------------------------------------------------
    Case(
        "s5_team_inactive",
        "an inactive team's pending jobs wait with team-inactive; its running jobs keep running",
        scenario(pool(1, 8), [team("a", 8, active=False)], [running("a0", "a", 2), pending("a1", "a", 2)]),
        starts=set(),
        pending={"a1": "team-inactive"},
    ),
    Case(
        "s5_exceeds_max_before_anything_else",
        "strict FIFO and a job that can never fit: exceeds-max, and it blocks nothing",
        scenario(
            pool(1, 8),
            [team("a", 4, sharing="dont-lend")],
            [pending("big", "a", 6), pending("a1", "a", 2, submit=1)],
            queueing="strict-fifo",
        ),
        starts={"a1"},
        pending={"big": "exceeds-max"},
        messages={"big": "at most 4"},
    ),
    Case(
        "s5_waiting_for_quota_lent_out_and_not_reclaimable",
        "within quota, but the quota is lent to a borrower the team may not reclaim from",
        scenario(
            pool(1, 8),
            [team("a", 4, reclaim="lower-priority"), team("b", 4, borrow_limit="unlimited")],
            [
                running("b1", "b", 4, "mid", since=-20),
                running("b2", "b", 4, "mid", since=-10),
                pending("a1", "a", 2, "mid"),
            ],
        ),
        starts=set(),
        pending={"a1": "waiting-for-quota"},
        messages={"a1": "uses 0 of its 4 GPU quota"},
    ),
    Case(
        "s5_capacity_lost",
        "limits and pool allow it, but a node that is not ready still runs a job",
        scenario(
            {
                "nodes": [
                    {"name": "n1", "instance_type": T, "gpus": 8},
                    {"name": "n2", "instance_type": T, "gpus": 8, "ready": False},
                ]
            },
            [team("a", 16)],
            [running("a0", "a", 8, on=[["n2", 8]]), pending("a1", "a", 4)],
        ),
        starts=set(),
        pending={"a1": "capacity-lost"},
        messages={"a1": "8 of the 8 GPUs ready on ml.t are in use (8 GPUs on nodes not ready)"},
    ),
    Case(
        "s5_capacity_lost_by_over_committed_quotas_names_them_not_lost_nodes",
        "5.6 with every node ready: the quotas (a 6 + b 6) exceed the 8 ready GPUs, so a's limits "
        "and the pool allow 4 more while only 2 are free; the message gives the quotas' sum and "
        "says nothing of nodes not ready, since none is",
        scenario(
            pool(1, 8),
            [team("a", 6, borrow_limit_percent=0), team("b", 6, borrow_limit_percent=0)],
            [running("b0", "b", 6), pending("a1", "a", 4)],
        ),
        starts=set(),
        pending={"a1": "capacity-lost"},
        messages={
            "a1": "6 of the 8 GPUs ready on ml.t are in use; quotas on it add up to 12 GPUs, "
            "more than its 8 ready GPUs; 4 more requested"
        },
    ),
    Case(
        "s5_fragmented",
        "6 GPUs free, 3 on each node: no node has room for 4",
        scenario(
            pool(2, 8), [team("a", 16)], [running("r1", "a", 5), running("r2", "a", 5), pending("a1", "a", 4)]
        ),
        starts=set(),
        pending={"a1": "fragmented"},
        messages={"a1": "6 GPUs free"},
    ),
    Case(
        "s5_over_a_lowered_limit_nothing_is_preempted_and_nothing_starts",
        "invariant 2's exception: running 6 over a quota of 4 stays; the team starts nothing more",
        scenario(
            pool(1, 8),
            [team("a", 4, borrow_limit_percent=0)],
            [running("a0", "a", 3), running("a1", "a", 3), pending("a2", "a", 1)],
        ),
        starts=set(),
        pending={"a2": "waiting-for-quota"},
    ),
    # docs/limits.md "Most GPUs running per member": the engine holds back a member's jobs.
    Case(
        "s3_member_limit_lets_a_colleagues_later_job_start",
        "docs/limits.md: ann runs 4 of her 4 GPUs; her older job waits, bob's newer one starts",
        scenario(
            pool(2, 8),
            [team("a", 16, max_running_gpus_per_member=4)],
            [
                running("a0", "a", 4, submitter="ann"),
                pending("a1", "a", 2, submit=-10, submitter="ann"),
                pending("a2", "a", 2, submit=-5, submitter="ann"),
                pending("b1", "a", 2, submit=0, submitter="bob"),
            ],
        ),
        starts={"b1"},
        pending={"a1": "member-limit", "a2": "member-limit"},
        messages={
            "a1": "member ann runs 4 GPUs in team a; with this job's 2 that would be 6, "
            "above the team's limit of 4 GPUs running per member"
        },
    ),
    Case(
        "s3_member_limit_counts_the_jobs_started_in_the_cycle",
        "docs/limits.md: ann's first job starts (3 of 4), her second would make 6: it waits",
        scenario(
            pool(2, 8),
            [team("a", 16, max_running_gpus_per_member=4)],
            [
                pending("a1", "a", 3, submit=-10, submitter="ann"),
                pending("a2", "a", 3, submit=-5, submitter="ann"),
                pending("a3", "a", 1, submit=-1, submitter="ann"),
            ],
        ),
        starts={"a1", "a3"},
        pending={"a2": "member-limit"},
        messages={"a2": "member ann runs 3 GPUs in team a; with this job's 3 that would be 6"},
    ),
    Case(
        "s3_member_limit_counts_every_instance_type",
        "docs/limits.md: 4 GPUs on one type and 2 asked on another make 6, above 5",
        {
            "cluster": {
                "node_pools": [
                    {"instance_type": T, "count": 1, "gpus_per_node": 8},
                    {"instance_type": "ml.u", "count": 1, "gpus_per_node": 8},
                ]
            },
            "teams": [{"name": "a", "quota": {T: 8, "ml.u": 8}, "max_running_gpus_per_member": 5}],
            "jobs": [
                running("a0", "a", 4, submitter="ann"),
                pending("a1", "a", 2, instance_type="ml.u", submitter="ann"),
                pending("a2", "a", 1, instance_type="ml.u", submitter="ann"),
            ],
            "policy": {"priority_classes": CLASSES},
        },
        starts={"a2"},
        pending={"a1": "member-limit"},
    ),
    Case(
        "s3_member_limit_does_not_block_under_strict_fifo",
        "docs/limits.md: ann's head waits at her limit; under strict FIFO bob's job behind it starts",
        scenario(
            pool(2, 8),
            [team("a", 16, max_running_gpus_per_member=4)],
            [
                running("a0", "a", 4, submitter="ann"),
                pending("a1", "a", 2, submit=-10, submitter="ann"),
                pending("b1", "a", 2, submit=0, submitter="bob"),
            ],
            queueing="strict-fifo",
        ),
        starts={"b1"},
        pending={"a1": "member-limit"},
    ),
    Case(
        "s3_member_limit_takes_no_victims",
        "docs/limits.md: ann's high-priority job at her limit preempts nobody, not even her own",
        scenario(
            pool(1, 8),
            [team("a", 8, max_running_gpus_per_member=6)],
            [
                running("a0", "a", 6, "low", submitter="ann"),
                running("b0", "a", 2, "low", submitter="bob"),
                pending("a1", "a", 2, "high", submitter="ann"),
            ],
        ),
        starts=set(),
        pending={"a1": "member-limit"},
    ),
    Case(
        "s3_member_limit_lowered_preempts_nobody",
        "docs/limits.md: ann runs 8 over a limit lowered to 4; nothing of hers is preempted",
        scenario(
            pool(2, 8),
            [team("a", 16, max_running_gpus_per_member=4)],
            [
                running("a0", "a", 8, submitter="ann"),
                pending("a1", "a", 1, "high", submitter="ann"),
                pending("b1", "a", 4, submitter="bob"),
            ],
        ),
        starts={"b1"},
        pending={"a1": "member-limit"},
        messages={"a1": "member ann runs 8 GPUs in team a; with this job's 1 that would be 9"},
    ),
    Case(
        "s3_member_limit_spares_jobs_without_a_submitter",
        "docs/limits.md: a job of nobody in particular is not held to the limit per member",
        scenario(
            pool(1, 8),
            [team("a", 8, max_running_gpus_per_member=2)],
            [running("a0", "a", 2, submitter="ann"), pending("x1", "a", 4)],
        ),
        starts={"x1"},
    ),
    Case(
        "s3_member_limit_frees_when_a_members_job_is_preempted",
        "docs/limits.md: b reclaims ann's borrowed job; her running GPUs fall and her next fits",
        scenario(
            pool(1, 8),
            [team("a", 2, max_running_gpus_per_member=6), team("b", 6)],
            [
                running("a0", "a", 6, "low", since=-10, submitter="ann"),
                pending("b1", "b", 4, "high", submit=-5),
                pending("a1", "a", 2, "high", submit=0, submitter="ann"),
            ],
            **FCFS,
        ),
        starts={"b1", "a1"},
        preempted={"a0": ("reclaim", "b1")},
    ),
]


# docs/preemption.md: minimum runtime (section 1), checkpoints (2), victim order (3), the
# pending reason ``min-runtime`` (4). Ids start with the section (``p1_...``).
COST_TEAMS = [team("a", 4, reclaim="any"), team("b", 4, borrow_limit_percent=100)]
COST_CASES = [
    Case(
        "p1_a_job_within_its_minimum_runtime_is_no_candidate",
        "b1 ran 100 s of its 600 s minimum runtime: the reclaim takes the older b0 instead",
        scenario(
            pool(1, 8),
            COST_TEAMS,
            [running("b0", "b", 4, since=-1000), running("b1", "b", 4, since=-100), pending("a1", "a", 4)],
            min_runtime_s=600,
        ),
        starts={"a1"},
        preempted={"b0": ("reclaim", "a1")},
    ),
    Case(
        "p1_without_minimum_runtime_the_most_recent_goes",
        "the same cluster with min_runtime_s 0: POLICY.md 4's order takes b1",
        scenario(
            pool(1, 8),
            COST_TEAMS,
            [running("b0", "b", 4, since=-1000), running("b1", "b", 4, since=-100), pending("a1", "a", 4)],
        ),
        starts={"a1"},
        preempted={"b1": ("reclaim", "a1")},
    ),
    Case(
        "p4_min_runtime_names_the_victim_and_the_time_left",
        "both of b's jobs are protected; the search that would count them takes b1, whose "
        "protection ends in 550 s",
        scenario(
            pool(1, 8),
            COST_TEAMS,
            [running("b0", "b", 4, since=-100), running("b1", "b", 4, since=-50), pending("a1", "a", 4)],
            min_runtime_s=600,
        ),
        starts=set(),
        pending={"a1": "min-runtime"},
        messages={"a1": "reclaims 4 GPUs from b's job b1 in 10 min: minimum runtime"},
    ),
    Case(
        "p4_the_job_starts_once_the_minimum_runtime_has_run",
        "at 550 s b1 has run its 600 s: a1 takes it",
        scenario(
            pool(1, 8),
            COST_TEAMS,
            [running("b0", "b", 4, since=-100), running("b1", "b", 4, since=-50), pending("a1", "a", 4)],
            min_runtime_s=600,
        ),
        now=550,
        starts={"a1"},
        preempted={"b1": ("reclaim", "a1")},
    ),
    Case(
        "p4_in_team_victims_protected_say_preempts",
        "a's low job is protected; its high job waits for it",
        scenario(
            pool(1, 4),
            [team("a", 4)],
            [running("a0", "a", 4, "low", since=-30), pending("a1", "a", 2, "high")],
            min_runtime_s=90,
        ),
        starts=set(),
        pending={"a1": "min-runtime"},
        messages={"a1": "preempts 4 GPUs from a's job a0 in 1 min: minimum runtime"},
    ),
    Case(
        "p1_a_class_minimum_runtime_overrides_the_policy",
        "class low has min_runtime_s 0 under a policy of 600: b1 (low) may go",
        {
            **scenario(
                pool(1, 8),
                COST_TEAMS,
                [
                    running("b0", "b", 4, "mid", since=-100),
                    running("b1", "b", 4, "low", since=-50),
                    pending("a1", "a", 4, "mid"),
                ],
            ),
            "policy": {
                "priority_classes": [
                    {"name": "low", "weight": 10, "min_runtime_s": 0},
                    {"name": "mid", "weight": 20},
                ],
                "min_runtime_s": 600,
            },
        },
        starts={"a1"},
        preempted={"b1": ("reclaim", "a1")},
    ),
    Case(
        "p1_a_job_started_at_this_instant_is_protected",
        "b1 started at this instant (an earlier cycle): no candidate, a1 waits with min-runtime",
        scenario(
            pool(1, 8),
            [team("a", 4, reclaim="any"), team("b", 0, borrow_limit="unlimited")],
            [running("a0", "a", 2, since=-100), running("b1", "b", 6, since=0), pending("a1", "a", 2)],
            min_runtime_s=60,
        ),
        starts=set(),
        pending={"a1": "min-runtime"},
        messages={"a1": "reclaims 6 GPUs from b's job b1 in 1 min: minimum runtime"},
    ),
    Case(
        "p3_least_work_lost_first",
        "b0 started 1000 s ago with a checkpoint every 300 s (loses 100 s), b1 200 s ago without "
        "(loses 200 s): b0 goes although b1 started more recently",
        scenario(
            pool(1, 8),
            COST_TEAMS,
            [
                running("b0", "b", 4, since=-1000, checkpoint_interval_s=300),
                running("b1", "b", 4, since=-200),
                pending("a1", "a", 4),
            ],
        ),
        starts={"a1"},
        preempted={"b0": ("reclaim", "a1")},
    ),
    Case(
        "p3_equal_lost_work_most_recently_started_first",
        "b0 (1000 s, checkpoint every 300 s) and b1 (100 s) both lose 100 s: the more recent b1 goes",
        scenario(
            pool(1, 8),
            COST_TEAMS,
            [
                running("b0", "b", 4, since=-1000, checkpoint_interval_s=300),
                running("b1", "b", 4, since=-100),
                pending("a1", "a", 4),
            ],
        ),
        starts={"a1"},
        preempted={"b1": ("reclaim", "a1")},
    ),
]


def _run(case: Case) -> tuple[Plan, set[str], dict[str, tuple[str, str]]]:
    replay = build(case.spec)
    if case.settle:
        settle(replay, case.now)
        return replay.plans[-1], replay.running, replay.preempted
    plan = allocate(replay.snapshot, case.now)
    return (
        plan,
        {s.job_id for s in plan.starts},
        {p.job_id: (p.reason.value, p.preemptor) for p in plan.preemptions},
    )


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_policy_rule(case: Case) -> None:
    plan, started, preempted = _run(case)
    if case.starts is not None:
        assert started == case.starts, case.doc
    assert preempted == case.preempted, case.doc
    for job_id, code in case.pending.items():
        assert job_id in plan.pending, (job_id, case.doc)
        assert plan.pending[job_id].code.value == code, (job_id, plan.pending[job_id], case.doc)
    for job_id, text in case.messages.items():
        assert text in plan.pending[job_id].message, (job_id, plan.pending[job_id].message)
    starts = {s.job_id: s.nodes for s in plan.starts}
    for job_id, nodes in case.nodes.items():
        assert starts[job_id] == nodes


def test_case_ids_name_their_section() -> None:
    assert all(c.id.split("_")[0] in {"s2", "s3", "s4", "s5"} for c in CASES)
    assert len({c.id for c in CASES}) == len(CASES)
    assert {code for c in CASES for code in c.pending.values()} >= {
        "team-inactive",
        "exceeds-max",
        "blocked-by-fifo",
        "borrow-limit",
        "waiting-for-quota",
        "capacity-lost",
        "no-idle-capacity",
        "fragmented",
        "member-limit",
    }


@pytest.mark.parametrize("case", COST_CASES, ids=[c.id for c in COST_CASES])
def test_preemption_cost_rule(case: Case) -> None:
    """docs/preemption.md sections 1 to 4."""
    test_policy_rule(case)


def test_cost_case_ids_name_their_section() -> None:
    assert all(c.id.split("_")[0] in {"p1", "p2", "p3", "p4"} for c in COST_CASES)
    assert len({c.id for c in COST_CASES}) == len(COST_CASES)
