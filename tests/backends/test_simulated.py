"""The simulated backend keeps the backend contract (backends/base.py) on a database cluster."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone

from allocations.backends import (
    BackendJobState,
    JobSpec,
    NodeState,
    PermanentBackendError,
    TransientBackendError,
    get_backend,
)
from allocations.backends.simulated import LISTED_S
from allocations.models import Node, SimulatedJob
from tests import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster_nodes() -> list[Node]:
    f.make_cluster()
    return f.make_nodes(f.make_instance_type("ml.p5.48xlarge", 8), 2, prefix="sim")


def spec(job_id: str = "1", gpus: int = 4, duration_s: int | None = 3600) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        team="team-a",
        name="train",
        instance_type="ml.p5.48xlarge",
        gpus=gpus,
        duration_s=duration_s,
    )


def test_lists_the_node_rows_with_their_state(cluster_nodes: list[Node]) -> None:
    Node.objects.filter(pk=cluster_nodes[1].pk).update(state="draining", reason="maintenance")
    nodes = get_backend("simulated", {}).list_nodes()
    assert [(n.name, n.instance_type, n.gpus, n.state, n.reason) for n in nodes] == [
        (cluster_nodes[0].name, "ml.p5.48xlarge", 8, NodeState.READY, ""),
        (cluster_nodes[1].name, "ml.p5.48xlarge", 8, NodeState.DRAINING, "maintenance"),
    ]


def test_start_is_idempotent_by_job_id(cluster_nodes: list[Node]) -> None:
    backend = get_backend("simulated", {})
    node = cluster_nodes[0].name
    first = backend.start(spec(), ((node, 4),))
    again = backend.start(spec(), ((node, 4),))
    assert first == again == "sim-1"
    (job,) = backend.list_jobs()
    assert (job.job_id, job.state, job.nodes) == ("1", BackendJobState.RUNNING, ((node, 4),))
    assert SimulatedJob.objects.count() == 1


def test_runs_for_the_requested_duration_divided_by_the_speedup(cluster_nodes: list[Node]) -> None:
    backend = get_backend("simulated", {"speedup": 60})
    backend.start(spec(duration_s=3600), ((cluster_nodes[0].name, 4),))
    row = SimulatedJob.objects.get()
    assert row.ends_at - row.started_at == timedelta(seconds=60)
    # The simulated clock is the wall clock: move the job's end into the past instead of waiting.
    SimulatedJob.objects.update(
        started_at=timezone.now() - timedelta(seconds=61), ends_at=timezone.now() - timedelta(seconds=1)
    )
    (job,) = backend.list_jobs()
    assert job.state == BackendJobState.FINISHED
    assert job.exit_code == 0
    assert job.finished_at is not None and job.started_at is not None and job.finished_at > job.started_at


def test_a_job_whose_time_is_up_has_finished_and_is_not_preempted(cluster_nodes: list[Node]) -> None:
    backend = get_backend("simulated", {})
    backend.start(spec(), ((cluster_nodes[0].name, 4),))
    SimulatedJob.objects.update(
        started_at=timezone.now() - timedelta(seconds=61), ends_at=timezone.now() - timedelta(seconds=1)
    )
    assert backend.preempt("1") is False
    (job,) = backend.list_jobs()
    assert (job.state, job.exit_code) == (BackendJobState.FINISHED, 0)


def test_an_ended_job_is_listed_for_a_while_then_only_remembered(cluster_nodes: list[Node]) -> None:
    backend = get_backend("simulated", {"retention_s": 3600})
    backend.start(spec(), ((cluster_nodes[0].name, 4),))
    backend.cancel("1")
    (job,) = backend.list_jobs()
    assert job.state == BackendJobState.CANCELLED
    # Its end recorded longer ago than LISTED_S: no longer listed, but a repeated start finds it.
    SimulatedJob.objects.update(ends_at=timezone.now() - timedelta(seconds=LISTED_S + 1))
    assert backend.list_jobs() == []
    assert backend.start(spec(), ((cluster_nodes[0].name, 4),)) == "sim-1"
    assert SimulatedJob.objects.get().state == "cancelled"
    # Forgotten after retention_s.
    SimulatedJob.objects.update(ends_at=timezone.now() - timedelta(seconds=3601))
    backend.list_jobs()
    assert not SimulatedJob.objects.exists()


def test_a_job_that_ended_while_nobody_asked_is_listed_once_the_cluster_records_it(
    cluster_nodes: list[Node],
) -> None:
    backend = get_backend("simulated", {})
    backend.start(spec(), ((cluster_nodes[0].name, 4),))
    # Its time was up two hours ago, longer than LISTED_S, and nothing called the cluster since.
    ended = timezone.now() - timedelta(hours=2)
    SimulatedJob.objects.update(started_at=ended - timedelta(hours=1), ends_at=ended)
    (job,) = backend.list_jobs()
    assert job.state == BackendJobState.FINISHED
    assert job.finished_at == pytest.approx(ended.timestamp())  # when it really ended
    (job,) = backend.list_jobs()  # and still listed at the next call
    assert job.state == BackendJobState.FINISHED


def test_preempted_job_is_held_until_started_again(cluster_nodes: list[Node]) -> None:
    backend = get_backend("simulated", {})
    a, b = (n.name for n in cluster_nodes)
    backend.start(spec(), ((a, 4),))
    assert backend.preempt("1") is True
    assert backend.preempt("1") is True  # idempotent: pending there
    assert backend.preempt("unknown") is False
    (job,) = backend.list_jobs()
    assert (job.state, job.nodes) == (BackendJobState.PENDING, ())
    assert backend.start(spec(), ((b, 4),)) == "sim-1"
    (job,) = backend.list_jobs()
    assert (job.state, job.nodes) == (BackendJobState.RUNNING, ((b, 4),))


def test_cancel_is_idempotent_and_ignores_unknown_jobs(cluster_nodes: list[Node]) -> None:
    backend = get_backend("simulated", {})
    backend.start(spec(), ((cluster_nodes[0].name, 4),))
    backend.cancel("1")
    backend.cancel("1")
    backend.cancel("404")
    (job,) = backend.list_jobs()
    assert job.state == BackendJobState.CANCELLED
    # A cancelled job is not started again by a repeated start.
    backend.start(spec(), ((cluster_nodes[0].name, 4),))
    assert backend.list_jobs()[0].state == BackendJobState.CANCELLED


@pytest.mark.parametrize(
    ("nodes", "gpus", "message"),
    [
        ((("nowhere", 4),), 4, "unknown node 'nowhere'"),
        ((("{a}", 4),), 8, "nodes hold 4 GPUs but the job asks for 8"),
        ((("{a}", 12),), 12, "has 8 of 8 GPUs free, 12 asked"),
        ((), 4, "nodes must not be empty"),
    ],
)
def test_refuses_impossible_placements_naming_node_and_numbers(
    cluster_nodes: list[Node], nodes: tuple[tuple[str, int], ...], gpus: int, message: str
) -> None:
    a = cluster_nodes[0].name
    placement = tuple((name.format(a=a), g) for name, g in nodes)
    with pytest.raises(PermanentBackendError, match=message):
        get_backend("simulated", {}).start(spec(gpus=gpus), placement)
    assert not SimulatedJob.objects.exists()


def test_refuses_a_node_that_is_full_or_not_ready(cluster_nodes: list[Node]) -> None:
    backend = get_backend("simulated", {})
    a, b = (n.name for n in cluster_nodes)
    backend.start(spec("1", gpus=6), ((a, 6),))
    with pytest.raises(PermanentBackendError, match=f"node '{a}' has 2 of 8 GPUs free, 4 asked"):
        backend.start(spec("2", gpus=4), ((a, 4),))
    Node.objects.filter(name=b).update(state="draining")
    with pytest.raises(PermanentBackendError, match=f"node '{b}' is draining, not ready"):
        backend.start(spec("2", gpus=4), ((b, 4),))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"speedup": "fast"}, "backend_settings.speedup must be a number, not 'fast'"),
        ({"speedup": 0}, "backend_settings.speedup must be above 0, not 0.0"),
        ({"node_failure_rate": -1}, "backend_settings.node_failure_rate must be at least 0.0, not -1"),
        ({"seed": 1.5}, "backend_settings.seed must be a whole number, not 1.5"),
        ({"available": "no"}, "backend_settings.available must be true or false, not 'no'"),
    ],
)
def test_bad_settings_are_named_with_their_value(settings: dict[str, object], message: str) -> None:
    with pytest.raises(PermanentBackendError, match=message):
        get_backend("simulated", settings)


def test_an_offline_simulated_cluster_is_a_transient_error(cluster_nodes: list[Node]) -> None:
    backend = get_backend("simulated", {"available": False})
    for call in (backend.list_nodes, backend.list_jobs, backend.health, lambda: backend.preempt("1")):
        with pytest.raises(TransientBackendError, match="offline"):
            call()


def test_node_failures_are_seeded_fail_the_jobs_on_the_node_and_are_repaired(
    cluster_nodes: list[Node],
) -> None:
    # 60 failures per node per hour: every node fails in the current minute, whatever the seed.
    backend = get_backend("simulated", {"node_failure_rate": 60, "node_repair_s": 600, "seed": 7})
    get_backend("simulated", {}).start(spec(), ((cluster_nodes[0].name, 4),))
    nodes = backend.list_nodes()
    assert {n.state for n in nodes} == {NodeState.DOWN}
    assert all(n.reason.startswith("simulated failure") for n in nodes)
    (job,) = backend.list_jobs()
    assert (job.state, job.reason) == (BackendJobState.FAILED, f"node {cluster_nodes[0].name} failed")
    # Repaired after node_repair_s (moved into the past rather than waited for).
    Node.objects.update(state_since=timezone.now() - timedelta(seconds=601))
    calm = get_backend("simulated", {"node_failure_rate": 0, "node_repair_s": 600})
    calm._fail_and_repair_nodes(timezone.now(), Node, SimulatedJob)
    assert set(Node.objects.values_list("state", flat=True)) == {"ready"}


def test_no_failures_when_the_rate_is_zero(cluster_nodes: list[Node]) -> None:
    backend = get_backend("simulated", {"seed": 7})
    assert {n.state for n in backend.list_nodes()} == {NodeState.READY}


def test_unknown_settings_are_named() -> None:
    with pytest.raises(
        PermanentBackendError, match=r"backend_settings\.speed is not a setting of the simulated"
    ):
        get_backend("simulated", {"speed": 60})
    get_backend("simulated", {"speedup": 60, "demo_workload": True})  # what load_demo writes


def test_a_job_resumed_from_a_checkpoint_runs_only_the_rest_of_its_duration(
    cluster_nodes: list[Node],
) -> None:
    """docs/preemption.md section 2: the simulator resumes a preempted job that kept progress
    with the rest of its duration (kept progress is wall-clock seconds, like the run)."""
    backend = get_backend("simulated", {"speedup": 60})
    a, b = (n.name for n in cluster_nodes)
    backend.start(spec(duration_s=3600), ((a, 4),))
    backend.preempt("1")
    backend.start(replace(spec(duration_s=3600), progress_kept_s=45.0), ((b, 4),))
    row = SimulatedJob.objects.get()
    assert row.ends_at - row.started_at == timedelta(seconds=15)
    assert row.duration_s == 15


def test_a_job_that_kept_all_its_work_ends_as_soon_as_it_resumes(cluster_nodes: list[Node]) -> None:
    backend = get_backend("simulated", {})
    backend.start(replace(spec(duration_s=600), progress_kept_s=900.0), ((cluster_nodes[0].name, 4),))
    row = SimulatedJob.objects.get()
    assert row.ends_at == row.started_at  # never a negative duration


# --- resources beyond GPUs (docs/resources.md 1 and 3) --------------------------------------

P4D = "ml.p4d.24xlarge"
MIG = "mig-1g.5gb"


@pytest.fixture
def p4d_nodes() -> list[Node]:
    """Two nodes of docs/resources.md 1's example: 6 whole GPUs, 96 vCPU, 1,152 GiB and 14
    mig-1g.5gb partitions each."""
    f.make_cluster()
    kind = f.make_instance_type(
        P4D, 6, vcpus_per_node=96, memory_gib_per_node=1152, partitions_per_node={MIG: 14}
    )
    return f.make_nodes(kind, 2, prefix="p4d")


def p4d_spec(job_id: str, gpus: int = 0, vcpus: int = 0, memory_gib: int = 0, migs: int = 0) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        team="team-a",
        name="train",
        instance_type=P4D,
        gpus=gpus,
        duration_s=3600,
        vcpus_per_node=vcpus,
        memory_gib_per_node=memory_gib,
        partitions_per_node=((MIG, migs),) if migs else (),
    )


def test_lists_a_nodes_vcpu_memory_and_partitions(p4d_nodes: list[Node]) -> None:
    node = get_backend("simulated", {}).list_nodes()[0]
    assert (node.gpus, node.vcpus, node.memory_gib, node.partitions) == (6, 96, 1152, ((MIG, 14),))


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        ({"gpus": 2, "vcpus": 80}, {"gpus": 1, "vcpus": 32}, "has 16 of 96 vCPU free, 32 asked"),
        (
            {"gpus": 2, "memory_gib": 1000},
            {"gpus": 1, "memory_gib": 192},
            "has 152 of 1152 GiB memory free, 192 asked",
        ),
        ({"migs": 10}, {"migs": 5}, f"has 4 of 14 {MIG} free, 5 asked"),
    ],
)
def test_refuses_a_start_beyond_a_nodes_free_vcpu_memory_or_partitions(
    p4d_nodes: list[Node], first: dict[str, int], second: dict[str, int], message: str
) -> None:
    """docs/resources.md 4: a node has room for all of a job's resources at once, or none."""
    backend = get_backend("simulated", {})
    a, b = (n.name for n in p4d_nodes)
    gpus = first.get("gpus", 0)
    backend.start(p4d_spec("1", **first), ((a, gpus),))
    with pytest.raises(PermanentBackendError, match=f"node '{a}' {message}"):
        backend.start(p4d_spec("2", **second), ((a, second.get("gpus", 0)),))
    # A fresh instance reads what runs from the database, and refuses the same.
    with pytest.raises(PermanentBackendError, match=f"node '{a}' {message}"):
        get_backend("simulated", {}).start(p4d_spec("2", **second), ((a, second.get("gpus", 0)),))
    # The other node is free; once the first job is preempted its node is free again.
    backend.start(p4d_spec("3", **second), ((b, second.get("gpus", 0)),))
    assert backend.preempt("1")
    backend.start(p4d_spec("2", **second), ((a, second.get("gpus", 0)),))
    running = {job.job_id: job.nodes for job in backend.list_jobs() if job.state is BackendJobState.RUNNING}
    assert running == {"2": ((a, second.get("gpus", 0)),), "3": ((b, second.get("gpus", 0)),)}


