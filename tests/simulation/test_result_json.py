"""``write_json`` writes, job by job, the very text of ``json.dumps(to_json(result), indent=2)``
(what ``simulate --json`` wrote before it had its own writer): the same file, much sooner."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from allocations.simulation import load_scenario, parse_scenario, replay, to_json, write_json
from allocations.simulation.result import Result
from tests.conftest import SHARED

EXAMPLES = sorted((SHARED / "spec" / "examples").glob("*.yaml"))

# Preempted and evicted jobs, a cancellation, fractional times, and ids and names that JSON
# must escape.
ODD = """
name: 'odd "names" \\ and ünïcode'
cluster:
  node_pools: [{instance_type: ml.p5.48xlarge, count: 2, gpus_per_node: 8}]
policy:
  priority_classes: [{name: high, weight: 100}, {name: low, weight: 10}]
teams:
  - {name: team-a, quota: {ml.p5.48xlarge: 8}, borrow_limit: unlimited}
  - {name: team-b, quota: {ml.p5.48xlarge: 8}}
jobs:
  - {id: 'borrower "1"', team: team-a, gpus: 8, submit: 0, duration: 100, priority: low}
  - {id: 'a\\b', team: team-a, gpus: 8, submit: 0.5, duration: 1000.25, priority: high}
  - {id: 'ünï', team: team-b, gpus: 8, submit: 5.75, duration: 50, priority: high}
  - {id: later, team: team-b, gpus: 4, submit: 7200}
  - {id: gone, team: team-b, gpus: 4, submit: 1}
events:
  - {at: 3, node_down: {count: 1}}
  - {at: 4, node_up: {count: 1}}
  - {at: 6, cancel: gone}
"""


def written(result: Result) -> str:
    out = io.StringIO()
    write_json(result, out)
    return out.getvalue()


def dumped(result: Result) -> str:
    return json.dumps(to_json(result), indent=2) + "\n"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.stem)
def test_the_examples_are_written_as_json_dumps_writes_them(example: Path) -> None:
    result = replay(load_scenario(example))
    assert written(result) == dumped(result)


@pytest.mark.parametrize("until", [0, 3.5, 60, None])
def test_preempted_evicted_cancelled_jobs_and_escaped_strings_are_written_the_same(
    until: float | None,
) -> None:
    result = replay(parse_scenario(yaml.safe_load(ODD)), until=until)
    assert written(result) == dumped(result)
    assert json.loads(written(result)) == to_json(result)


def test_a_result_without_jobs_is_written_the_same() -> None:
    data = yaml.safe_load(ODD)
    del data["jobs"], data["events"]
    result = replay(parse_scenario(data), until=0)
    assert not result.jobs
    assert written(result) == dumped(result)


def test_a_trace_result_is_written_the_same(tmp_path: Path) -> None:
    rows = ["job_id,user,num_gpu,submit_time,duration"]
    rows += [f"{i},{'team-a' if i % 3 else 'Team B'},{1 + i % 4},{-(i % 50)},{60 + i}" for i in range(300)]
    rows += ["300,team-a,0,5,10", "301,ghost,1,5,10"]  # skipped: the report is in the result
    (tmp_path / "trace.csv").write_text("\n".join(rows) + "\n")
    data = yaml.safe_load(ODD)
    del data["jobs"], data["events"]
    data["jobs_csv"] = {
        "path": "trace.csv",
        "columns": {
            "id": "job_id",
            "team": "user",
            "gpus": "num_gpu",
            "submit": "submit_time",
            "duration": "duration",
        },
    }
    result = replay(parse_scenario(data, base_dir=tmp_path), until=0)
    assert len(result.jobs) == 300 and result.trace is not None
    assert written(result) == dumped(result)
