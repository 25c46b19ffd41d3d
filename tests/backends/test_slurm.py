"""The Slurm backend: parsers on captured Slurm 22.05 output, then the real local cluster.

The cluster is the one scripts/slurm-up starts: node[1-4] are ml.p5.48xlarge with 8 GPUs,
node[5-6] ml.g5.12xlarge with 4, partition ``gpu``, cred_expire=5, sched_interval=2.
"""

from __future__ import annotations

import os
import shlex
import signal
import time
from pathlib import Path

import pytest

from allocations.backends import REGISTRY, get_backend
from allocations.backends.base import (
    BackendJob,
    BackendJobState,
    JobSpec,
    NodeState,
    PermanentBackendError,
    TransientBackendError,
)
from allocations.backends.slurm import (
    SlurmBackend,
    SlurmJob,
    backend_job,
    exit_code_from_status,
    expand_hostlist,
    gres_gpus,
    held_gpus,
    leaked_gpus,
    node_state,
    parse_squeue_json,
    transient_message,
    validate_settings,
    within_nodes,
)
from tests.backends.conftest import run_slurm_up, slurm, wait_for
from tests.conftest import Personas, require_service

# --- captured output (Slurm 22.05.8, this project's local cluster) --------------------------

SINFO_NODES = [
    {
        "name": "node1",
        "state": "idle",
        "state_flags": [],
        "features": "ml.p5.48xlarge",
        "gres": "gpu:h100:8",
        "reason": "",
        "partitions": ["gpu"],
    },
    {
        "name": "node4",
        "state": "idle",
        "state_flags": ["DRAIN"],
        "features": "ml.p5.48xlarge",
        "gres": "gpu:h100:8",
        "reason": "test drain",
        "partitions": ["gpu"],
    },
    {
        "name": "node5",
        "state": "idle",
        "state_flags": [],
        "features": "ml.g5.12xlarge",
        "gres": "gpu:a10g:4",
        "reason": "",
        "partitions": ["gpu"],
    },
]
SQUEUE_JOBS = [
    {"job_id": 1, "name": "gpugov-t1", "job_state": "RUNNING", "state_reason": "None", "nodes": "node5", "start_time": 1795970383, "end_time": 1795970443, "exit_code": 0, "tres_per_node": "gres:gpu:2", "restart_cnt": 1, "priority": 4294901757},
    {"job_id": 3, "name": "gpugov-t3", "job_state": "FAILED", "state_reason": "NonZeroExitCode", "nodes": "node3", "start_time": 1795970404, "end_time": 1795970405, "exit_code": 768, "tres_per_node": "gres:gpu:1", "restart_cnt": 0, "priority": 4294901756},
    {"job_id": 4, "name": "gpugov-t4", "job_state": "COMPLETED", "state_reason": "None", "nodes": "node3", "start_time": 1795970404, "end_time": 1795970405, "exit_code": 0, "tres_per_node": "gres:gpu:1", "restart_cnt": 0, "priority": 4294901755},
    {"job_id": 5, "name": "gpugov-t5", "job_state": "CANCELLED", "state_reason": "None", "nodes": "node1", "start_time": 1795970532, "end_time": 1795970535, "exit_code": 15, "tres_per_node": "gres:gpu:2", "restart_cnt": 0, "priority": 4294901754},
    {"job_id": 8, "name": "gpugov-t8", "job_state": "RUNNING", "state_reason": "None", "nodes": "node[2-3]", "start_time": 1795970643, "end_time": 1795970703, "exit_code": 0, "tres_per_node": "gres:gpu:4", "restart_cnt": 0, "priority": 4294901751},
    # Just after `scontrol requeuehold`: the script is being killed, the job is already held.
    {"job_id": 9, "name": "gpugov-cap", "job_state": "COMPLETING", "state_reason": "JobHeldUser", "nodes": "node4", "start_time": 1795970668, "end_time": 6090937904, "exit_code": 0, "tres_per_node": "gres:gpu:8", "restart_cnt": 1, "priority": 0},
    {"job_id": 10, "name": "gpugov-cap", "job_state": "PENDING", "state_reason": "JobHeldUser", "nodes": "", "start_time": 1795970674, "end_time": 6090937910, "exit_code": 0, "tres_per_node": "gres:gpu:8", "restart_cnt": 1, "priority": 0},
    # Released onto node5 while its GPUs are busy: Slurm will start it there.
    {"job_id": 92, "name": "gpugov-wait", "job_state": "PENDING", "state_reason": "Resources", "nodes": "", "required_nodes": "node5", "submit_time": 1827506950, "eligible_time": 1827506950, "start_time": 1827507014, "end_time": 6122474250, "exit_code": 0, "tres_per_node": "gres:gpu:2", "restart_cnt": 0, "priority": 4294901668},
    # Released onto node6, which was drained meanwhile: stuck.
    {"job_id": 93, "name": "gpugov-stuck", "job_state": "PENDING", "state_reason": "ReqNodeNotAvail", "nodes": "", "required_nodes": "node6", "start_time": 0, "end_time": 0, "exit_code": 0, "tres_per_node": "gres:gpu:2", "restart_cnt": 0, "priority": 4294901667},
]  # fmt: skip
SQUEUE_DOWN = {"meta": {}, "errors": [{"description": "Failed while looking for jobs", "error_number": -1, "error": "Unspecified error", "source": "slurm_load_jobs"}], "jobs": []}  # fmt: skip


# --- parsers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("node5", ["node5"]),
        ("node[2-3]", ["node2", "node3"]),
        ("node[1-2,5],gpu7", ["node1", "node2", "node5", "gpu7"]),
        ("gpu-a[008-010]", ["gpu-a008", "gpu-a009", "gpu-a010"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("", []),
        ("(null)", []),
    ],
)
def test_expands_hostlists_like_scontrol_show_hostnames(expression: str, names: list[str]) -> None:
    assert expand_hostlist(expression) == names