def test_a_job_of_partitions_alone_takes_no_gpu(p4d_nodes: list[Node]) -> None:
    backend = get_backend("simulated", {})
    a = p4d_nodes[0].name
    backend.start(p4d_spec("parts", migs=14, vcpus=8), ((a, 0),))
    backend.start(p4d_spec("whole", gpus=6, vcpus=88), ((a, 6),))
    with pytest.raises(PermanentBackendError, match=f"node '{a}' has 0 of 14 {MIG} free, 1 asked"):
        backend.start(p4d_spec("more", migs=1), ((a, 0),))
    # A job of GPUs alone still needs a GPU on every node it is placed on.
    with pytest.raises(PermanentBackendError, match="has 6 of 6 GPUs free, 0 asked"):
        backend.start(p4d_spec("none"), ((p4d_nodes[1].name, 0),))


def test_a_gpu_only_job_is_held_to_gpus_alone(cluster_nodes: list[Node]) -> None:
    """An instance type of GPUs alone: a job asks nothing more and nothing more is checked."""
    backend = get_backend("simulated", {})
    a = cluster_nodes[0].name
    backend.start(spec("1", gpus=8), ((a, 8),))
    assert SimulatedJob.objects.get(job_id="1").resources == {}
    node = backend.list_nodes()[0]
    assert (node.vcpus, node.memory_gib, node.partitions) == (None, None, ())
