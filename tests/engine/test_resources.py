"""docs/resources.md: what an instance type's node has, the quotas the ratio rule resolves
(section 2), what a job asks (section 3), and the cycle's fit, placement and reasons per
resource (sections 4 and 7), fair share by the dominant resource (section 5) and preemption
per resource (section 6)."""

from __future__ import annotations

import random
from dataclasses import replace

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


def _snapshot(it: InstanceType, job: Job | None = None) -> Snapshot:
    return Snapshot(
        instance_types=(it,),
        nodes=(Node("n1", it.name, it.gpus_per_node),),
        teams=(Team("a", {it.name: Quota(quota=it.gpus_per_node)}),),
        policy=ClusterPolicy(),
        jobs=(job or Job("j1", "a", it.name, 1, 0.0),),
    )


def _cluster(it: InstanceType, jobs: list[Job], nodes: int = 1, **team: object) -> Snapshot:
    return Snapshot(
        instance_types=(it,),
        nodes=tuple(Node(f"n{k}", it.name, it.gpus_per_node) for k in range(1, nodes + 1)),
        teams=(Team("a", {it.name: Quota(quota=it.gpus_per_node * nodes)}, **team),),  # type: ignore[arg-type]
        policy=ClusterPolicy(),
        jobs=tuple(jobs),
    )


def _run(job_id: str, node: str, gpus: int, **kwargs: object) -> Job:
    return Job(job_id, "a", "ml.p5.48xlarge", gpus, -10.0, nodes=((node, gpus),), started_at=-10.0, **kwargs)  # type: ignore[arg-type]


def test_s4_a_job_short_of_memory_waits_and_its_reason_names_memory() -> None:
    """docs/resources.md 4 and 7: GPUs to spare, but the memory quota is used up: the job left
    to its node share of memory (2 of 8 GPUs: 512 GiB) waits, naming memory and its figures; a
    job asking less memory starts."""
    from allocations.engine import Sharing

    jobs = [
        _run("r1", "n1", 2, memory_gib=1900),
        Job("j1", "a", P5.name, 2, 0.0, seq=1),
        Job("j2", "a", P5.name, 2, 0.0, seq=2, memory_gib=100),
    ]
    plan = allocate(_cluster(P5, jobs, sharing=Sharing.LEND), 0.0)
    assert [s.job_id for s in plan.starts] == ["j2"]
    why = plan.pending["j1"]
    assert why.code == "waiting-for-quota"
    assert why.message == (
        "a uses 1,900 of its 2,048 GiB memory quota on ml.p5.48xlarge and may not borrow; "
        "512 GiB memory more requested"
    )


def test_s4_best_fit_needs_room_for_every_resource_on_one_node() -> None:
    """docs/resources.md 4: n1 is the fuller node by GPUs but has 48 GiB memory free; a job of
    1 GPU (256 GiB by the ratio) goes to n2. GPUs alone would have put it on n1."""
    jobs = [_run("r1", "n1", 2, memory_gib=2000), Job("j1", "a", P5.name, 1, 0.0)]
    plan = allocate(_cluster(P5, jobs, nodes=2), 0.0)
    assert [(s.job_id, s.nodes) for s in plan.starts] == [("j1", (("n2", 1),))]
    gpus_only = replace(P5, vcpus_per_node=0, memory_gib_per_node=0)
    jobs_gpus = [replace(j, instance_type=gpus_only.name, memory_gib=None) for j in jobs]
    plan = allocate(_cluster(gpus_only, jobs_gpus, nodes=2), 0.0)
    assert [(s.job_id, s.nodes) for s in plan.starts] == [("j1", (("n1", 1),))]


def test_s4_no_node_with_room_for_all_is_fragmented() -> None:
    """docs/resources.md 4 and 7: the team's figures allow it, but no one node has the GPUs and
    the memory at once."""
    jobs = [
        _run("r1", "n1", 7, memory_gib=1800),
        _run("r2", "n2", 1, memory_gib=1800),
        Job("j1", "a", P5.name, 1, 0.0, memory_gib=400),
    ]
    plan = allocate(_cluster(P5, jobs, nodes=2), 0.0)
    assert plan.starts == ()
    assert plan.pending["j1"].code == "fragmented"
    assert plan.pending["j1"].message == (
        "no ready ml.p5.48xlarge node has room for 1 GPU, 24 vCPU, 400 GiB memory at once"
    )


