"""``manage.py simulate`` and ``python -m allocations.simulation``: output, JSON shape, errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from tests.conftest import REPO

EXAMPLE = REPO / "docs" / "examples" / "borrow-and-reclaim.yaml"

BROKEN = """
cluster:
  node_pools: [{instance_type: ml.p5.48xlarge, count: 1, gpus_per_node: 8}]
teams:
  - {name: team-a, quota: {ml.p5: 8}}
jobs:
  - {id: j1, team: team-a, gpus: -2}
"""


def run_manage(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "simulate", "--no-progress", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_call_command_prints_a_summary_per_team_and_for_the_cluster() -> None:
    out = io.StringIO()
    call_command("simulate", str(EXAMPLE), "--until", "5", stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    assert "Scenario borrow-and-reclaim: simulated 0 .. 5 s" in text
    lines = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("team-")}
    assert set(lines) == {"team-a", "team-b"}
    assert lines["team-b"][-2:] == ["1", "0.003"]  # one preemption, 2 GPUs x 5 s lost
    assert "1 preemptions" in text and "2 running, 1 pending" in text


def test_json_to_stdout_has_the_result_shape_of_scenario_md() -> None:
    out = io.StringIO()
    call_command("simulate", str(EXAMPLE), "--until", "5", "--json", "-", stdout=out, stderr=io.StringIO())
    result = json.loads(out.getvalue())
    assert {"name", "end_time", "jobs", "teams", "cluster"} <= result.keys()
    assert result["end_time"] == 5
    b2 = result["jobs"]["b2"]
    assert {
        k: b2[k] for k in ("team", "gpus", "priority", "state", "admitted_at", "preempted", "finished_at")
    } == {
        "team": "team-b",
        "gpus": 2,
        "priority": None,
        "state": "pending",
        "admitted_at": [0],
        "preempted": [{"at": 5, "reason": "reclaim", "by": "a1"}],
        "finished_at": None,
    }
    assert b2["pending_reason"]["code"] == "no-idle-capacity" and b2["pending_reason"]["message"]
    assert result["jobs"]["a1"]["pending_reason"] is None
    team_keys = {
        "gpu_hours",
        "borrowed_gpu_hours",
        "lent_gpu_hours",
        "idle_quota_gpu_hours",
        "wait_p50_s",
        "wait_p95_s",
        "preemptions",
        "lost_gpu_hours",
    }
    assert team_keys <= result["teams"]["team-b"].keys()
    assert result["teams"]["team-b"]["lost_gpu_hours"] == pytest.approx(2 * 5 / 3600, abs=1e-6)
    assert result["teams"]["team-a"]["lent_gpu_hours"] == pytest.approx(2 * 5 / 3600, abs=1e-6)
    cluster_keys = {
        "capacity_gpu_hours",
        "allocated_gpu_hours",
        "utilization",
        "idle_while_waiting_gpu_hours",
        "wait_mean_s",
        "wait_p95_s",
        "lost_gpu_hours",
        "preemptions",
        "cycles",
    }
    assert cluster_keys <= result["cluster"].keys()
    assert result["cluster"]["preemptions"] == 1


def test_json_to_a_file(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    call_command("simulate", str(EXAMPLE), "--json", str(target), stdout=io.StringIO(), stderr=io.StringIO())
    assert json.loads(target.read_text())["name"] == "borrow-and-reclaim"


def test_call_command_refuses_a_broken_file_with_every_path(tmp_path: Path) -> None:
    file = tmp_path / "broken.yaml"
    file.write_text(BROKEN)
    with pytest.raises(CommandError) as info:
        call_command("simulate", str(file), stdout=io.StringIO(), stderr=io.StringIO())
    message = str(info.value)
    assert "nothing simulated" in message
    assert "teams[0].quota.ml.p5: unknown instance type 'ml.p5'" in message
    assert "jobs[0].gpus: must be a whole number >= 1, got -2" in message


def test_manage_py_simulate_exits_non_zero_on_a_broken_file_and_writes_nothing(tmp_path: Path) -> None:
    file = tmp_path / "broken.yaml"
    file.write_text(BROKEN)
    target = tmp_path / "out.json"
    done = run_manage(str(file), "--json", str(target))
    assert done.returncode == 1
    assert "jobs[0].gpus: must be a whole number >= 1, got -2" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == "" and not target.exists()


def test_manage_py_simulate_runs_an_example(tmp_path: Path) -> None:
    done = run_manage(str(EXAMPLE), "--until", "5", "--json", "-")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["jobs"]["b2"]["state"] == "pending"
    assert "Scenario borrow-and-reclaim" in done.stderr  # the table goes to stderr when stdout is JSON


def test_python_m_runs_without_django(tmp_path: Path) -> None:
    code = (
        "import runpy, sys; sys.argv = ['x', sys.argv[1], '--until', '5', '--no-progress']; "
        "import allocations.simulation.command_line as c; rc = c.main(sys.argv[1:]); "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'django', 'celery', 'plotly'}); "
        "print('LOADED', ','.join(bad)); sys.exit(rc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(EXAMPLE)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "Scenario borrow-and-reclaim" in done.stdout
    assert "LOADED \n" in done.stdout or done.stdout.rstrip().endswith("LOADED")
    module = subprocess.run(
        [sys.executable, "-m", "allocations.simulation", str(EXAMPLE), "--until", "x"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert module.returncode == 2 and "--until: invalid float value: 'x'" in module.stderr


def test_a_negative_until_is_refused() -> None:
    with pytest.raises(CommandError, match="--until: must be a number of seconds >= 0, got -1"):
        call_command("simulate", str(EXAMPLE), "--until", "-1", stdout=io.StringIO(), stderr=io.StringIO())


def test_keep_unfit_and_strict_flags_reach_the_loader(tmp_path: Path) -> None:
    file = tmp_path / "unfit.yaml"
    file.write_text(BROKEN.replace("ml.p5: 8", "ml.p5.48xlarge: 4").replace("gpus: -2", "gpus: 8"))
    with pytest.raises(CommandError, match=r"jobs\[0\].gpus: job 'j1' can never fit"):
        call_command("simulate", str(file), stdout=io.StringIO(), stderr=io.StringIO())
    out = io.StringIO()
    call_command("simulate", str(file), "--keep-unfit", "--json", "-", stdout=out, stderr=io.StringIO())
    assert json.loads(out.getvalue())["jobs"]["j1"]["state"] == "rejected"


def test_the_cycle_interval_flag_stands_instead_of_the_files(tmp_path: Path) -> None:
    file = tmp_path / "interval.yaml"
    file.write_text(
        """
cluster:
  node_pools: [{instance_type: ml.p5.48xlarge, count: 1, gpus_per_node: 8}]
teams:
  - {name: team-a, quota: {ml.p5.48xlarge: 8}}
jobs:
  - {id: j1, team: team-a, gpus: 2, submit: 7, duration: 60}
options: {cycle_interval: 60}
"""
    )

    def admitted(*flags: str) -> list[float]:
        out = io.StringIO()
        call_command("simulate", str(file), "--json", "-", *flags, stdout=out, stderr=io.StringIO())
        return json.loads(out.getvalue())["jobs"]["j1"]["admitted_at"]

    assert admitted() == [60]  # the file's interval: submitted at 7, decided at 60
    assert admitted("--cycle-interval", "0") == [7]  # at every happening
    assert admitted("--cycle-interval", "5") == [10]
    with pytest.raises(
        CommandError, match=r"--cycle-interval: must be a whole number of seconds >= 0 .*got -5"
    ):
        call_command(
            "simulate", str(file), "--cycle-interval", "-5", stdout=io.StringIO(), stderr=io.StringIO()
        )
