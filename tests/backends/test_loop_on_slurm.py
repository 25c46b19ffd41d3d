"""The allocation loop driving the REAL local Slurm cluster (scripts/slurm-up).

node[1-4] are ml.p5.48xlarge with 8 GPUs: 32 GPUs, shared here by two teams of quota 16.
Every test's Slurm jobs carry a name prefix of their own and are cancelled afterwards; a node a
test drains is resumed afterwards. What the tests look at in Slurm they read with Slurm's own
commands, not through the backend.
"""

from __future__ import annotations

import itertools
import os
import subprocess
from collections.abc import Iterator

import pytest
from django.utils import timezone

from allocations.models import Cluster, CycleRun, InstanceType, Job, JobEvent, Node, Team
from allocations.services.loop import run_allocation_cycle
from tests import factories as f
from tests.backends.conftest import slurm, slurm_answers, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.django_db]
P5 = "ml.p5.48xlarge"
_serial = itertools.count(1)


@pytest.fixture
def prefix(slurm_cluster: None) -> Iterator[str]:
    """A job name prefix of this test's own; its Slurm jobs are cancelled afterwards."""
    name = f"gpugovloop-{os.getpid()}-{next(_serial)}-"
    yield name
    if slurm_answers():
        lines = slurm("squeue", "-h", "-o", "%i|%j").splitlines()
        ids = [line.split("|")[0] for line in lines if line.split("|", 1)[-1].startswith(name)]
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, timeout=30, check=False)


@pytest.fixture
def governed(prefix: str) -> dict[str, Team]:
    """The cluster on the Slurm backend, two teams of quota 16 on the 32 GPUs of p5."""
    f.make_cluster(
        backend_kind="slurm",
        backend_settings={"job_name_prefix": prefix, "partition": "gpu", "output": "/dev/null"},
    )
    kind = f.make_instance_type(P5, 8)
    f.make_priority_classes()
    return {
        "team-a": f.make_team("team-a", {kind: 16}),  # may borrow 50 %: up to 24 GPUs
        "team-b": f.make_team("team-b", {kind: 16}),
    }


def submit(team: Team, gpus: int = 8, priority: str = "training") -> Job:
    from allocations.models import InstanceType, PriorityClass

    job = f.make_job(
        team,
        InstanceType.objects.get(name=P5),
        gpus,
        priority_class=PriorityClass.objects.get(name=priority),
        requested_duration=600,
        command="sleep 600",
    )
    JobEvent.objects.create(job=job, kind="submitted", at=timezone.now())
    return job


def cycle() -> CycleRun:
    run = run_allocation_cycle(trigger="slurm-test")
    assert run is not None
    assert run.ok, run.errors
    return run


def slurm_states(prefix: str) -> dict[str, str]:
    """gpugov job id -> Slurm state (and reason) of the newest Slurm job with that name."""
    states: dict[str, str] = {}
    for line in slurm("squeue", "-h", "-o", "%i|%j|%T|%r", "--sort=i").splitlines():
        _, name, state, reason = line.split("|", 3)
        if name.startswith(prefix):
            states[name[len(prefix) :]] = f"{state}/{reason}"
    return states


