"""The governance policy as the importers and exporters see it: read once from the database and
compared with an imported policy field by field (``services.policy_import_apply`` applies the
difference in one transaction).

An import says only what its format can express: fields it does not mention keep their values
(a team's ``reclaim`` is not touched by a HyperPod import), and a list it does not carry
(``priority_classes=None``) is left alone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Prefetch, Q, Sum

from allocations.choices import NodeState
from allocations.models import Cluster, ClusterPolicy, InstanceType, Node, PriorityClass, Team, TeamQuota
from allocations.policy_fields import QUOTA_DEFAULTS, QUOTA_FIELDS, TEAM_SETTINGS
from allocations.services import audit


@dataclass(frozen=True, slots=True)
class PolicyState:
    """The policy as it is now: rows loaded with their relations, in a constant number of
    queries. ``capacity`` is the GPUs of every node of each instance type (ready or not): the
    most any team could ever use of it; ``ready_capacity`` counts ready nodes only (POLICY.md
    section 1's capacity)."""

    cluster: Cluster | None
    policy: ClusterPolicy
    priority_classes: tuple[PriorityClass, ...]
    instance_types: tuple[InstanceType, ...]
    capacity: dict[str, int]
    ready_capacity: dict[str, int]
    teams: tuple[Team, ...]

    def quotas(self, team: Team) -> list[TeamQuota]:
        """The team's quotas (prefetched), by instance type name."""
        return sorted(team.quotas.all(), key=lambda q: q.instance_type.name)


def read_policy() -> PolicyState:
    """The whole policy from the database (five queries whatever its size)."""
    cluster = Cluster.objects.select_related("policy").filter(pk=1).first()
    policy = getattr(cluster, "policy", None) if cluster else None
    if policy is None:
        policy = ClusterPolicy()  # unsaved: the defaults, for a database without a cluster yet
    rows = list(
        Node.objects.values("instance_type__name").annotate(
            total_gpus=Sum("gpus"), ready_gpus=Sum("gpus", filter=Q(state=NodeState.READY))
        )
    )
    teams = (
        Team.objects.select_related("default_priority_class")
        .prefetch_related(Prefetch("quotas", queryset=TeamQuota.objects.select_related("instance_type")))
        .order_by("name")
    )
    return PolicyState(
        cluster=cluster,
        policy=policy,
        priority_classes=tuple(PriorityClass.objects.order_by("-weight", "name")),
        instance_types=tuple(InstanceType.objects.order_by("name")),
        capacity={row["instance_type__name"]: row["total_gpus"] or 0 for row in rows},
        ready_capacity={row["instance_type__name"]: row["ready_gpus"] or 0 for row in rows},
        teams=tuple(teams),
    )


def limit_warnings(team: Team, system: str) -> list[str]:
    """What a team may ask for (docs/limits.md), which neither HyperPod nor Kueue can say:
    gpugov checks it when a job is submitted, and an export carries none of it."""
    limits = []
    if team.allowed_priority_classes:
        limits.append(f"allowed priority classes {', '.join(team.allowed_priority_classes)}")
    if team.default_priority_class is not None:
        limits.append(f"default priority class {team.default_priority_class.name}")
    if team.max_gpus_per_job is not None:
        limits.append(f"at most {team.max_gpus_per_job} GPUs per job")
    if team.max_pending_jobs_per_member is not None:
        limits.append(f"at most {team.max_pending_jobs_per_member} pending jobs per member")
    if team.max_pending_jobs is not None:
        limits.append(f"at most {team.max_pending_jobs} pending jobs")
    warnings = []
    if limits:
        warnings.append(
            f"{team.name}: {'; '.join(limits)} cannot be expressed in {system} (gpugov checks them at submission)."
        )
    if team.max_running_gpus_per_member is not None:
        warnings.append(
            f"{team.name}: at most {team.max_running_gpus_per_member} GPUs running per member cannot be "
            f"expressed in {system} (gpugov's allocation engine holds a member's jobs back at each cycle)."
        )
    return warnings


def preemption_cost_warnings(state: PolicyState, target: str) -> list[str]:
    """What of the preemption-cost settings (docs/preemption.md) ``target`` ("HyperPod",
    "Kueue") cannot express: minimum runtimes, of the policy and of each class that sets its
    own. Neither has one (Kueue's is KEP-9876, open), so there jobs are preemptible at once.
    Checkpoints are the jobs' own (``checkpoint_interval_s``), not the policy's: nothing to
    export, but victims there are chosen by start time, not by work lost since a checkpoint."""
    warnings = []
    policy_minimum = state.policy.min_runtime_s
    if policy_minimum:
        warnings.append(
            f"min_runtime_s is {policy_minimum}: {target} has no minimum runtime, so a job there may be "
            "preempted as soon as it starts (docs/preemption.md section 1); it is not exported."
        )
    classes = [pc for pc in state.priority_classes if pc.min_runtime_s is not None]
    if classes:
        listed = ", ".join(f"{pc.name} ({pc.min_runtime_s} s)" for pc in classes)
        warnings.append(
            f"Priority classes with their own minimum runtime: {listed}. {target} has none; not exported "
            "(docs/preemption.md section 1)."
        )
    if policy_minimum or classes:
        warnings.append(
            f"{target} chooses victims by start time, not by the work they would lose since their last "
            "checkpoint; jobs' checkpoint_interval_s is not exported (docs/preemption.md sections 2 and 3)."
        )
    return warnings


# --- An imported policy --------------------------------------------------------------------------
@dataclass(slots=True)
class QuotaSettings:
    """The settings an import gives for one team and instance type (``None``: keep)."""

    instance_type: str
    values: dict[str, Any]
    path: str = ""  # where the import gave it, for errors found when applying


@dataclass(slots=True)
class TeamSettings:
    """One team of an import: the fields it sets and, unless ``quotas`` is None, its complete
    set of quotas (a quota of the team that is not listed is deleted)."""

    name: str
    values: dict[str, Any]
    quotas: list[QuotaSettings] | None = None
    path: str = ""


@dataclass(slots=True)
class ImportedPolicy:
    """What an import sets. ``priority_classes`` (name -> weight), when given, is the complete
    set: classes not in it are deleted. ``class_settings`` (name -> field -> value) sets a
    class's other fields where a source has them (a what-if draft; HyperPod has no such field,
    so its import leaves them alone). Teams not listed are left as they are."""

    cluster_policy: dict[str, Any] = field(default_factory=dict)
    priority_classes: dict[str, int] | None = None
    class_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    teams: list[TeamSettings] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Change:
    """One line of the preview: an object created, deleted, or one field of it changed."""

    action: str  # create, update, delete
    object_type: str  # cluster policy, priority class, team, team quota
    object_repr: str
    field: str = ""
    old: str = ""
    new: str = ""


def _text(value: Any) -> str:
    return audit.value_text(value)


def diff(imported: ImportedPolicy, state: PolicyState | None = None) -> list[Change]:
    """The changes that applying ``imported`` makes, per object and field, in a stable order."""
    state = state or read_policy()
    changes: list[Change] = []

    # 1. The cluster policy (created with the cluster when the database has none).
    for name, new in imported.cluster_policy.items():
        old = getattr(state.policy, name)
        if old != new:
            changes.append(Change("update", "cluster policy", "cluster policy", name, _text(old), _text(new)))

    # 2. Priority classes: the import's set replaces the current one.
    if imported.priority_classes is not None:
        current = {pc.name: pc for pc in state.priority_classes}
        for name, weight in imported.priority_classes.items():
            pc = current.get(name)
            if pc is None:
                changes.append(Change("create", "priority class", name, "weight", "", _text(weight)))
            elif pc.weight != weight:
                changes.append(
                    Change("update", "priority class", name, "weight", _text(pc.weight), _text(weight))
                )
            for setting, new in imported.class_settings.get(name, {}).items():
                if pc is None and new is not None:
                    changes.append(Change("create", "priority class", name, setting, "", _text(new)))
                elif pc is not None and getattr(pc, setting) != new:
                    changes.append(
                        Change(
                            "update", "priority class", name, setting, _text(getattr(pc, setting)), _text(new)
                        )
                    )
        for name, pc in current.items():
            if name not in imported.priority_classes:
                changes.append(Change("delete", "priority class", name, "weight", _text(pc.weight), ""))

    # 3. Teams and their quotas.
    teams = {team.name: team for team in state.teams}
    for settings in imported.teams:
        team = teams.get(settings.name)
        if team is None:
            changes.extend(
                Change("create", "team", settings.name, name, "", _text(settings.values[name]))
                for name in TEAM_SETTINGS
                if name in settings.values
            )
        else:
            for name, new in settings.values.items():
                old = getattr(team, name)
                if old != new:
                    changes.append(Change("update", "team", team.name, name, _text(old), _text(new)))
        if settings.quotas is None:
            continue
        current_quotas = {q.instance_type.name: q for q in state.quotas(team)} if team else {}
        for quota in settings.quotas:
            label = f"{settings.name} / {quota.instance_type}"
            existing = current_quotas.get(quota.instance_type)
            values = quota_values(quota, existing)
            for name in QUOTA_FIELDS:
                if name not in values:
                    continue
                if existing is None:
                    changes.append(Change("create", "team quota", label, name, "", _text(values[name])))
                elif getattr(existing, name) != values[name]:
                    changes.append(
                        Change(
                            "update",
                            "team quota",
                            label,
                            name,
                            _text(getattr(existing, name)),
                            _text(values[name]),
                        )
                    )
        listed = {q.instance_type for q in settings.quotas}
        for type_name, existing in current_quotas.items():
            if type_name not in listed and not is_default(existing):
                changes.append(
                    Change(
                        "delete",
                        "team quota",
                        f"{settings.name} / {type_name}",
                        "quota",
                        _text(existing.quota),
                        "",
                    )
                )
    return changes


def quota_values(quota: QuotaSettings, existing: TeamQuota | None) -> dict[str, Any]:
    """The values an imported quota gives, plus a lend limit lowered to a lowered quota: the
    database refuses ``lend_limit > quota`` and the import cannot say what the limit should be,
    so it shrinks with the quota (the preview shows it)."""
    values = dict(quota.values)
    lend_limit = existing.lend_limit if existing else None
    if (
        "lend_limit" not in values
        and lend_limit is not None
        and "quota" in values
        and values["quota"] < lend_limit
    ):
        values["lend_limit"] = values["quota"]
    return values


def changes_digest(changes: Iterable[Change]) -> str:
    """A fingerprint of a preview: applying checks the changes are still the ones shown."""
    payload = json.dumps([list(_astuple(c)) for c in changes], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _astuple(change: Change) -> tuple[str, ...]:
    return (change.action, change.object_type, change.object_repr, change.field, change.old, change.new)


def is_default(quota: TeamQuota) -> bool:
    """A quota row that says no more than a missing one (quota 0, default limits)."""
    return all(getattr(quota, name) == value for name, value in QUOTA_DEFAULTS.items())
