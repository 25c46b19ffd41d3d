"""Writes of the what-if lab: policy drafts and what-if runs, and the state of a run as its
worker executes it (``runs.py`` decides, this module writes).

A draft is edited with the live policy's own rules (``services.policy.validate_*``, through the
console's forms) and applied through the live policy's services, in one transaction: every
changed field gets its audit entry and the allocation loop is asked for a cycle once the
change is committed (``services.policy`` does both).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from allocations.interop import policy as interop
from allocations.interop import services as interop_services
from allocations.models import PolicyDraft, WhatIfRun, WhatIfRunState
from allocations.services.cycle_requests import queue_task
from allocations.whatif import drafts as bodies

# The key of the live policy among a run's policies (always the first).
LIVE = "live"
# The Celery task that executes a run (``whatif/tasks.py``), queued by name: the tasks module
# imports the runner, which imports this module.
RUN_TASK = "allocations.whatif.run"

# A what-if window: at least an hour, at most a year (the history kept is far shorter).
MIN_WINDOW_S = 3600
MAX_WINDOW_S = 366 * 86400
MAX_DRAFTS_PER_RUN = 5
# Seconds of the grid a run's scenario is put on (0: exact times); see whatif.history.build.
DEFAULT_TIME_STEP_S = 60
MAX_TIME_STEP_S = 3600


def _check_name(name: Any, current: PolicyDraft | None = None) -> str:
    if not isinstance(name, str) or not name.strip() or len(name.strip()) > 100:
        raise ValidationError({"name": f"Draft name must be 1 to 100 characters; got {name!r}."})
    name = name.strip()
    taken = PolicyDraft.objects.filter(name=name)
    if current is not None:
        taken = taken.exclude(pk=current.pk)
    if taken.exists():
        raise ValidationError({"name": f"A draft named {name!r} already exists."})
    return name


# --- Drafts --------------------------------------------------------------------------------------
@transaction.atomic
def draft_create(*, actor: Any, name: str) -> PolicyDraft:
    """A new draft holding a copy of the whole live policy."""
    return PolicyDraft.objects.create(name=_check_name(name), created_by=actor, body=bodies.live_body())


@transaction.atomic
def draft_rename(*, draft: PolicyDraft, name: str) -> PolicyDraft:
    locked = PolicyDraft.objects.select_for_update().get(pk=draft.pk)
    locked.name = _check_name(name, locked)
    locked.save(update_fields=["name", "updated_at"])
    return locked


@transaction.atomic
def draft_update(*, draft: PolicyDraft, body: Mapping[str, Any]) -> PolicyDraft:
    """Replace the draft's body (a complete policy: ``drafts.check_body``). The values were
    checked by the live policy's rules in the forms that built it."""
    try:
        bodies.check_body(body)
    except bodies.BodyError as exc:
        raise ValidationError({"body": exc.errors}) from exc
    locked = PolicyDraft.objects.select_for_update().get(pk=draft.pk)
    locked.body = dict(body)
    locked.save(update_fields=["body", "updated_at"])
    return locked


@transaction.atomic
def draft_delete(*, draft: PolicyDraft) -> None:
    PolicyDraft.objects.filter(pk=draft.pk).delete()