@pytest.mark.parametrize("expression", ["node[1-", "node[a-b]", "node]1[", "node[3-1]"])
def test_malformed_hostlist_is_an_error_naming_it(expression: str) -> None:
    with pytest.raises(ValueError, match="hostlist"):
        expand_hostlist(expression)


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:h100:8", 8),
        ("gpu:8", 8),
        ("gpu:h100:8(S:0-1)", 8),
        ("gpu:a100:4,gpu:h100:4", 8),
        ("gpu:2,shard:8", 2),
        ("shard:8", 0),
        ("(null)", 0),
        ("", 0),
        ("gres:gpu:4", 4),
        ("gres:gpu:h100:4", 4),
        ("gres/gpu:2", 2),
        ("gres/gpu=3", 3),
    ],
)
def test_reads_gpu_counts_from_gres(gres: str, gpus: int) -> None:
    assert gres_gpus(gres) == gpus


def test_unreadable_gres_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="gpu:h100:x:y"):
        gres_gpus("gpu:h100:x:y")


@pytest.mark.parametrize(
    ("state", "flags", "expected"),
    [
        ("idle", [], NodeState.READY),
        ("mixed", [], NodeState.READY),
        ("allocated", [], NodeState.READY),
        ("idle", ["DRAIN"], NodeState.DRAINING),
        ("mixed", ["DRAIN"], NodeState.DRAINING),
        ("drained", [], NodeState.DRAINING),
        ("draining", [], NodeState.DRAINING),
        ("mixed+drain", [], NodeState.DRAINING),
        ("down", [], NodeState.DOWN),
        ("down*", [], NodeState.DOWN),
        ("idle*", [], NodeState.DOWN),
        ("idle", ["NOT_RESPONDING"], NodeState.DOWN),
        ("drained*", [], NodeState.DOWN),
        ("fail", [], NodeState.DOWN),
        ("unknown", [], NodeState.DOWN),
        ("idle~", [], NodeState.DOWN),
        (["IDLE", "DRAIN"], [], NodeState.DRAINING),  # Slurm 23.02+ JSON
        (["MIXED"], [], NodeState.READY),
        ("something new", [], NodeState.DOWN),
    ],
)
def test_maps_slurm_node_states(state: str | list[str], flags: list[str], expected: NodeState) -> None:
    assert node_state(state, flags) is expected


def test_reads_nodes_from_captured_sinfo_json() -> None:
    backend = SlurmBackend({})
    nodes = [backend._node(raw) for raw in SINFO_NODES]
    assert [(n.name, n.instance_type, n.gpus, n.state, n.reason) for n in nodes] == [
        ("node1", "ml.p5.48xlarge", 8, NodeState.READY, ""),
        ("node4", "ml.p5.48xlarge", 8, NodeState.DRAINING, "test drain"),
        ("node5", "ml.g5.12xlarge", 4, NodeState.READY, ""),
    ]


def test_instance_type_comes_from_settings_before_features() -> None:
    backend = SlurmBackend({"node_instance_types": {"node5": "ml.g6.12xlarge"}})
    node = backend._node({**SINFO_NODES[2], "features": "ml.g5.12xlarge,ib"})
    assert node.instance_type == "ml.g6.12xlarge"
    assert SlurmBackend({})._node({**SINFO_NODES[2], "features": "ib,ml.g5.12xlarge"}).instance_type == (
        "ml.g5.12xlarge"
    )


def test_node_without_an_instance_type_is_down_and_says_why() -> None:
    node = SlurmBackend({})._node({**SINFO_NODES[0], "features": "ib,nvme"})
    assert node.state is NodeState.DOWN
    assert "settings.node_instance_types" in node.reason


def test_maps_captured_squeue_json_to_backend_jobs() -> None:
    jobs = {j.slurm_id: j for j in parse_squeue_json({"jobs": SQUEUE_JOBS})}
    running = backend_job("t1", jobs["1"])
    assert (running.state, running.nodes, running.started_at, running.finished_at) == (
        BackendJobState.RUNNING,
        (("node5", 2),),
        1795970383.0,
        None,
    )
    failed = backend_job("t3", jobs["3"])
    assert (failed.state, failed.exit_code, failed.reason, failed.finished_at) == (
        BackendJobState.FAILED,
        3,
        "NonZeroExitCode",
        1795970405.0,
    )
    finished = backend_job("t4", jobs["4"])
    assert (finished.state, finished.exit_code, finished.nodes) == (
        BackendJobState.FINISHED,
        0,
        (("node3", 1),),
    )
    cancelled = backend_job("t5", jobs["5"])
    assert (cancelled.state, cancelled.exit_code) == (BackendJobState.CANCELLED, 143)
    two_nodes = backend_job("t8", jobs["8"])
    assert two_nodes.nodes == (("node2", 4), ("node3", 4))


def test_preempted_job_is_pending_even_while_slurm_still_kills_it() -> None:
    jobs = {j.slurm_id: j for j in parse_squeue_json({"jobs": SQUEUE_JOBS})}
    for slurm_id in ("9", "10"):
        job = backend_job("cap", jobs[slurm_id])
        assert (job.state, job.nodes, job.started_at, job.finished_at) == (
            BackendJobState.PENDING,
            (),
            None,
            None,
        )
        assert jobs[slurm_id].held
        assert job.held  # Slurm will not start it by itself: the loop has nothing to hold


def test_released_job_waiting_for_the_scheduler_counts_as_running_on_its_nodes() -> None:
    jobs = {j.slurm_id: j for j in parse_squeue_json({"jobs": SQUEUE_JOBS})}
    waiting = backend_job("wait", jobs["92"])
    assert (waiting.state, waiting.nodes, waiting.started_at) == (
        BackendJobState.RUNNING,
        (("node5", 2),),
        None,
    )
    assert "Resources" in waiting.reason
    stuck = backend_job("stuck", jobs["93"])
    assert (stuck.state, stuck.nodes, stuck.reason) == (BackendJobState.PENDING, (), "ReqNodeNotAvail")
    # Released, waiting for its node: Slurm would start it by itself once the node is back.
    assert not stuck.held


