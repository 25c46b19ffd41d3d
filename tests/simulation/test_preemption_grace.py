"""The simulator carries out grace (docs/preemption.md sections 5 and 6): a victim is signalled
and keeps its GPUs until it ends or its grace runs out; its preemptor waits with
``preempting`` meanwhile, and nothing else takes those GPUs."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from allocations.simulation import parse_scenario, replay
from allocations.simulation.result import Result

RECLAIM = """
cluster:
  node_pools: [{instance_type: ml.p5.48xlarge, count: 1, gpus_per_node: 8}]
policy:
  preemption_grace_s: %(grace)s
  priority_classes: [{name: quick, weight: 10, preemption_grace_s: 5}, {name: slow, weight: 10}]
teams:
  - {name: a, quota: {ml.p5.48xlarge: 8}}
  - {name: b, quota: {ml.p5.48xlarge: 0}, borrow_limit: unlimited}
  - {name: c, quota: {ml.p5.48xlarge: 0}, borrow_limit: unlimited}
jobs:
  - {id: b1, team: b, gpus: 8, submit: 0, duration: %(b1)s, priority: %(priority)s}
  - {id: a1, team: a, gpus: 8, submit: 2000, duration: 600}
"""
# A third team's job submitted while b1 terminates: it could take b1's GPUs, were they free.
LATE = "  - {id: c1, team: c, gpus: 8, submit: 2010, duration: 100}\n"


def run(
    grace: float, b1: float = 7200, priority: str = "slow", extra: str = "", until: float | None = None
) -> Result:
    text = textwrap.dedent(RECLAIM % {"grace": grace, "b1": b1, "priority": priority}) + extra
    return replay(parse_scenario(yaml.safe_load(text)), until=until)


def test_without_grace_the_victim_stops_at_once() -> None:
    result = run(0)
    assert result.jobs["b1"].preempted[0].at == 2000
    assert result.jobs["a1"].admitted_at == (2000,)
    assert result.cluster.lost_gpu_hours == pytest.approx(2000 * 8 / 3600)


def test_a_victim_keeps_its_gpus_for_its_grace_then_is_killed() -> None:
    """b1 is signalled at 2000 s and killed at 2030 s: a1 starts then, and b1 lost 2030 s of
    8 GPUs (it ran until it was killed)."""
    result = run(30)
    assert result.jobs["b1"].preempted[0].at == 2000
    assert result.jobs["a1"].admitted_at == (2030,)
    assert result.jobs["b1"].admitted_at == (0, 2630)
    assert result.cluster.lost_gpu_hours == pytest.approx(2030 * 8 / 3600)


def test_a_victim_that_ends_within_its_grace_frees_its_gpus_then() -> None:
    """b1 would end at 2010 s, within its 30 s grace: it finishes, nothing is lost, a1 starts at
    2010 s."""
    result = run(30, b1=2010)
    assert result.jobs["b1"].finished_at == 2010
    assert result.jobs["b1"].admitted_at == (0,)
    assert result.jobs["a1"].admitted_at == (2010,)
    assert result.cluster.lost_gpu_hours == 0


def test_the_preemptor_waits_with_preempting_and_its_gpus_are_reserved() -> None:
    """While b1 terminates, a1 waits with ``preempting`` naming b1 and the time left, and c1,
    submitted meanwhile, does not take b1's GPUs (they are counted once, b1's) nor preempts."""
    during = run(30, extra=LATE, until=2012)
    reason = during.jobs["a1"].pending_reason
    assert reason is not None and reason.code == "preempting"
    assert "waits for job b1 (grace 30 s, 18 s left) to stop" in reason.message
    assert during.jobs["b1"].state == "running"
    assert during.jobs["c1"].state == "pending"
    assert during.jobs["c1"].admitted_at == ()
    result = run(30, extra=LATE)
    assert result.jobs["a1"].admitted_at == (2030,)
    assert len(result.jobs["b1"].preempted) == 1
    assert result.jobs["c1"].admitted_at[0] >= 2030 + 600


def test_a_class_grace_overrides_the_policys() -> None:
    """b1's class ``quick`` has a grace of 5 s under a policy of 30 s."""
    result = run(30, priority="quick")
    assert result.jobs["a1"].admitted_at == (2005,)
