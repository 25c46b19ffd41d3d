"""The policy's fields, in one registry.

Each tuple lists the fields of one kind of policy object that a person may set, in the order
forms and previews show them. The services take them as what a write may change and what the
audit trail records; the HyperPod and Kueue import, the what-if lab's drafts, the console's
forms, the admin and the API's serializers take them as what they show or set. A new setting
is added here, to its model and migration, to the service's rules (``services/policy.py``), and
to ``engine_team`` below, the one mapping of a team's fields to the engine's ``Team`` (the loop's
snapshot reads rows through it, the what-if lab reads drafts through it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allocations import engine
from allocations.choices import BorrowLimitKind

INSTANCE_TYPE_FIELDS = (
    "name",
    "gpus_per_node",
    "price_per_gpu_hour",
    "description",
    # docs/resources.md 1: 0, 0 and {} count GPUs alone.
    "vcpus_per_node",
    "memory_gib_per_node",
    "partitions_per_node",
)
NODE_FIELDS = ("name", "instance_type", "gpus", "state", "reason")
PRIORITY_CLASS_FIELDS = ("name", "weight", "description", "min_runtime_s", "preemption_grace_s")
CLUSTER_FIELDS = ("name", "backend_kind", "backend_settings", "time_zone")
CLUSTER_POLICY_FIELDS = (
    "idle_allocation",
    "task_ranking",
    "share_unallocated",
    "queueing",
    "fair_share_half_life_s",
    "fair_share_history_percent",
    "min_runtime_s",
    "preemption_grace_s",
)
# A team's settings that decide what runs: everything but its name, which identifies it in an
# import or a draft, and its limits below.
TEAM_SETTINGS = (
    "display_name",
    "active",
    "fair_share_weight",
    "sharing",
    "preempt_team_tasks",
    "reclaim",
    "preempt_while_borrowing",
    "preempt_while_borrowing_max_priority",
)
# What a team may ask for (docs/limits.md): checked when a job is submitted, never by the engine,
# so they are apart from the settings above, which the engine, the imports and the what-if
# drafts read. All but the last: the most GPUs running per member is enforced by the engine at
# each cycle (``ENGINE_TEAM_LIMITS``: the loop's snapshot maps it with ``engine_team``).
TEAM_LIMITS = (
    "allowed_priority_classes",
    "default_priority_class",
    "max_gpus_per_job",
    "max_pending_jobs_per_member",
    "max_pending_jobs",
    "max_running_gpus_per_member",
)
ENGINE_TEAM_LIMITS = ("max_running_gpus_per_member",)
# What a what-if draft holds of a team: what the engine decides with, its limits included.
DRAFT_TEAM_SETTINGS = (*TEAM_SETTINGS, *ENGINE_TEAM_LIMITS)
# A priority class's settings beside its weight that the engine decides with (docs/preemption.md).
PRIORITY_CLASS_ENGINE_SETTINGS = ("min_runtime_s", "preemption_grace_s")
TEAM_FIELDS = ("name", *TEAM_SETTINGS, *TEAM_LIMITS)
# docs/resources.md 2: a quota's resources besides its GPUs (``quota``), and absolute borrow
# limits of those resources; every one left at its default means GPUs alone.
QUOTA_RESOURCE_FIELDS = (
    "vcpus",
    "memory_gib",
    "partitions",
    "instances",
    "borrow_limit_vcpus",
    "borrow_limit_memory_gib",
    "borrow_limit_partitions",
)
QUOTA_FIELDS = (
    "quota",
    "borrow_limit_kind",
    "borrow_limit_percent",
    "borrow_limit",
    "lend_limit",
    *QUOTA_RESOURCE_FIELDS,
)
QUOTA_RESOURCE_DEFAULTS: dict[str, Any] = {
    "vcpus": None,
    "memory_gib": None,
    "partitions": {},
    "instances": None,
    "borrow_limit_vcpus": None,
    "borrow_limit_memory_gib": None,
    "borrow_limit_partitions": {},
}
# A quota row with these values means the same as no row (POLICY.md section 1's defaults).
QUOTA_DEFAULTS: dict[str, Any] = {
    "quota": 0,
    "borrow_limit_kind": BorrowLimitKind.PERCENT,
    "borrow_limit_percent": 50,
    "borrow_limit": None,
    "lend_limit": None,
    **QUOTA_RESOURCE_DEFAULTS,
}
# The job's fields that say what it asks besides its GPUs (docs/resources.md 3).
JOB_RESOURCE_FIELDS = ("vcpus", "memory_gib", "partitions")


def _pairs(mapping: Mapping[str, int] | None) -> tuple[tuple[str, int], ...]:
    """A stored {name: amount} as the engine's sorted (name, amount) pairs."""
    return tuple(sorted((str(k), int(v)) for k, v in (mapping or {}).items()))