def test_a_released_job_slurm_does_not_start_within_the_timeout_is_reported_pending() -> None:
    jobs = {j.slurm_id: j for j in parse_squeue_json({"jobs": SQUEUE_JOBS})}
    released = jobs["92"]
    assert released.eligible_since == 1827506950  # its eligible_time: the release
    soon = backend_job("wait", released, now=1827506950 + 179, start_timeout_s=180)
    assert (soon.state, soon.nodes) == (BackendJobState.RUNNING, (("node5", 2),))
    late = backend_job("wait", released, now=1827506950 + 181, start_timeout_s=180)
    assert (late.state, late.nodes, late.held) == (BackendJobState.PENDING, (), False)
    assert late.reason == (
        "released onto node5 181 s ago, Slurm has not started it (Resources; settings.start_timeout_s=180)"
    )
    # Only a copy counted as starting times out: a running one, or a held one, is what it is.
    assert backend_job("t8", jobs["8"], now=2e9, start_timeout_s=1).state is BackendJobState.RUNNING
    assert backend_job("cap", jobs["10"], now=2e9, start_timeout_s=1).held


def copy(slurm_id: str, state: str, nodes: tuple[str, ...], gpus: int, **fields: object) -> SlurmJob:
    """One Slurm copy of a gpugov job: running on ``nodes``, or released onto them and waiting."""
    starting = state == "PENDING"
    values: dict[str, object] = {
        "slurm_id": slurm_id,
        "name": f"gpugov-{slurm_id}",
        "state": state,
        "reason": "Resources" if starting else "None",
        "nodes": () if starting else nodes,
        "gpus_per_node": gpus,
        "held": False,
        "restarts": 0,
        "start_time": None if starting else 1827506900.0,
        "end_time": None,
        "exit_status": None,
        "required_nodes": nodes if starting else (),
        "eligible_since": 1827506950.0,
        **fields,
    }
    return SlurmJob(**values)  # type: ignore[arg-type]


def test_a_waiting_copy_counts_as_running_only_where_it_fits_beside_the_jobs_slurm_runs() -> None:
    """docs/chaos.md item 7: when a preemption finds its victim already completing, the victim
    still holds its GPUs (Slurm keeps them until it has ended) while its preemptor is released
    onto them; counting both as running would put 16 GPUs on a node of 8. Slurm's running jobs
    are counted first, then the waiting copies, oldest first."""
    copies = {
        "victim": copy("10", "COMPLETING", ("node4",), 8),
        "late": copy("12", "PENDING", ("node4",), 4, eligible_since=1827506960.0),
        "first": copy("11", "PENDING", ("node3",), 4),
        "second": copy("13", "PENDING", ("node3",), 4, eligible_since=1827506955.0),
        "third": copy("14", "PENDING", ("node3",), 2, eligible_since=1827506958.0),
        "wide": copy("15", "PENDING", ("node1", "node2"), 8),
        "unknown": copy("16", "PENDING", ("node9",), 8),
    }
    reports = [backend_job(job_id, job) for job_id, job in copies.items()]
    assert all(seen.state is BackendJobState.RUNNING for seen in reports)  # backend_job alone
    seen = {
        s.job_id: s for s in within_nodes(reports, copies, {"node1": 8, "node2": 8, "node3": 8, "node4": 8})
    }
    running = {job_id: s.nodes for job_id, s in seen.items() if s.state is BackendJobState.RUNNING}
    assert running == {
        "victim": (("node4", 8),),
        "first": (("node3", 4),),
        "second": (("node3", 4),),
        "wide": (("node1", 8), ("node2", 8)),
        "unknown": (("node9", 8),),  # a node sinfo does not give the GPUs of is not judged
    }
    late, third = seen["late"], seen["third"]
    assert (late.state, late.nodes, late.held, late.external_id) == (BackendJobState.PENDING, (), False, "12")
    assert late.reason == (
        "released onto node4, but gpugov jobs Slurm runs there (victim) hold 8 of node4's 8 GPUs and "
        "it needs 4; Slurm has not started it"
    )
    assert third.state is BackendJobState.PENDING and "(first, second) hold 8 of node3's 8" in third.reason
    # With no node's GPUs known, nothing is judged: every waiting copy counts as running.
    assert [s for s in within_nodes(reports, copies, {}) if s.state is BackendJobState.PENDING] == []


def test_a_preempted_copy_still_completing_leaves_its_gpus_to_the_preemptor() -> None:
    """A victim gpugov preempted (held) is pending for gpugov while Slurm kills it: its
    preemptor, released onto its GPUs, counts as running there (what the loop placed)."""
    captured = {j.slurm_id: j for j in parse_squeue_json({"jobs": SQUEUE_JOBS})}
    copies = {"cap": captured["9"], "preemptor": copy("12", "PENDING", ("node4",), 8)}
    assert captured["9"].state == "REQUEUE_HOLD" and captured["9"].nodes == ("node4",)
    reports = [backend_job(job_id, job) for job_id, job in copies.items()]
    seen = {s.job_id: s for s in within_nodes(reports, copies, {"node4": 8})}
    assert (seen["cap"].state, seen["preemptor"].state) == (BackendJobState.PENDING, BackendJobState.RUNNING)
    assert seen["preemptor"].nodes == (("node4", 8),)
    # The same victim not held (its requeuehold found it already completing) keeps its GPUs.
    ending = copy("9", "COMPLETING", ("node4",), 8)
    reports = [backend_job("cap", ending), backend_job("preemptor", copies["preemptor"])]
    seen = {s.job_id: s for s in within_nodes(reports, {**copies, "cap": ending}, {"node4": 8})}
    assert (seen["cap"].state, seen["preemptor"].state) == (BackendJobState.RUNNING, BackendJobState.PENDING)


# sinfo --json of node1 (8 GPUs) with one job of 4 GPUs on it, as slurmctld counts them.
BUSY_NODE = {**SINFO_NODES[0], "state": "mixed", "alloc_cpus": 1, "gres_used": "gpu:h100:8(IDX:0-7)"}


def squeue_holding(*jobs: tuple[str, str, str]) -> dict[str, object]:
    """squeue --json with jobs (state, nodes, tres_per_node) of any user."""
    return {
        "jobs": [
            {"job_id": i, "name": f"someone-{i}", "job_state": state, "nodes": nodes, "tres_per_node": tres}
            for i, (state, nodes, tres) in enumerate(jobs)
        ]
    }


