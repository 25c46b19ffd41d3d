"""The simulator counts what a preemption costs (docs/preemption.md sections 1, 2 and 8):
minimum runtimes delay a reclaim, checkpoints keep progress, and the result counts lost
GPU-hours, preemptions per job and the victims that had run less than 10 minutes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from allocations.simulation import load_scenario, parse_scenario, replay
from allocations.simulation.result import to_json

RECLAIM = """
cluster:
  node_pools: [{instance_type: ml.p5.48xlarge, count: 1, gpus_per_node: 8}]
policy: {min_runtime_s: %(min_runtime)s}
teams:
  - {name: a, quota: {ml.p5.48xlarge: 8}}
  - {name: b, quota: {ml.p5.48xlarge: 0}, borrow_limit: unlimited}
jobs:
  - {id: b1, team: b, gpus: 8, submit: 0, duration: 7200, checkpoint_interval_s: %(checkpoint)s}
  - {id: a1, team: a, gpus: 8, submit: 2000, duration: 600}
"""


def run(min_runtime: float = 0, checkpoint: float | None = None):
    text = RECLAIM % {"min_runtime": min_runtime, "checkpoint": "null" if checkpoint is None else checkpoint}
    return replay(parse_scenario(yaml.safe_load(textwrap.dedent(text))))


def test_a_checkpointed_victim_loses_only_the_work_since_its_last_checkpoint() -> None:
    """b1 is reclaimed at 2000 s, its last checkpoint at 1800 s: 200 s of 8 GPUs are lost, and
    it resumes at 2600 s with 7200 - 1800 s of work left."""
    result = run(checkpoint=1800)
    assert result.jobs["b1"].preempted[0].at == 2000
    assert result.cluster.lost_gpu_hours == pytest.approx(200 * 8 / 3600)
    assert result.teams["b"].lost_gpu_hours == pytest.approx(200 * 8 / 3600)
    assert result.jobs["b1"].admitted_at == (0, 2600)
    assert result.jobs["b1"].finished_at == 2600 + 7200 - 1800


def test_without_checkpoints_the_whole_run_is_lost_and_done_again() -> None:
    result = run()
    assert result.cluster.lost_gpu_hours == pytest.approx(2000 * 8 / 3600)
    assert result.jobs["b1"].finished_at == 2600 + 7200


def test_a_reclaim_waits_for_the_victims_minimum_runtime() -> None:
    """b1 is protected until 3000 s: a1 waits with min-runtime (its reason made at 2000 s, its
    last cycle), then starts at 3000 s (a cycle runs when the protection ends)."""
    until = replay(
        parse_scenario(
            yaml.safe_load(textwrap.dedent(RECLAIM % {"min_runtime": 3000, "checkpoint": "null"}))
        ),
        until=2500,
    )
    assert until.jobs["a1"].pending_reason is not None
    assert until.jobs["a1"].pending_reason.code == "min-runtime"
    assert (
        "reclaims 8 GPUs from b's job b1 in 17 min: minimum runtime"
        in until.jobs["a1"].pending_reason.message
    )
    result = run(min_runtime=3000)
    assert result.jobs["a1"].admitted_at == (3000,)
    assert result.jobs["b1"].preempted[0].at == 3000


def test_the_result_counts_preemptions_per_job_and_short_victims() -> None:
    """One preemption among two jobs; the victim had run 2000 s, so no short run; with the
    reclaim at 300 s it is one."""
    result = run()
    assert result.cluster.preemptions_per_job == 0.5
    assert result.cluster.short_victims_share == 0
    early = replay(
        parse_scenario(
            yaml.safe_load(
                textwrap.dedent(RECLAIM % {"min_runtime": 0, "checkpoint": "null"}).replace("2000", "300")
            )
        )
    )
    assert early.cluster.short_victims_share == 1
    cluster = to_json(early)["cluster"]
    assert (cluster["short_victims_share"], cluster["preemptions_per_job"]) == (1, 0.5)


def test_a_trace_column_maps_checkpoint_intervals(tmp_path: Path) -> None:
    """docs/simulation.md: ``checkpoint_interval_s`` is a mappable ``jobs_csv`` column; empty or
    0 is no checkpoint, a bad cell skips the row."""
    (tmp_path / "trace.csv").write_text(
        "id,user,gpus,t,d,ck\nj1,a,1,0,10,1800\nj2,a,1,0,10,\nj3,a,1,0,10,-5\n"
    )
    (tmp_path / "s.yaml").write_text(
        textwrap.dedent(
            """
            cluster:
              node_pools: [{instance_type: ml.p5.48xlarge, count: 1, gpus_per_node: 8}]
            teams:
              - {name: a, quota: {ml.p5.48xlarge: 8}}
            jobs_csv:
              path: trace.csv
              columns: {id: id, team: user, gpus: gpus, submit: t, duration: d, checkpoint_interval_s: ck}
            """
        )
    )
    scenario = load_scenario(tmp_path / "s.yaml")
    assert [(j.id, j.checkpoint_interval_s) for j in scenario.jobs] == [("j1", 1800), ("j2", None)]
    assert scenario.trace is not None
    assert scenario.trace.skipped == {"with a bad checkpoint interval": 1}