def engine_instance_type(values: Mapping[str, Any]) -> engine.InstanceType:
    """An instance type's fields (``INSTANCE_TYPE_FIELDS``) as the engine's InstanceType."""
    return engine.InstanceType(
        name=values["name"],
        gpus_per_node=values["gpus_per_node"],
        vcpus_per_node=values.get("vcpus_per_node") or 0,
        memory_gib_per_node=values.get("memory_gib_per_node") or 0,
        partitions_per_node=_pairs(values.get("partitions_per_node")),
    )


def quota_resource_pairs(values: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """The per-resource form's entries other than GPUs, as ``engine.Quota.resources``."""
    named = {"vcpus": values.get("vcpus"), "memory_gib": values.get("memory_gib")}
    out = {k: v for k, v in named.items() if v is not None}
    out.update(values.get("partitions") or {})
    return _pairs(out)


def borrow_limit_pairs(values: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """The absolute borrow limits other than GPUs, as ``engine.Quota.borrow_limits``."""
    named = {"vcpus": values.get("borrow_limit_vcpus"), "memory_gib": values.get("borrow_limit_memory_gib")}
    out = {k: v for k, v in named.items() if v is not None}
    out.update(values.get("borrow_limit_partitions") or {})
    return _pairs(out)


def engine_quota(values: Mapping[str, Any]) -> engine.Quota:
    """A quota's fields (``QUOTA_FIELDS``) as the engine's Quota: the borrow limit's kind picks
    which of the three limits is in force. The resource fields may be missing (a what-if draft
    saved before they existed): missing means GPUs alone."""
    kind = values["borrow_limit_kind"]
    instances = values.get("instances")
    return engine.Quota(
        quota=values["quota"],
        lend_limit=values["lend_limit"],
        borrow_limit_percent=values["borrow_limit_percent"],
        borrow_limit=values["borrow_limit"] if kind == BorrowLimitKind.ABSOLUTE else None,
        borrow_unlimited=kind == BorrowLimitKind.UNLIMITED,
        # With instances, ``quota`` is kept at N times the GPUs per node by the services.
        resources=() if instances is not None else quota_resource_pairs(values),
        instances=instances,
        borrow_limits=borrow_limit_pairs(values),
    )


def engine_team(
    name: str, settings: Mapping[str, Any], quotas: Mapping[str, Mapping[str, Any]]
) -> engine.Team:
    """A team as the engine sees it, from its settings (``TEAM_SETTINGS``, as stored: choice
    values are strings, and ``ENGINE_TEAM_LIMITS`` where given: a what-if draft holds none)
    and its quotas by instance type name (``QUOTA_FIELDS``)."""
    preempt_while_borrowing = settings["preempt_while_borrowing"]
    return engine.Team(
        name=name,
        quotas={type_name: engine_quota(values) for type_name, values in quotas.items()},
        active=settings["active"],
        sharing=engine.Sharing(settings["sharing"]),
        fair_share_weight=settings["fair_share_weight"],
        preempt_team_tasks=engine.PreemptTeamTasks(settings["preempt_team_tasks"]),
        reclaim=engine.Reclaim(settings["reclaim"]),
        preempt_while_borrowing=(
            engine.PreemptWhileBorrowing(preempt_while_borrowing) if preempt_while_borrowing else None
        ),
        preempt_while_borrowing_max_priority=settings["preempt_while_borrowing_max_priority"],
        max_running_gpus_per_member=settings.get("max_running_gpus_per_member"),
    )
