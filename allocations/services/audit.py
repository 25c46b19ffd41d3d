"""The audit trail of policy changes: one AuditEntry per changed field, written by the services.

Values are stored as readable text (a choice's policy word, a related row's name, "yes"/"no",
"(none)") because the audit page and its readers see them long after the rows have changed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import models
from django.utils import timezone

from allocations.choices import AuditAction
from allocations.models import AuditEntry

NONE_TEXT = "(none)"


def value_text(value: Any) -> str:
    """A field value as the audit page shows it."""
    if value is None or value == "":
        return NONE_TEXT
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Decimal):
        return format(value.normalize(), "f")
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


def field_values(obj: models.Model, fields: Iterable[str]) -> dict[str, Any]:
    """The current values of ``fields`` of ``obj``; a foreign key gives the related row."""
    return {name: getattr(obj, name) for name in fields}


def object_label(obj: models.Model) -> str:
    """A name for the object that stays the same when its settings change (a priority class's
    ``__str__`` shows its weight, a membership's its role), so one object's entries match."""
    team, user = getattr(obj, "team", None), getattr(obj, "user", None)
    if team is not None and user is not None:
        return f"{user.get_username()} in {team.name}"
    name = getattr(obj, "name", None)
    return str(name) if name else str(obj)


def actor_name(actor: Any) -> str:
    """Who acted, as kept in the trail even after the user is deleted ("system" for commands)."""
    if actor is None:
        return "system"
    return str(actor.get_username())


def _entry(
    *,
    actor: Any,
    action: str,
    obj: models.Model,
    object_repr: str,
    field: str = "",
    old: str = "",
    new: str = "",
) -> AuditEntry:
    return AuditEntry(
        at=timezone.now(),
        actor=actor if actor is not None and actor.pk else None,
        actor_name=actor_name(actor),
        action=action,
        object_type=str(obj._meta.verbose_name),
        object_id=str(obj.pk),
        object_repr=object_repr[:200],
        field=field,
        old_value=old,
        new_value=new,
    )


def record_create(
    *, actor: Any, obj: models.Model, values: Mapping[str, Any], object_repr: str | None = None
) -> AuditEntry:
    """One "create" entry whose new value lists the settings the object was created with."""
    summary = "; ".join(f"{name}: {value_text(value)}" for name, value in values.items())
    entry = _entry(
        actor=actor,
        action=AuditAction.CREATE,
        obj=obj,
        object_repr=object_repr or object_label(obj),
        new=summary,
    )
    entry.save()
    return entry


def record_changes(
    *,
    actor: Any,
    obj: models.Model,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    object_repr: str | None = None,
) -> list[AuditEntry]:
    """One "update" entry per field whose readable value changed; nothing when none did."""
    entries = []
    for name, new in after.items():
        old_text, new_text = value_text(before.get(name)), value_text(new)
        if old_text != new_text:
            entries.append(
                _entry(
                    actor=actor,
                    action=AuditAction.UPDATE,
                    obj=obj,
                    object_repr=object_repr or object_label(obj),
                    field=name,
                    old=old_text,
                    new=new_text,
                )
            )
    AuditEntry.objects.bulk_create(entries)
    return entries


def record_delete(
    *, actor: Any, obj: models.Model, values: Mapping[str, Any], object_repr: str | None = None
) -> AuditEntry:
    """One "delete" entry whose old value lists the settings the object had (call before delete)."""
    summary = "; ".join(f"{name}: {value_text(value)}" for name, value in values.items())
    entry = _entry(
        actor=actor,
        action=AuditAction.DELETE,
        obj=obj,
        object_repr=object_repr or object_label(obj),
        old=summary,
    )
    entry.save()
    return entry