@pytest.mark.parametrize(
    ("jobs", "leaked"),
    [
        ([("RUNNING", "node1", "gres:gpu:4")], 4),
        ([("RUNNING", "node1", "gres:gpu:4"), ("COMPLETING", "node[1-2]", "gres:gpu:4")], 0),
        ([("RUNNING", "node1", "gres:gpu:8")], 0),
        (
            [
                ("RUNNING", "node1", "gres:gpu:4"),
                ("PENDING", "", "gres:gpu:4"),
                ("COMPLETED", "node1", "gres:gpu:4"),
            ],
            4,
        ),
        # A job without GPUs holds none of them.
        ([("RUNNING", "node1", "gres:gpu:4"), ("RUNNING", "node1", "")], 4),
    ],
)
def test_gpus_slurm_counts_as_used_beyond_what_jobs_hold_are_leaked(
    jobs: list[tuple[str, str, str]], leaked: int
) -> None:
    held = held_gpus(squeue_holding(*jobs))
    assert leaked_gpus(BUSY_NODE, held) == leaked
    node = SlurmBackend({})._node(BUSY_NODE, leaked)
    if leaked:
        assert (node.state, node.gpus) == (NodeState.DRAINING, 8)
        assert f"Slurm counts {leaked} GPU(s) of this node in use that no job holds" in node.reason
    else:
        assert node.state is NodeState.READY


def test_gpus_asked_per_job_or_task_are_not_counted_as_leaked() -> None:
    document = squeue_holding(("RUNNING", "node1", "gres:gpu:4"))
    document["jobs"].append(  # type: ignore[attr-defined]
        {"job_id": 9, "name": "x", "job_state": "RUNNING", "nodes": "node1", "tres_per_job": "gres:gpu:4"}
    )
    assert held_gpus(document) == {"node1": None}
    assert leaked_gpus(BUSY_NODE, held_gpus(document)) == 0
    # A GPU count or a node list that cannot be read: that node, or every node, is not judged.
    odd = squeue_holding(("RUNNING", "node1", "gres:gpu:h100:x:y"))
    assert held_gpus(odd) == {"node1": None} and leaked_gpus(BUSY_NODE, held_gpus(odd)) == 0
    unreadable = squeue_holding(("RUNNING", "node1", "gres:gpu:4"), ("RUNNING", "node[1-", "gres:gpu:4"))
    assert held_gpus(unreadable) == {} and leaked_gpus(BUSY_NODE, held_gpus(unreadable)) == 0
    # Without squeue's word only a node where no job holds a CPU is judged.
    assert leaked_gpus(BUSY_NODE, {}) == 0
    assert leaked_gpus({**BUSY_NODE, "alloc_cpus": 0}, {}) == 8


def test_only_gpugovs_jobs_are_read_and_an_unreadable_one_is_named() -> None:
    odd = {**SQUEUE_JOBS[0], "job_id": 77, "name": "someone-else", "tres_per_node": "gres:gpu:h100:x:y"}
    jobs = parse_squeue_json({"jobs": [*SQUEUE_JOBS, odd]}, "gpugov-")
    assert [j.slurm_id for j in jobs] == ["1", "3", "4", "5", "8", "9", "10", "92", "93"]
    mine = {**odd, "name": "gpugov-77"}
    with pytest.raises(PermanentBackendError, match=r"job 77 \('gpugov-77'\).*gpu:h100:x:y"):
        parse_squeue_json({"jobs": [mine]}, "gpugov-")


def test_reads_slurm_23_json_layout() -> None:
    raw = {
        "job_id": 12,
        "name": "gpugov-x",
        "job_state": ["RUNNING"],
        "state_reason": "None",
        "nodes": "node1",
        "start_time": {"set": True, "infinite": False, "number": 100},
        "end_time": {"set": True, "infinite": False, "number": 0},
        "exit_code": {"status": ["SUCCESS"], "return_code": {"set": True, "number": 0}},
        "tres_per_node": "gres/gpu:4",
        "restart_cnt": 0,
        "priority": {"set": True, "infinite": False, "number": 1},
    }
    job = backend_job("x", parse_squeue_json({"jobs": [raw]})[0])
    assert (job.state, job.nodes, job.started_at) == (BackendJobState.RUNNING, (("node1", 4),), 100.0)


@pytest.mark.parametrize(("status", "code"), [(0, 0), (768, 3), (256, 1), (15, 143), (9, 137)])
def test_decodes_slurm_wait_status(status: int, code: int) -> None:
    assert exit_code_from_status(status) == code


@pytest.mark.parametrize(
    ("message", "transient"),
    [
        (
            "scancel: error: Kill job error on job id 1: Unable to contact slurm controller (connect failure)",
            True,
        ),
        (
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
            True,
        ),
        ("Unexpected message received for job 1", True),
        ('sbatch: error: Munge encode failed: Failed to access "/run/munge/munge.socket.2"', True),
        ("sbatch: error: Batch job submission failed: Invalid node name specified", False),
        ("sbatch: error: Batch job submission failed: Requested node configuration is not available", False),
        ("Requested operation is presently disabled for job 5", False),
    ],
)
def test_tells_unreachable_from_refused(message: str, transient: bool) -> None:
    assert transient_message(message) is transient


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"timeout_s": -1}, "settings.timeout_s"),
        ({"timeout_s": "10"}, "settings.timeout_s"),
        ({"command_prefix": "ssh login"}, "settings.command_prefix"),
        ({"teams": {"team-a": {"qos": "high"}}}, "settings.teams.team-a"),
        ({"teams": {"team-a": {"account": 7}}}, "settings.teams.team-a.account"),
        ({"job_name_prefix": "has space"}, "settings.job_name_prefix"),
        ({"node_instance_types": {"node1": 8}}, "settings.node_instance_types"),
        ({"partiton": "gpu"}, "partiton"),
    ],
)
def test_bad_settings_are_refused_naming_key_and_value(settings: dict[str, object], named: str) -> None:
    with pytest.raises(PermanentBackendError) as caught:
        validate_settings(settings)
    assert named in str(caught.value)
    value = next(iter(settings.values()))
    if not isinstance(value, dict):
        assert repr(value) in str(caught.value)


