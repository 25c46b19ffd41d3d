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

import re
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.utils import timezone

from allocations import choices
from allocations.choices import BackendKind, BorrowLimitKind, NodeState
from allocations.models import (
    Cluster,
    ClusterPolicy,
    InstanceType,
    Job,
    Node,
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

INSTANCE_TYPE_NAME_REGEX = r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$"
MAX_GPUS = 32767  # PositiveSmallIntegerField's ceiling: a node or instance type never has more
MAX_GPU_COUNT = 2_147_483_647  # PositiveIntegerField's ceiling (quotas, limits)


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


def validate_instance_type(values: Mapping[str, Any], current: InstanceType | None = None) -> None:
    """An instance type's name, GPUs per node (never below its nodes' GPUs) and price."""
    errors = _Errors()
    name = values.get("name")
    if not isinstance(name, str) or not re.match(INSTANCE_TYPE_NAME_REGEX, name) or len(name) > 64:
        errors.add(
            "name",
            "Instance type name must be lowercase letters, digits, '.' and '-', starting and ending "
            f"with a letter or digit, at most 64 characters; got {name!r}.",
        )
    elif not _unique(InstanceType, "name", name, current):
        errors.add("name", f"An instance type named {name!r} already exists.")
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
    errors.raise_if_any()


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
    name = values.get("name")
    if not isinstance(name, str) or not re.match(choices.DNS_LABEL_REGEX, name) or len(name) > 63:
        errors.add(
            "name",
            "Priority class name must be lowercase letters, digits and '-', starting and ending "
            f"with a letter or digit, at most 63 characters; got {name!r}.",
        )
    elif not _unique(PriorityClass, "name", name, current):
        errors.add("name", f"A priority class named {name!r} already exists.")
    errors.whole_number("weight", values.get("weight"), 0, 100, "Weight")
    _check_text(errors, "description", values.get("description", ""), 200)
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
    name = values.get("name")
    if (
        not isinstance(name, str)
        or not re.match(choices.DNS_LABEL_REGEX, name)
        or len(name) > choices.TEAM_NAME_MAX_LENGTH
    ):
        errors.add(
            "name",
            "Team name must be a DNS label: lowercase letters, digits and '-', starting and ending "
            f"with a letter or digit, at most {choices.TEAM_NAME_MAX_LENGTH} characters; got {name!r}.",
        )
    elif not _unique(Team, "name", name, current):
        errors.add("name", f"A team named {name!r} already exists.")
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
    errors.raise_if_any()


def validate_quota(values: Mapping[str, Any]) -> None:
    """A quota of GPUs with its borrow cap (percent, absolute or unlimited) and lend limit <= quota."""
    errors = _Errors()
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
    errors.raise_if_any()


def _check_text(errors: _Errors, field: str, value: Any, max_length: int) -> None:
    if not isinstance(value, str):
        errors.add(field, f"{field.replace('_', ' ').capitalize()} must be text; got {value!r}.")
    elif len(value) > max_length:
        errors.add(
            field,
            f"{field.replace('_', ' ').capitalize()} must be at most {max_length} characters; got {len(value)}.",
        )


# --- Common steps -------------------------------------------------------------------------------
def _request_cycle() -> None:
    """Ask the allocation loop for a cycle once the change is committed (policy changes what may run)."""
    transaction.on_commit(request_cycle)


def _refuse_unknown(changes: Mapping[str, Any], fields: tuple[str, ...]) -> None:
    unknown = sorted(set(changes) - set(fields))
    if unknown:
        raise ValidationError(
            {name: f"{name!r} is not a setting that can be changed here." for name in unknown}
        )


def _create(
    *,
    actor: Any,
    model: type[M],
    fields: tuple[str, ...],
    values: Mapping[str, Any],
    validate: Callable[[Mapping[str, Any]], None],
    extra: Mapping[str, Any] | None = None,
    object_repr: Callable[[M], str] = audit.object_label,
) -> M:
    """Validate, create and audit one row (inside the caller's transaction)."""
    _refuse_unknown(values, fields)
    validate(values)
    obj = model._default_manager.create(**values, **(extra or {}))
    audit.record_create(
        actor=actor, obj=obj, values=audit.field_values(obj, fields), object_repr=object_repr(obj)
    )
    return obj


def _update(
    *,
    actor: Any,
    obj: M,
    fields: tuple[str, ...],
    changes: Mapping[str, Any],
    validate: Callable[[Mapping[str, Any], M], None],
    object_repr: Callable[[M], str] = audit.object_label,
) -> M:
    """Lock the row, validate the merged settings, save and audit each changed field."""
    _refuse_unknown(changes, fields)
    locked = type(obj)._default_manager.select_for_update().get(pk=obj.pk)
    before = audit.field_values(locked, fields)
    validate({**before, **changes}, locked)
    for name, value in changes.items():
        setattr(locked, name, value)
    locked.save()
    audit.record_changes(
        actor=actor,
        obj=locked,
        before=before,
        after=audit.field_values(locked, fields),
        object_repr=object_repr(locked),
    )
    return locked


# --- Instance types -----------------------------------------------------------------------------
@transaction.atomic
def instance_type_create(
    *, actor: Any, name: str, gpus_per_node: int, price_per_gpu_hour: Any = Decimal(0), description: str = ""
) -> InstanceType:
    obj = _create(
        actor=actor,
        model=InstanceType,
        fields=INSTANCE_TYPE_FIELDS,
        values={
            "name": name,
            "gpus_per_node": gpus_per_node,
            "price_per_gpu_hour": Decimal(str(price_per_gpu_hour)),
            "description": description,
        },
        validate=validate_instance_type,
    )
    _request_cycle()
    return obj


@transaction.atomic
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
    obj = _update(
        actor=actor,
        obj=instance_type,
        fields=INSTANCE_TYPE_FIELDS,
        changes=changes,
        validate=validate_instance_type,
    )
    _request_cycle()
    return obj


@transaction.atomic
def instance_type_delete(*, actor: Any, instance_type: InstanceType) -> None:
    """Delete an instance type that no node, quota or job refers to (they would lose their type)."""
    locked = InstanceType.objects.select_for_update().get(pk=instance_type.pk)
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
    audit.record_delete(actor=actor, obj=locked, values=audit.field_values(locked, INSTANCE_TYPE_FIELDS))
    locked.delete()
    _request_cycle()


# --- Nodes --------------------------------------------------------------------------------------
@transaction.atomic
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
    obj = _create(
        actor=actor,
        model=Node,
        fields=NODE_FIELDS,
        values={"name": name, "instance_type": instance_type, "gpus": gpus, "state": state, "reason": reason},
        validate=validate_node,
        extra={"state_since": timezone.now()},
    )
    _request_cycle()
    return obj


@transaction.atomic
def node_update(*, actor: Any, node: Node, **changes: Any) -> Node:
    """Change a node; a change of state (ready, draining, down) restarts ``state_since``.

    Going back to ready clears the reason unless a new one is given: the old "why it is
    down" would be misleading.
    """
    current = Node.objects.select_for_update().get(pk=node.pk)
    if "state" in changes and changes["state"] != current.state:
        if changes["state"] == NodeState.READY and "reason" not in changes:
            changes["reason"] = ""
        state_changed = True
    else:
        state_changed = False
    obj = _update(actor=actor, obj=current, fields=NODE_FIELDS, changes=changes, validate=validate_node)
    if state_changed:
        obj.state_since = timezone.now()
        obj.save(update_fields=["state_since"])
    _request_cycle()
    return obj


@transaction.atomic
def node_delete(*, actor: Any, node: Node) -> None:
    locked = Node.objects.select_for_update().get(pk=node.pk)
    audit.record_delete(actor=actor, obj=locked, values=audit.field_values(locked, NODE_FIELDS))
    locked.delete()
    _request_cycle()


# --- Priority classes ---------------------------------------------------------------------------
@transaction.atomic
def priority_class_create(*, actor: Any, name: str, weight: int, description: str = "") -> PriorityClass:
    # Lock the existing classes so that two concurrent creations cannot both pass the 32 check.
    list(PriorityClass.objects.select_for_update().values_list("pk", flat=True))
    obj = _create(
        actor=actor,
        model=PriorityClass,
        fields=PRIORITY_CLASS_FIELDS,
        values={"name": name, "weight": weight, "description": description},
        validate=validate_priority_class,
    )
    _request_cycle()
    return obj


@transaction.atomic
def priority_class_update(*, actor: Any, priority_class: PriorityClass, **changes: Any) -> PriorityClass:
    obj = _update(
        actor=actor,
        obj=priority_class,
        fields=PRIORITY_CLASS_FIELDS,
        changes=changes,
        validate=validate_priority_class,
    )
    _request_cycle()
    return obj


@transaction.atomic
def priority_class_delete(*, actor: Any, priority_class: PriorityClass) -> None:
    """Delete a priority class; its jobs keep running with priority 0 (POLICY.md section 1)."""
    locked = PriorityClass.objects.select_for_update().get(pk=priority_class.pk)
    audit.record_delete(actor=actor, obj=locked, values=audit.field_values(locked, PRIORITY_CLASS_FIELDS))
    locked.delete()
    _request_cycle()


# --- Cluster and its policy ---------------------------------------------------------------------
@transaction.atomic
def cluster_update(*, actor: Any, **changes: Any) -> Cluster:
    """Change the cluster's settings; the first call on an empty installation creates it."""
    _refuse_unknown(changes, CLUSTER_FIELDS)
    cluster = Cluster.objects.select_for_update().filter(pk=1).first()
    if cluster is None:
        defaults = {
            "name": "cluster",
            "backend_kind": BackendKind.SIMULATED,
            "backend_settings": {},
            "time_zone": "UTC",
        }
        cluster = _create(
            actor=actor,
            model=Cluster,
            fields=CLUSTER_FIELDS,
            values={**defaults, **changes},
            validate=validate_cluster,
            extra={"pk": 1},
        )
    else:
        cluster = _update(
            actor=actor,
            obj=cluster,
            fields=CLUSTER_FIELDS,
            changes=changes,
            validate=lambda v, _: validate_cluster(v),
        )
    _request_cycle()
    return cluster


@transaction.atomic
def cluster_policy_update(*, actor: Any, **changes: Any) -> ClusterPolicy:
    """Change the cluster policy (idle allocation, task ranking, unallocated sharing, queueing)."""
    _refuse_unknown(changes, CLUSTER_POLICY_FIELDS)
    cluster = Cluster.objects.filter(pk=1).first() or cluster_update(actor=actor)
    policy = ClusterPolicy.objects.select_for_update().filter(cluster=cluster).first()
    if policy is None:
        defaults = {f: ClusterPolicy._meta.get_field(f).get_default() for f in CLUSTER_POLICY_FIELDS}
        policy = _create(
            actor=actor,
            model=ClusterPolicy,
            fields=CLUSTER_POLICY_FIELDS,
            values={**defaults, **changes},
            validate=validate_cluster_policy,
            extra={"cluster": cluster},
        )
    else:
        policy = _update(
            actor=actor,
            obj=policy,
            fields=CLUSTER_POLICY_FIELDS,
            changes=changes,
            validate=lambda v, _: validate_cluster_policy(v),
        )
    _request_cycle()
    return policy


# --- Teams and their quotas ---------------------------------------------------------------------
def _quota_repr(quota: TeamQuota) -> str:
    return f"{quota.team.name} / {quota.instance_type.name}"


@transaction.atomic
def team_create(
    *,
    actor: Any,
    name: str,
    quotas: Mapping[InstanceType, Mapping[str, Any]] | None = None,
    **settings: Any,
) -> Team:
    """Create a team with its settings and, optionally, its quota of each instance type."""
    defaults = {f: Team._meta.get_field(f).get_default() for f in TEAM_FIELDS if f != "name"}
    team = _create(
        actor=actor,
        model=Team,
        fields=TEAM_FIELDS,
        values={**defaults, **settings, "name": name},
        validate=validate_team,
    )
    for instance_type, quota in (quotas or {}).items():
        team_quota_set(actor=actor, team=team, instance_type=instance_type, **quota)
    _request_cycle()
    return team


@transaction.atomic
def team_update(*, actor: Any, team: Team, **changes: Any) -> Team:
    obj = _update(actor=actor, obj=team, fields=TEAM_FIELDS, changes=changes, validate=validate_team)
    _request_cycle()
    return obj


@transaction.atomic
def team_delete(*, actor: Any, team: Team) -> None:
    """Delete a team that never had a job (its history would go too); otherwise deactivate it."""
    locked = Team.objects.select_for_update().get(pk=team.pk)
    jobs = Job.objects.filter(team=locked).count()
    if jobs:
        raise ValidationError(
            {
                "__all__": f"{locked.name} has {jobs} job(s) on record and cannot be deleted; deactivate it instead."
            }
        )
    for quota in locked.quotas.select_related("team", "instance_type"):
        audit.record_delete(
            actor=actor,
            obj=quota,
            values=audit.field_values(quota, QUOTA_FIELDS),
            object_repr=_quota_repr(quota),
        )
    for membership in locked.memberships.select_related("user", "team"):
        audit.record_delete(
            actor=actor, obj=membership, values=audit.field_values(membership, MEMBERSHIP_FIELDS)
        )
    audit.record_delete(actor=actor, obj=locked, values=audit.field_values(locked, TEAM_FIELDS))
    locked.delete()
    _request_cycle()


@transaction.atomic
def team_quota_set(
    *, actor: Any, team: Team, instance_type: InstanceType, **settings: Any
) -> TeamQuota | None:
    """Set a team's quota of one instance type (created on first use, audited per field).

    A borrow limit in GPUs is kept only while the limit kind is ``absolute``, so a stored row
    never says two different caps. Setting an all-default quota where none exists creates
    nothing (returns None): a missing row already means quota 0 with default limits.
    """
    _refuse_unknown(settings, QUOTA_FIELDS)
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
    validate_quota(values)
    if current is None:
        if values == QUOTA_DEFAULTS:
            return None
        quota = TeamQuota.objects.create(team=team, instance_type=instance_type, **values)
        audit.record_create(actor=actor, obj=quota, values=values, object_repr=_quota_repr(quota))
    else:
        quota = _update(
            actor=actor,
            obj=current,
            fields=QUOTA_FIELDS,
            changes=values,
            validate=lambda v, _: validate_quota(v),
            object_repr=_quota_repr,
        )
    _request_cycle()
    return quota