def test_s3_partition_jobs_of_no_whole_gpu_start_and_count() -> None:
    """docs/resources.md 1 and 3: a job of partitions alone (0 GPUs) starts on a node with that
    many free; its partitions count against the quota (one instance: 14), so a second job of
    partitions beyond them waits; more than a node has can never fit."""
    it = P4D
    jobs = [
        Job("j1", "a", it.name, 0, 0.0, seq=1, partitions=(("mig-1g.5gb", 10),)),
        Job("j2", "a", it.name, 0, 0.0, seq=2, partitions=(("mig-1g.5gb", 5),)),
        Job("j3", "a", it.name, 0, 0.0, seq=3, partitions=(("mig-1g.5gb", 15),)),
        Job("j4", "a", it.name, 1, 0.0, seq=4, partitions=(("mig-1g.5gb", 4),)),
    ]
    snapshot = Snapshot(
        instance_types=(it,),
        nodes=(Node("n1", it.name, 6),),
        teams=(Team("a", {it.name: Quota(quota=6, instances=1, borrow_limit_percent=0)}),),
        policy=ClusterPolicy(),
        jobs=tuple(jobs),
    )
    plan = allocate(snapshot, 0.0)
    assert [(s.job_id, s.nodes) for s in plan.starts] == [("j1", (("n1", 0),)), ("j4", (("n1", 1),))]
    assert plan.pending["j2"].code == "waiting-for-quota"
    assert plan.pending["j2"].message == (
        "a uses 10 of its 14 mig-1g.5gb quota on ml.p4d.24xlarge and may not borrow; 5 mig-1g.5gb more requested"
    )
    assert plan.pending["j3"].code == "exceeds-max"
    assert plan.pending["j3"].message == "15 mig-1g.5gb of ml.p4d.24xlarge asked; a node has 14 mig-1g.5gb"


def test_s1_a_resource_the_type_lacks_is_refused() -> None:
    """docs/resources.md 1: partitions asked of a type without them are refused, naming the
    field."""
    with pytest.raises(ValueError, match=r"jobs\[0\]\.partitions: ml.g5.48xlarge has no partitions"):
        allocate(
            _snapshot(GPU_ONLY, Job("j1", "a", GPU_ONLY.name, 0, 0.0, partitions=(("mig-1g.5gb", 1),))), 0.0
        )
    with pytest.raises(ValueError, match=r"job.partitions: ml.p5.48xlarge has no partition 'mig-1g.5gb'"):
        allocate(_snapshot(P5, Job("j1", "a", P5.name, 1, 0.0, partitions=(("mig-1g.5gb", 1),))), 0.0)


def test_s9_gpu_only_types_keep_their_plan() -> None:
    plan = allocate(_snapshot(GPU_ONLY), 0.0)
    assert [s.job_id for s in plan.starts] == ["j1"]


def test_s6_no_victim_is_taken_when_the_preemptor_would_still_lack_memory() -> None:
    """docs/resources.md 6 and 9: a2 is within its GPU quota and reclaims GPUs from b, which
    borrows them; but a2's 1,000 GiB would take a beyond its memory limit (1,024 + 50%) whatever
    is preempted, so nobody is: a2 waits."""
    teams = (
        Team("a", {P5.name: Quota(quota=4)}),
        Team("b", {P5.name: Quota(quota=4)}),
    )
    jobs = (
        Job("b1", "b", P5.name, 6, -10.0, nodes=(("n1", 6),), started_at=-10.0, memory_gib=100),
        Job("a1", "a", P5.name, 1, -10.0, nodes=(("n1", 1),), started_at=-10.0, memory_gib=1024),
        Job("a2", "a", P5.name, 2, 0.0, memory_gib=1000),
    )
    snapshot = Snapshot((P5,), (Node("n1", P5.name, 8),), teams, ClusterPolicy(), jobs)
    plan = allocate(snapshot, 0.0)
    assert plan.preemptions == ()
    assert plan.starts == ()
    # Section 7: the first resource in section 1's order whose test fails, here GPUs.
    assert plan.pending["a2"].code == "waiting-for-quota"
    assert plan.pending["a2"].message.startswith("a uses 1 of its 4 GPU quota on ml.p5.48xlarge;")