def test_borrowing_shows_on_slurm_and_reclaim_requeues_the_borrower(
    prefix: str, governed: dict[str, Team]
) -> None:
    team_a, team_b = governed["team-a"], governed["team-b"]
    a_jobs = [submit(team_a) for _ in range(3)]  # 24 GPUs: 8 of them borrowed from team-b

    first = cycle()

    assert first.started == 3
    assert set(Node.objects.filter(instance_type__name=P5).values_list("name", flat=True)) >= {
        "node1",
        "node2",
        "node3",
        "node4",
    }
    running = wait_for(
        lambda: slurm_states(prefix),
        lambda states: sum(s.startswith("RUNNING") for s in states.values()) == 3,
        "three team-a jobs running in Slurm",
    )
    assert set(running) == {str(job.pk) for job in a_jobs}

    # team-b wants its quota back: one job fits in the idle 8 GPUs, the other reclaims.
    b_jobs = [submit(team_b) for _ in range(2)]
    second = cycle()

    assert (second.started, second.preempted) == (2, 1)
    (victim,) = Job.objects.filter(team=team_a, state="pending")
    assert victim.pk == a_jobs[-1].pk  # the newest borrower goes first (POLICY.md 4)
    preempted = JobEvent.objects.get(job=victim, kind="preempted")
    assert preempted.reason == "reclaim" and preempted.preemptor_id in {job.pk for job in b_jobs}
    assert victim.pending_reason_code and victim.pending_reason_message
    assert Job.objects.filter(team=team_b, state="running").count() == 2
    # In Slurm: the borrower is held (requeued, never restarted by Slurm itself); team-b runs.
    states = wait_for(
        lambda: slurm_states(prefix),
        lambda s: all(s.get(str(job.pk), "").startswith("RUNNING") for job in b_jobs),
        "team-b's jobs running in Slurm",
        limit_s=60,
    )
    assert not states.get(str(victim.pk), "").startswith("RUNNING"), states
    assert states[str(victim.pk)].startswith("PENDING") and "held" in states[str(victim.pk)].lower(), states

    third = cycle()  # nothing changed: the loop and Slurm agree
    assert (third.started, third.preempted, third.corrections) == (0, 0, 0)


@pytest.fixture
def drained_node4(governed: dict[str, Team]) -> Iterator[str]:
    yield "node4"
    subprocess.run(
        ["scontrol", "update", "NodeName=node4", "State=RESUME"], capture_output=True, timeout=30, check=False
    )


def test_drained_node_lowers_capacity_and_resumed_node_raises_it(
    prefix: str, governed: dict[str, Team], drained_node4: str
) -> None:
    team_a, team_b = governed["team-a"], governed["team-b"]
    slurm("scontrol", "update", f"NodeName={drained_node4}", "State=DRAIN", "Reason=gpugov loop test")
    for _ in range(2):
        submit(team_a)
    cycle()
    assert Node.objects.get(name=drained_node4).state == "draining"
    assert Node.objects.get(name=drained_node4).reason == "gpugov loop test"

    b_first, b_second = submit(team_b), submit(team_b)
    cycle()

    b_first.refresh_from_db()
    b_second.refresh_from_db()
    assert b_first.state == "running"
    assert b_second.state == "pending"
    # Within its quota and nobody borrowing: only the lost node keeps it waiting.
    assert b_second.pending_reason_code == "capacity-lost", b_second.pending_reason_message
    assert all(name != drained_node4 for job in Job.objects.filter(state="running") for name, _ in job.nodes)

    slurm("scontrol", "update", f"NodeName={drained_node4}", "State=RESUME")
    wait_for(
        lambda: slurm("sinfo", "-h", "-n", drained_node4, "-o", "%t").strip(),
        lambda state: state in {"idle", "mix", "alloc"},
        "Slurm to report the resumed node ready",
        limit_s=60,
    )
    cycle()

    b_second.refresh_from_db()
    assert Node.objects.get(name=drained_node4).state == "ready"
    assert b_second.state == "running" and b_second.nodes == [[drained_node4, 8]]
    wait_for(
        lambda: slurm_states(prefix).get(str(b_second.pk), ""),
        lambda state: state.startswith("RUNNING"),
        "the job on the resumed node running in Slurm",
        limit_s=60,
    )


def test_unreachable_slurm_degrades_the_cluster_and_fails_no_job(governed: dict[str, Team]) -> None:
    job = submit(governed["team-a"])
    cycle()
    # Slurm's commands behind an ssh to a host that does not answer: an outage, not a bad request.
    Cluster.objects.filter(pk=1).update(
        backend_settings={
            **Cluster.objects.get().backend_settings,
            "command_prefix": ["ssh", "-o", "ConnectTimeout=2", "-o", "BatchMode=yes", "nobody@192.0.2.1"],
            "timeout_s": 10,
        }
    )
    run = run_allocation_cycle(trigger="slurm-test")
    assert run is not None and run.backend_outage
    cluster = Cluster.objects.get()
    assert not cluster.backend_healthy and cluster.backend_error
    job.refresh_from_db()
    assert job.state == "running"
    assert not JobEvent.objects.filter(kind="failed").exists()


