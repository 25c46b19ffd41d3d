"""docs/resources.md: what an instance type's node has, the quotas the ratio rule resolves
(section 2), what a job asks (section 3), and the cycle refusing resources it does not decide
on yet (section 9)."""

from __future__ import annotations

import random

import pytest

from allocations.engine import allocate
from allocations.engine.resources import (
    counts_gpus_only,
    is_profile_name,
    job_resources,
    max_use_resources,
    quota_resources,
    type_resources,
)
from allocations.engine.snapshot import (
    ClusterPolicy,
    InstanceType,
    Job,
    Node,
    Quota,
    Snapshot,
    Team,
)

P5 = InstanceType("ml.p5.48xlarge", 8, vcpus_per_node=192, memory_gib_per_node=2048)
P4D = InstanceType(
    "ml.p4d.24xlarge",
    6,
    vcpus_per_node=96,
    memory_gib_per_node=1152,
    partitions_per_node=(("mig-1g.5gb", 14),),
)
GPU_ONLY = InstanceType("ml.g5.48xlarge", 8)


def test_s1_node_resources_in_order_gpus_vcpus_memory_partitions() -> None:
    assert list(type_resources(P4D).items()) == [
        ("gpus", 6),
        ("vcpus", 96),
        ("memory_gib", 1152),
        ("mig-1g.5gb", 14),
    ]
    assert type_resources(GPU_ONLY) == {"gpus": 8}
    assert counts_gpus_only(GPU_ONLY) and not counts_gpus_only(P5) and not counts_gpus_only(P4D)


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("mig-1g.10gb", True),
        ("mig-3g.40gb", True),
        ("gpus", False),
        ("instances", False),
        ("MIG", False),
        ("-a", False),
    ],
)
def test_s8_profile_names(name: str, ok: bool) -> None:
    assert is_profile_name(name) is ok


@pytest.mark.parametrize(
    ("it", "quota", "resolved"),
    [
        # docs/resources.md 2, the table: GPUs alone give vCPU and memory by ratio.
        (P5, Quota(quota=4), {"gpus": 4, "vcpus": 96, "memory_gib": 1024}),
        # vCPU alone: memory by ratio, 0 GPUs.
        (P5, Quota(resources=(("vcpus", 48),)), {"gpus": 0, "vcpus": 48, "memory_gib": 512}),
        # memory alone: vCPU by ratio, 0 GPUs.
        (P5, Quota(resources=(("memory_gib", 256),)), {"gpus": 0, "vcpus": 24, "memory_gib": 256}),
        # GPUs and vCPU given: memory by the ratio of GPUs; a profile not named is 0.
        (
            P4D,
            Quota(quota=4, resources=(("mig-1g.5gb", 7), ("vcpus", 64))),
            {"gpus": 4, "vcpus": 64, "memory_gib": 768, "mig-1g.5gb": 7},
        ),
        (P4D, Quota(quota=3), {"gpus": 3, "vcpus": 48, "memory_gib": 576, "mig-1g.5gb": 0}),
        # instances: N nodes' worth of everything.
        (
            P4D,
            Quota(quota=12, instances=2),
            {"gpus": 12, "vcpus": 192, "memory_gib": 2304, "mig-1g.5gb": 28},
        ),
        # GPUs named as 0 set no ratio: vCPU given sets it.
        (P5, Quota(quota=0, resources=(("vcpus", 96),)), {"gpus": 0, "vcpus": 96, "memory_gib": 1024}),
        # Partitions alone: nothing else.
        (
            P4D,
            Quota(resources=(("mig-1g.5gb", 2),)),
            {"gpus": 0, "vcpus": 0, "memory_gib": 0, "mig-1g.5gb": 2},
        ),
        (GPU_ONLY, Quota(quota=5), {"gpus": 5}),
    ],
)
def test_s2_ratio_rule(it: InstanceType, quota: Quota, resolved: dict[str, int]) -> None:
    assert quota_resources(it, quota) == resolved


