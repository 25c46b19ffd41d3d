"""The loop's node sync and starts with resources beyond GPUs (docs/resources.md 1 and 3), on
the simulated backend; on real Slurm: tests/backends/test_loop_on_slurm_resources.py."""

from __future__ import annotations

import pytest

from allocations.backends import BackendNode, NodeState, get_backend
from allocations.models import InstanceType, Job, SimulatedJob, TeamQuota
from allocations.services.loop import _spec, resource_mismatch
from tests import factories as f

pytestmark = pytest.mark.django_db
MIG = "mig-1g.5gb"


def p4d() -> InstanceType:
    return f.make_instance_type(
        "ml.p4d.24xlarge", 6, vcpus_per_node=96, memory_gib_per_node=1152, partitions_per_node={MIG: 14}
    )


def node(**read: object) -> BackendNode:
    return BackendNode("n1", "ml.p4d.24xlarge", 6, NodeState.READY, **read)  # type: ignore[arg-type]


def test_a_node_with_less_than_its_type_declares_is_a_mismatch() -> None:
    it = p4d()
    assert resource_mismatch(node(vcpus=96, memory_gib=1152, partitions=((MIG, 14),)), it) == ""
    # A real node's RealMemory is often a little under its nominal size, never above: more is fine.
    assert resource_mismatch(node(vcpus=128, memory_gib=1200, partitions=((MIG, 14),)), it) == ""
    assert resource_mismatch(node(memory_gib=1000), it) == (
        "gpugov: the backend reads 1,000 GiB memory of the 1,152 declared on ml.p4d.24xlarge"
    )
    assert resource_mismatch(node(partitions=()), it) == (
        f"gpugov: the backend reads 0 {MIG} of the 14 declared on ml.p4d.24xlarge"
    )
    # What the backend does not know is not judged; a type of GPUs alone declares no partition.
    assert resource_mismatch(node(), it) == ""
    gpus_only = f.make_instance_type("ml.p5.48xlarge", 8)
    assert resource_mismatch(node(vcpus=192, memory_gib=2048, partitions=()), gpus_only) == ""


def test_the_spec_carries_what_the_job_takes_on_each_node() -> None:
    f.make_cluster()
    it = p4d()
    team = f.make_team("team-a", {it: 6})
    ratio = f.make_job(team, it, 3, command="true")
    given = f.make_job(team, it, 1, vcpus=4, memory_gib=100, partitions={MIG: 2}, command="true")
    alone = f.make_job(team, it, 0, partitions={MIG: 5}, command="true")
    whole = f.make_job(team, it, 12, command="true")

    def per_node(spec: object) -> tuple[object, ...]:
        return tuple(
            getattr(spec, k) for k in ("vcpus_per_node", "memory_gib_per_node", "partitions_per_node")
        )

    assert per_node(_spec(ratio)) == (48, 576, ())  # docs/resources.md 3: the node share
    assert per_node(_spec(given)) == (4, 100, ((MIG, 2),))
    assert per_node(_spec(alone)) == (0, 0, ((MIG, 5),))  # no GPU, no share of vCPU or memory
    assert per_node(_spec(whole, 2)) == (96, 1152, ())  # spread evenly over its nodes
    gpus_only = f.make_instance_type("ml.p5.48xlarge", 8)
    assert _spec(f.make_job(team, gpus_only, 4, command="true")).counts_gpus_only


def test_the_simulated_backend_records_what_a_started_job_takes() -> None:
    f.make_cluster()
    it = p4d()
    [n1] = f.make_nodes(it, 1)
    team = f.make_team("team-a", {it: 6})
    job = f.make_job(team, it, 2, partitions={MIG: 1}, command="true")
    get_backend("simulated", {}).start(_spec(job), ((n1.name, 2),))
    assert SimulatedJob.objects.get().resources == {"vcpus": 32, "memory_gib": 384, MIG: 1}


def test_a_cycle_places_by_every_resource_and_says_which_one_blocks() -> None:
    """docs/resources.md 4 and 7, end to end: the loop's cycle on the simulated backend starts a
    job of partitions and one asking much memory, and holds back a third whose ratio memory no
    longer fits the team's memory quota, naming memory and its numbers."""
    from allocations.services.loop import run_allocation_cycle

    f.make_cluster()
    it = p4d()
    f.make_nodes(it, 1)
    team = f.make_team("team-a")
    TeamQuota.objects.create(team=team, instance_type=it, quota=6, partitions={MIG: 14})
    slices = f.make_job(team, it, 0, partitions={MIG: 3}, command="true", requested_duration=600)
    big = f.make_job(team, it, 2, memory_gib=1100, command="true", requested_duration=600)
    ratio = f.make_job(team, it, 2, command="true", requested_duration=600)

    run = run_allocation_cycle(trigger="test")
    assert run is not None and run.ok, run and run.errors

    states = {job.pk: job for job in Job.objects.all()}
    assert states[slices.pk].state == "running" and states[big.pk].state == "running"
    waiting = states[ratio.pk]
    assert waiting.state == "pending"
    assert (
        "GiB memory" in waiting.pending_reason_message
        and "384 GiB memory needed" in waiting.pending_reason_message
    )
    # What the simulated cluster runs holds the same: the partitions and the memory asked.
    taken = {job.job_id: job.resources for job in SimulatedJob.objects.filter(state="running")}
    assert len(taken) == 2, taken