def test_registry_knows_slurm_and_names_the_known_kinds_for_an_unknown_one() -> None:
    assert REGISTRY["slurm"] is SlurmBackend
    assert isinstance(get_backend("slurm", {}), SlurmBackend)
    with pytest.raises(PermanentBackendError, match=r"'kubernetes'.*slurm"):
        get_backend("kubernetes", {})


def spec(
    job_id: str,
    gpus: int,
    command: str = "sleep 60",
    *,
    instance_type: str = "ml.p5.48xlarge",
    image: str = "",
    duration_s: int | None = None,
) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        team="team-a",
        name=f"test {job_id}",
        instance_type=instance_type,
        gpus=gpus,
        command=command,
        image=image,
        duration_s=duration_s,
    )


@pytest.mark.parametrize(
    ("job", "nodes", "named"),
    [
        (spec("a", 4), (), "nodes"),
        (spec("a", 12), (("node1", 8), ("node5", 4)), "same GPUs on every node"),
        (spec("a", 4), (("node1", 8),), "job.gpus is 4"),
        (spec("a", 8), (("node1", 4), ("node1", 4)), "twice"),
        (spec("a", 4), (("node1", 0),), "bad GPU count 0"),
        (spec("a b", 4), (("node1", 4),), "job.job_id"),
        (spec("a", 4, command=""), (("node1", 4),), "job.command"),
        (spec("a", 4, image="img,x"), (("node1", 4),), "job.image"),
    ],
)
def test_start_refuses_what_slurm_cannot_express_before_calling_it(
    job: JobSpec, nodes: tuple[tuple[str, int], ...], named: str
) -> None:
    # bin_dir points nowhere: a command run here would be a different error.
    with pytest.raises(PermanentBackendError, match=named):
        SlurmBackend({"bin_dir": "/nonexistent"}).start(job, nodes)


def test_commands_behind_ssh_are_quoted_for_the_remote_shell() -> None:
    local = SlurmBackend({"bin_dir": "/opt/slurm/bin"})
    assert local.argv("sbatch", "--wrap=sleep 60; echo done") == [
        "/opt/slurm/bin/sbatch",
        "--wrap=sleep 60; echo done",
    ]
    remote = SlurmBackend({"command_prefix": ["/usr/bin/ssh", "-o", "BatchMode=yes", "login1"]})
    args = ("--job-name=gpugov-7", "--wrap=sleep 60; echo 'done' $HOME")
    argv = remote.argv("sbatch", *args)
    assert argv[:4] == ["/usr/bin/ssh", "-o", "BatchMode=yes", "login1"]
    # ssh joins its arguments with spaces for the remote shell, which splits them again.
    assert shlex.split(" ".join(argv[4:])) == ["sbatch", *args]
    docker = SlurmBackend({"command_prefix": ["docker", "exec", "slurmctld"]})
    assert docker.argv("squeue", "--json") == ["docker", "exec", "slurmctld", "squeue", "--json"]


def test_missing_commands_are_a_permanent_error_naming_the_setting() -> None:
    with pytest.raises(PermanentBackendError, match=r"settings.bin_dir='/nonexistent'"):
        SlurmBackend({"bin_dir": "/nonexistent"}).list_nodes()


# --- the real local cluster -----------------------------------------------------------------


def job_of(backend: SlurmBackend, job_id: str) -> BackendJob | None:
    return next((j for j in backend.list_jobs() if j.job_id == job_id), None)


def wait_running(backend: SlurmBackend, job_id: str) -> BackendJob:
    """Wait until Slurm really runs the job (a start time, not just "starting")."""
    seen = wait_for(
        lambda: job_of(backend, job_id),
        lambda j: j is not None and j.started_at is not None,
        f"{job_id} to run",
    )
    assert seen is not None
    return seen


def state_of(backend: SlurmBackend, job_id: str) -> BackendJobState | None:
    job = job_of(backend, job_id)
    return job.state if job else None


def slurm_jobs_named(name: str) -> list[dict[str, str]]:
    """Every job of that exact name slurmctld remembers, seen through squeue itself."""
    lines = slurm("squeue", "-h", "-t", "all", "-o", "%i|%j|%T|%N|%b|%Q|%a|%P").splitlines()
    keys = ("id", "name", "state", "nodes", "tres", "priority", "account", "partition")
    rows = [dict(zip(keys, line.split("|"), strict=True)) for line in lines]
    return [row for row in rows if row["name"] == name]


@pytest.mark.slurm
def test_lists_the_local_nodes_with_instance_types_gpus_and_states(slurm_backend: SlurmBackend) -> None:
    nodes = {n.name: n for n in slurm_backend.list_nodes()}
    for name in ("node1", "node2", "node3", "node4"):
        assert (nodes[name].instance_type, nodes[name].gpus) == ("ml.p5.48xlarge", 8)
    for name in ("node5", "node6"):
        assert (nodes[name].instance_type, nodes[name].gpus) == ("ml.g5.12xlarge", 4)
    sinfo = dict(line.split() for line in slurm("sinfo", "-N", "-h", "-o", "%N %T").splitlines())
    for name, node in nodes.items():
        assert node.state is node_state(sinfo[name]), (name, sinfo[name])


@pytest.mark.slurm
def test_the_loops_sync_reads_squeue_once_for_nodes_and_jobs(
    slurm_backend: SlurmBackend, tmp_path: Path
) -> None:
    """list_nodes reads squeue (for leaked GPUs); the list_jobs right after it uses that read."""
    log = tmp_path / "commands"
    wrapper = tmp_path / "logged"
    wrapper.write_text(f'#!/bin/sh\necho "$1" >> {log}\nexec "$@"\n')
    wrapper.chmod(0o755)
    backend = SlurmBackend({**slurm_backend.config, "command_prefix": [str(wrapper)]})

    def commands() -> list[str]:
        done = log.read_text().split() if log.exists() else []
        log.write_text("")
        return done

    assert {n.name for n in backend.list_nodes()} >= {"node1", "node6"}
    backend.list_jobs()
    assert commands() == ["sinfo", "squeue"]
    backend.list_jobs()  # not right after list_nodes: a fresh read (and the nodes' GPUs)
    assert commands() == ["squeue", "sinfo"]
    backend.list_nodes()
    backend.cancel("nothing")  # any call in between makes the read stale (this one reads its own)
    backend.list_jobs()
    assert commands() == ["sinfo", "squeue", "squeue", "squeue"]