def test_s6_no_min_runtime_reason_when_the_protected_victim_would_not_do() -> None:
    """docs/preemption.md 4 with docs/resources.md 6: b1 is protected by its minimum runtime,
    but taking it would not let a2 start either (a2 would exceed its memory limit), so a2's
    reason is not ``min-runtime``."""
    teams = (
        Team("a", {P5.name: Quota(quota=4)}),
        Team("b", {P5.name: Quota(quota=4)}),
    )
    jobs = (
        Job("b1", "b", P5.name, 6, -10.0, nodes=(("n1", 6),), started_at=-10.0, memory_gib=100),
        Job("a1", "a", P5.name, 1, -10.0, nodes=(("n1", 1),), started_at=-10.0, memory_gib=1024),
        Job("a2", "a", P5.name, 2, 0.0, memory_gib=1000),
    )
    policy = ClusterPolicy(min_runtime_s=100.0)
    plan = allocate(Snapshot((P5,), (Node("n1", P5.name, 8),), teams, policy, jobs), 0.0)
    assert plan.preemptions == ()
    assert plan.pending["a2"].code == "waiting-for-quota"
    # Asking 200 GiB, within its memory limit, it waits for b1's minimum runtime instead.
    fits = replace(jobs[2], memory_gib=200)
    plan = allocate(Snapshot((P5,), (Node("n1", P5.name, 8),), teams, policy, (*jobs[:2], fits)), 0.0)
    assert plan.pending["a2"].code == "min-runtime"


def test_s3_never_fits_judges_every_resource_at_submission() -> None:
    """docs/resources.md 3: a job asking more memory than a node has can never fit, and says
    which resource; a job of partitions alone is judged on them."""
    from allocations.engine import never_fits

    snapshot = _snapshot(P5)
    too_much = Job("j9", "a", P5.name, 1, 0.0, memory_gib=3000)
    reason = never_fits(snapshot, too_much)
    assert reason is not None and reason.code == "exceeds-max"
    assert reason.message == "3,000 GiB memory of ml.p5.48xlarge asked; a node has 2,048 GiB memory"
    assert never_fits(snapshot, replace(too_much, memory_gib=2000)) is None
    parts = _snapshot(P4D)
    job = Job("p", "a", P4D.name, 0, 0.0, partitions=(("mig-1g.5gb", 3),))
    # A quota of GPUs alone gives no partitions (section 2): none may ever be used.
    reason = never_fits(parts, job)
    assert reason is not None
    assert reason.message == "3 mig-1g.5gb of ml.p4d.24xlarge asked; a may use at most 0 mig-1g.5gb"
    parts = replace(parts, teams=(Team("a", {P4D.name: Quota(quota=6, instances=1)}),))
    assert never_fits(parts, job) is None
    with pytest.raises(ValueError, match=r"job\.gpus: must be above 0"):
        never_fits(parts, Job("p", "a", P4D.name, 0, 0.0))


def _dominant_cluster() -> Snapshot:
    """a borrows 4 of the 16 GPUs of the pool and no memory; b borrows 3 GPUs but 1,744 of the
    4,096 GiB memory pool (its quota names 256 GiB). One GPU is free, on n2."""
    from allocations.engine import IdleAllocation

    teams = (
        Team("a", {P5.name: Quota(quota=4, borrow_unlimited=True)}),
        Team("b", {P5.name: Quota(quota=4, resources=(("memory_gib", 256),), borrow_unlimited=True)}),
    )
    jobs = (
        Job("a1", "a", P5.name, 8, -10.0, nodes=(("n1", 8),), started_at=-10.0, memory_gib=100),
        Job("b1", "b", P5.name, 7, -10.0, nodes=(("n2", 7),), started_at=-10.0, memory_gib=2000),
        Job("a2", "a", P5.name, 1, 0.0, seq=1, memory_gib=10),
        Job("b2", "b", P5.name, 1, 0.0, seq=2, memory_gib=10),
    )
    nodes = (Node("n1", P5.name, 8), Node("n2", P5.name, 8))
    return Snapshot((P5,), nodes, teams, ClusterPolicy(idle_allocation=IdleAllocation.FAIR_SHARE), jobs)


def test_s5_fair_share_ranks_by_the_dominant_resource() -> None:
    """docs/resources.md 5: once its job runs, a's share is 5 of 16 GPUs (0.31) and b's is
    1,754 of 4,096 GiB memory (0.43), its dominant resource; by GPUs alone b's would be 4 of 16
    (0.25). The lower share goes first: a2 takes the free GPU, and b2 may not take it back
    (rules A and B need b's share below a's)."""
    plan = allocate(_dominant_cluster(), 0.0)
    assert [s.job_id for s in plan.starts] == ["a2"]
    assert plan.preemptions == ()
    assert plan.pending["b2"].code != "exceeds-max"