def test_s2_ratio_rounds_down_and_holds_the_jobs_of_its_gpus() -> None:
    """docs/resources.md 2 and 3: every ratio rounds down, so jobs of g GPUs in all, each asking
    its node share, never ask more than the ratio quota of g GPUs."""
    rng = random.Random(30)
    for _ in range(500):
        gpn = rng.randint(1, 16)
        it = InstanceType(
            "t", gpn, vcpus_per_node=rng.randint(1, 500), memory_gib_per_node=rng.randint(1, 5000)
        )
        sizes = [rng.randint(1, gpn) for _ in range(rng.randint(1, 10))]
        quota = quota_resources(it, Quota(quota=sum(sizes)))
        for name in ("vcpus", "memory_gib"):
            asked = sum(job_resources(it, _job(g))[name] for g in sizes)
            assert asked <= quota[name]


def test_s2_borrow_limits_per_resource() -> None:
    # The percentage applies to each resource.
    assert max_use_resources(P5, Quota(quota=4, borrow_limit_percent=50)) == {
        "gpus": 6,
        "vcpus": 144,
        "memory_gib": 1536,
    }
    # Absolute per resource; a resource not named keeps the percentage.
    q = Quota(quota=4, borrow_limit=2, borrow_limits=(("memory_gib", 256),), borrow_limit_percent=0)
    assert max_use_resources(P5, q) == {"gpus": 6, "vcpus": 96, "memory_gib": 1280}
    assert max_use_resources(P5, Quota(quota=4, borrow_unlimited=True)) == {
        "gpus": None,
        "vcpus": None,
        "memory_gib": None,
    }


def _job(gpus: int, **kwargs: object) -> Job:
    return Job(id="j", team="a", instance_type="t", gpus=gpus, submit_time=0.0, **kwargs)  # type: ignore[arg-type]


def test_s3_job_leaves_out_its_node_share() -> None:
    # A job of 2 GPUs on an 8-GPU node with 192 vCPU asks 48 vCPU.
    assert job_resources(P5, _job(2)) == {"gpus": 2, "vcpus": 48, "memory_gib": 512}
    assert job_resources(P5, _job(2, memory_gib=300)) == {"gpus": 2, "vcpus": 48, "memory_gib": 300}
    # Partitions alone ask no vCPU or memory unless named.
    assert job_resources(P4D, _job(0, partitions=(("mig-1g.5gb", 3),), vcpus=8)) == {
        "gpus": 0,
        "vcpus": 8,
        "memory_gib": 0,
        "mig-1g.5gb": 3,
    }
    assert job_resources(GPU_ONLY, _job(3)) == {"gpus": 3}


def _snapshot(it: InstanceType) -> Snapshot:
    return Snapshot(
        instance_types=(it,),
        nodes=(Node("n1", it.name, it.gpus_per_node),),
        teams=(Team("a", {it.name: Quota(quota=it.gpus_per_node)}),),
        policy=ClusterPolicy(),
        jobs=(Job("j1", "a", it.name, 1, 0.0),),
    )


def test_s9_cycle_refuses_resources_it_would_ignore() -> None:
    """docs/resources.md 9: the cycle decides on GPUs alone, and says so rather than leaving a
    declared resource out of the plan."""
    with pytest.raises(ValueError, match=r"instance_types\[0\]\.vcpus_per_node: .*got 192"):
        allocate(_snapshot(P5), 0.0)
    with pytest.raises(ValueError, match=r"instance_types\[0\]\.partitions_per_node: .*mig-1g\.5gb"):
        allocate(_snapshot(InstanceType("t", 6, partitions_per_node=(("mig-1g.5gb", 14),))), 0.0)
    plan = allocate(_snapshot(GPU_ONLY), 0.0)
    assert [s.job_id for s in plan.starts] == ["j1"]