class DraftRefused(Exception):
    """The live policy's services refused part of the draft; nothing was applied."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__("; ".join(messages))
        self.messages = messages


def draft_apply(*, actor: Any, draft: PolicyDraft) -> list[interop.Change]:
    """Make the draft the live policy in one transaction, through the policy services (an
    audit entry per changed field; a cycle is requested once committed, so the loop uses the
    new policy from its next cycle). Returns the changes made; any refusal changes nothing."""
    try:
        bodies.check_body(draft.body)
    except bodies.BodyError as exc:
        raise DraftRefused(exc.errors) from exc
    with transaction.atomic():
        try:
            changes = interop_services.policy_import_apply(actor=actor, imported=bodies.as_import(draft.body))
        except interop_services.ApplyRefused as exc:
            raise DraftRefused(exc.messages) from exc
        PolicyDraft.objects.filter(pk=draft.pk).update(applied_at=timezone.now())
    return changes


# --- What-if runs --------------------------------------------------------------------------------
def whatif_run_create(
    *,
    actor: Any,
    drafts: Iterable[PolicyDraft],
    window_start: datetime,
    window_end: datetime,
    time_step: int = DEFAULT_TIME_STEP_S,
) -> WhatIfRun:
    """Ask for a replay of [window_start, window_end) under the live policy and each draft, on
    a grid of ``time_step`` seconds (``whatif.history.build``); the Celery task is queued once
    the run is committed."""
    drafts = list(drafts)
    errors: dict[str, str] = {}
    if not drafts:
        errors["drafts"] = "Choose at least one draft to compare with the live policy."
    elif len(drafts) > MAX_DRAFTS_PER_RUN:
        errors["drafts"] = f"Choose at most {MAX_DRAFTS_PER_RUN} drafts; got {len(drafts)}."
    span = (window_end - window_start).total_seconds()
    if span < MIN_WINDOW_S:
        errors["window_end"] = (
            f"The window must be at least an hour; got {window_start:%Y-%m-%d %H:%M} to {window_end:%Y-%m-%d %H:%M}."
        )
    elif span > MAX_WINDOW_S:
        errors["window_start"] = f"The window must be at most 366 days; got {span / 86400:.0f} days."
    elif window_start > timezone.now():
        errors["window_start"] = f"The window must start in the past; got {window_start:%Y-%m-%d %H:%M}."
    if isinstance(time_step, bool) or not isinstance(time_step, int) or not 0 <= time_step <= MAX_TIME_STEP_S:
        errors["time_step"] = f"Time step must be 0 to {MAX_TIME_STEP_S} seconds; got {time_step!r}."
    for draft in drafts:
        try:
            bodies.check_body(draft.body)
        except bodies.BodyError as exc:
            errors["drafts"] = f"Draft {draft.name!r} is not a complete policy: {exc}"
    if errors:
        raise ValidationError(errors)
    policies = [{"key": LIVE, "name": "live policy", "body": bodies.live_body()}]
    policies += [{"key": f"draft-{d.pk}", "name": d.name, "body": d.body} for d in drafts]
    with transaction.atomic():
        run = WhatIfRun.objects.create(
            created_by=actor,
            window_start=window_start,
            window_end=window_end,
            time_step=time_step,
            policies=policies,
        )
        run.drafts.set(drafts)
        transaction.on_commit(lambda: _queue(run.pk))
    return run


def _queue(run_id: int) -> None:
    result = queue_task(RUN_TASK, args=[run_id])
    WhatIfRun.objects.filter(pk=run_id).update(celery_task_id=result.id or "")


@transaction.atomic
def whatif_run_cancel(*, run: WhatIfRun) -> WhatIfRun:
    """Stop a run: a queued one is cancelled at once; a running one at the next check of its
    cancel flag (within a second or so); a finished one is left as it is."""
    locked = WhatIfRun.objects.select_for_update().get(pk=run.pk)
    if locked.state == WhatIfRunState.QUEUED:
        locked.state = WhatIfRunState.CANCELLED
        locked.finished_at = timezone.now()
        locked.progress_message = "Cancelled before it started"
    if locked.state in (WhatIfRunState.QUEUED, WhatIfRunState.RUNNING, WhatIfRunState.CANCELLED):
        locked.cancel_requested = True
    locked.save()
    return locked


@transaction.atomic
def whatif_run_delete(*, run: WhatIfRun) -> None:
    WhatIfRun.objects.filter(pk=run.pk).delete()


# --- A run as its worker executes it (``runs.execute``) ------------------------------------------
def whatif_run_claim(*, run_id: int) -> bool:
    """Move a queued run to running; False when another copy of the task took it, or it was
    cancelled meanwhile (then the caller does nothing)."""
    now = timezone.now()
    return bool(
        WhatIfRun.objects.filter(pk=run_id, state=WhatIfRunState.QUEUED).update(
            state=WhatIfRunState.RUNNING,
            started_at=now,
            heartbeat_at=now,
            progress=0,
            progress_message="Reading the history",
        )
    )


def whatif_run_store_scenario(*, run_id: int, scenario: bytes, results: dict[str, Any]) -> None:
    """Keep the window's history (packed) with the run, so that a retried run replays it."""
    WhatIfRun.objects.filter(pk=run_id).update(scenario=scenario, results=results)


def whatif_run_progress(*, run_id: int, progress: float, message: str) -> bool:
    """Record a running run's progress and heartbeat; False when its cancel flag is set (the
    caller stops the replay)."""
    if WhatIfRun.objects.filter(pk=run_id, cancel_requested=True).exists():
        return False
    WhatIfRun.objects.filter(pk=run_id, state=WhatIfRunState.RUNNING).update(
        progress=progress, progress_message=message[:200], heartbeat_at=timezone.now()
    )
    return True


def whatif_run_fail(*, run_id: int, state: str, **fields: Any) -> None:
    """End a running run that did not complete (cancelled or failed), with its message."""
    WhatIfRun.objects.filter(pk=run_id, state=WhatIfRunState.RUNNING).update(
        state=state, finished_at=timezone.now(), **fields
    )


@transaction.atomic
def whatif_run_complete(*, run_id: int, results: dict[str, Any]) -> str:
    """Store a replayed run's results; returns its final state. A run the reaper ended
    meanwhile is left as it is; one whose cancel was asked for ends cancelled."""
    run = WhatIfRun.objects.select_for_update().get(pk=run_id)
    if run.state != WhatIfRunState.RUNNING:
        return str(run.state)
    state = WhatIfRunState.CANCELLED if run.cancel_requested else WhatIfRunState.DONE
    run.state = state
    run.results = results
    run.progress = 1.0
    run.progress_message = "Done" if state == WhatIfRunState.DONE else "Cancelled"
    run.finished_at = timezone.now()
    run.save(update_fields=["state", "results", "progress", "progress_message", "finished_at"])
    return state


def whatif_runs_reap_stalled(*, stale_after: timedelta) -> int:
    """End the runs left ``running`` by a worker that stopped (killed, out of memory, the machine
    restarted): no progress report for ``stale_after``. They become ``failed`` with a message
    saying so, instead of showing "running" forever; their drafts are untouched, and a new run
    can be started. Returns how many were ended."""
    now = timezone.now()
    cutoff = now - stale_after
    minutes = max(1, round(stale_after.total_seconds() / 60))
    return WhatIfRun.objects.filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff),
        state=WhatIfRunState.RUNNING,
    ).update(
        state=WhatIfRunState.FAILED,
        finished_at=now,
        progress_message="Stopped",
        error=(
            f"The worker running this what-if run stopped: no progress for {minutes} minutes. "
            "Nothing was applied; start the run again."
        ),
    )