@pytest.mark.slurm
def test_hostlist_expansion_agrees_with_scontrol(slurm_cluster: None) -> None:
    for expression in ("node[1-3,5]", "gpu-a[008-011],x1", "r[1-2]n[01-02]"):
        assert expand_hostlist(expression) == slurm("scontrol", "show", "hostnames", expression).split()


@pytest.mark.slurm
def test_start_runs_the_job_on_the_chosen_node_with_its_gpus(
    slurm_backend: SlurmBackend, tmp_path: Path
) -> None:
    out = tmp_path / "env"
    job = spec(
        "run1",
        2,
        command=f"echo $GPUGOV_JOB_ID $GPUGOV_TEAM > {out}; sleep 60",
        instance_type="ml.g5.12xlarge",
    )
    slurm_id = slurm_backend.start(job, (("node5", 2),))
    seen = wait_for(
        lambda: job_of(slurm_backend, "run1"),
        lambda j: j is not None and j.started_at is not None,
        "run1 to run",
    )
    assert seen is not None
    assert (seen.external_id, seen.nodes) == (slurm_id, (("node5", 2),))
    assert seen.started_at is not None and seen.finished_at is None
    # Slurm's own view: this node, these GPUs, the team's account, the default partition.
    detail = slurm("scontrol", "show", "job", "-d", slurm_id)
    assert "NodeList=node5 " in detail and "NumNodes=1 " in detail
    assert "GRES=gpu:a10g:2(IDX:" in detail
    [row] = slurm_jobs_named(f"{slurm_backend.prefix}run1")
    assert (row["account"], row["partition"]) == ("acct-a", "gpu")
    assert (
        wait_for(lambda: out.read_text() if out.exists() else "", bool, "the job's output") == "run1 team-a\n"
    )


@pytest.mark.slurm
def test_starting_the_same_job_twice_makes_one_slurm_job(slurm_backend: SlurmBackend) -> None:
    job = spec("twice", 8)
    first = slurm_backend.start(job, (("node2", 8),))
    second = slurm_backend.start(job, (("node2", 8),))
    wait_running(slurm_backend, "twice")
    third = slurm_backend.start(job, (("node3", 8),))
    assert first == second == third
    assert [row["id"] for row in slurm_jobs_named(f"{slurm_backend.prefix}twice")] == [first]


@pytest.mark.slurm
def test_a_multi_node_job_gets_whole_nodes(slurm_backend: SlurmBackend) -> None:
    slurm_id = slurm_backend.start(spec("wide", 16), (("node3", 8), ("node4", 8)))
    seen = wait_for(
        lambda: job_of(slurm_backend, "wide"), lambda j: j is not None and j.started_at is not None, "wide"
    )
    assert seen is not None and seen.nodes == (("node3", 8), ("node4", 8))
    assert "NodeList=node[3-4] " in slurm("scontrol", "show", "job", slurm_id)


@pytest.mark.slurm
def test_preempted_job_stays_held_until_gpugov_starts_it_again_elsewhere(slurm_backend: SlurmBackend) -> None:
    job = spec("pre", 4, instance_type="ml.g5.12xlarge")
    first = slurm_backend.start(job, (("node6", 4),))
    wait_running(slurm_backend, "pre")
    assert slurm_backend.preempt("pre") is True
    held = job_of(slurm_backend, "pre")
    assert held is not None and (held.state, held.nodes, held.external_id) == (
        BackendJobState.PENDING,
        (),
        first,
    )
    # Slurm may restart a requeued job after cred_expire + 1 s (6 s here) and schedules every
    # 2 s: watch well past that. It must stay pending, with priority 0 (held).
    watch_until = time.monotonic() + 10
    while time.monotonic() < watch_until:
        assert state_of(slurm_backend, "pre") is BackendJobState.PENDING
        assert slurm_jobs_named(f"{slurm_backend.prefix}pre")[0]["state"] in ("PENDING", "COMPLETING")
        time.sleep(1)
    [row] = slurm_jobs_named(f"{slurm_backend.prefix}pre")
    assert (row["state"], row["priority"]) == ("PENDING", "0")
    assert slurm_backend.preempt("pre") is True  # idempotent: still the one held job
    [row] = slurm_jobs_named(f"{slurm_backend.prefix}pre")
    assert (row["id"], row["state"], row["priority"]) == (first, "PENDING", "0")
    # gpugov places it again, on the other g5 node.
    second = slurm_backend.start(job, (("node5", 4),))
    assert second != first
    assert slurm_backend.start(job, (("node5", 4),)) == second
    seen = wait_for(
        lambda: job_of(slurm_backend, "pre"), lambda j: j is not None and j.started_at is not None, "restart"
    )
    assert seen is not None and (seen.external_id, seen.nodes) == (second, (("node5", 4),))
    states = {row["id"]: row["state"] for row in slurm_jobs_named(f"{slurm_backend.prefix}pre")}
    assert states == {first: "CANCELLED", second: "RUNNING"}


