"""``jobs_csv`` traces: team names normalized, unusable rows skipped with counts (or refused)."""

from __future__ import annotations

from pathlib import Path

import pytest

from allocations.simulation import ScenarioError, load_scenario
from allocations.simulation.scenario import team_name_from_trace

SCENARIO = """
cluster:
  node_pools: [{instance_type: ml.p4d.24xlarge, count: 2, gpus_per_node: 4}]
policy:
  priority_classes: [{name: best-effort, weight: 0}, {name: normal, weight: 50}]
teams:
  - {name: vc-6214e9, quota: {ml.p4d.24xlarge: 4}, borrow_limit: unlimited}
  - {name: team-b, quota: {ml.p4d.24xlarge: 4}}
jobs_csv:
  path: trace.csv
  columns: {id: job_id, team: user, gpus: num_gpu, submit: submit_time, duration: duration, priority: best_effort}
  priority_values: {"1": best-effort, "0": normal}
"""

TRACE = """job_id,user,num_gpu,submit_time,duration,best_effort
0,vc_6214e9,1,10,100,0
1,Team B,2,20,50,1
2,vc_6214e9,0,30,10,0
3,vc_6214e9,0,31,10,0
4,vc_ghost,1,40,10,0
5,vc_6214e9,1,50,-5,0
6,vc_6214e9,64,60,10,0
7,vc_6214e9,two,70,10,0
8,vc_6214e9,1,80,,0
9,vc_6214e9,8,90,100,1
"""


def write(tmp_path: Path, scenario: str = SCENARIO, trace: str = TRACE) -> Path:
    (tmp_path / "trace.csv").write_text(trace)
    file = tmp_path / "scenario.yaml"
    file.write_text(scenario)
    return file


@pytest.mark.parametrize(
    ("value", "team"),
    [
        ("vc_6214e9", "vc-6214e9"),
        ("Team B", "team-b"),
        ("ML__Infra  Team", "ml-infra-team"),
        ("a-b", "a-b"),
        (" _x_ ", "x"),
    ],
)
def test_trace_team_values_become_team_names(value: str, team: str) -> None:
    assert team_name_from_trace(value) == team


def test_unusable_rows_are_skipped_and_counted_with_the_first_examples(tmp_path: Path) -> None:
    loaded = load_scenario(write(tmp_path))
    assert [(j.id, j.team, j.gpus, j.priority) for j in loaded.jobs] == [
        ("0", "vc-6214e9", 1, "normal"),
        ("1", "team-b", 2, "best-effort"),
        ("9", "vc-6214e9", 8, "best-effort"),
    ]
    report = loaded.trace
    assert report is not None
    assert (report.rows, report.used, report.skipped_total) == (10, 3, 7)
    assert report.skipped == {
        "with 0 GPUs": 2,
        "of an unknown team": 1,
        "with a negative duration": 1,
        "with more GPUs than the cluster": 1,
        "with a bad number": 2,
    }
    assert report.examples["with 0 GPUs"] == ("line 4: num_gpu='0'", "line 5: num_gpu='0'")
    assert report.examples["with a bad number"] == ("line 9: num_gpu='two'", "line 10: duration=''")
    assert "used 3 of 10 rows" in report.describe()


def test_strict_refuses_a_trace_with_unusable_rows_naming_each(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(write(tmp_path), strict=True)
    errors = info.value.errors
    assert len(errors) == 7
    assert "jobs_csv line 4: with 0 GPUs: num_gpu='0'" in errors
    assert "jobs_csv line 6: of an unknown team: user='vc_ghost'" in errors


def test_a_clean_trace_loads_under_strict(tmp_path: Path) -> None:
    clean = "job_id,user,num_gpu,submit_time,duration,best_effort\n0,vc_6214e9,1,10,100,0\n"
    loaded = load_scenario(write(tmp_path, trace=clean), strict=True)
    assert loaded.trace is not None and loaded.trace.skipped == {}


def test_a_mapped_column_missing_from_the_trace_is_an_error(tmp_path: Path) -> None:
    file = write(tmp_path, scenario=SCENARIO.replace("gpus: num_gpu", "gpus: gpus"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(file)
    assert info.value.errors[0].startswith(
        "jobs_csv.columns.gpus: no such column in trace.csv (columns: job_id, user,"
    )


def test_a_missing_trace_file_is_an_error(tmp_path: Path) -> None:
    file = tmp_path / "scenario.yaml"
    file.write_text(SCENARIO)
    with pytest.raises(ScenarioError, match=r"jobs_csv.path: cannot read .*trace\.csv"):
        load_scenario(file)


def test_trace_jobs_that_can_never_fit_are_errors_unless_kept(tmp_path: Path) -> None:
    # team-b may use 4 + 50% = 6 GPUs; a row asking for 8 can never fit.
    trace = "job_id,user,num_gpu,submit_time,duration,best_effort\n0,team-b,8,10,100,0\n"
    file = write(tmp_path, trace=trace)
    with pytest.raises(ScenarioError, match=r"jobs_csv line 2 \(gpus\): job '0' can never fit"):
        load_scenario(file)
    assert set(load_scenario(file, keep_unfit=True).rejected) == {"0"}


def test_a_submitter_column_gives_each_job_its_submitter(tmp_path: Path) -> None:
    """docs/simulation.md: ``columns: {submitter: ...}``; an empty cell is no submitter, on the
    short way (a plainly usable row) and the long one (a row short of cells) alike."""
    scenario = SCENARIO.replace("priority: best_effort}", "priority: best_effort, submitter: owner}")
    trace = "job_id,user,num_gpu,submit_time,duration,best_effort,owner\n0,vc_6214e9,1,10,100,0, ann \n"
    trace += "1,vc_6214e9,1,11,100,0,\n2,vc_6214e9,1,12,100,0\n"
    loaded = load_scenario(write(tmp_path, scenario=scenario, trace=trace))
    assert {j.id: j.submitter for j in loaded.jobs} == {"0": "ann", "1": None, "2": None}
