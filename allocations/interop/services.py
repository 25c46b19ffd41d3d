"""Applying an imported policy (HyperPod, Kueue, or a what-if draft) to the live one.

One transaction through the policy services, which check every rule, write the audit trail and
ask for an allocation cycle once committed: an import changes exactly what the preview
(``policy.diff``) listed, or nothing.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from allocations.models import Team
from allocations.policy_fields import QUOTA_DEFAULTS
from allocations.services import policy as policy_services

from .policy import Change, ImportedPolicy, diff, is_default, quota_values, read_policy


class ApplyRefused(Exception):
    """A service refused a change: the messages, each with the JSON path it came from."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__("; ".join(messages))
        self.messages = messages


def policy_import_apply(*, actor: Any, imported: ImportedPolicy) -> list[Change]:
    """Apply an import in one transaction through the policy services (which check every rule,
    write the audit trail and ask for an allocation cycle once committed). Any refusal rolls
    everything back and raises ApplyRefused. Returns the changes made."""
    try:
        with transaction.atomic():
            return _apply(imported, actor=actor)
    except _Refusal as refusal:
        raise ApplyRefused(_messages(refusal.error, refusal.path)) from refusal.error
    except ValidationError as exc:
        raise ApplyRefused(_messages(exc, "")) from exc


class _Refusal(Exception):
    """A service's ValidationError with the import's path of what was being applied."""

    def __init__(self, path: str, error: ValidationError) -> None:
        super().__init__(path)
        self.path = path
        self.error = error


def _messages(exc: ValidationError, path: str) -> list[str]:
    where = f"{path}: " if path else ""
    if hasattr(exc, "message_dict"):
        return [
            f"{where}{field}: {message}"
            for field, messages in exc.message_dict.items()
            for message in messages
        ]
    return [f"{where}{message}" for message in exc.messages]


def _at(path: str, call: Any, **kwargs: Any) -> Any:
    """Call a service; a refusal carries the import's path of what it was applying."""
    try:
        return call(**kwargs)
    except ValidationError as exc:
        raise _Refusal(path, exc) from exc


# Long, in numbered steps: one transaction that applies the import in the order the rules need
# (policy, classes before the 32-class cap counts them, teams, then their quotas).
def _apply(imported: ImportedPolicy, *, actor: Any) -> list[Change]:
    # 1. Read the policy inside the transaction: the diff is what this transaction changes.
    list(Team.objects.select_for_update().values_list("pk", flat=True))
    state = read_policy()
    changes = diff(imported, state)
    if not changes:
        return changes

    # 2. The cluster policy (the service creates the cluster on an empty installation).
    policy_changes = {
        name: value for name, value in imported.cluster_policy.items() if getattr(state.policy, name) != value
    }
    if policy_changes or (imported.cluster_policy and state.cluster is None):
        _at("ClusterSchedulerConfig", policy_services.cluster_policy_update, actor=actor, **policy_changes)

    # 3. Priority classes: deletions first, so that the 32-class cap counts the new set.
    if imported.priority_classes is not None:
        current = {pc.name: pc for pc in state.priority_classes}
        for name, pc in current.items():
            if name not in imported.priority_classes:
                policy_services.priority_class_delete(actor=actor, priority_class=pc)
        for i, (name, weight) in enumerate(imported.priority_classes.items()):
            path = f"ClusterSchedulerConfig.SchedulerConfig.PriorityClasses[{i}]"
            settings = imported.class_settings.get(name, {})
            if name not in current:
                _at(
                    path,
                    policy_services.priority_class_create,
                    actor=actor,
                    name=name,
                    weight=weight,
                    **settings,
                )
                continue
            class_changes = {
                field: value
                for field, value in {"weight": weight, **settings}.items()
                if getattr(current[name], field) != value
            }
            if class_changes:
                _at(
                    path,
                    policy_services.priority_class_update,
                    actor=actor,
                    priority_class=current[name],
                    **class_changes,
                )

    # 4. Teams, then each team's complete set of quotas.
    teams = {team.name: team for team in state.teams}
    types = {t.name: t for t in state.instance_types}
    for settings in imported.teams:
        team = teams.get(settings.name)
        if team is None:
            team = _at(
                settings.path, policy_services.team_create, actor=actor, name=settings.name, **settings.values
            )
        else:
            team_changes = {k: v for k, v in settings.values.items() if getattr(team, k) != v}
            if team_changes:
                team = _at(settings.path, policy_services.team_update, actor=actor, team=team, **team_changes)
        if settings.quotas is None:
            continue
        existing = (
            {q.instance_type.name: q for q in state.quotas(teams[settings.name])}
            if settings.name in teams
            else {}
        )
        for quota in settings.quotas:
            if quota.instance_type not in types:  # deleted since the preview
                raise _Refusal(
                    quota.path,
                    ValidationError(
                        f"{quota.instance_type!r} is no longer an instance type of this cluster."
                    ),
                )
            current_quota = existing.get(quota.instance_type)
            values = quota_values(quota, current_quota)
            if current_quota is not None and all(getattr(current_quota, k) == v for k, v in values.items()):
                continue
            _at(
                quota.path,
                policy_services.team_quota_set,
                actor=actor,
                team=team,
                instance_type=types[quota.instance_type],
                **values,
            )
        listed = {q.instance_type for q in settings.quotas}
        for type_name, unlisted in existing.items():
            if type_name not in listed and not is_default(unlisted):
                _at(
                    settings.path,
                    policy_services.team_quota_set,
                    actor=actor,
                    team=team,
                    instance_type=types[type_name],
                    **QUOTA_DEFAULTS,
                )
    return changes
