"""Writes of the governance policy (POLICY.md section 1): every change goes through here.

Each service owns its transaction, checks the rules (raising ``ValidationError({field:
message})`` with a message that names the value), writes one AuditEntry per changed field and,
once the change is committed, asks the allocation loop for a cycle: a new quota or a drained
node changes what may run.

The ``validate_*`` functions hold the rules and are shared with the console's forms, so a
person sees the same message whichever way the change comes in. Team memberships have their
own module, ``services/memberships.py``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, ParamSpec, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.utils import timezone

from allocations import choices
from allocations.choices import BackendKind, BorrowLimitKind, NodeState, NodeStateSource
from allocations.engine.resources import RESERVED, is_profile_name
from allocations.models import (
    Cluster,
    ClusterPolicy,
    InstanceType,
    Job,
    Node,
    NodeStateChange,
    PriorityClass,
    Team,
    TeamQuota,
)
from allocations.policy_fields import (
    CLUSTER_FIELDS,
    CLUSTER_POLICY_FIELDS,
    INSTANCE_TYPE_FIELDS,
    NODE_FIELDS,
    PRIORITY_CLASS_FIELDS,
    QUOTA_DEFAULTS,
    QUOTA_FIELDS,
    TEAM_FIELDS,
)
from allocations.services import audit
from allocations.services.cycle_requests import request_cycle
from allocations.services.memberships import MEMBERSHIP_FIELDS

M = TypeVar("M", bound=models.Model)
P = ParamSpec("P")
R = TypeVar("R")

INSTANCE_TYPE_NAME_REGEX = r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$"
MAX_GPUS = 32767  # PositiveSmallIntegerField's ceiling: a node or instance type never has more
MAX_GPU_COUNT = 2_147_483_647  # PositiveIntegerField's ceiling (quotas, limits)
# The names' patterns in words, for the errors.
INSTANCE_TYPE_NAME_WORDS = (
    "lowercase letters, digits, '.' and '-', starting and ending with a letter or digit"
)
DNS_LABEL_WORDS = "lowercase letters, digits and '-', starting and ending with a letter or digit"
# Longest minimum runtime accepted (seconds): 30 days. Longer would make a running job
# unpreemptable for good, which a priority class's weight already says more plainly.
MAX_MIN_RUNTIME_S = 30 * 24 * 3600
# docs/preemption.md section 7: a day at most, as the scenario format; above it, a typo.
MAX_PREEMPTION_GRACE_S = 24 * 3600


# --- Rules --------------------------------------------------------------------------------------
class _Errors:
    """Collects field errors so that a person sees every problem of a change at once."""

    def __init__(self) -> None:
        self.by_field: dict[str, list[str]] = {}

    def add(self, field: str, message: str) -> None:
        self.by_field.setdefault(field, []).append(message)

    def whole_number(self, field: str, value: Any, low: int, high: int, what: str, unit: str = "") -> bool:
        """``value`` must be an int within [low, high]; ``what`` names it, ``unit`` (e.g. "GPUs")
        follows the bound: "Quota must be 0 or more GPUs; got -3."."""
        unit = f" {unit}" if unit else ""
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(field, f"{what} must be a whole number{unit and ' of' + unit}; got {value!r}.")
            return False
        if value < low:
            self.add(field, f"{what} must be {low} or more{unit}; got {value}.")
            return False
        if value > high:
            self.add(field, f"{what} must be at most {high}{unit}; got {value}.")
            return False
        return True

    def choice(self, field: str, value: Any, allowed: list[tuple[str, str]] | list[str], what: str) -> bool:
        words = [c if isinstance(c, str) else c[0] for c in allowed]
        if value not in words:
            self.add(field, f"{what} must be one of {', '.join(words)}; got {value!r}.")
            return False
        return True

    def raise_if_any(self) -> None:
        if self.by_field:
            raise ValidationError(self.by_field)


def _unique(model: type[models.Model], field: str, value: Any, current: models.Model | None) -> bool:
    rows = model._default_manager.filter(**{field: value})
    if current is not None and current.pk is not None:
        rows = rows.exclude(pk=current.pk)
    return not rows.exists()


def _check_name(
    errors: _Errors,
    values: Mapping[str, Any],
    current: models.Model | None,
    model: type[models.Model],
    pattern: str,
    max_length: int,
    words: str,
) -> None:
    """``values["name"]`` must match ``pattern`` (which ``words`` describe), have at most
    ``max_length`` characters and be no other ``model`` row's name; the errors name the kind by
    its verbose name ("Team name must be ...", "A team named 'ml' already exists.")."""
    name = values.get("name")
    kind = str(model._meta.verbose_name)
    if not isinstance(name, str) or not re.match(pattern, name) or len(name) > max_length:
        errors.add(
            "name",
            f"{kind.capitalize()} name must be {words}, at most {max_length} characters; got {name!r}.",
        )
    elif not _unique(model, "name", name, current):
        article = "An" if kind[0] in "aeiou" else "A"
        errors.add("name", f"{article} {kind} named {name!r} already exists.")


def validate_instance_type(values: Mapping[str, Any], current: InstanceType | None = None) -> None:
    """An instance type's name, GPUs per node (never below its nodes' GPUs) and price."""
    errors = _Errors()
    _check_name(errors, values, current, InstanceType, INSTANCE_TYPE_NAME_REGEX, 64, INSTANCE_TYPE_NAME_WORDS)
    gpus = values.get("gpus_per_node")
    if errors.whole_number("gpus_per_node", gpus, 1, MAX_GPUS, "GPUs per node") and current is not None:
        largest = current.nodes.aggregate(m=models.Max("gpus"))["m"]
        if largest is not None and gpus < largest:
            errors.add(
                "gpus_per_node",
                f"GPUs per node cannot be {gpus}: node(s) of {current.name} have {largest} GPUs.",
            )
    price = values.get("price_per_gpu_hour", Decimal(0))
    try:
        price_ok = Decimal(str(price)) >= 0 and Decimal(str(price)) < Decimal("1000000")
    except (InvalidOperation, ValueError):
        price_ok = False
    if isinstance(price, bool) or not price_ok:
        errors.add("price_per_gpu_hour", f"Price per GPU-hour must be 0 or more dollars; got {price!r}.")
    _check_text(errors, "description", values.get("description", ""), 200)
    _check_type_resources(errors, values, current)
    errors.raise_if_any()


MAX_RESOURCE = 2_147_483_647  # PositiveIntegerField's ceiling (vCPU, GiB, partition counts)
PROFILE_WORDS = (
    "lower case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 63 "
    f"characters, none of {', '.join(sorted(RESERVED))}"
)


def check_partitions(
    add: Callable[[str, str], None], field: str, value: Any, *, known: Mapping[str, int] | None, low: int
) -> dict[str, int] | None:
    """``value`` must be a mapping of partition profile to a whole count >= ``low``
    (docs/resources.md 8); with ``known`` (an instance type's profiles), only those profiles.
    The errors name the field, the profile and the value; None when any is wrong."""
    if not isinstance(value, dict):
        add(field, f"Partitions must be a mapping of partition profile to a count; got {shown(value)}.")
        return None
    out: dict[str, int] = {}
    for profile, count in value.items():
        if not isinstance(profile, str) or not is_profile_name(profile):
            add(field, f"{shown(profile)} is no partition profile name ({PROFILE_WORDS}).")
        elif known is not None and profile not in known:
            have = ", ".join(known) or "none"
            add(field, f"Unknown partition profile {profile!r} (the instance type has: {have}).")
        elif isinstance(count, bool) or not isinstance(count, int) or not low <= count <= MAX_RESOURCE:
            add(field, f"Partitions {profile!r} must be a whole number of {low} or more; got {shown(count)}.")
        else:
            out[profile] = count
    return out if len(out) == len(value) else None


def _check_type_resources(errors: _Errors, values: Mapping[str, Any], current: InstanceType | None) -> None:
    """vCPU, memory and partitions per node (docs/resources.md 1), never dropping a resource a
    quota or a live job of the type names."""
    for field, what, unit in (
        ("vcpus_per_node", "vCPU per node", "vCPU"),
        ("memory_gib_per_node", "Memory per node", "GiB"),
    ):
        errors.whole_number(field, values.get(field, 0), 0, MAX_RESOURCE, what, unit)
    partitions = check_partitions(
        errors.add, "partitions_per_node", values.get("partitions_per_node", {}), known=None, low=1
    )
    if current is None or current.pk is None or "partitions_per_node" in errors.by_field:
        return
    declared = {
        "vcpus": bool(values.get("vcpus_per_node")),
        "memory_gib": bool(values.get("memory_gib_per_node")),
    }
    quotas = list(current.quotas.select_related("team"))
    jobs = list(
        current.jobs.filter(state__in=choices.ACTIVE_JOB_STATES).values("vcpus", "memory_gib", "partitions")
    )
    for name, field in (("vcpus", "vcpus_per_node"), ("memory_gib", "memory_gib_per_node")):
        if declared[name]:
            continue
        users = [
            q.team.name
            for q in quotas
            if getattr(q, name) is not None or getattr(q, f"borrow_limit_{name}") is not None
        ]
        if users or any(j[name] is not None for j in jobs):
            who = f"the quotas of {', '.join(users)}" if users else "live jobs"
            errors.add(field, f"{field.replace('_', ' ').capitalize()} cannot be 0: {who} name {name}.")
    profiles = set(partitions or {})
    named = {p for q in quotas for p in (*q.partitions, *q.borrow_limit_partitions)}
    named |= {p for j in jobs for p in j["partitions"] or {}}
    dropped = sorted(named - profiles)
    if dropped:
        errors.add(
            "partitions_per_node",
            f"Partition profile(s) {', '.join(dropped)} cannot be removed: quotas or live jobs name them.",
        )


def validate_node(values: Mapping[str, Any], current: Node | None = None) -> None:
    """A node's unique name, its instance type, GPUs that fit the type, and a valid state."""
    errors = _Errors()
    name = values.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 128:
        errors.add("name", f"Node name must be 1 to 128 characters; got {name!r}.")
    elif not _unique(Node, "name", name, current):
        errors.add("name", f"A node named {name!r} already exists.")
    instance_type = values.get("instance_type")
    if not isinstance(instance_type, InstanceType):
        errors.add("instance_type", f"Choose an instance type; got {instance_type!r}.")
    gpus = values.get("gpus")
    gpus_ok = errors.whole_number("gpus", gpus, 1, MAX_GPUS, "A node", "GPUs")
    if gpus_ok and isinstance(instance_type, InstanceType) and gpus > instance_type.gpus_per_node:
        errors.add(
            "gpus",
            f"A node of {instance_type.name} has at most {instance_type.gpus_per_node} GPUs; got {gpus}.",
        )
    errors.choice("state", values.get("state"), NodeState.values, "State")
    _check_text(errors, "reason", values.get("reason", ""), 200)
    errors.raise_if_any()


def validate_priority_class(values: Mapping[str, Any], current: PriorityClass | None = None) -> None:
    """A priority class's DNS-label name, weight 0..100, and at most 32 classes in all."""
    errors = _Errors()
    _check_name(errors, values, current, PriorityClass, choices.DNS_LABEL_REGEX, 63, DNS_LABEL_WORDS)
    errors.whole_number("weight", values.get("weight"), 0, 100, "Weight")
    _check_text(errors, "description", values.get("description", ""), 200)
    min_runtime = values.get("min_runtime_s")
    if min_runtime is not None:
        errors.whole_number("min_runtime_s", min_runtime, 0, MAX_MIN_RUNTIME_S, "Minimum runtime", "seconds")
    grace = values.get("preemption_grace_s")
    if grace is not None:
        errors.whole_number(
            "preemption_grace_s", grace, 0, MAX_PREEMPTION_GRACE_S, "Preemption grace", "seconds"
        )
    if current is None and PriorityClass.objects.count() >= choices.MAX_PRIORITY_CLASSES:
        errors.add(
            "__all__",
            f"A cluster has at most {choices.MAX_PRIORITY_CLASSES} priority classes (POLICY.md "
            "section 1); delete one first.",
        )
    errors.raise_if_any()


def validate_team(values: Mapping[str, Any], current: Team | None = None) -> None:
    """A team's name (a DNS label of at most 40 characters), weight and preemption settings."""
    errors = _Errors()
    words = f"a DNS label: {DNS_LABEL_WORDS}"
    _check_name(errors, values, current, Team, choices.DNS_LABEL_REGEX, choices.TEAM_NAME_MAX_LENGTH, words)
    _check_text(errors, "display_name", values.get("display_name", ""), 100)
    if not isinstance(values.get("active", True), bool):
        errors.add("active", f"Active must be true or false; got {values.get('active')!r}.")
    errors.whole_number("fair_share_weight", values.get("fair_share_weight", 1), 0, 100, "Fair-share weight")
    errors.choice("sharing", values.get("sharing"), choices.SHARING_CHOICES, "Sharing")
    errors.choice(
        "preempt_team_tasks",
        values.get("preempt_team_tasks"),
        choices.PREEMPT_TEAM_TASKS_CHOICES,
        "Preempt team tasks",
    )
    reclaim_ok = errors.choice("reclaim", values.get("reclaim"), choices.RECLAIM_CHOICES, "Reclaim")
    pwb = values.get("preempt_while_borrowing", "")
    pwb_ok = errors.choice(
        "preempt_while_borrowing",
        pwb,
        ["", *(c for c, _ in choices.PREEMPT_WHILE_BORROWING_CHOICES)],
        "Preempt while borrowing",
    )
    # POLICY.md section 1: preempting while borrowing without reclaiming is refused.
    if pwb_ok and reclaim_ok and pwb == "lower-priority" and values.get("reclaim") == "never":
        errors.add(
            "preempt_while_borrowing",
            "Preempt while borrowing 'lower-priority' needs reclaim; with reclaim 'never' choose "
            "'never' or the default (POLICY.md section 1).",
        )
    max_priority = values.get("preempt_while_borrowing_max_priority")
    if max_priority is not None:
        errors.whole_number("preempt_while_borrowing_max_priority", max_priority, 0, 100, "Maximum priority")
    _check_team_limits(errors, values)
    errors.raise_if_any()


# The limits of what a team may ask for (docs/limits.md), as their errors name them.
TEAM_LIMIT_WORDS = {
    "max_gpus_per_job": "Most GPUs per job",
    "max_pending_jobs_per_member": "Most pending jobs per member",
    "max_pending_jobs": "Most pending jobs of the team",
    "max_running_gpus_per_member": "Most GPUs running per member",
}


def _check_team_limits(errors: _Errors, values: Mapping[str, Any]) -> None:
    """A team's allowed classes (names of existing classes, empty = all), its default class
    (one of them) and its numeric limits (1 or more, or none)."""
    allowed = values.get("allowed_priority_classes") or []
    allowed_ok = True
    if not isinstance(allowed, list) or not all(isinstance(name, str) for name in allowed):
        errors.add(
            "allowed_priority_classes",
            f"Allowed priority classes must be a list of class names; got {allowed!r}.",
        )
        allowed_ok = False
    else:
        known = set(PriorityClass.objects.filter(name__in=allowed).values_list("name", flat=True))
        unknown = [name for name in allowed if name not in known]
        if unknown:
            errors.add(
                "allowed_priority_classes",
                f"Allowed priority classes: no class is called {', '.join(map(repr, unknown))}.",
            )
            allowed_ok = False
        elif len(set(allowed)) != len(allowed):
            errors.add(
                "allowed_priority_classes", f"Allowed priority classes name a class twice; got {allowed!r}."
            )
            allowed_ok = False
    default = values.get("default_priority_class")
    if default is not None and not isinstance(default, PriorityClass):
        errors.add(
            "default_priority_class", f"Default priority class must be a priority class; got {default!r}."
        )
    elif default is not None and allowed_ok and allowed and default.name not in allowed:
        errors.add(
            "default_priority_class",
            f"Default priority class {default.name!r} is not one the team may use ({', '.join(allowed)}).",
        )
    for field, what in TEAM_LIMIT_WORDS.items():
        limit = values.get(field)
        if limit is not None:
            errors.whole_number(field, limit, 1, MAX_GPU_COUNT, what, "GPUs" if "gpus" in field else "jobs")


def validate_quota(values: Mapping[str, Any], instance_type: InstanceType | None = None) -> None:
    """A quota of GPUs with its borrow cap (percent, absolute or unlimited) and lend limit <=
    quota, and its other resources (docs/resources.md 2), which must be the instance type's."""
    errors = _Errors()
    _check_quota_resources(errors, values, instance_type)
    quota = values.get("quota")
    quota_ok = errors.whole_number("quota", quota, 0, MAX_GPU_COUNT, "Quota", "GPUs")
    kind = values.get("borrow_limit_kind")
    errors.choice("borrow_limit_kind", kind, BorrowLimitKind.values, "Borrow limit kind")
    errors.whole_number(
        "borrow_limit_percent", values.get("borrow_limit_percent", 50), 0, 10000, "Borrow limit percent"
    )
    borrow_limit = values.get("borrow_limit")
    if borrow_limit is not None:
        errors.whole_number("borrow_limit", borrow_limit, 0, MAX_GPU_COUNT, "Borrow limit", "GPUs")
    elif kind == BorrowLimitKind.ABSOLUTE:
        errors.add("borrow_limit", "Give the borrow limit in GPUs (0 or more) when the limit is in GPUs.")
    lend_limit = values.get("lend_limit")
    if (
        lend_limit is not None
        and errors.whole_number("lend_limit", lend_limit, 0, MAX_GPU_COUNT, "Lend limit", "GPUs")
        and quota_ok
        and lend_limit > quota
    ):
        errors.add("lend_limit", f"Lend limit must be at most the quota ({quota} GPUs); got {lend_limit}.")
    errors.raise_if_any()


# A quota's resource fields: (field, the type's per-node field, the resource's name, unit).
QUOTA_RESOURCE_COLUMNS = (
    ("vcpus", "vcpus_per_node", "vcpus", "vCPU"),
    ("memory_gib", "memory_gib_per_node", "memory_gib", "GiB"),
    ("borrow_limit_vcpus", "vcpus_per_node", "vcpus", "vCPU"),
    ("borrow_limit_memory_gib", "memory_gib_per_node", "memory_gib", "GiB"),
)


def _check_quota_resources(errors: _Errors, values: Mapping[str, Any], it: InstanceType | None) -> None:
    """vCPU, memory, partitions and instances of a quota and their absolute borrow limits
    (docs/resources.md 2 and 8): whole numbers, only of resources the instance type declares,
    and ``instances`` standing alone."""
    for field, per_node, name, unit in QUOTA_RESOURCE_COLUMNS:
        value = values.get(field)
        if value is None:
            continue
        what = field.replace("_", " ").replace("gib", "GiB").capitalize()
        ok = errors.whole_number(field, value, 0, MAX_RESOURCE, what, unit)
        if ok and it is not None and not getattr(it, per_node):
            errors.add(field, f"{it.name} declares no {name} (set its {per_node}); got {value}.")
    known = dict(it.partitions_per_node or {}) if it is not None else None
    for field in ("partitions", "borrow_limit_partitions"):
        value = values.get(field, {})
        if value and known is not None and not known:
            errors.add(field, f"{it.name if it else ''} has no partitions; got {shown(value)}.")
        else:
            check_partitions(errors.add, field, value, known=known, low=0)
    instances = values.get("instances")
    if instances is None:
        return
    if errors.whole_number("instances", instances, 0, MAX_GPU_COUNT, "Instances", "nodes"):
        others = [f for f in ("vcpus", "memory_gib") if values.get(f) is not None]
        others += ["partitions"] * bool(values.get("partitions"))
        if others:
            errors.add(
                "instances",
                f"Instances stands alone: N nodes' worth of every resource; also given: {', '.join(others)}.",
            )
        elif it is not None and values.get("quota") != instances * it.gpus_per_node:
            errors.add(
                "quota",
                f"With {instances} instances the quota is {instances * it.gpus_per_node} GPUs "
                f"({it.gpus_per_node} per node); got {values.get('quota')!r}.",
            )


def validate_cluster(values: Mapping[str, Any]) -> None:
    """The cluster's name, backend kind and settings (checked by the backend) and time zone."""
    errors = _Errors()
    name = values.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        errors.add("name", f"Cluster name must be 1 to 100 characters; got {name!r}.")
    kind_ok = errors.choice("backend_kind", values.get("backend_kind"), BackendKind.values, "Backend kind")
    backend_settings = values.get("backend_settings")
    if not isinstance(backend_settings, dict):
        errors.add(
            "backend_settings", f"Backend settings must be a JSON object ({{...}}); got {backend_settings!r}."
        )
    elif kind_ok:
        problem = _backend_settings_problem(values["backend_kind"], backend_settings)
        if problem:
            errors.add("backend_settings", problem)
    time_zone = values.get("time_zone")
    try:
        if not isinstance(time_zone, str) or not time_zone:
            raise ValueError(time_zone)
        ZoneInfo(time_zone)
    except (ValueError, ZoneInfoNotFoundError):
        errors.add(
            "time_zone", f"Time zone must be an IANA name such as Europe/Berlin or UTC; got {time_zone!r}."
        )
    errors.raise_if_any()


def _backend_settings_problem(kind: str, backend_settings: dict[str, Any]) -> str:
    """The backend's own complaint about its settings, when that backend is installed here."""
    import importlib

    from allocations.backends import REGISTRY, PermanentBackendError

    try:
        importlib.import_module(f"allocations.backends.{kind}")
    except ImportError:  # that backend's module has not landed: nothing more to check
        return ""
    backend_class = REGISTRY.get(kind)
    if backend_class is None:
        return ""
    try:
        backend_class(backend_settings)
    except PermanentBackendError as exc:
        return f"Backend settings are not valid for {kind}: {exc}"
    return ""


def validate_cluster_policy(values: Mapping[str, Any]) -> None:
    """The cluster policy's choices (POLICY.md section 1)."""
    errors = _Errors()
    errors.choice(
        "idle_allocation", values.get("idle_allocation"), choices.IDLE_ALLOCATION_CHOICES, "Idle allocation"
    )
    errors.choice("task_ranking", values.get("task_ranking"), choices.TASK_RANKING_CHOICES, "Task ranking")
    errors.choice("queueing", values.get("queueing"), choices.QUEUEING_CHOICES, "Queueing")
    if not isinstance(values.get("share_unallocated"), bool):
        errors.add(
            "share_unallocated",
            f"Share unallocated must be true or false; got {values.get('share_unallocated')!r}.",
        )
    # Fairness over time (docs/fairness.md); a year is far beyond any usage history kept.
    errors.whole_number(
        "fair_share_half_life_s",
        values.get("fair_share_half_life_s", 0),
        0,
        MAX_FAIR_SHARE_HALF_LIFE_S,
        "Fair-share half-life",
        "seconds",
    )
    errors.whole_number(
        "fair_share_history_percent",
        values.get("fair_share_history_percent", 0),
        0,
        100,
        "Fair-share history percent",
    )
    errors.whole_number(
        "min_runtime_s", values.get("min_runtime_s", 0), 0, MAX_MIN_RUNTIME_S, "Minimum runtime", "seconds"
    )
    errors.whole_number(
        "preemption_grace_s",
        values.get("preemption_grace_s", 0),
        0,
        MAX_PREEMPTION_GRACE_S,
        "Preemption grace",
        "seconds",
    )
    errors.raise_if_any()


MAX_FAIR_SHARE_HALF_LIFE_S = 365 * 24 * 3600


def shown(value: Any, limit: int = 40) -> str:
    """``value`` for a message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(str(value))} characters)"


def _check_text(errors: _Errors, field: str, value: Any, max_length: int) -> None:
    if not isinstance(value, str):
        errors.add(field, f"{field.replace('_', ' ').capitalize()} must be text; got {value!r}.")
    elif len(value) > max_length:
        errors.add(
            field,
            f"{field.replace('_', ' ').capitalize()} must be at most {max_length} characters; got {len(value)}.",
        )


# --- Common steps -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Kind:
    """One kind of policy row as the services write it: the fields a write may set (and the
    trail records), the rules they must pass, and the row's name in the trail."""

    model: type[models.Model]
    fields: tuple[str, ...]
    validate: Callable[[Mapping[str, Any], Any], None]
    object_repr: Callable[[Any], str] = audit.object_label

    def defaults(self) -> dict[str, Any]:
        """The model's default of each field."""
        return {f: self.model._meta.get_field(f).get_default() for f in self.fields}


def _quota_repr(quota: TeamQuota) -> str:
    return f"{quota.team.name} / {quota.instance_type.name}"


_INSTANCE_TYPE = _Kind(InstanceType, INSTANCE_TYPE_FIELDS, validate_instance_type)
_NODE = _Kind(Node, NODE_FIELDS, validate_node)
_PRIORITY_CLASS = _Kind(PriorityClass, PRIORITY_CLASS_FIELDS, validate_priority_class)
_TEAM = _Kind(Team, TEAM_FIELDS, validate_team)
_CLUSTER = _Kind(Cluster, CLUSTER_FIELDS, lambda values, _: validate_cluster(values))
_CLUSTER_POLICY = _Kind(
    ClusterPolicy, CLUSTER_POLICY_FIELDS, lambda values, _: validate_cluster_policy(values)
)
_QUOTA = _Kind(
    TeamQuota,
    QUOTA_FIELDS,
    lambda values, current: validate_quota(values, current.instance_type if current else None),
    _quota_repr,
)


def _policy_write(service: Callable[P, R]) -> Callable[P, R]:
    """``service`` in one transaction that, once committed, asks the allocation loop for a
    cycle: a policy change changes what may run."""

    @functools.wraps(service)
    @transaction.atomic
    def write(*args: P.args, **kwargs: P.kwargs) -> R:
        result = service(*args, **kwargs)
        transaction.on_commit(request_cycle)
        return result

    return write


def _lock(obj: M) -> M:
    """``obj``'s row read afresh and locked until the transaction ends."""
    return type(obj)._default_manager.select_for_update().get(pk=obj.pk)


def _create(
    *, actor: Any, kind: _Kind, values: Mapping[str, Any], extra: Mapping[str, Any] | None = None
) -> Any:
    """Validate, create and audit one row (inside the caller's transaction)."""
    audit.refuse_unknown(values, kind.fields)
    kind.validate(values, None)
    obj = kind.model._default_manager.create(**values, **(extra or {}))
    audit.record_create(
        actor=actor, obj=obj, values=audit.field_values(obj, kind.fields), object_repr=kind.object_repr(obj)
    )
    return obj


def _update(*, actor: Any, kind: _Kind, obj: M, changes: Mapping[str, Any]) -> M:
    """Lock the row, validate the merged settings, save and audit each changed field."""
    audit.refuse_unknown(changes, kind.fields)
    locked = _lock(obj)
    audit.apply_changes(
        actor=actor,
        obj=locked,
        fields=kind.fields,
        changes=changes,
        validate=kind.validate,
        object_repr=kind.object_repr,
    )
    return locked


def _record_delete(*, actor: Any, kind: _Kind, obj: models.Model) -> None:
    """Record the deletion of ``obj`` with its settings (before it is deleted)."""
    audit.record_delete(
        actor=actor, obj=obj, values=audit.field_values(obj, kind.fields), object_repr=kind.object_repr(obj)
    )


def _delete(*, actor: Any, kind: _Kind, locked: models.Model) -> None:
    """Audit and delete a row read under lock."""
    _record_delete(actor=actor, kind=kind, obj=locked)
    locked.delete()


# --- Instance types -----------------------------------------------------------------------------
@_policy_write
def instance_type_create(
    *,
    actor: Any,
    name: str,
    gpus_per_node: int,
    price_per_gpu_hour: Any = Decimal(0),
    description: str = "",
    vcpus_per_node: int = 0,
    memory_gib_per_node: int = 0,
    partitions_per_node: Mapping[str, int] | None = None,
) -> InstanceType:
    values = {
        "name": name,
        "gpus_per_node": gpus_per_node,
        "price_per_gpu_hour": Decimal(str(price_per_gpu_hour)),
        "description": description,
        "vcpus_per_node": vcpus_per_node,
        "memory_gib_per_node": memory_gib_per_node,
        "partitions_per_node": {} if partitions_per_node is None else partitions_per_node,
    }
    return _create(actor=actor, kind=_INSTANCE_TYPE, values=values)


@_policy_write
def instance_type_update(*, actor: Any, instance_type: InstanceType, **changes: Any) -> InstanceType:
    if "price_per_gpu_hour" in changes:
        try:
            changes["price_per_gpu_hour"] = Decimal(str(changes["price_per_gpu_hour"]))
        except InvalidOperation as exc:
            raise ValidationError(
                {
                    "price_per_gpu_hour": f"Price per GPU-hour must be a number; got {changes['price_per_gpu_hour']!r}."
                }
            ) from exc
    updated = _update(actor=actor, kind=_INSTANCE_TYPE, obj=instance_type, changes=changes)
    # A quota in instances is N nodes' worth of GPUs: it follows a new number per node.
    for quota in updated.quotas.select_related("team", "instance_type").filter(instances__isnull=False):
        gpus = quota.instances * updated.gpus_per_node
        if quota.quota != gpus:
            _update(actor=actor, kind=_QUOTA, obj=quota, changes={"quota": gpus})
    return updated


@_policy_write
def instance_type_delete(*, actor: Any, instance_type: InstanceType) -> None:
    """Delete an instance type that no node, quota or job refers to (they would lose their type)."""
    locked = _lock(instance_type)
    users = {
        "nodes": locked.nodes.count(),
        "quotas": locked.quotas.count(),
        "jobs": locked.jobs.count(),
    }
    in_use = ", ".join(f"{count} {what}" for what, count in users.items() if count)
    if in_use:
        raise ValidationError(
            {"__all__": f"{locked.name} cannot be deleted: {in_use} still refer to it. Remove them first."}
        )
    _delete(actor=actor, kind=_INSTANCE_TYPE, locked=locked)


# --- Nodes --------------------------------------------------------------------------------------
@_policy_write
def node_create(
    *,
    actor: Any,
    name: str,
    instance_type: InstanceType,
    gpus: int | None = None,
    state: str = NodeState.READY,
    reason: str = "",
) -> Node:
    """Add a node; its GPUs default to its instance type's GPUs per node."""
    if gpus is None and isinstance(instance_type, InstanceType):
        gpus = instance_type.gpus_per_node
    values = {"name": name, "instance_type": instance_type, "gpus": gpus, "state": state, "reason": reason}
    node = _create(actor=actor, kind=_NODE, values=values, extra={"state_since": timezone.now()})
    _record_state(actor, node, old_state="")
    return node


def _record_state(actor: Any, node: Node, *, old_state: str) -> None:
    """The node page's history: the node's state now, who set it and why."""
    NodeStateChange.objects.create(
        node=node,
        at=node.state_since,
        old_state=old_state,
        state=node.state,
        reason=node.reason,
        source=NodeStateSource.ADMIN,
        actor_name=audit.actor_name(actor),
    )


@_policy_write
def node_update(*, actor: Any, node: Node, **changes: Any) -> Node:
    """Change a node; a change of state (ready, draining, down) restarts ``state_since``.

    Going back to ready clears the reason unless a new one is given: the old "why it is
    down" would be misleading.
    """
    current = _lock(node)
    old_state = current.state
    if "state" in changes and changes["state"] != current.state:
        if changes["state"] == NodeState.READY and "reason" not in changes:
            changes["reason"] = ""
        state_changed = True
    else:
        state_changed = False
    obj = _update(actor=actor, kind=_NODE, obj=current, changes=changes)
    if state_changed:
        obj.state_since = timezone.now()
        obj.save(update_fields=["state_since"])
        _record_state(actor, obj, old_state=old_state)
    return obj


@_policy_write
def node_delete(*, actor: Any, node: Node) -> None:
    _delete(actor=actor, kind=_NODE, locked=_lock(node))


# --- Priority classes ---------------------------------------------------------------------------
@_policy_write
def priority_class_create(
    *,
    actor: Any,
    name: str,
    weight: int,
    description: str = "",
    min_runtime_s: int | None = None,
    preemption_grace_s: int | None = None,
) -> PriorityClass:
    # Lock the existing classes so that two concurrent creations cannot both pass the 32 check.
    list(PriorityClass.objects.select_for_update().values_list("pk", flat=True))
    values = {
        "name": name,
        "weight": weight,
        "description": description,
        "min_runtime_s": min_runtime_s,
        "preemption_grace_s": preemption_grace_s,
    }
    return _create(actor=actor, kind=_PRIORITY_CLASS, values=values)


@_policy_write
def priority_class_update(*, actor: Any, priority_class: PriorityClass, **changes: Any) -> PriorityClass:
    """Change a priority class; a new name follows into the teams' allowed classes (audited)."""
    old_name = _lock(priority_class).name
    updated = _update(actor=actor, kind=_PRIORITY_CLASS, obj=priority_class, changes=changes)
    if updated.name != old_name:
        # In Python: SQLite has no containment lookup on JSON, and teams are few.
        for team in [t for t in Team.objects.select_for_update() if old_name in t.allowed_priority_classes]:
            renamed = [updated.name if name == old_name else name for name in team.allowed_priority_classes]
            _update(actor=actor, kind=_TEAM, obj=team, changes={"allowed_priority_classes": renamed})
    return updated


@_policy_write
def priority_class_delete(*, actor: Any, priority_class: PriorityClass) -> None:
    """Delete a priority class; its jobs keep running with priority 0 (POLICY.md section 1).

    A class a team's limits name is refused: dropped from a team's allowed classes it could
    leave none, which means all (docs/limits.md)."""
    locked = _lock(priority_class)
    teams = sorted(
        {
            *(t.name for t in Team.objects.all() if locked.name in t.allowed_priority_classes),
            *Team.objects.filter(default_priority_class=locked).values_list("name", flat=True),
        }
    )
    if teams:
        raise ValidationError(
            {
                "__all__": (
                    f"{locked.name} cannot be deleted: team(s) {', '.join(teams)} may use it or have it as "
                    "their default class. Change their limits first."
                )
            }
        )
    _delete(actor=actor, kind=_PRIORITY_CLASS, locked=locked)


# --- Cluster and its policy ---------------------------------------------------------------------
@_policy_write
def cluster_update(*, actor: Any, **changes: Any) -> Cluster:
    """Change the cluster's settings; the first call on an empty installation creates it."""
    audit.refuse_unknown(changes, CLUSTER_FIELDS)
    cluster = Cluster.objects.select_for_update().filter(pk=1).first()
    if cluster is None:
        values = {
            "name": "cluster",
            "backend_kind": BackendKind.SIMULATED,
            "backend_settings": {},
            "time_zone": "UTC",
            **changes,
        }
        return _create(actor=actor, kind=_CLUSTER, values=values, extra={"pk": 1})
    return _update(actor=actor, kind=_CLUSTER, obj=cluster, changes=changes)


@_policy_write
def cluster_policy_update(*, actor: Any, **changes: Any) -> ClusterPolicy:
    """Change the cluster policy (idle allocation, task ranking, unallocated sharing, queueing,
    minimum runtime, preemption grace)."""
    audit.refuse_unknown(changes, CLUSTER_POLICY_FIELDS)
    cluster = Cluster.objects.filter(pk=1).first() or cluster_update(actor=actor)
    policy = ClusterPolicy.objects.select_for_update().filter(cluster=cluster).first()
    if policy is None:
        values = {**_CLUSTER_POLICY.defaults(), **changes}
        return _create(actor=actor, kind=_CLUSTER_POLICY, values=values, extra={"cluster": cluster})
    return _update(actor=actor, kind=_CLUSTER_POLICY, obj=policy, changes=changes)


# --- Teams and their quotas ---------------------------------------------------------------------
@_policy_write
def team_create(
    *,
    actor: Any,
    name: str,
    quotas: Mapping[InstanceType, Mapping[str, Any]] | None = None,
    **settings: Any,
) -> Team:
    """Create a team with its settings and, optionally, its quota of each instance type."""
    team = _create(actor=actor, kind=_TEAM, values={**_TEAM.defaults(), **settings, "name": name})
    for instance_type, quota in (quotas or {}).items():
        team_quota_set(actor=actor, team=team, instance_type=instance_type, **quota)
    return team


@_policy_write
def team_update(*, actor: Any, team: Team, **changes: Any) -> Team:
    return _update(actor=actor, kind=_TEAM, obj=team, changes=changes)


@_policy_write
def team_delete(*, actor: Any, team: Team) -> None:
    """Delete a team that never had a job (its history would go too); otherwise deactivate it."""
    locked = _lock(team)
    jobs = Job.objects.filter(team=locked).count()
    if jobs:
        raise ValidationError(
            {
                "__all__": f"{locked.name} has {jobs} job(s) on record and cannot be deleted; deactivate it instead."
            }
        )
    for quota in locked.quotas.select_related("team", "instance_type"):
        _record_delete(actor=actor, kind=_QUOTA, obj=quota)
    for membership in locked.memberships.select_related("user", "team"):
        audit.record_delete(
            actor=actor, obj=membership, values=audit.field_values(membership, MEMBERSHIP_FIELDS)
        )
    _delete(actor=actor, kind=_TEAM, locked=locked)


@transaction.atomic
def team_quota_set(
    *, actor: Any, team: Team, instance_type: InstanceType, **settings: Any
) -> TeamQuota | None:
    """Set a team's quota of one instance type (created on first use, audited per field).

    A borrow limit in GPUs is kept only while the limit kind is ``absolute``, so a stored row
    never says two different caps. Setting an all-default quota where none exists creates
    nothing (returns None, and asks for no cycle): a missing row already means quota 0 with
    default limits.
    """
    audit.refuse_unknown(settings, QUOTA_FIELDS)
    current = (
        TeamQuota.objects.select_for_update()
        .select_related("team", "instance_type")
        .filter(team=team, instance_type=instance_type)
        .first()
    )
    base = audit.field_values(current, QUOTA_FIELDS) if current else dict(QUOTA_DEFAULTS)
    values = {**base, **settings}
    if values.get("borrow_limit_kind") != BorrowLimitKind.ABSOLUTE and "borrow_limit_kind" in settings:
        values["borrow_limit"] = None
    instances = values["instances"]
    if (
        isinstance(instances, int)
        and not isinstance(instances, bool)
        and isinstance(instance_type, InstanceType)
    ):
        # docs/resources.md 2: instances are N nodes' worth of GPUs too; the GPUs follow.
        values["quota"] = instances * instance_type.gpus_per_node
    validate_quota(values, instance_type if isinstance(instance_type, InstanceType) else None)
    if current is None:
        if values == QUOTA_DEFAULTS:
            return None
        quota = TeamQuota.objects.create(team=team, instance_type=instance_type, **values)
        audit.record_create(actor=actor, obj=quota, values=values, object_repr=_quota_repr(quota))
    else:
        quota = _update(actor=actor, kind=_QUOTA, obj=current, changes=values)
    transaction.on_commit(request_cycle)
    return quota