@pytest.mark.slurm
def test_start_moves_a_job_still_waiting_for_its_nodes_when_placed_elsewhere(
    slurm_backend: SlurmBackend,
) -> None:
    g5 = "ml.g5.12xlarge"
    slurm_backend.start(spec("hog", 4, instance_type=g5), (("node5", 4),))
    wait_running(slurm_backend, "hog")
    first = slurm_backend.start(spec("late", 2, instance_type=g5), (("node5", 2),))
    # node5 is full: Slurm keeps it pending (Resources). Counted as running there, it would
    # make node5 hold 6 GPUs of its 4: it is pending, and says which gpugov job holds node5.
    wait_for(
        lambda: slurm_jobs_named(f"{slurm_backend.prefix}late")[0]["state"],
        lambda state: state == "PENDING",
        "late to be evaluated",
    )
    seen = job_of(slurm_backend, "late")
    assert seen is not None and (seen.state, seen.nodes, seen.held) == (BackendJobState.PENDING, (), False)
    assert "(hog) hold 4 of node5's 4 GPUs and it needs 2" in seen.reason, seen.reason
    assert slurm_backend.start(spec("late", 2, instance_type=g5), (("node5", 2),)) == first
    # Placed elsewhere, it moves: a fresh copy on node6, the waiting one cancelled.
    second = slurm_backend.start(spec("late", 2, instance_type=g5), (("node6", 2),))
    assert second != first
    seen = wait_for(
        lambda: job_of(slurm_backend, "late"),
        lambda j: j is not None and j.started_at is not None,
        "late to run",
    )
    assert seen is not None and (seen.external_id, seen.nodes) == (second, (("node6", 2),))
    states = {row["id"]: row["state"] for row in slurm_jobs_named(f"{slurm_backend.prefix}late")}
    assert states == {first: "CANCELLED", second: "RUNNING"}


@pytest.mark.slurm
def test_a_copy_slurm_keeps_waiting_is_reported_pending_after_the_start_timeout(
    slurm_backend: SlurmBackend,
) -> None:
    # Another user's job (gpugov does not see it) takes node6's GPUs; gpugov places a job there.
    g5 = "ml.g5.12xlarge"
    backend = SlurmBackend({**slurm_backend.config, "start_timeout_s": 4})
    foreign = f"{slurm_backend.prefix.rstrip('-')}_other"
    slurm("sbatch", "-J", foreign, "-p", "gpu", "-w", "node6", "-N", "1", "--gres=gpu:4", "-o", "/dev/null",
          "--wrap", "sleep 120")  # fmt: skip
    try:
        wait_for(
            lambda: slurm_jobs_named(foreign)[0]["state"], lambda state: state == "RUNNING", "the foreign job"
        )
        slurm_id = backend.start(spec("blocked", 2, instance_type=g5), (("node6", 2),))
        seen = job_of(backend, "blocked")
        assert seen is not None and (seen.state, seen.nodes) == (BackendJobState.RUNNING, (("node6", 2),))
        seen = wait_for(
            lambda: job_of(backend, "blocked"),
            lambda j: j is not None and j.state is BackendJobState.PENDING,
            "the start timeout",
        )
        assert seen is not None and seen.external_id == slurm_id and not seen.held
        assert "released onto node6" in seen.reason and "Slurm has not started it (Resources" in seen.reason
        assert "settings.start_timeout_s=4" in seen.reason
        # What the loop then does: hold it, so that Slurm never starts it there by itself.
        backend.preempt("blocked")
        held = job_of(backend, "blocked")
        assert held is not None and (held.state, held.held) == (BackendJobState.PENDING, True)
    finally:
        for row in slurm_jobs_named(foreign):
            slurm("scancel", row["id"])


@pytest.mark.slurm
def test_preempting_an_ended_or_unknown_job_does_nothing(slurm_backend: SlurmBackend) -> None:
    assert slurm_backend.preempt("never-started") is False  # nothing preempted
    slurm_backend.cancel("never-started")
    assert job_of(slurm_backend, "never-started") is None
    slurm_backend.start(spec("short", 1, command="true"), (("node1", 1),))
    wait_for(
        lambda: job_of(slurm_backend, "short"),
        lambda j: j is not None and j.state is BackendJobState.FINISHED,
        "the short job to end",
    )
    assert slurm_backend.preempt("short") is False
    assert state_of(slurm_backend, "short") is BackendJobState.FINISHED


@pytest.mark.slurm
def test_cancel_stops_the_job_for_good(slurm_backend: SlurmBackend) -> None:
    slurm_id = slurm_backend.start(spec("gone", 1), (("node1", 1),))
    wait_running(slurm_backend, "gone")
    slurm_backend.cancel("gone")
    slurm_backend.cancel("gone")  # idempotent
    seen = wait_for(
        lambda: job_of(slurm_backend, "gone"), lambda j: j is not None and j.state == "cancelled", "cancel"
    )
    assert seen is not None and seen.external_id == slurm_id and seen.finished_at is not None
    # A cancelled job is not started again by a repeated start.
    assert slurm_backend.start(spec("gone", 1), (("node1", 1),)) == slurm_id
    assert [row["state"] for row in slurm_jobs_named(f"{slurm_backend.prefix}gone")] == ["CANCELLED"]


@pytest.mark.slurm
def test_jobs_that_end_report_finished_or_failed_with_times_and_exit_codes(
    slurm_backend: SlurmBackend,
) -> None:
    slurm_backend.start(spec("ok", 1, command="sleep 1"), (("node1", 1),))
    slurm_backend.start(spec("bad", 1, command="sleep 1; exit 3"), (("node1", 1),))
    ended = {BackendJobState.FINISHED, BackendJobState.FAILED}
    for job_id, state, code in (("ok", BackendJobState.FINISHED, 0), ("bad", BackendJobState.FAILED, 3)):
        seen = wait_for(
            lambda j=job_id: job_of(slurm_backend, j), lambda j: j is not None and j.state in ended, job_id
        )
        assert seen is not None
        assert (seen.state, seen.exit_code, seen.nodes) == (state, code, (("node1", 1),))
        assert seen.started_at is not None and seen.finished_at is not None
        assert seen.started_at <= seen.finished_at


@pytest.mark.slurm
def test_duration_becomes_the_time_limit_and_an_empty_command_sleeps(slurm_backend: SlurmBackend) -> None:
    slurm_id = slurm_backend.start(spec("timed", 1, command="", duration_s=90), (("node1", 1),))
    detail = slurm("scontrol", "show", "job", slurm_id)
    assert "TimeLimit=00:02:00" in detail


