"""The audit trail of policy changes: one AuditEntry per changed field, written by the services,
and the audited change of a row's settings (``refuse_unknown``, ``apply_changes``) that the
policy and membership services share.

Values are stored as readable text (a choice's policy word, a related row's name, "yes"/"no",
"(none)") because the audit page and its readers see them long after the rows have changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from allocations.choices import AuditAction
from allocations.models import AuditEntry

NONE_TEXT = "(none)"

M = TypeVar("M", bound=models.Model)


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
    # A change made through SageMaker's API names the access key that signed it (never its
    # secret): allocations/interop/sagemaker_api.py sets ``audit_via`` on the acting user.
    via = getattr(actor, "audit_via", "")
    name = str(actor.get_username())
    return f"{name} ({via})"[:150] if via else name


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
    return _record_settings(actor, AuditAction.CREATE, obj, values, object_repr, side="new")


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
    return _record_settings(actor, AuditAction.DELETE, obj, values, object_repr, side="old")


def _record_settings(
    actor: Any,
    action: str,
    obj: models.Model,
    values: Mapping[str, Any],
    object_repr: str | None,
    *,
    side: str,
) -> AuditEntry:
    """One entry that lists all of ``values`` on one ``side`` (``old`` or ``new``): an object
    that comes or goes is recorded whole, not field by field."""
    summary = "; ".join(f"{name}: {value_text(value)}" for name, value in values.items())
    entry = _entry(
        actor=actor, action=action, obj=obj, object_repr=object_repr or object_label(obj), **{side: summary}
    )
    entry.save()
    return entry


# --- The audited change of a row's settings, shared by the services that write them -----------
def refuse_unknown(changes: Mapping[str, Any], fields: Iterable[str]) -> None:
    """Refuse a change of anything but ``fields``, the settings a write may change and the
    trail records, with one error per unknown name."""
    unknown = sorted(set(changes) - set(fields))
    if unknown:
        raise ValidationError(
            {name: f"{name!r} is not a setting that can be changed here." for name in unknown}
        )


def apply_changes(
    *,
    actor: Any,
    obj: M,
    fields: Sequence[str],
    changes: Mapping[str, Any],
    validate: Callable[[Mapping[str, Any], M], None],
    object_repr: Callable[[M], str] = object_label,
) -> None:
    """Check ``obj``'s settings with ``changes`` merged in (``validate(values, obj)`` raises),
    set and save them, and record one entry per changed field, under the name ``object_repr``
    gives the changed row. ``obj`` is the row as read under the caller's lock, inside the
    caller's transaction."""
    before = field_values(obj, fields)
    validate({**before, **changes}, obj)
    for name, value in changes.items():
        setattr(obj, name, value)
    obj.save()
    after = field_values(obj, fields)
    record_changes(actor=actor, obj=obj, before=before, after=after, object_repr=object_repr(obj))