def _gpus_per_node() -> dict[str, int]:
    """GPUs the database has running on each node."""
    used: dict[str, int] = {}
    for placed in Job.objects.filter(state="running").values_list("nodes", flat=True):
        for name, gpus in placed:
            used[name] = used.get(name, 0) + gpus
    return used


def no_requeue_cluster(prefix: str) -> InstanceType:
    """A Slurm cluster whose jobs are submitted with ``--no-requeue``: Slurm then refuses
    `scontrol requeuehold`, a real refusal of every preemption. Returns its instance type."""
    f.make_cluster(
        backend_kind="slurm",
        backend_settings={
            "job_name_prefix": prefix,
            "partition": "gpu",
            "output": "/dev/null",
            "extra_sbatch_args": ["--no-requeue"],
        },
    )
    f.make_priority_classes()
    return f.make_instance_type(P5, 8)


def test_a_victim_slurm_will_not_requeue_keeps_its_nodes_and_its_preemptor_waits(
    prefix: str, slurm_cluster: None
) -> None:
    """A preemption the backend refuses leaves the victim running on its nodes: its preemptor
    is not started there (it would wait in Slurm while the database counted both, a node
    holding more GPUs than it has); the next cycle plans again from what really runs."""
    kind = no_requeue_cluster(prefix)
    team_a, team_b = f.make_team("team-a", {kind: 16}), f.make_team("team-b", {kind: 16})
    a_jobs = [submit(team_a) for _ in range(3)]  # 24 GPUs: 8 borrowed from team-b
    assert cycle().started == 3
    wait_for(
        lambda: slurm_states(prefix),
        lambda states: sum(s.startswith("RUNNING") for s in states.values()) == 3,
        "three team-a jobs running in Slurm",
    )

    b_jobs = [submit(team_b) for _ in range(2)]  # one fits in the idle node, one reclaims
    run = run_allocation_cycle(trigger="slurm-test")

    assert run is not None and not run.ok
    assert f"preempt job {a_jobs[-1].pk}" in run.errors, run.errors
    assert f"not started, job {a_jobs[-1].pk} on its nodes could not be preempted" in run.errors, run.errors
    assert (run.started, run.preempted) == (1, 0)
    assert Job.objects.filter(team=team_a, state="running").count() == 3
    assert Job.objects.filter(team=team_b, state="running").count() == 1
    assert all(used <= 8 for used in _gpus_per_node().values()), _gpus_per_node()
    waiting = Job.objects.get(pk__in=[job.pk for job in b_jobs], state="pending")
    assert str(waiting.pk) not in slurm_states(prefix)  # never submitted to Slurm


def test_a_preemptor_placed_elsewhere_waits_when_its_victim_cannot_be_preempted(
    prefix: str, slurm_cluster: None
) -> None:
    """An in-team preemption frees quota, not nodes: the preemptor goes to an empty node while
    its victim runs on another. When Slurm refuses the preemption, starting the preemptor
    anyway would put its team over quota; it waits for the next cycle instead."""
    kind = no_requeue_cluster(prefix)
    team_a = f.make_team("team-a", {kind: 8}, sharing="lend")  # never borrows
    team_b = f.make_team("team-b", {kind: 24})
    other = submit(team_b, gpus=4)
    assert cycle().started == 1
    low = submit(team_a, gpus=4, priority="experimentation")
    assert cycle().started == 1
    low.refresh_from_db()
    other.refresh_from_db()
    # Best fit: both on node1, so the 8-GPU preemptor goes to an empty node.
    assert low.nodes == other.nodes == [["node1", 4]], (low.nodes, other.nodes)
    wait_for(
        lambda: slurm_states(prefix),
        lambda states: sum(s.startswith("RUNNING") for s in states.values()) == 2,
        "both jobs running in Slurm",
    )

    high = submit(team_a, gpus=8, priority="inference")  # 4 + 8 > 8: preempts its own low job
    run = run_allocation_cycle(trigger="slurm-test")

    assert run is not None and not run.ok
    assert f"preempt job {low.pk}" in run.errors, run.errors
    assert f"start job {high.pk}: not started, a job it was to preempt could not be preempted" in run.errors
    assert (run.started, run.preempted) == (0, 0)
    low.refresh_from_db()
    high.refresh_from_db()
    assert (low.state, high.state) == ("running", "pending")
    assert str(high.pk) not in slurm_states(prefix)  # never submitted to Slurm


