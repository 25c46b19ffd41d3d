"""Resources beyond GPUs (docs/resources.md): what an instance type's node has, what a quota
gives once the ratio rule fills in what it leaves out, and what a job asks.

Every figure is a whole number and every ratio rounds down, so that a quota of g GPUs holds the
ratio demands of jobs of g GPUs in all (``a // n + b // n <= (a + b) // n``). A resource is
named as in quotas and jobs: ``gpus``, ``vcpus``, ``memory_gib``, or a partition profile.
"""

from __future__ import annotations

import re

from .snapshot import InstanceType, Job, Quota

GPUS = "gpus"
VCPUS = "vcpus"
MEMORY = "memory_gib"
# What the ratio rule may fill in, and the order in which the given ones set the ratio.
RATIO_ORDER = (GPUS, VCPUS, MEMORY)
# Words a quota mapping uses that no partition profile may be called.
RESERVED = frozenset((GPUS, VCPUS, MEMORY, "instances"))
PROFILE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
# How each resource is written in a message ("256 GiB memory").
UNITS = {GPUS: "GPUs", VCPUS: "vCPU", MEMORY: "GiB memory"}


def is_profile_name(name: str) -> bool:
    return len(name) <= 63 and name not in RESERVED and PROFILE_NAME.match(name) is not None


def counts_gpus_only(it: InstanceType) -> bool:
    """Whether the instance type counts GPUs alone (POLICY.md section 1 as written)."""
    return it.vcpus_per_node == 0 and it.memory_gib_per_node == 0 and not it.partitions_per_node


def type_resources(it: InstanceType) -> dict[str, int]:
    """One node's resources, in docs/resources.md section 1's order; only those it declares
    (GPUs always, even 0 of them)."""
    out = {GPUS: it.gpus_per_node}
    if it.vcpus_per_node:
        out[VCPUS] = it.vcpus_per_node
    if it.memory_gib_per_node:
        out[MEMORY] = it.memory_gib_per_node
    out.update(sorted(it.partitions_per_node))
    return out


def _fill_by_ratio(given: dict[str, int], per_node: dict[str, int]) -> dict[str, int]:
    """Each of the node's resources: as given, else by the ratio of the first of GPUs, vCPU,
    memory given above 0 (only vCPU and memory are filled in), else 0."""
    base = next((name for name in RATIO_ORDER if given.get(name, 0) > 0 and per_node.get(name)), None)
    out: dict[str, int] = {}
    for name, node_amount in per_node.items():
        if name in given:
            out[name] = given[name]
        elif base is not None and name in (VCPUS, MEMORY):
            out[name] = given[base] * node_amount // per_node[base]
        else:
            out[name] = 0
    return out


def quota_resources(it: InstanceType, quota: Quota) -> dict[str, int]:
    """The quota of each of the instance type's resources (docs/resources.md 2)."""
    per_node = type_resources(it)
    if quota.instances is not None:
        return {name: quota.instances * amount for name, amount in per_node.items()}
    given = dict(quota.resources)
    given[GPUS] = quota.quota
    return _fill_by_ratio(given, per_node)


def max_use_resources(it: InstanceType, quota: Quota) -> dict[str, int | None]:
    """Most of each resource the team may use (POLICY.md 2's ``max_use`` per resource), None
    when its borrowing is unlimited; the sharing setting (``lend``, ``dont-lend``) is the
    caller's, as for GPUs."""
    absolute = dict(quota.borrow_limits)
    out: dict[str, int | None] = {}
    for name, amount in quota_resources(it, quota).items():
        if name == GPUS and quota.borrow_limit is not None:
            out[name] = amount + quota.borrow_limit
        elif name in absolute:
            out[name] = amount + absolute[name]
        elif quota.borrow_unlimited:
            out[name] = None
        else:
            out[name] = amount + amount * quota.borrow_limit_percent // 100
    return out


def job_resources(it: InstanceType, job: Job) -> dict[str, int]:
    """What the job asks of each of the instance type's resources (docs/resources.md 3):
    vCPU and memory left out are its GPUs' share of their node."""
    given: dict[str, int] = {GPUS: job.gpus}
    if job.vcpus is not None:
        given[VCPUS] = job.vcpus
    if job.memory_gib is not None:
        given[MEMORY] = job.memory_gib
    given.update(job.partitions)
    per_node = type_resources(it)
    out: dict[str, int] = {}
    for name, node_amount in per_node.items():
        if name in given:
            out[name] = given[name]
        elif name in (VCPUS, MEMORY) and it.gpus_per_node:
            out[name] = job.gpus * node_amount // it.gpus_per_node
        else:
            out[name] = 0
    return out


def amount_text(name: str, amount: int) -> str:
    """``256 GiB memory``, ``48 vCPU``, ``2 mig-1g.10gb``, ``1 GPU``."""
    if name == GPUS and amount == 1:
        return "1 GPU"
    return f"{amount:,} {UNITS.get(name, name)}"
