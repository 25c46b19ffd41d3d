"""A what-if run over a week of history: the figures, and the same figures from ``manage.py
simulate`` on the run's exported scenario."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

from allocations.choices import JobState
from allocations.models import Job, WhatIfRun, WhatIfRunState
from allocations.simulation import parse_scenario
from allocations.whatif import drafts as bodies
from allocations.whatif import history, services
from allocations.whatif.runs import execute, export_yaml, scenario_data
from tests import factories as f


def lending_draft(personas, name="lend more"):
    """A draft in which team-b lends its whole quota (live: lend limit 0)."""
    draft = services.draft_create(actor=personas.cluster_admin, name=name)
    quota = {
        "quota": 8,
        "borrow_limit_kind": "percent",
        "borrow_limit_percent": 50,
        "borrow_limit": None,
        "lend_limit": None,
    }
    team = bodies.team_entry(draft.body, "team-b")
    body = bodies.with_team(draft.body, "team-b", team, {"ml.p5.48xlarge": quota})
    return services.draft_update(draft=draft, body=body)


def run_week(week, *drafts):
    run = services.whatif_run_create(
        actor=week.personas.cluster_admin, drafts=drafts, window_start=week.start, window_end=week.end
    )
    assert execute(run.pk) == WhatIfRunState.DONE, WhatIfRun.objects.get(pk=run.pk).error
    run.refresh_from_db()
    return run


def by_key(run):
    return {p["key"]: p for p in run.results["policies"]}


def test_the_window_becomes_a_scenario_with_real_run_times_and_node_history(week):
    built = history.build(week.start, week.end)
    jobs = {j["id"]: j for j in built.data["jobs"]}
    assert len(jobs) == len(week.jobs)
    finished = week.jobs[0]
    assert jobs[str(finished.pk)]["duration"] == (finished.finished_at - finished.started_at).total_seconds()
    assert jobs[str(finished.pk)]["submit"] == (finished.submitted_at - week.start).total_seconds()
    running = week.jobs[-1]
    assert jobs[str(running.pk)]["duration"] == 4 * 3600  # still running: its requested duration
    kinds = [next(k for k in e if k != "at") for e in built.data["events"]]
    assert kinds.count("node_down") == 1 and kinds.count("node_up") == 1 and kinds.count("cancel") == 1
    down = next(e for e in built.data["events"] if "node_down" in e)
    assert down["at"] == 3 * 86400
    assert built.data["horizon"] == 7 * 86400
    assert built.skipped == {}


def test_a_draft_that_lends_more_cuts_team_a_waits_and_idle_gpu_hours(week):
    draft = lending_draft(week.personas)
    run = run_week(week, draft)
    live, lending = by_key(run)["live"], by_key(run)[f"draft-{draft.pk}"]
    assert live["teams"]["team-b"]["lent_gpu_hours"] == 0
    assert lending["teams"]["team-b"]["lent_gpu_hours"] > 0
    assert lending["teams"]["team-a"]["borrowed_gpu_hours"] > live["teams"]["team-a"]["borrowed_gpu_hours"]
    assert lending["teams"]["team-a"]["wait_mean_s"] < live["teams"]["team-a"]["wait_mean_s"]
    assert (
        lending["cluster"]["idle_while_waiting_gpu_hours"] < live["cluster"]["idle_while_waiting_gpu_hours"]
    )
    # Cost is GPU-hours x price: the per-job runs add up to the simulator's own GPU-hours.
    for figures in (live, lending):
        for team in figures["teams"].values():
            assert team["cost"] == pytest.approx(team["gpu_hours"] * 4.5, abs=0.01)
    changed = run.results["comparisons"][0]["jobs"]
    assert changed and changed[0]["change_s"] < 0 and changed[0]["team"] == "team-a"
    assert changed[0]["reason_base"]["code"]  # why it waited under the live policy
    assert run.progress == 1.0


@pytest.mark.parametrize("key", ["live", "draft"])
def test_manage_py_simulate_on_the_exported_scenario_gives_the_same_figures(week, tmp_path: Path, key):
    draft = lending_draft(week.personas)
    run = run_week(week, draft)
    key = "live" if key == "live" else f"draft-{draft.pk}"
    scenario = tmp_path / "whatif.yaml"
    scenario.write_text(export_yaml(run, key))
    out = tmp_path / "result.json"
    with open(tmp_path / "summary.txt", "w") as summary:
        call_command("simulate", str(scenario), "--json", str(out), "--no-progress", stdout=summary)
    simulated = json.loads(out.read_text())
    stored = by_key(run)[key]
    for name, team in simulated["teams"].items():
        assert {k: stored["teams"][name][k] for k in team} == team
    assert {k: stored["cluster"][k] for k in simulated["cluster"]} == simulated["cluster"]
    assert simulated["job_counts"] == stored["job_counts"]
    # The run's time step is the replay's cycle interval, so the file replays on the same grid.
    assert run.time_step == 60
    assert yaml.safe_load(scenario.read_text())["options"] == {"keep_unfit": True, "cycle_interval": 60}


def test_a_run_cancelled_while_queued_never_replays(week):
    run = services.whatif_run_create(
        actor=week.personas.cluster_admin,
        drafts=[lending_draft(week.personas)],
        window_start=week.start,
        window_end=week.end,
    )
    services.whatif_run_cancel(run=run)
    assert execute(run.pk) == WhatIfRunState.CANCELLED
    run.refresh_from_db()
    assert run.results == {} and run.scenario is None


def test_a_run_cancelled_while_running_stops_at_the_next_check(week, monkeypatch):
    from allocations.whatif import runs

    monkeypatch.setattr(runs, "PROGRESS_EVERY_S", 0.0)  # check the flag at every report
    run = services.whatif_run_create(
        actor=week.personas.cluster_admin,
        drafts=[lending_draft(week.personas)],
        window_start=week.start,
        window_end=week.end,
    )
    # The flag is set as the run starts: the first progress report finds it.
    WhatIfRun.objects.filter(pk=run.pk).update(cancel_requested=True)
    assert execute(run.pk) == WhatIfRunState.CANCELLED
    run.refresh_from_db()
    assert run.state == WhatIfRunState.CANCELLED and "policies" not in run.results


def test_executing_a_finished_run_again_changes_nothing(week):
    run = run_week(week, lending_draft(week.personas))
    before = run.results
    assert execute(run.pk) == WhatIfRunState.DONE
    run.refresh_from_db()
    assert run.results == before


def test_a_time_step_puts_every_submit_run_time_and_event_on_its_grid(week):
    exact = {j["id"]: j for j in history.build(week.start, week.end).data["jobs"]}
    built = history.build(week.start, week.end, step=300)
    for job in built.data["jobs"]:
        assert job["submit"] % 300 == 0 and 0 <= job["submit"] - exact[job["id"]]["submit"] < 300
        if job["duration"] is not None:  # None: the cancelled job, which had none
            assert job["duration"] % 300 == 0 and abs(job["duration"] - exact[job["id"]]["duration"]) <= 150
    assert all(event["at"] % 300 == 0 for event in built.data["events"])
    # and so are the cycles (a back-off retry at the next step, as the loop's next cycle)
    assert built.data["options"]["cycle_interval"] == 300
    assert "cycle_interval" not in history.build(week.start, week.end).data["options"]


def test_a_run_refuses_a_bad_window_or_time_step_naming_it(week):
    from django.core.exceptions import ValidationError

    draft = lending_draft(week.personas)
    with pytest.raises(ValidationError) as refused:
        services.whatif_run_create(
            actor=week.personas.cluster_admin,
            drafts=[draft],
            window_start=week.end,
            window_end=week.start,
            time_step=-5,
        )
    assert refused.value.message_dict == {
        "window_end": [
            f"The window must be at least an hour; got {week.end:%Y-%m-%d %H:%M} to {week.start:%Y-%m-%d %H:%M}."
        ],
        "time_step": ["Time step must be 0 to 3600 seconds; got -5."],
    }
    assert not WhatIfRun.objects.exists()


def test_a_run_whose_worker_stopped_is_marked_failed_by_the_reaper(week):
    """A worker killed in the middle of a run (out of memory, a restart) leaves it "running":
    the beat task ends such a run once its heartbeat is older than WHATIF_STALE_AFTER_S, with a
    message; a run still reporting progress, and finished runs, are left alone."""
    from datetime import timedelta

    from django.test import Client
    from django.urls import reverse
    from django.utils import timezone

    from allocations.whatif.tasks import reap_whatif_runs

    done = run_week(week, lending_draft(week.personas))
    assert done.heartbeat_at is not None and done.heartbeat_at >= done.started_at

    draft = lending_draft(week.personas, name="another")

    def started(minutes_ago: float) -> WhatIfRun:
        run = services.whatif_run_create(
            actor=week.personas.cluster_admin, drafts=[draft], window_start=week.start, window_end=week.end
        )
        at = timezone.now() - timedelta(minutes=minutes_ago)
        WhatIfRun.objects.filter(pk=run.pk).update(
            state=WhatIfRunState.RUNNING, started_at=at, heartbeat_at=at
        )
        return run

    stalled, alive = started(11), started(1)
    WhatIfRun.objects.filter(pk=done.pk).update(heartbeat_at=timezone.now() - timedelta(days=1))
    assert reap_whatif_runs() == 1
    stalled.refresh_from_db()
    assert stalled.state == WhatIfRunState.FAILED and stalled.finished_at is not None
    assert "stopped: no progress for 10 minutes" in stalled.error
    assert WhatIfRun.objects.get(pk=alive.pk).state == WhatIfRunState.RUNNING
    assert WhatIfRun.objects.get(pk=done.pk).state == WhatIfRunState.DONE
    # The run's page polls this: it shows the failure and its message.
    client = Client()
    client.force_login(week.personas.cluster_admin)
    status = client.get(reverse("allocations:whatif_run_status", kwargs={"pk": stalled.pk})).json()
    assert status["state"] == "failed" and "start the run again" in status["error"]
    # The worker cannot come back and overwrite it: its progress reports only touch running runs.
    assert reap_whatif_runs() == 0


def test_a_run_taken_for_stalled_is_not_overwritten_when_its_worker_comes_back(week, monkeypatch):
    """A worker that was only slow (no report for WHATIF_STALE_AFTER_S) finds its run failed by
    the reaper: it leaves it failed instead of turning it done behind the user's back."""
    from datetime import timedelta

    from allocations.whatif import runs

    real_report = runs._Progress.report

    def report(self, fraction, message, force=False):
        services.whatif_runs_reap_stalled(
            stale_after=timedelta(0)
        )  # the reaper passes while the worker is busy
        return real_report(self, fraction, message, force)

    monkeypatch.setattr(runs._Progress, "report", report)
    run = services.whatif_run_create(
        actor=week.personas.cluster_admin,
        drafts=[lending_draft(week.personas)],
        window_start=week.start,
        window_end=week.end,
    )
    assert execute(run.pk) == WhatIfRunState.FAILED
    run.refresh_from_db()
    assert run.state == WhatIfRunState.FAILED and "worker running this what-if run stopped" in run.error
    assert "policies" not in run.results