def test_a_copy_slurm_could_start_by_itself_is_held_while_gpugov_has_the_job_pending(
    prefix: str, governed: dict[str, Team], drained_node4: str
) -> None:
    """docs/chaos.md, fault 5. A copy released on a node that drained before it started waits
    in Slurm for its node (not for the scheduler), so the backend reports it pending and the
    loop takes the job back; Slurm would start that copy by itself once the node returns,
    beside whatever gpugov placed there meanwhile. The loop holds it: a job pending in gpugov
    has no runnable copy in Slurm."""
    team_a = governed["team-a"]
    slurm("scontrol", "update", f"NodeName={drained_node4}", "State=DRAIN", "Reason=gpugov loop test")
    for _ in range(3):  # team-a at its limit of 24 GPUs on the three ready nodes
        submit(team_a)
    assert cycle().started == 3
    back, waiting = submit(team_a), submit(team_a)
    # As a cycle that died after releasing them would leave them: each has a released copy
    # pinned to the drained node; the database has one running there, the other pending.
    for job in (back, waiting):
        slurm(
            "sbatch",
            f"--job-name={prefix}{job.pk}",
            f"--nodelist={drained_node4}",
            "--nodes=1",
            "--gres=gpu:8",
            "--partition=gpu",
            "--output=/dev/null",
            "--wrap=sleep 600",
        )
    # And, as a crash inside a start would leave it, a newer held copy beside the released one.
    slurm(
        "sbatch",
        "--hold",
        f"--job-name={prefix}{waiting.pk}",
        "--nodes=1",
        "--gres=gpu:8",
        "--partition=gpu",
        "--output=/dev/null",
        "--wrap=sleep 600",
    )
    Job.objects.filter(pk=back.pk).update(
        state="running", nodes=[[drained_node4, 8]], started_at=timezone.now()
    )
    wait_for(
        lambda: slurm_states(prefix),
        lambda states: all(states.get(str(j.pk), "").startswith("PENDING") for j in (back, waiting)),
        "both copies waiting in Slurm",
    )
    run = cycle()

    states = slurm_states(prefix)
    for job in (back, waiting):
        job.refresh_from_db()
        assert job.state == "pending" and job.pending_reason_code == "borrow-limit", (
            job.pending_reason_message
        )
        assert "held" in states[str(job.pk)].lower(), (job.pk, states)  # and Slurm holds it
    copies = [
        line.split("|")
        for line in slurm("squeue", "-h", "-o", "%j|%T|%r").splitlines()
        if line.startswith(f"{prefix}{waiting.pk}|")
    ]
    assert len(copies) == 2 and all("held" in reason.lower() for _, _, reason in copies), copies
    assert any(f"job {back.pk} is held as pending by the backend: requeued" in n for n in run.notes), (
        run.notes
    )
    assert sum("could start it by itself: held there" in n for n in run.notes) == 2, run.notes
    assert all(used <= 8 for used in _gpus_per_node().values()), _gpus_per_node()

    slurm("scontrol", "update", f"NodeName={drained_node4}", "State=RESUME")
    again = cycle()  # Slurm starts neither copy by itself; gpugov and Slurm agree
    assert (again.started, again.corrections) == (0, 0), again.notes
    assert not any(
        s.startswith("RUNNING")
        for j, s in slurm_states(prefix).items()
        if j in {str(back.pk), str(waiting.pk)}
    )


