"""The scenario reader split in modules (scenario, cluster, trace, events, reading): the names
other modules import stay where they were; a trace row's short way gives what its long way
gives; the walk along the timeline reports in time order."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import allocations.simulation as simulation
from allocations.engine.snapshot import InstanceType, Node, Quota, Team
from allocations.simulation import ScenarioError, parse_scenario, scenario
from allocations.simulation.reading import Reader
from allocations.simulation.trace import _Rows


def test_the_names_other_modules_import_stay_importable() -> None:
    for name in ("Scenario", "ScenarioError", "load_scenario", "parse_scenario", "write_json", "to_json"):
        assert hasattr(simulation, name)
    # replay.py, result.py, the what-if lab, the tests and the benchmarks import these from
    # allocations.simulation.scenario.
    for name in (
        "Cancel",
        "NodeDown",
        "NodeUp",
        "Scenario",
        "ScenarioError",
        "ScenarioJob",
        "TraceReport",
        "UpdatePolicy",
        "UpdateTeam",
        "read_cycle_interval",
        "team_name_from_trace",
    ):
        assert hasattr(scenario, name), name


# --- a trace's rows: the short way and the long way agree -------------------------------------

TYPES = {"t1": InstanceType("t1", 4), "t2": InstanceType("t2", 2)}
NODES = [Node("a", "t1", 4), Node("b", "t1", 4), Node("c", "t2", 2)]
TEAMS = {name: Team(name, quotas={"t1": Quota(quota=4)}) for name in ("vc-a", "team-b")}
CLASSES = {"normal", "low"}
HEADER = ("id", "team", "gpus", "submit", "duration", "priority", "instance_type")

CELLS = {
    "id": st.sampled_from(["1", "2", "3", "", " 2 ", "x"]),
    "team": st.sampled_from(["vc_a", "VC_A", "Team B", "team-b", "ghost", "", " vc a "]),
    "gpus": st.sampled_from(
        ["1", "2", "4", "8", "0", "-1", "1.5", "2.0", "two", "", "nan", "inf", " 2 ", "1e400"]
    ),
    "submit": st.sampled_from(["0", "-5", "10", "2.5", "", "soon", "nan", "-inf", " 3 "]),
    "duration": st.sampled_from(["60", "0", "-1", "", "1e9", "x", "inf"]),
    "priority": st.sampled_from(["0", "1", "", "normal", "low", "high"]),
    "instance_type": st.sampled_from(["t1", "t2", "", "t3", " t1 "]),
}


@st.composite
def traces(draw: st.DrawFn) -> tuple[dict[str, str], list[list[str]], dict[object, object], bool]:
    keys = ["team", "gpus", "submit", "duration"]
    keys += [k for k in ("id", "priority", "instance_type") if draw(st.booleans())]
    columns = {key: f"col_{key}" for key in keys}
    rows = []
    for _ in range(draw(st.integers(0, 12))):
        row = [draw(CELLS[key]) for key in keys]
        cut = draw(st.sampled_from([len(row), len(row), len(row), 0, 2, len(row) + 1]))
        rows.append([*row, "extra"][:cut])
    priority_values = draw(st.sampled_from([{}, {"0": "normal", "1": "low"}, {"1": "high"}, {"0": None}]))
    return columns, rows, priority_values, draw(st.booleans())


def read(
    rows: list[list[str]],
    columns: dict[str, str],
    priority_values: dict[object, object],
    strict: bool,
    short: bool,
) -> tuple[object, ...]:
    r = Reader()
    index = {key: i for i, key in enumerate(columns)}
    types = TYPES if "instance_type" in columns else {"t1": TYPES["t1"]}
    reader = _Rows(r, columns, index, 3, types, NODES, TEAMS, CLASSES, priority_values, strict)
    if short:
        reader.add(rows, first_line=2)
    else:
        for line, row in enumerate(rows, 2):
            reader.rows += 1
            reader.judge_row(line, row)
    return reader.jobs, reader.rows, reader.skipped, reader.examples, r.errors


@settings(max_examples=300, deadline=None)
@given(traces())
def test_a_row_taken_the_short_way_reads_as_the_long_way_reads_it(
    trace: tuple[dict[str, str], list[list[str]], dict[object, object], bool],
) -> None:
    columns, rows, priority_values, strict = trace
    assert read(rows, columns, priority_values, strict, short=True) == read(
        rows, columns, priority_values, strict, short=False
    )


# --- the walk along the timeline ------------------------------------------------------------

BASE = """
cluster:
  node_pools: [{instance_type: ml.p5.48xlarge, count: 2, gpus_per_node: 8}]
teams:
  - {name: team-a, quota: {ml.p5.48xlarge: 8}}
  - {name: team-b, quota: {ml.p5.48xlarge: 4}}
"""


def test_errors_of_events_and_of_jobs_that_never_fit_come_in_time_order() -> None:
    data = yaml.safe_load(BASE)
    # team-b may use 4 + 50% = 6 GPUs: 8 never fit. The file lists them out of time order.
    data["jobs"] = [
        {"id": "late", "team": "team-b", "gpus": 8, "submit": 30},
        {"id": "early", "team": "team-b", "gpus": 8, "submit": 5},
        {"id": "at-10", "team": "team-b", "gpus": 8, "submit": 10},
    ]
    data["events"] = [
        {"at": 20, "node_up": {"count": 1}},  # none is down
        {"at": 10, "cancel": "nobody"},
    ]
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    assert [error.split(":")[0] for error in info.value.errors] == [
        "jobs[1].gpus",
        "events[1].cancel",
        "jobs[2].gpus",
        "events[0].node_up.count",
        "jobs[0].gpus",
    ]


def test_each_job_is_judged_with_the_events_before_its_submit_applied(tmp_path: Path) -> None:
    data = yaml.safe_load(BASE)
    data["jobs_csv"] = {
        "path": "trace.csv",
        "columns": {"id": "id", "team": "team", "gpus": "gpus", "submit": "submit", "duration": "duration"},
    }
    # team-b's quota is 12 from 100 on (18 GPUs with 50% borrowing, 16 in the cluster), 4
    # again from 200 on: 8 GPUs never fit before 100 nor from 200.
    data["events"] = [
        {"at": 100, "update_team": {"name": "team-b", "quota": {"ml.p5.48xlarge": 12}}},
        {"at": 200, "update_team": {"name": "team-b", "quota": {"ml.p5.48xlarge": 4}}},
    ]
    rows = ["id,team,gpus,submit,duration", "a,team-b,8,99,1", "b,team-b,8,100,1", "c,team-b,8,199,1"]
    rows += ["d,team-b,8,200,1", "e,team-a,8,0,1"]
    (tmp_path / "trace.csv").write_text("\n".join(rows) + "\n")
    loaded = parse_scenario(data, base_dir=tmp_path, keep_unfit=True)
    assert list(loaded.rejected) == ["a", "d"]