def test_jobs_running_at_the_window_start_that_todays_nodes_cannot_hold_wait_instead(week, tmp_path: Path):
    """Three 8-GPU jobs ran across the window's start, and today's cluster has two 8-GPU nodes
    (a node removed since, say): the run replays the third as waiting from its submission
    (without it the window could not be replayed at all), says so on the run, and the exported
    scenario gives the same figures under ``manage.py simulate``."""

    personas = week.personas
    across = [
        f.make_job(
            personas.team,
            personas.instance_type,
            8,
            submitted_at=week.start - timedelta(hours=3 - i),
            started_at=week.start - timedelta(hours=2 - i / 2),
            finished_at=week.start + timedelta(hours=1),
            state=JobState.FINISHED,
        )
        for i in range(3)
    ]
    built = history.build(week.start, week.end)
    jobs = {j["id"]: j for j in built.data["jobs"]}
    assert [("running_since" in jobs[str(j.pk)]) for j in across] == [True, True, False]
    reason = (
        "running when the window opened, with no room on today's nodes: replayed waiting from its submission"
    )
    assert built.adjusted == {reason: 1}
    assert built.adjusted_examples[reason] == [f"job {across[2].pk} (8 GPUs of ml.p5.48xlarge)"]

    run = run_week(week, lending_draft(personas))
    assert run.results["adjusted"]["counts"] == {reason: 1}
    page = personas_client(personas).get(f"/whatif/runs/{run.pk}/").content.decode()
    assert "Replayed otherwise than they ran: 1 running when the window opened" in page
    assert Job.objects.filter(pk__in=[j.pk for j in across]).count() == 3  # nothing changed in the history
    scenario = tmp_path / "whatif.yaml"
    scenario.write_text(export_yaml(run, "live"))
    out = tmp_path / "result.json"
    with open(tmp_path / "summary.txt", "w") as summary:
        call_command("simulate", str(scenario), "--json", str(out), "--no-progress", stdout=summary)
    simulated = json.loads(out.read_text())
    assert {k: by_key(run)["live"]["cluster"][k] for k in simulated["cluster"]} == simulated["cluster"]
    # It waited for a node: the other two end an hour into the window.
    assert simulated["jobs"][str(across[2].pk)]["admitted_at"][0] == 3600


