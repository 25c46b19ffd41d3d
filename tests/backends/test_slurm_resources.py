"""The Slurm backend with resources beyond GPUs (docs/slurm.md "Resources"): parsers on
captured output, then the real local cluster, whose node[7-8] (ml.p4d.24xlarge) scripts/slurm-up
gives 6 whole GPUs (gpu:a100:6), 14 MIG partitions (gpu:1g.5gb:14), 96 CPUs and 1,152 GiB.
"""

from __future__ import annotations

import pytest

from allocations.backends.base import BackendJobState, JobSpec, NodeState, PermanentBackendError
from allocations.backends.slurm import (
    SlurmBackend,
    gres_gpus,
    gres_partitions,
    gres_type_of_profile,
    parse_squeue_json,
    whole_gpu_types,
)
from tests.backends.conftest import slurm, wait_for

P4D = "ml.p4d.24xlarge"
MIG = "mig-1g.5gb"
# sinfo --json of node7, Slurm 22.05.8 (the fields read here).
SINFO_NODE7 = {
    "name": "node7",
    "state": "idle",
    "state_flags": [],
    "features": P4D,
    "gres": "gpu:a100:6,gpu:1g.5gb:14",
    "gres_used": "gpu:a100:0(IDX:N/A),gpu:1g.5gb:0(IDX:N/A)",
    "cpus": 96,
    "real_memory": 1179648,
    "alloc_cpus": 0,
    "reason": "",
    "partitions": ["gpu"],
}


@pytest.mark.parametrize(
    ("gres", "gpus", "partitions"),
    [
        ("gpu:a100:6,gpu:1g.5gb:14", 6, {MIG: 14}),
        ("gpu:a100:2(IDX:0-1),gpu:1g.5gb:3(IDX:6-8)", 2, {MIG: 3}),
        ("gres:gpu:a100:2,gres:gpu:1g.5gb:3", 2, {MIG: 3}),  # a job's tres_per_node
        ("gres:gpu:3g.20gb:1", 0, {"mig-3g.20gb": 1}),
        ("gpu:h100:8", 8, {}),
        ("gpu:4", 4, {}),
        ("(null)", 0, {}),
    ],
)
def test_partitions_are_typed_gres_apart_from_whole_gpus(
    gres: str, gpus: int, partitions: dict[str, int]
) -> None:
    assert (gres_gpus(gres), gres_partitions(gres)) == (gpus, partitions)


def test_profile_names_map_to_gres_types_and_back() -> None:
    assert gres_type_of_profile("mig-1g.5gb") == "1g.5gb"
    assert gres_partitions(f"gpu:{gres_type_of_profile('mig-3g.40gb')}:2") == {"mig-3g.40gb": 2}
    for bad in ("1g.5gb", "mig-big", "shard-1g.5gb"):
        with pytest.raises(ValueError, match=f"partition profile {bad!r} has no Slurm gres type"):
            gres_type_of_profile(bad)
    assert whole_gpu_types("gpu:a100:6,gpu:1g.5gb:14") == {"a100"}


def test_reads_a_nodes_cpus_memory_and_partitions_from_sinfo_json() -> None:
    node = SlurmBackend({})._node(SINFO_NODE7)
    assert (node.instance_type, node.gpus, node.state) == (P4D, 6, NodeState.READY)
    assert (node.vcpus, node.memory_gib, node.partitions) == (96, 1152, ((MIG, 14),))
    # Used partitions are not leaked whole GPUs.
    used = {**SINFO_NODE7, "gres_used": "gpu:a100:0(IDX:N/A),gpu:1g.5gb:3(IDX:6-8)", "alloc_cpus": 8}
    assert SlurmBackend({})._node(used).state is NodeState.READY


def test_a_jobs_whole_gpus_are_read_apart_from_its_partitions() -> None:
    [job] = parse_squeue_json(
        {
            "jobs": [
                {
                    "job_id": 7,
                    "name": "gpugov-p",
                    "job_state": "RUNNING",
                    "nodes": "node7",
                    "tres_per_node": "gres:gpu:a100:2,gres:gpu:1g.5gb:3",
                    "priority": 1,
                }
            ]
        },
        "gpugov-",
    )
    assert job.gpus_per_node == 2