def test_a_copy_waiting_on_gpus_another_gpugov_job_holds_is_not_adopted(
    prefix: str, governed: dict[str, Team]
) -> None:
    """docs/chaos.md item 7. A copy released onto GPUs that a job Slurm runs still holds (a
    victim whose preemption found it already completing, or a second cycle's start) waits
    there. Adopting it as running would make the database count 16 GPUs on a node of 8. The sync
    holds it instead, and the cycle places the job again where there is room."""
    team_a = governed["team-a"]
    first = submit(team_a)
    assert cycle().started == 1
    first.refresh_from_db()
    [[node, _]] = first.nodes
    wait_for(
        lambda: slurm_states(prefix).get(str(first.pk), ""),
        lambda s: s.startswith("RUNNING"),
        "the first job",
    )
    second = submit(team_a)
    slurm(
        "sbatch",
        f"--job-name={prefix}{second.pk}",
        f"--nodelist={node}",
        "--nodes=1",
        "--gres=gpu:8",
        "--partition=gpu",
        "--output=/dev/null",
        "--wrap=sleep 600",
    )
    wait_for(
        lambda: slurm_states(prefix).get(str(second.pk), ""),
        lambda s: s == "PENDING/Resources",
        "the copy to wait for the first job's GPUs",
    )

    run = cycle()

    assert all(used <= 8 for used in _gpus_per_node().values()), _gpus_per_node()
    assert not any("adopted" in note for note in run.notes), run.notes
    assert any(f"job {second.pk} waited in the backend" in note for note in run.notes), run.notes
    second.refresh_from_db()
    assert second.state == "running" and second.nodes != [[node, 8]], second.nodes
    assert JobEvent.objects.filter(job=second, kind="started").count() == 1
    wait_for(
        lambda: slurm_states(prefix),
        lambda states: (
            states.get(str(first.pk), "").startswith("RUNNING")
            and states.get(str(second.pk), "").startswith("RUNNING")
        ),
        "both jobs running in Slurm, on two nodes",
    )


def test_a_job_slurm_never_starts_where_it_was_placed_is_requeued_saying_why(
    prefix: str, governed: dict[str, Team]
) -> None:
    """A job of another Slurm user holds node1's GPUs; gpugov does not see it and places a job
    there. Slurm keeps that job waiting; after ``start_timeout_s`` the loop takes it back, with
    an event that says where and how long it waited, and places it again as a fresh copy."""
    Cluster.objects.filter(pk=1).update(
        backend_settings={**Cluster.objects.get().backend_settings, "start_timeout_s": 3}
    )
    # Not under gpugov's name prefix: the backend does not list it (a job whose name has the
    # prefix is reported, and would count on node1's GPUs).
    foreign = f"{prefix.rstrip('-')}_outside"
    outsider = slurm("sbatch", "--parsable", "-J", foreign, "-p", "gpu", "-w", "node1", "-N", "1",
                     "--gres=gpu:8", "-o", "/dev/null", "--wrap", "sleep 120").strip()  # fmt: skip
    try:
        wait_for(
            lambda: slurm("squeue", "-h", "-j", outsider, "-o", "%T").strip(),
            lambda s: s == "RUNNING",
            "the outsider",
        )
        _placed_where_the_outsider_runs(prefix, governed)
    finally:
        slurm("scancel", outsider)


def _placed_where_the_outsider_runs(prefix: str, governed: dict[str, Team]) -> None:
    """gpugov does not see the outsider on node1 and places a job there."""
    job = submit(governed["team-a"])
    assert cycle().started == 1
    job.refresh_from_db()
    assert (job.state, job.nodes) == ("running", [["node1", 8]])

    def requeued() -> bool:
        cycle()
        return JobEvent.objects.filter(job=job, kind="requeued").exists()

    wait_for(requeued, bool, "the job to be taken back after the start timeout")
    event = JobEvent.objects.get(job=job, kind="requeued")
    assert "released onto node1" in event.message and "Slurm has not started it (Resources" in event.message
    assert "settings.start_timeout_s=3" in event.message
    # The same cycle placed it again (on node1: gpugov still cannot see the outsider), as a
    # fresh copy; the one that waited is gone.
    assert JobEvent.objects.filter(job=job, kind="started").count() == 2
    copies = [row for row in slurm("squeue", "-h", "-t", "all", "-o", "%j|%T").splitlines()
              if row.startswith(f"{prefix}{job.pk}|")]  # fmt: skip
    assert sorted(copies) == [f"{prefix}{job.pk}|CANCELLED", f"{prefix}{job.pk}|PENDING"], copies