def personas_client(personas):
    from django.test import Client

    client = Client()
    client.force_login(personas.cluster_admin)
    return client


@pytest.mark.parametrize("step", [0, 60])
def test_runs_that_end_as_the_window_opens_leave_it_and_overdue_runs_go_on(week, step):
    """A run that ends at the window's start (or within a step of it, on a grid) is not in the
    window; one still running past its requested duration runs on in it. Otherwise either would
    make the window's scenario invalid (a run that would end before the simulation starts)."""

    personas = week.personas

    def across(end, **fields):
        return f.make_job(
            personas.team,
            personas.instance_type,
            8,
            submitted_at=week.start - timedelta(hours=3),
            started_at=week.start - timedelta(hours=2),
            finished_at=end,
            **fields,
        )

    at_start = across(week.start, state=JobState.FINISHED)
    just_after = across(week.start + timedelta(seconds=20), state=JobState.FINISHED)
    overdue = across(None, state=JobState.RUNNING, requested_duration=3600)
    built = history.build(week.start, week.end, step=step)
    jobs = {j["id"]: j for j in built.data["jobs"]}
    assert str(at_start.pk) not in jobs
    if step:
        assert str(just_after.pk) not in jobs  # 20 s after the start: gone on a 1-minute grid
    else:
        assert jobs[str(just_after.pk)]["running_since"] + jobs[str(just_after.pk)]["duration"] == 20
    assert jobs[str(overdue.pk)]["running_since"] == -7200 and jobs[str(overdue.pk)]["duration"] is None
    assert built.skipped == {}
    policies = [{"key": "live", "name": "live", "body": bodies.live_body()}]
    parse_scenario(scenario_data(built.data, policies, "live"), keep_unfit=True)  # valid