def test_s5_dominant_share_of_gpus_alone_is_policy_share() -> None:
    """docs/resources.md 5: on a type that counts GPUs alone the same cluster ranks by borrowed
    GPUs, as POLICY.md 3.2 does: b (3 borrowed) is below a (4), and b2 starts."""
    gpus_only = replace(P5, vcpus_per_node=0, memory_gib_per_node=0)
    snap = _dominant_cluster()
    teams = tuple(
        replace(t, quotas={gpus_only.name: Quota(quota=4, borrow_unlimited=True)}) for t in snap.teams
    )
    jobs = tuple(replace(j, memory_gib=None) for j in snap.jobs)
    plan = allocate(replace(snap, instance_types=(gpus_only,), teams=teams, jobs=jobs), 0.0)
    assert [s.job_id for s in plan.starts] == ["b2"]


@pytest.mark.parametrize("mode", ["fair-share", "first-come-first-serve"])
def test_s6_preemption_frees_the_memory_the_preemptor_lacks(mode: str) -> None:
    """docs/resources.md 6: b is within its GPU quota but borrows 876 GiB of memory; a's job,
    within a's quota, lacks memory on the one node (1,900 of 2,048 GiB used, 512 asked). b1 is
    a valid candidate because b borrows memory, the resource a2 lacks: it is preempted and a2
    starts. Searching by GPUs alone, b (borrowing no GPU) would give no candidate."""
    from allocations.engine import IdleAllocation

    teams = (Team("a", {P5.name: Quota(quota=4)}), Team("b", {P5.name: Quota(quota=4)}))
    jobs = (
        Job("b1", "b", P5.name, 2, -10.0, nodes=(("n1", 2),), started_at=-10.0, memory_gib=1900),
        Job("a2", "a", P5.name, 2, 0.0),
    )
    policy = ClusterPolicy(idle_allocation=IdleAllocation(mode))
    plan = allocate(Snapshot((P5,), (Node("n1", P5.name, 8),), teams, policy, jobs), 0.0)
    assert [(p.job_id, p.preemptor) for p in plan.preemptions] == [("b1", "a2")]
    assert [s.job_id for s in plan.starts] == ["a2"]


def test_s6_a_team_borrowing_only_what_the_preemptor_has_gives_no_victim() -> None:
    """docs/resources.md 6: b borrows GPUs (3 of its 2) but no memory (700 of its 1,024 GiB);
    a2, within a's quotas, lacks memory alone (the node's and the pool's), so b's jobs are no
    candidates and a2 waits. Searching by GPUs, b1 would have been taken."""
    teams = (
        Team("a", {P5.name: Quota(quota=4)}),
        Team("b", {P5.name: Quota(quota=2, resources=(("memory_gib", 1024),))}),
    )
    jobs = (
        Job("b1", "b", P5.name, 3, -10.0, nodes=(("n1", 3),), started_at=-10.0, memory_gib=700),
        Job("a1", "a", P5.name, 1, -10.0, nodes=(("n1", 1),), started_at=-10.0, memory_gib=1000),
        Job("a2", "a", P5.name, 2, 0.0, memory_gib=500),
    )
    plan = allocate(Snapshot((P5,), (Node("n1", P5.name, 8),), teams, ClusterPolicy(), jobs), 0.0)
    assert plan.preemptions == ()
    assert plan.starts == ()


@pytest.mark.parametrize(("history", "first"), [(1.0, "a2"), (3.0, "b2")])
def test_s5_gpu_history_counts_in_the_dominant_share(history: float, first: str) -> None:
    """docs/resources.md 5 with docs/fairness.md: half of a's share is its past borrowing of
    GPUs, over the same GPU pool: with 3 GPUs borrowed on average a's share is (5 + 3) / 2 of
    16 GPUs (0.25), above b's half of 0.43 (0.21), and b2 goes first; with 1 GPU (0.19) a2
    still does."""
    snap = _dominant_cluster()
    policy = replace(snap.policy, fair_share_half_life_s=3600.0, fair_share_history_percent=50)
    plan = allocate(replace(snap, policy=policy, borrowed_history={"a": history}), 0.0)
    assert [s.job_id for s in plan.starts] == [first]
