"""Preemption grace on the REAL local Slurm cluster (scripts/slurm-up; docs/slurm.md
"Preemption grace", docs/preemption.md section 5): ``signal`` sends SIGTERM to the job's
processes (``scancel --signal=TERM --full``) and leaves it running on its nodes; ``preempt``
after the grace requeues it held; a job that ends on SIGTERM ends by itself. What the tests
look at in Slurm they read with Slurm's own commands, or from what the job itself wrote."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from allocations.backends import BackendJobState
from allocations.backends.slurm import SlurmBackend
from allocations.models import ClusterPolicy, InstanceType, Job, JobEvent, PriorityClass, Team
from tests import factories as f
from tests.backends.conftest import wait_for
from tests.backends.test_loop_on_slurm import P5, cycle, governed, prefix, slurm_states
from tests.backends.test_slurm import job_of, slurm_jobs_named, spec, state_of, wait_running

pytestmark = pytest.mark.slurm


def trapping(marker: Path) -> str:
    """A job that notes SIGTERM in ``marker`` and runs on: one that takes its grace. It writes
    ``marker``.up once its handler is in place (see ``wait_up``)."""
    return f"trap 'echo term >> {marker}' TERM; touch {marker}.up; while :; do sleep 1; done"


def wait_up(marker: Path) -> None:
    """Slurm reports a job running a moment before its batch script runs, and a signal sent in
    that moment reaches no process (docs/slurm.md "Preemption grace"): wait for the script."""
    wait_for(lambda: Path(f"{marker}.up").exists(), bool, "the job's script to run")


def test_a_signalled_job_gets_sigterm_and_keeps_running_on_its_nodes(
    slurm_backend: SlurmBackend, tmp_path: Path
) -> None:
    marker = tmp_path / "term"
    slurm_backend.start(
        spec("graceful", 4, trapping(marker), instance_type="ml.g5.12xlarge"), (("node6", 4),)
    )
    wait_running(slurm_backend, "graceful")
    wait_up(marker)

    assert slurm_backend.signal("graceful") is True

    wait_for(lambda: marker.exists() and marker.read_text(), bool, "the job to note its SIGTERM")
    # It handled the signal and runs on, its GPUs still its own, until gpugov kills it.
    watch_until = time.monotonic() + 4
    while time.monotonic() < watch_until:
        seen = job_of(slurm_backend, "graceful")
        assert seen is not None and (seen.state, seen.nodes) == (BackendJobState.RUNNING, (("node6", 4),))
        [row] = slurm_jobs_named(f"{slurm_backend.prefix}graceful")
        assert row["state"] == "RUNNING" and "gpu" in row["tres"]
        time.sleep(1)
    assert slurm_backend.signal("graceful") is True  # idempotent: signalled again, still running

    # The grace is over: preempt requeues it held, as a victim with no grace.
    assert slurm_backend.preempt("graceful") is True
    held = job_of(slurm_backend, "graceful")
    assert held is not None and (held.state, held.nodes) == (BackendJobState.PENDING, ())
    assert slurm_backend.signal("graceful") is False  # nothing runs: nothing to signal


def test_a_job_that_ends_on_sigterm_ends_by_itself(slurm_backend: SlurmBackend, tmp_path: Path) -> None:
    marker = tmp_path / "quick"
    command = f"touch {marker}.up; sleep 300"
    slurm_backend.start(spec("quick", 4, command, instance_type="ml.g5.12xlarge"), (("node5", 4),))
    wait_running(slurm_backend, "quick")
    wait_up(marker)

    assert slurm_backend.signal("quick") is True

    ended = wait_for(
        lambda: state_of(slurm_backend, "quick"),
        lambda state: state not in (BackendJobState.RUNNING, BackendJobState.PENDING),
        "the job to end on its SIGTERM",
    )
    assert ended in (BackendJobState.FAILED, BackendJobState.CANCELLED, BackendJobState.FINISHED)
    assert slurm_backend.signal("quick") is False
    assert slurm_backend.preempt("quick") is False  # ended by itself: nothing to preempt


def test_signalling_an_unknown_job_does_nothing(slurm_backend: SlurmBackend) -> None:
    assert slurm_backend.signal("never-started") is False


# --- The allocation loop on Slurm ---------------------------------------------------------------


__all__ = ["governed", "prefix"]  # fixtures of the loop's Slurm tests, used here


def loop_submit(team: Team, command: str) -> Job:
    return f.make_job(
        team,
        InstanceType.objects.get(name=P5),
        8,
        priority_class=PriorityClass.objects.get(name="training"),
        requested_duration=600,
        command=command,
    )


@pytest.mark.slow
@pytest.mark.django_db
def test_the_loop_signals_a_victim_on_slurm_and_requeues_it_when_its_grace_runs_out(
    prefix: str, governed: dict[str, Team], tmp_path: Path
) -> None:
    """docs/preemption.md section 5 on Slurm: the reclaimed borrower gets SIGTERM and runs on
    in Slurm, its GPUs still counted; its preemptor waits with ``preempting`` and Slurm does
    not run it; when the grace runs out the borrower is requeued held and its preemptor runs."""
    ClusterPolicy.objects.update(preemption_grace_s=600)
    team_a, team_b = governed["team-a"], governed["team-b"]
    # Each job notes its SIGTERM in a file named after its gpugov id.
    command = trapping(tmp_path / "$GPUGOV_JOB_ID")
    a_jobs = [loop_submit(team_a, command) for _ in range(3)]  # 24 GPUs: 8 borrowed from team-b
    assert cycle().started == 3
    for job in a_jobs:
        wait_up(tmp_path / str(job.pk))

    b_jobs = [loop_submit(team_b, command) for _ in range(2)]
    second = cycle()

    assert (second.started, second.preempted) == (0, 1)  # the starts wait for the next cycle
    (victim,) = Job.objects.filter(team=team_a, terminating_since__isnull=False)
    assert victim.state == "running" and victim.pk == a_jobs[-1].pk
    wait_for(lambda: (tmp_path / str(victim.pk)).exists(), bool, "the victim to note its SIGTERM")
    third = cycle()
    assert (third.started, third.preempted) == (1, 0)  # team-b's job that fits the idle GPUs
    preemptor = Job.objects.get(pk=victim.preempted_for_id)
    assert preemptor in b_jobs and preemptor.state == "pending"
    assert preemptor.pending_reason_code == "preempting"
    states = wait_for(
        lambda: slurm_states(prefix),
        lambda s: sum(v.startswith("RUNNING") for v in s.values()) == 4,
        "team-a's three jobs and team-b's first running in Slurm",
        limit_s=60,
    )
    assert states[str(victim.pk)].startswith("RUNNING") and not states.get(str(preemptor.pk), "").startswith(
        "RUNNING"
    )

    Job.objects.filter(pk=victim.pk).update(grace_ends_at=timezone.now() - timedelta(seconds=1))
    fourth = cycle()

    assert fourth.started == 1
    victim.refresh_from_db()
    preemptor.refresh_from_db()
    assert (victim.state, preemptor.state) == ("pending", "running")
    assert JobEvent.objects.get(job=victim, kind="preempted").preemptor_id == preemptor.pk
    states = wait_for(
        lambda: slurm_states(prefix),
        lambda s: s.get(str(preemptor.pk), "").startswith("RUNNING"),
        "the preemptor running in Slurm",
        limit_s=60,
    )
    assert states[str(victim.pk)].startswith("PENDING"), states
    assert sum(v.startswith("RUNNING") for v in states.values()) == 4  # 32 GPUs, none counted twice