def p4d(job_id: str, gpus: int = 0, vcpus: int = 0, memory_gib: int = 0, migs: int = 0) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        team="team-a",
        name=f"test {job_id}",
        instance_type=P4D,
        gpus=gpus,
        command="sleep 60",
        vcpus_per_node=vcpus,
        memory_gib_per_node=memory_gib,
        partitions_per_node=((MIG, migs),) if migs else (),
    )


def test_refuses_a_profile_slurm_cannot_express() -> None:
    job = JobSpec("x", "team-a", "x", P4D, 0, command="true", partitions_per_node=(("big-one", 1),))
    with pytest.raises(PermanentBackendError, match=r"job\.partitions_per_node: partition profile 'big-one'"):
        SlurmBackend({}).start(job, (("node7", 0),))


# --- the real local cluster -------------------------------------------------------------------


@pytest.mark.slurm
def test_sinfo_reads_the_configured_cpus_memory_and_typed_gres(slurm_backend: SlurmBackend) -> None:
    nodes = {n.name: n for n in slurm_backend.list_nodes()}
    for name in ("node7", "node8"):
        node = nodes[name]
        assert (node.instance_type, node.gpus, node.vcpus, node.memory_gib, node.partitions) == (
            P4D,
            6,
            96,
            1152,
            ((MIG, 14),),
        )
    assert (
        nodes["node1"].gpus,
        nodes["node1"].vcpus,
        nodes["node1"].memory_gib,
        nodes["node1"].partitions,
    ) == (
        8,
        32,
        64,
        (),
    )


@pytest.mark.slurm
def test_a_partition_job_gets_its_typed_gres_cpus_and_memory(slurm_backend: SlurmBackend) -> None:
    slurm_id = slurm_backend.start(p4d("parts", vcpus=8, memory_gib=16, migs=3), (("node7", 0),))
    seen = wait_for(
        lambda: next((j for j in slurm_backend.list_jobs() if j.job_id == "parts"), None),
        lambda j: j is not None and j.started_at is not None,
        "the partition job to run",
    )
    assert seen is not None and (seen.state, seen.nodes) == (BackendJobState.RUNNING, (("node7", 0),))
    detail = slurm("scontrol", "show", "job", "-d", slurm_id)
    assert "TRES=cpu=8,mem=16G,node=1" in detail, detail
    assert "TresPerNode=gres:gpu:1g.5gb:3" in detail, detail
    assert " GRES=gpu:1g.5gb:3(IDX:" in detail, detail  # partitions only, no whole GPU
    used = slurm("sinfo", "-h", "-N", "-n", "node7", "-O", "GresUsed:80").strip()
    assert used.startswith("gpu:a100:0(IDX:N/A),gpu:1g.5gb:3("), used


@pytest.mark.slurm
def test_whole_gpus_beside_partitions_are_asked_by_their_type(slurm_backend: SlurmBackend) -> None:
    """An untyped gpu:N there could be given partitions (Slurm takes any type for it)."""
    slurm_id = slurm_backend.start(p4d("whole", gpus=6, vcpus=32, memory_gib=384, migs=1), (("node8", 6),))
    wait_for(
        lambda: next((j for j in slurm_backend.list_jobs() if j.job_id == "whole"), None),
        lambda j: j is not None and j.started_at is not None,
        "the whole-GPU job to run",
    )
    detail = slurm("scontrol", "show", "job", "-d", slurm_id)
    assert "TRES=cpu=32,mem=384G,node=1" in detail, detail
    assert "GRES=gpu:a100:6(IDX:0-5),gpu:1g.5gb:1(IDX:" in detail, detail
    # The backend reports the job's whole GPUs on its node, not its partitions.
    seen = next(j for j in slurm_backend.list_jobs() if j.job_id == "whole")
    assert seen.nodes == (("node8", 6),)


@pytest.mark.slurm
def test_slurm_refuses_more_than_a_node_has(slurm_backend: SlurmBackend) -> None:
    with pytest.raises(PermanentBackendError, match="Slurm refused `sbatch --test-only"):
        slurm_backend.start(p4d("big", vcpus=128, migs=1), (("node7", 0),))
    with pytest.raises(PermanentBackendError, match="Slurm refused `sbatch --test-only"):
        slurm_backend.start(p4d("many", migs=15), (("node7", 0),))