def test_replays_side_by_side_give_the_figures_of_replays_one_after_the_other(week, settings, monkeypatch):
    from allocations.whatif import runs

    used: list[int] = []
    in_processes = runs._replay_in_processes

    def spy(*args, **kwargs):
        used.append(args[-1])
        return in_processes(*args, **kwargs)

    monkeypatch.setattr(runs, "_replay_in_processes", spy)
    drafts = (lending_draft(week.personas, "one"), lending_draft(week.personas, "two"))
    settings.WHATIF_PROCESSES = 1
    alone = run_week(week, *drafts)
    assert used == []
    settings.WHATIF_PROCESSES = 2
    side_by_side = run_week(week, *drafts)
    assert used == [2]
    assert side_by_side.results["policies"] == alone.results["policies"]
    assert side_by_side.results["comparisons"] == alone.results["comparisons"]
    assert side_by_side.progress == 1.0 and side_by_side.progress_message == "Done"


def test_a_run_cancelled_while_its_replays_run_in_processes_ends_them(
    week, settings, monkeypatch, tmp_path: Path
):
    """The worker reads the cancel flag while the forked replays run, and ends them."""
    import os
    import time

    from allocations.whatif import runs

    settings.WHATIF_PROCESSES = 2
    monkeypatch.setattr(runs, "PROGRESS_EVERY_S", 0.0)
    replay = runs.replay_policy

    def slow(*args, **kwargs):  # in the forked process: say who it is, then take its time
        (tmp_path / f"{os.getpid()}.pid").write_text("")
        time.sleep(60)
        return replay(*args, **kwargs)

    monkeypatch.setattr(runs, "replay_policy", slow)
    report = runs._Progress.report
    run = services.whatif_run_create(
        actor=week.personas.cluster_admin,
        drafts=[lending_draft(week.personas)],
        window_start=week.start,
        window_end=week.end,
    )

    def cancel_once_started(self, fraction, message, force=False):
        if not force and list(tmp_path.glob("*.pid")):
            WhatIfRun.objects.filter(pk=run.pk).update(cancel_requested=True)
        return report(self, fraction, message, force)

    monkeypatch.setattr(runs._Progress, "report", cancel_once_started)
    assert execute(run.pk) == WhatIfRunState.CANCELLED
    run.refresh_from_db()
    assert run.state == WhatIfRunState.CANCELLED and "policies" not in run.results
    pids = [int(p.stem) for p in tmp_path.glob("*.pid")]
    assert pids
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
