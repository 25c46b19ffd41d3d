"""The allocation loop's node sync and starts on the REAL local Slurm cluster, with resources
beyond GPUs (docs/resources.md, docs/slurm.md "Resources").

node[7-8] are ml.p4d.24xlarge: 6 whole GPUs, 14 mig-1g.5gb partitions, 96 CPUs, 1,152 GiB. The
engine does not decide on these resources yet (docs/resources.md 9), so the start is a plan made
here and applied by the loop's own apply step, as a cycle applies the engine's plan.
"""

from __future__ import annotations

import itertools
import os
import subprocess
from collections.abc import Iterator

import pytest
from django.db import transaction
from django.utils import timezone

from allocations import engine
from allocations.backends import get_backend
from allocations.choices import JobState
from allocations.models import InstanceType, Node
from allocations.selectors.snapshot import job_id
from allocations.services.loop import _apply, _Changes, _spec, _start_seq, _sync_nodes
from tests import factories as f
from tests.backends.conftest import slurm, slurm_answers, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]
P4D = "ml.p4d.24xlarge"
MIG = "mig-1g.5gb"
_serial = itertools.count(1)


@pytest.fixture
def prefix(slurm_cluster: None) -> Iterator[str]:
    name = f"gpugovres-{os.getpid()}-{next(_serial)}-"
    yield name
    if slurm_answers():
        lines = slurm("squeue", "-h", "-o", "%i|%j").splitlines()
        ids = [line.split("|")[0] for line in lines if line.split("|", 1)[-1].startswith(name)]
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, timeout=30, check=False)


def declare_p4d(prefix: str, partitions: dict[str, int]) -> InstanceType:
    f.make_cluster(
        backend_kind="slurm",
        backend_settings={"job_name_prefix": prefix, "partition": "gpu", "output": "/dev/null"},
    )
    return f.make_instance_type(
        P4D, 6, vcpus_per_node=96, memory_gib_per_node=1152, partitions_per_node=partitions
    )


def sync(prefix: str) -> _Changes:
    backend = get_backend("slurm", {"job_name_prefix": prefix, "partition": "gpu"})
    changes = _Changes()
    with transaction.atomic():
        _sync_nodes(backend, timezone.now(), changes)
    return changes


def test_the_sync_accepts_nodes_that_have_what_their_type_declares(prefix: str) -> None:
    declare_p4d(prefix, {MIG: 14})
    changes = sync(prefix)
    assert not [n for n in changes.notes if "the backend reads" in n], changes.notes
    assert set(Node.objects.filter(instance_type__name=P4D).values_list("name", "gpus", "reason")) == {
        ("node7", 6, ""),
        ("node8", 6, ""),
    }


def test_the_sync_notes_a_node_whose_resources_differ_from_its_type(prefix: str) -> None:
    """docs/resources.md 1: every node of a type has its declared resources; one that does not
    is named, once, with what Slurm reads, and its reason says so."""
    kind = declare_p4d(prefix, {MIG: 7, "mig-3g.20gb": 1})
    InstanceType.objects.filter(pk=kind.pk).update(vcpus_per_node=128)
    expected = (
        f"gpugov: the backend reads 96 vCPU of the 128 declared, 14 {MIG} of the 7 declared, "
        f"0 mig-3g.20gb of the 1 declared on {P4D}"
    )
    first = sync(prefix)
    assert f"node node7: {expected}" in first.notes, first.notes
    assert Node.objects.get(name="node7").reason == expected
    again = sync(prefix)  # the same mismatch is not noted every cycle
    assert not [n for n in again.notes if "the backend reads" in n], again.notes
    assert Node.objects.get(name="node7").state == "ready"


def test_the_loop_places_a_partition_job_with_its_typed_gres_cpus_and_memory(prefix: str) -> None:
    kind = declare_p4d(prefix, {MIG: 14})
    team = f.make_team("team-a", {kind: 6})
    job = f.make_job(team, kind, 0, partitions={MIG: 3}, vcpus=8, command="sleep 600", requested_duration=600)
    ratio = f.make_job(team, kind, 2, command="sleep 600", requested_duration=600)
    # What the loop asks of the backend: docs/resources.md 3 (the ratio for what is left out).
    spec = _spec(ratio, 1)
    assert (spec.gpus, spec.vcpus_per_node, spec.memory_gib_per_node, spec.partitions_per_node) == (
        2,
        32,
        384,
        (),
    )
    assert _spec(job, 1).partitions_per_node == ((MIG, 3),)

    sync(prefix)
    backend = get_backend("slurm", {"job_name_prefix": prefix, "partition": "gpu", "output": "/dev/null"})
    now = timezone.now()
    plan = engine.Plan(
        starts=(
            engine.Start(job_id(job.pk), (("node7", 0),)),
            engine.Start(job_id(ratio.pk), (("node7", 2),)),
        )
    )
    changes = _Changes()
    with transaction.atomic():
        preempted, started, errors = _apply(backend, plan, now, changes, _start_seq(now))
        changes.save()
    assert (preempted, started, errors) == (0, 2, [])
    job.refresh_from_db()
    ratio.refresh_from_db()
    assert (job.state, job.nodes, ratio.state, ratio.nodes) == (
        JobState.RUNNING,
        [["node7", 0]],
        JobState.RUNNING,
        [["node7", 2]],
    )
    for row in (job, ratio):
        wait_for(
            lambda row=row: slurm("squeue", "-h", "-j", row.external_id, "-o", "%T").strip(),
            lambda state: state == "RUNNING",
            f"Slurm to run job {row.pk}",
        )
    detail = slurm("scontrol", "show", "job", "-d", job.external_id)
    assert "TRES=cpu=8,mem=" in detail and "TresPerNode=gres:gpu:1g.5gb:3" in detail, detail
    assert " GRES=gpu:1g.5gb:3(IDX:" in detail, detail
    detail = slurm("scontrol", "show", "job", "-d", ratio.external_id)
    assert "TRES=cpu=32,mem=384G,node=1" in detail, detail
    assert " GRES=gpu:a100:2(IDX:0-1)" in detail, detail
    # The next sync sees both on node7, and what runs there is what the rows say.
    seen = {j.job_id: j.nodes for j in backend.list_jobs()}
    assert seen == {job_id(job.pk): (("node7", 0),), job_id(ratio.pk): (("node7", 2),)}
