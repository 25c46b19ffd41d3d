"""The four examples of SCENARIO.md, built by hand here, replayed to their ``expect``.

They are the acceptance test of the engine: the simulator runs the same files. The hand-built
copies keep the project's tests self-contained; ``test_shared_example_files_agree`` replays the
files of ../shared themselves when they are present.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.conftest import require_shared

from .scenarios import run_until

P5 = "ml.p5.48xlarge"

HYPERPOD_BORROW_AND_RECLAIM: dict[str, Any] = {
    "cluster": {"node_pools": [{"instance_type": "ml.g5.8xlarge", "count": 11, "gpus_per_node": 1}]},
    "teams": [
        {"name": "team-a", "quota": {"ml.g5.8xlarge": 6}},
        {"name": "team-b", "quota": {"ml.g5.8xlarge": 5}, "borrow_limit_percent": 100},
    ],
    "jobs": [
        {"id": "a1", "team": "team-a", "gpus": 2, "submit": -200, "running_since": -200},
        {"id": "b1", "team": "team-b", "gpus": 4, "submit": -100, "running_since": -100},
        {"id": "b-new", "team": "team-b", "gpus": 4, "submit": 0},
        {"id": "a-new", "team": "team-a", "gpus": 4, "submit": 10},
    ],
    "expect": {
        "until": 10,
        "running": ["a1", "b1", "a-new"],
        "pending": {"b-new": "no-idle-capacity"},
        "preempted": {"b-new": ["reclaim", "a-new"]},
    },
}

IN_TEAM_PRIORITY: dict[str, Any] = {
    "cluster": {"node_pools": [{"instance_type": P5, "count": 1, "gpus_per_node": 8}]},
    "policy": {
        "priority_classes": [
            {"name": "inference", "weight": 100},
            {"name": "training", "weight": 50},
            {"name": "experimentation", "weight": 10},
        ]
    },
    "teams": [
        {"name": "team-a", "quota": {P5: 4}, "sharing": "dont-lend", "preempt_team_tasks": "lower-priority"},
        {"name": "team-c", "quota": {P5: 4}, "sharing": "dont-lend", "preempt_team_tasks": "never"},
    ],
    "jobs": [
        {
            "id": "e1",
            "team": "team-a",
            "gpus": 2,
            "priority": "experimentation",
            "submit": -100,
            "running_since": -100,
        },
        {
            "id": "t1",
            "team": "team-a",
            "gpus": 2,
            "priority": "training",
            "submit": -50,
            "running_since": -50,
        },
        {"id": "i1", "team": "team-a", "gpus": 2, "priority": "inference", "submit": 0},
        {
            "id": "e2",
            "team": "team-c",
            "gpus": 2,
            "priority": "experimentation",
            "submit": -100,
            "running_since": -100,
        },
        {
            "id": "t2",
            "team": "team-c",
            "gpus": 2,
            "priority": "training",
            "submit": -50,
            "running_since": -50,
        },
        {"id": "i2", "team": "team-c", "gpus": 2, "priority": "inference", "submit": 0},
    ],
    "expect": {
        "until": 0,
        "running": ["t1", "i1", "e2", "t2"],
        "pending": {"e1": "waiting-for-quota", "i2": "waiting-for-quota"},
        "preempted": {"e1": ["in-team", "i1"]},
    },
}

LENDING_AND_LIMITS: dict[str, Any] = {
    "cluster": {"node_pools": [{"instance_type": P5, "count": 2, "gpus_per_node": 8}]},
    "policy": {"share_unallocated": True},
    "teams": [
        {"name": "team-a", "quota": {P5: 8}, "sharing": "dont-lend"},
        {"name": "team-b", "quota": {P5: 4}, "borrow_limit_percent": 50},
        {"name": "team-z", "quota": {P5: 0}, "borrow_limit": "unlimited"},
    ],
    "jobs": [
        *({"id": f"b{k}", "team": "team-b", "gpus": 2, "submit": 0} for k in range(1, 5)),
        {"id": "z1", "team": "team-z", "gpus": 2, "submit": 1},
        {"id": "z2", "team": "team-z", "gpus": 2, "submit": 1},
    ],
    "expect": {
        "until": 1,
        "running": ["b1", "b2", "b3", "z1"],
        "pending": {"b4": "borrow-limit", "z2": "no-idle-capacity"},
    },
}


def _fair_share_weights(idle_allocation: str) -> dict[str, Any]:
    p4 = "ml.p4d.24xlarge"
    return {
        "cluster": {"node_pools": [{"instance_type": p4, "count": 12, "gpus_per_node": 1}]},
        "policy": {"idle_allocation": idle_allocation},
        "teams": [
            {"name": "owner", "quota": {p4: 12}},
            {"name": "x", "quota": {p4: 0}, "borrow_limit": "unlimited", "fair_share_weight": 2},
            {"name": "y", "quota": {p4: 0}, "borrow_limit": "unlimited", "fair_share_weight": 1},
        ],
        "jobs": [
            {
                "id": "hold",
                "team": "owner",
                "gpus": 12,
                "submit": -100,
                "running_since": -100,
                "duration": 110,
            },
            *({"id": f"x{k:02d}", "team": "x", "gpus": 1, "submit": 0} for k in range(12)),
            *({"id": f"y{k:02d}", "team": "y", "gpus": 1, "submit": 1} for k in range(6)),
        ],
    }


FAIR_SHARE_WEIGHTS = {
    **_fair_share_weights("fair-share"),
    "expect": {
        "until": 10,
        "running": [f"x{k:02d}" for k in range(8)] + [f"y{k:02d}" for k in range(4)],
        "pending": {
            **{f"x{k:02d}": "no-idle-capacity" for k in range(8, 12)},
            "y04": "no-idle-capacity",
            "y05": "no-idle-capacity",
        },
    },
}

# The file's comment: under first-come-first-serve x, which asked first, takes all 12.
FAIR_SHARE_WEIGHTS_FCFS = {
    **_fair_share_weights("first-come-first-serve"),
    "expect": {
        "until": 10,
        "running": [f"x{k:02d}" for k in range(12)],
        "pending": {f"y{k:02d}": "no-idle-capacity" for k in range(6)},
    },
}

EXAMPLES = {
    "hyperpod-borrow-and-reclaim": HYPERPOD_BORROW_AND_RECLAIM,
    "in-team-priority": IN_TEAM_PRIORITY,
    "lending-and-limits": LENDING_AND_LIMITS,
    "fair-share-weights": FAIR_SHARE_WEIGHTS,
    "fair-share-weights-under-fcfs": FAIR_SHARE_WEIGHTS_FCFS,
}


def assert_expected(spec: dict[str, Any]) -> None:
    """SCENARIO.md ``expect``: running exact, pending codes, preempted exhaustive."""
    expect = spec["expect"]
    replay = run_until(spec, expect["until"])
    assert replay.running == set(expect["running"])
    codes = replay.codes()
    for job_id, code in expect.get("pending", {}).items():
        assert codes.get(job_id) == code, (job_id, replay.pending.get(job_id))
    want_preempted = {k: tuple(v) for k, v in expect.get("preempted", {}).items()}
    assert replay.preempted == want_preempted


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_scenario_reaches_its_expect(name: str) -> None:
    assert_expected(EXAMPLES[name])


def test_shared_example_files_agree() -> None:
    """Replays ../shared/spec/examples/*.yaml themselves (none of them has events)."""
    folder = require_shared("spec/examples")
    files = sorted(folder.glob("*.yaml"))
    assert files, f"no example in {folder}"
    for path in files:
        spec = yaml.safe_load(path.read_text())
        assert "events" not in spec, f"{path.name}: events are beyond this test's replay"
        assert_expected(spec)