@pytest.mark.slurm
def test_a_request_slurm_refuses_is_permanent_with_slurms_message(slurm_backend: SlurmBackend) -> None:
    with pytest.raises(PermanentBackendError, match="Invalid node name specified"):
        slurm_backend.start(spec("nowhere", 1), (("node99", 1),))
    with pytest.raises(PermanentBackendError, match="Requested node configuration is not available"):
        slurm_backend.start(spec("toobig", 8), (("node5", 8),))
    assert job_of(slurm_backend, "nowhere") is None


@pytest.mark.slurm
def test_drained_node_shows_draining_and_ready_again_after_resume(slurm_backend: SlurmBackend) -> None:
    try:
        slurm("scontrol", "update", "NodeName=node6", "State=DRAIN", "Reason=gpugov test drain")
        node6 = {n.name: n for n in slurm_backend.list_nodes()}["node6"]
        assert (node6.state, node6.reason) == (NodeState.DRAINING, "gpugov test drain")
    finally:
        slurm("scontrol", "update", "NodeName=node6", "State=RESUME")
    # Right after RESUME slurmctld pings the node and shows it not responding (down) until
    # slurmd answers.
    node6 = wait_for(
        lambda: {n.name: n for n in slurm_backend.list_nodes()}["node6"],
        lambda n: n.state is not NodeState.DRAINING and n.state is not NodeState.DOWN,
        "node6 to be ready",
    )
    assert (node6.state, node6.reason) == (NodeState.READY, "")


@pytest.mark.slurm
@pytest.mark.slow
def test_node_whose_slurmd_dies_shows_down_and_ready_once_it_is_back(slurm_backend: SlurmBackend) -> None:
    pid_file = Path("/run/slurm/slurmd-node6.pid")
    require_service(os.geteuid() == 0 and pid_file.exists(), "root and slurmd started by scripts/slurm-up")
    os.kill(int(pid_file.read_text()), signal.SIGTERM)
    try:
        # SlurmdTimeout is 10 s in scripts/slurm-up (300 s by default).
        node6 = wait_for(
            lambda: {n.name: n for n in slurm_backend.list_nodes()}["node6"],
            lambda n: n.state is NodeState.DOWN,
            "node6 to be down",
            limit_s=60,
        )
        assert (node6.instance_type, node6.gpus) == ("ml.g5.12xlarge", 4)
    finally:
        restarted = run_slurm_up()
    assert restarted.returncode == 0, restarted.stderr
    wait_for(
        lambda: {n.name: n for n in slurm_backend.list_nodes()}["node6"].state,
        lambda state: state is NodeState.READY,
        "node6 to be ready again",
    )


@pytest.mark.slurm
def test_unreachable_slurmctld_is_transient_and_calls_recover_once_it_is_back(
    slurm_backend: SlurmBackend,
) -> None:
    pid_file = Path("/run/slurm/slurmctld.pid")
    require_service(os.geteuid() == 0 and pid_file.exists(), "root and slurmctld started by scripts/slurm-up")
    slurm_id = slurm_backend.start(spec("survivor", 1), (("node1", 1),))
    wait_running(slurm_backend, "survivor")
    quick = SlurmBackend({**slurm_backend.settings, "timeout_s": 2})
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGTERM)
    try:
        wait_for(lambda: Path(f"/proc/{pid}").exists(), lambda alive: not alive, "slurmctld to stop")
        # Each command either times out (2 s here) or fails after Slurm's own retries (about
        # 9 s): both are transient, never a job failure. (sbatch's "Unable to contact slurm
        # controller" is classified in test_tells_unreachable_from_refused.)
        with pytest.raises(TransientBackendError, match="timeout_s"):
            quick.list_jobs()
        with pytest.raises(TransientBackendError):
            quick.health()
        # 22.05's `squeue --json` exits 0 with an error list then: not an empty cluster.
        with pytest.raises(TransientBackendError, match="Failed while looking for jobs"):
            slurm_backend.list_jobs()
    finally:
        restarted = run_slurm_up()
    assert restarted.returncode == 0, restarted.stderr
    slurm_backend.health()
    seen = job_of(slurm_backend, "survivor")
    assert seen is not None and (seen.external_id, seen.state) == (slurm_id, BackendJobState.RUNNING)
    assert job_of(slurm_backend, "during-outage") is None


@pytest.mark.slurm
@pytest.mark.django_db
def test_the_allocation_loop_runs_jobs_on_slurm_and_sees_them_finish(
    slurm_backend: SlurmBackend, personas: Personas
) -> None:
    """The whole path: run_allocation_cycle -> engine -> SlurmBackend -> Slurm, and back."""
    from allocations.models import Cluster, Job
    from allocations.services.loop import run_allocation_cycle
    from tests import factories as f

    Cluster.objects.update(backend_kind="slurm", backend_settings=dict(slurm_backend.settings))
    training = personas.priority_classes["training"]
    long_job = f.make_job(
        personas.team, personas.instance_type, 8, priority_class=training, command="sleep 60"
    )
    short_job = f.make_job(
        personas.team, personas.instance_type, 4, priority_class=training, command="sleep 1"
    )

    run = run_allocation_cycle(trigger="test")
    assert run is not None and run.ok, run and run.errors
    for job in (long_job, short_job):
        job.refresh_from_db()
        assert job.state == "running", (job.pk, job.pending_reason_code, job.pending_reason_message)
        name = f"{slurm_backend.prefix}{job.pk}"
        [row] = wait_for(
            lambda n=name: slurm_jobs_named(n), lambda rows: rows[0]["state"] != "PENDING", f"{name} to run"
        )
        # Slurm runs it where the engine put it, with the GPUs it was given.
        assert row["id"] == job.external_id
        assert [(node, gpus) for node, gpus in job.nodes] == [
            (node, gres_gpus(row["tres"])) for node in expand_hostlist(row["nodes"])
        ]

    def short_state() -> str:
        run_allocation_cycle(trigger="test")
        return Job.objects.get(pk=short_job.pk).state

    wait_for(short_state, lambda state: state == "finished", "the short job to finish in the database")
    long_job.refresh_from_db()
    assert long_job.state == "running"
