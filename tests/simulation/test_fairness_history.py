"""Fairness over time in the simulator (docs/fairness.md): the replay decays each team's
borrowing with the policy's half-life, as the loop reads it off the recorded history."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from allocations.engine import Plan, Snapshot, allocate
from allocations.simulation import ScenarioError, parse_scenario, replay

T = "ml.p4d.24xlarge"


def cluster(policy: dict[str, Any], horizon: float) -> dict[str, Any]:
    """x borrows 4 GPUs from t=0 to 3600, y 2 GPUs from 1800 on."""
    return {
        "cluster": {"node_pools": [{"instance_type": T, "count": 8, "gpus_per_node": 1}]},
        "policy": policy,
        "teams": [
            {"name": "owner", "quota": {T: 8}},
            {"name": "x", "quota": {T: 0}, "borrow_limit": "unlimited"},
            {"name": "y", "quota": {T: 0}, "borrow_limit": "unlimited"},
        ],
        "jobs": [
            {"id": "x1", "team": "x", "gpus": 4, "submit": 0, "running_since": 0, "duration": 3600},
            {"id": "y1", "team": "y", "gpus": 2, "submit": 1800, "duration": None},
        ],
        "horizon": horizon,
    }


def test_the_replay_decays_borrowing_with_the_half_life() -> None:
    """Half-life an hour: x's 4 GPUs over [0, 3600] seen at 7200 weigh 4 * h / ln 2 * (1 - 1/2)
    GPU-seconds, halved once more; y's 2 GPUs over [1800, 7200] weigh 2 * h / ln 2 * (1 - 2^-1.5)."""
    h = 3600.0
    result = replay(
        parse_scenario(cluster({"fair_share_half_life_s": h, "fair_share_history_percent": 50}, 7200))
    )
    x = 4 * h / math.log(2) * 0.5 * 0.5
    y = 2 * h / math.log(2) * (1 - 2**-1.5)
    assert result.teams["x"].borrowed_lately_gpu_hours == pytest.approx(x / 3600)
    assert result.teams["y"].borrowed_lately_gpu_hours == pytest.approx(y / 3600)
    assert result.teams["owner"].borrowed_lately_gpu_hours == 0


def test_the_snapshots_carry_the_decayed_average_only_while_the_history_counts() -> None:
    seen: list[tuple[float, dict[str, float]]] = []

    def recording(snapshot: Snapshot, now: float) -> Plan:
        seen.append((now, dict(snapshot.borrowed_history)))
        return allocate(snapshot, now)

    h = 3600.0
    on = {"fair_share_half_life_s": h, "fair_share_history_percent": 50}
    replay(parse_scenario(cluster(on, 7200)), allocate=recording)
    history = next(history for now, history in seen if now == 1800)
    # Borrowing 4 GPUs for half a half-life: 4 * (1 - 2^-0.5) on average.
    assert history == {"x": pytest.approx(4 * (1 - 2**-0.5))}
    seen.clear()
    replay(parse_scenario(cluster({"fair_share_half_life_s": h}, 7200)), allocate=recording)
    assert seen and all(history == {} for _, history in seen)


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"fair_share_half_life_s": -1}, "policy.fair_share_half_life_s: must be a number >= 0, got -1"),
        ({"fair_share_half_life_s": "1h"}, "policy.fair_share_half_life_s: must be a number >= 0, got '1h'"),
        (
            {"fair_share_history_percent": 150},
            "policy.fair_share_history_percent: must be a whole number from 0 to 100, got 150",
        ),
    ],
)
def test_bad_history_settings_name_key_and_value(policy: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(cluster(policy, 10))
    assert message in str(info.value)


def test_the_history_is_made_again_once_a_minute_at_most() -> None:
    """The engine's session starts again whenever the history differs, so the replay refreshes
    it as the loop's history is sampled, once a minute (``replay.HISTORY_STEP``)."""
    data = cluster({"fair_share_half_life_s": 3600, "fair_share_history_percent": 50}, 600)
    data["jobs"] += [
        {"id": f"z{k}", "team": "y", "gpus": 1, "submit": 1800 + 7 * k, "duration": 5} for k in range(40)
    ]
    refreshes: list[tuple[float, object]] = []

    def recording(snapshot: Snapshot, now: float) -> Plan:
        if not refreshes or snapshot.borrowed_history is not refreshes[-1][1]:
            refreshes.append((now, snapshot.borrowed_history))
        return allocate(snapshot, now)

    data["horizon"] = 2400
    replay(parse_scenario(data), allocate=recording)
    times = [now for now, _ in refreshes]
    assert len(times) > 3
    assert all(b - a >= 60 for a, b in itertools.pairwise(times))
