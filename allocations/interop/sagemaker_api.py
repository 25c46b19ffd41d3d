"""SageMaker's task-governance operations, served on gpugov's policy (docs/interop.md
"HyperPod's API").

``call(operation, body, user, access_key_id)`` runs one of the ten operations
(``Create/Describe/List/Update/Delete`` of ``ComputeQuota`` and ``ClusterSchedulerConfig``) and
returns the response document, or raises ApiError with AWS's error code.

* Requests are checked against SageMaker's model in botocore (``shapes.check_request``), as an
  offline import is; responses take the output shapes of the same model.
* Writes go through the HyperPod import: a Create or Update becomes the CreateComputeQuota (or
  CreateClusterSchedulerConfig) request it amounts to, ``hyperpod.parse`` maps it and
  ``policy_import_apply`` applies it through the policy services. The mapping, the rules, the
  over-commit checks and the audit trail are therefore those of the console's import.
* A compute quota is one team's quotas and sharing settings; the scheduler config is the
  cluster policy and its priority classes. Their ids, names and versions are kept in
  ``SageMakerResource`` rows, made the first time the API sees a team or the cluster, so a
  policy set up in the console or imported is listed at once.
* A version counts changes from any source: a Describe, List or Update that finds the settings
  changed since the version was counted (in the console, say) counts one more, so an Update with
  the version read before that change is refused with ConflictException.
* Who may do what is ``access.py``'s: cluster administrators change; team roles read their
  teams' compute quotas and the scheduler config; anything else is ResourceNotFound (not
  yours) or AccessDeniedException (visible, but not yours to change).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.utils import parse_to_aware_datetime
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from allocations import access, bounded_json
from allocations.models import SageMakerResource, Team

from . import hyperpod
from .policy import ImportedPolicy, PolicyState, TeamSettings, read_policy
from .services import ApplyRefused, policy_import_apply
from .shapes import Problem, check_request

Kind = SageMakerResource.Kind
DEFAULT_MAX_RESULTS = 10
_ACCOUNT_IN_ARN = re.compile(r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:([0-9]{12}):")


class ApiError(Exception):
    """An answer in AWS's error shape: ``{"__type": code, "message": message}``, HTTP 400."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _validation(problems: list[Problem] | list[str]) -> ApiError:
    return ApiError("ValidationException", "; ".join(str(p) for p in problems))


@dataclass(frozen=True, slots=True)
class Caller:
    """Who signed the request: the user, and the access key id the audit trail names."""

    user: Any
    access_key_id: str

    @property
    def actor(self) -> Any:
        """The user as the services' ``actor``: the audit trail names them with this key
        (``audit.actor_name`` reads ``audit_via``; the user row is this request's own copy)."""
        self.user.audit_via = f"access key {self.access_key_id}"
        return self.user


# --- Identity and versions -----------------------------------------------------------------------
def _new_id() -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(12))


def _account(cluster_arn: str) -> str:
    match = _ACCOUNT_IN_ARN.match(cluster_arn)
    return match.group(1) if match else settings.GPUGOV_AWS_ACCOUNT_ID


def arn(record: SageMakerResource) -> str:
    return f"arn:aws:sagemaker:{settings.GPUGOV_AWS_REGION}:{_account(record.cluster_arn)}:{record.kind}/{record.resource_id}"


def _digest(request: dict[str, Any], *members: str) -> str:
    payload = json.dumps({name: request.get(name) for name in members}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


QUOTA_MEMBERS = ("ComputeQuotaConfig", "ComputeQuotaTarget", "ActivationState", "Description")
SCHEDULER_MEMBERS = ("SchedulerConfig",)


@dataclass(slots=True)
class Snapshot:
    """The policy as it is now and as HyperPod requests (the export, one per team)."""

    state: PolicyState
    scheduler: dict[str, Any] | None
    quotas: dict[str, dict[str, Any]]  # by team name
    teams: dict[int, Team]
    configured_arn: str | None  # the cluster's hyperpod_cluster_arn, when set


def _snapshot() -> Snapshot:
    state = read_policy()
    bundle = hyperpod.export_policy(state).bundle
    quotas = {q["ComputeQuotaTarget"]["TeamName"]: q for q in bundle["ComputeQuotas"]}
    scheduler = bundle["ClusterSchedulerConfig"] if state.cluster is not None else None
    arn = (state.cluster.backend_settings or {}).get(hyperpod.CLUSTER_ARN_SETTING) if state.cluster else None
    configured = arn if isinstance(arn, str) and arn else None
    return Snapshot(state, scheduler, quotas, {team.pk: team for team in state.teams}, configured)


def _check_cluster_arn(snapshot: Snapshot, given: str) -> None:
    """A Create names this cluster: its configured ARN when it has one (any ARN otherwise)."""
    if snapshot.configured_arn and given != snapshot.configured_arn:
        raise ApiError(
            "ValidationException",
            f"ClusterArn: {given!r} is not this cluster's ARN {snapshot.configured_arn!r}.",
        )


def _sync(snapshot: Snapshot, now: datetime) -> dict[str, SageMakerResource]:
    """The API's row of the scheduler config and of each team (made when missing), their
    versions counted up where the settings changed since; by resource id."""
    rows = {
        (row.kind, row.team_id): row for row in SageMakerResource.objects.select_for_update().order_by("pk")
    }
    wanted: list[tuple[str, Team | None, dict[str, Any], tuple[str, ...]]] = []
    if snapshot.scheduler is not None:
        wanted.append((Kind.CLUSTER_SCHEDULER_CONFIG, None, snapshot.scheduler, SCHEDULER_MEMBERS))
    for team in snapshot.state.teams:
        wanted.append((Kind.COMPUTE_QUOTA, team, snapshot.quotas[team.name], QUOTA_MEMBERS))
    result = {}
    for kind, team, request, members in wanted:
        digest = _digest(request, *members)
        row = rows.get((kind, team.pk if team else None))
        if row is None:
            row = _create_row(kind, team, request, digest, now, by="")
        if snapshot.configured_arn and row.cluster_arn != snapshot.configured_arn:
            # The cluster's configured ARN wins over what a Create gave before it was set.
            row.cluster_arn = snapshot.configured_arn
            row.save(update_fields=["cluster_arn"])
        if row.state_digest != digest and row.deleted_at is None:
            row.version += 1
            row.state_digest = digest
            row.last_modified_at = now
            row.last_modified_by = "gpugov"
            row.save(update_fields=["version", "state_digest", "last_modified_at", "last_modified_by"])
        result[row.resource_id] = row
    return result


def _create_row(
    kind: str, team: Team | None, request: dict[str, Any], digest: str, now: datetime, *, by: str
) -> SageMakerResource:
    """A new row; a concurrent request that made the same one first wins (its row is used)."""
    try:
        with transaction.atomic():
            return SageMakerResource.objects.create(
                kind=kind,
                resource_id=_new_id(),
                team=team,
                name=request["Name"],
                cluster_arn=request["ClusterArn"],
                state_digest=digest,
                created_at=now,
                created_by=by,
                last_modified_at=now,
                last_modified_by=by,
            )
    except IntegrityError:
        return SageMakerResource.objects.select_for_update().get(kind=kind, team=team)


def _live(rows: dict[str, SageMakerResource], kind: str, caller: Caller) -> list[SageMakerResource]:
    """The rows of ``kind`` that exist (not deleted) and that the caller may see."""
    if kind == Kind.CLUSTER_SCHEDULER_CONFIG:
        visible = access.can_read_cluster(caller.user)
        return [r for r in rows.values() if r.kind == kind and r.deleted_at is None and visible]
    teams = set(access.visible_teams(caller.user).values_list("pk", flat=True))
    return [r for r in rows.values() if r.kind == kind and r.deleted_at is None and r.team_id in teams]


def _find(
    rows: dict[str, SageMakerResource], kind: str, caller: Caller, resource_id: str
) -> SageMakerResource:
    for row in _live(rows, kind, caller):
        if row.resource_id == resource_id:
            return row
    what = "compute quota" if kind == Kind.COMPUTE_QUOTA else "cluster scheduler config"
    raise ApiError("ResourceNotFound", f"No {what} with id {resource_id!r}.")


def _require_admin(caller: Caller, operation: str) -> None:
    if not access.is_cluster_admin(caller.user):
        raise ApiError(
            "AccessDeniedException",
            f"User {caller.user.get_username()} (access key {caller.access_key_id}) is not authorized to "
            f"perform SageMaker:{operation}: only cluster administrators change the policy.",
        )


def _apply(caller: Caller, imported: ImportedPolicy) -> None:
    try:
        policy_import_apply(actor=caller.actor, imported=imported)
    except ApplyRefused as exc:
        raise _validation(exc.messages) from exc


def _parse(request: dict[str, Any]) -> ImportedPolicy:
    """The request through the HyperPod import's mapping (the one mapping of both)."""
    try:
        return hyperpod.parse(json.dumps(request))
    except hyperpod.ImportRefused as exc:
        raise _validation(exc.problems) from exc


def _touch(
    row: SageMakerResource, caller: Caller, now: datetime, request: dict[str, Any], members: tuple[str, ...]
) -> None:
    """Count the API's own change: one version more, the new settings' digest."""
    row.version += 1
    row.state_digest = _digest(request, *members)
    row.last_modified_at = now
    row.last_modified_by = caller.access_key_id
    row.save()


# --- Compute quotas ------------------------------------------------------------------------------
def create_compute_quota(params: dict[str, Any], caller: Caller) -> dict[str, Any]:
    _require_admin(caller, "CreateComputeQuota")
    now = timezone.now()
    team_name = params["ComputeQuotaTarget"]["TeamName"]
    team = Team.objects.filter(name=team_name).first()
    if team is None:
        known = ", ".join(Team.objects.order_by("name").values_list("name", flat=True)) or "none yet"
        raise ApiError(
            "ValidationException",
            f"ComputeQuotaTarget.TeamName: {team_name!r} is not a team of this cluster (teams: {known}); "
            "teams, with their members, are made in gpugov's console.",
        )
    snapshot = _snapshot()
    _check_cluster_arn(snapshot, params["ClusterArn"])
    rows = _sync(snapshot, now)
    row = next(r for r in rows.values() if r.team_id == team.pk)
    if row.deleted_at is None:
        raise ApiError(
            "ConflictException",
            f"Team {team_name!r} already has compute quota {row.resource_id} ({row.name}); change it with "
            "UpdateComputeQuota.",
        )
    _check_unique_name(rows, Kind.COMPUTE_QUOTA, params["Name"])
    _apply(caller, _parse(params))
    after = _snapshot().quotas[team_name]
    row.resource_id = _new_id()
    row.name = params["Name"]
    row.cluster_arn = params["ClusterArn"]
    row.version = 1
    row.state_digest = _digest(after, *QUOTA_MEMBERS)
    row.created_at = row.last_modified_at = now
    row.created_by = row.last_modified_by = caller.access_key_id
    row.deleted_at = None
    row.save()
    return {"ComputeQuotaArn": arn(row), "ComputeQuotaId": row.resource_id}


def _check_unique_name(rows: dict[str, SageMakerResource], kind: str, name: str) -> None:
    for row in rows.values():
        if row.kind == kind and row.deleted_at is None and row.name == name:
            raise ApiError(
                "ConflictException", f"Name: {name!r} is already the name of {row.kind} {row.resource_id}."
            )


def _check_version(row: SageMakerResource, target: int) -> None:
    if target != row.version:
        raise ApiError(
            "ConflictException",
            f"TargetVersion: {target} is not the current version {row.version} of {row.kind} "
            f"{row.resource_id}; describe it again and retry.",
        )


def update_compute_quota(params: dict[str, Any], caller: Caller) -> dict[str, Any]:
    now = timezone.now()
    snapshot = _snapshot()
    row = _find(_sync(snapshot, now), Kind.COMPUTE_QUOTA, caller, params["ComputeQuotaId"])
    _require_admin(caller, "UpdateComputeQuota")
    _check_version(row, params["TargetVersion"])
    assert row.team_id is not None
    team = snapshot.teams[row.team_id]
    request = dict(snapshot.quotas[team.name])
    target = params.get("ComputeQuotaTarget")
    if target is not None and target["TeamName"] != team.name:
        raise ApiError(
            "ValidationException",
            f"ComputeQuotaTarget.TeamName: {target['TeamName']!r} is not {team.name!r}: a compute quota "
            "stays with its team (delete it and create one for the other team).",
        )
    for member in ("ComputeQuotaConfig", "ComputeQuotaTarget", "ActivationState", "Description"):
        if member in params:
            request[member] = params[member]
    _apply(caller, _parse(request))
    _touch(row, caller, now, _snapshot().quotas[team.name], QUOTA_MEMBERS)
    return {"ComputeQuotaArn": arn(row), "ComputeQuotaVersion": row.version}


def delete_compute_quota(params: dict[str, Any], caller: Caller) -> dict[str, Any]:
    """The team keeps its members and jobs; its quotas go back to none (as an import that
    lists the team with no resources)."""
    now = timezone.now()
    snapshot = _snapshot()
    row = _find(_sync(snapshot, now), Kind.COMPUTE_QUOTA, caller, params["ComputeQuotaId"])
    _require_admin(caller, "DeleteComputeQuota")
    assert row.team_id is not None
    team = snapshot.teams[row.team_id]
    _apply(caller, ImportedPolicy(teams=[TeamSettings(team.name, {}, quotas=[], path="ComputeQuotaId")]))
    row.deleted_at = row.last_modified_at = now
    row.last_modified_by = caller.access_key_id
    row.save()
    return {}


def _quota_document(row: SageMakerResource, snapshot: Snapshot, *, summary: bool) -> dict[str, Any]:
    assert row.team_id is not None
    request = snapshot.quotas[snapshot.teams[row.team_id].name]
    document: dict[str, Any] = {
        "ComputeQuotaArn": arn(row),
        "ComputeQuotaId": row.resource_id,
        "Name": row.name,
        "ComputeQuotaVersion": row.version,
        "Status": "Created" if row.version == 1 else "Updated",
        "ClusterArn": row.cluster_arn,
        "ComputeQuotaConfig": request["ComputeQuotaConfig"],
        "ComputeQuotaTarget": request["ComputeQuotaTarget"],
        "ActivationState": request["ActivationState"],
        "CreationTime": row.created_at.timestamp(),
        "LastModifiedTime": row.last_modified_at.timestamp(),
    }
    if not summary and "Description" in request:
        document["Description"] = request["Description"]
    return document


def describe_compute_quota(params: dict[str, Any], caller: Caller) -> dict[str, Any]:
    snapshot = _snapshot()
    row = _find(_sync(snapshot, timezone.now()), Kind.COMPUTE_QUOTA, caller, params["ComputeQuotaId"])
    _check_described_version(row, params.get("ComputeQuotaVersion"), "ComputeQuotaVersion")
    return _quota_document(row, snapshot, summary=False)


def _check_described_version(row: SageMakerResource, version: int | None, member: str) -> None:
    if version is not None and version != row.version:
        raise ApiError(
            "ResourceNotFound",
            f"{member}: version {version} of {row.kind} {row.resource_id} is not kept (gpugov keeps the "
            f"current version, {row.version}; the audit trail has the history).",
        )


def list_compute_quotas(params: dict[str, Any], caller: Caller) -> dict[str, Any]:
    snapshot = _snapshot()
    rows = _live(_sync(snapshot, timezone.now()), Kind.COMPUTE_QUOTA, caller)
    documents = [_quota_document(row, snapshot, summary=True) for row in rows]
    page, token = _page(_filtered(documents, params), params)
    return {"ComputeQuotaSummaries": page, **({"NextToken": token} if token else {})}


# --- The cluster scheduler config ----------------------------------------------------------------
def create_cluster_scheduler_config(params: dict[str, Any], caller: Caller) -> dict[str, Any]:
    _require_admin(caller, "CreateClusterSchedulerConfig")
    now = timezone.now()
    snapshot = _snapshot()
    _check_cluster_arn(snapshot, params["ClusterArn"])
    rows = _sync(snapshot, now)
    existing = [r for r in rows.values() if r.kind == Kind.CLUSTER_SCHEDULER_CONFIG]
    if existing and existing[0].deleted_at is None:
        raise ApiError(
            "ConflictException",
            f"The cluster already has cluster scheduler config {existing[0].resource_id} ({existing[0].name}); "
            "change it with UpdateClusterSchedulerConfig.",
        )
    _apply(caller, _parse(params))
    after = _snapshot()
    assert after.scheduler is not None
    row = existing[0] if existing else None
    if row is None:
        row = _create_row(
            Kind.CLUSTER_SCHEDULER_CONFIG,
            None,
            params,
            _digest(after.scheduler, *SCHEDULER_MEMBERS),
            now,
            by="",
        )
    row.resource_id = _new_id()
    row.name = params["Name"]
    row.cluster_arn = params["ClusterArn"]
    row.description = params.get("Description", "")
    row.version = 1
    row.state_digest = _digest(after.scheduler, *SCHEDULER_MEMBERS)
    row.created_at = row.last_modified_at = now
    row.created_by = row.last_modified_by = caller.access_key_id
    row.deleted_at = None
    row.save()
    return {"ClusterSchedulerConfigArn": arn(row), "ClusterSchedulerConfigId": row.resource_id}


def update_cluster_scheduler_config(params: dict[str, Any], caller: Caller) -> dict[str, Any]:
    now = timezone.now()
    snapshot = _snapshot()
    rows = _sync(snapshot, now)
    row = _find(rows, Kind.CLUSTER_SCHEDULER_CONFIG, caller, params["ClusterSchedulerConfigId"])
    _require_admin(caller, "UpdateClusterSchedulerConfig")
    _check_version(row, params["TargetVersion"])
    assert snapshot.scheduler is not None
    request = dict(snapshot.scheduler)
    if "SchedulerConfig" in params:
        request["SchedulerConfig"] = params["SchedulerConfig"]
    _apply(caller, _parse(request))
    if "Description" in params:
        row.description = params["Description"]
    after = _snapshot().scheduler
    assert after is not None
    _touch(row, caller, now, after, SCHEDULER_MEMBERS)
    return {"ClusterSchedulerConfigArn": arn(row), "ClusterSchedulerConfigVersion": row.version}


def delete_cluster_scheduler_config(params: dict[str, Any], caller: Caller) -> dict[str, Any]:
    """What HyperPod does without one: no priority classes, fair share on, idle capacity shared
    (gpugov's defaults), through the same services; a class a team's limits name is refused."""
    now = timezone.now()
    rows = _sync(_snapshot(), now)
    row = _find(rows, Kind.CLUSTER_SCHEDULER_CONFIG, caller, params["ClusterSchedulerConfigId"])
    _require_admin(caller, "DeleteClusterSchedulerConfig")
    defaults = {"idle_allocation": "fair-share", "share_unallocated": True}
    _apply(caller, ImportedPolicy(cluster_policy=defaults, priority_classes={}))
    row.deleted_at = row.last_modified_at = now
    row.last_modified_by = caller.access_key_id
    row.save()
    return {}


def _scheduler_document(row: SageMakerResource, snapshot: Snapshot, *, summary: bool) -> dict[str, Any]:
    assert snapshot.scheduler is not None
    document: dict[str, Any] = {
        "ClusterSchedulerConfigArn": arn(row),
        "ClusterSchedulerConfigId": row.resource_id,
        "ClusterSchedulerConfigVersion": row.version,
        "Name": row.name,
        "Status": "Created" if row.version == 1 else "Updated",
        "ClusterArn": row.cluster_arn,
        "CreationTime": row.created_at.timestamp(),
        "LastModifiedTime": row.last_modified_at.timestamp(),
    }
    if not summary:
        document["SchedulerConfig"] = snapshot.scheduler["SchedulerConfig"]
        document["Description"] = row.description or snapshot.scheduler["Description"]
    return document


def describe_cluster_scheduler_config(params: dict[str, Any], caller: Caller) -> dict[str, Any]:
    snapshot = _snapshot()
    rows = _sync(snapshot, timezone.now())
    row = _find(rows, Kind.CLUSTER_SCHEDULER_CONFIG, caller, params["ClusterSchedulerConfigId"])
    _check_described_version(
        row, params.get("ClusterSchedulerConfigVersion"), "ClusterSchedulerConfigVersion"
    )
    return _scheduler_document(row, snapshot, summary=False)


def list_cluster_scheduler_configs(params: dict[str, Any], caller: Caller) -> dict[str, Any]:
    snapshot = _snapshot()
    rows = _live(_sync(snapshot, timezone.now()), Kind.CLUSTER_SCHEDULER_CONFIG, caller)
    documents = [_scheduler_document(row, snapshot, summary=True) for row in rows]
    page, token = _page(_filtered(documents, params), params)
    return {"ClusterSchedulerConfigSummaries": page, **({"NextToken": token} if token else {})}


# --- Lists: filters, order, pages ----------------------------------------------------------------
def _filtered(documents: list[dict[str, Any]], params: dict[str, Any]) -> list[dict[str, Any]]:
    after, before = params.get("CreatedAfter"), params.get("CreatedBefore")
    if after is not None:
        documents = [d for d in documents if d["CreationTime"] > parse_to_aware_datetime(after).timestamp()]
    if before is not None:
        documents = [d for d in documents if d["CreationTime"] < parse_to_aware_datetime(before).timestamp()]
    if "NameContains" in params:
        documents = [d for d in documents if params["NameContains"] in d["Name"]]
    for member in ("Status", "ClusterArn"):
        if member in params:
            documents = [d for d in documents if d.get(member) == params[member]]
    sort_by = params.get("SortBy", "CreationTime")
    return sorted(
        documents,
        key=lambda d: (d.get(sort_by) or "", d["Name"]),
        reverse=params.get("SortOrder", "Descending") == "Descending",
    )


def _page(documents: list[dict[str, Any]], params: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    token = params.get("NextToken")
    start = 0
    if token is not None:
        if not (token.startswith("gpugov-") and token[7:].isdigit()):
            raise ApiError(
                "ValidationException", f"NextToken: {token[:80]!r} is not a token this service gave."
            )
        start = int(token[7:])
    size = params.get("MaxResults", DEFAULT_MAX_RESULTS)
    end = start + size
    return documents[start:end], (f"gpugov-{end}" if end < len(documents) else None)


# --- Dispatch ------------------------------------------------------------------------------------
OPERATIONS: dict[str, Callable[[dict[str, Any], Caller], dict[str, Any]]] = {
    "CreateComputeQuota": create_compute_quota,
    "DescribeComputeQuota": describe_compute_quota,
    "ListComputeQuotas": list_compute_quotas,
    "UpdateComputeQuota": update_compute_quota,
    "DeleteComputeQuota": delete_compute_quota,
    "CreateClusterSchedulerConfig": create_cluster_scheduler_config,
    "DescribeClusterSchedulerConfig": describe_cluster_scheduler_config,
    "ListClusterSchedulerConfigs": list_cluster_scheduler_configs,
    "UpdateClusterSchedulerConfig": update_cluster_scheduler_config,
    "DeleteClusterSchedulerConfig": delete_cluster_scheduler_config,
}


def call(operation: str, body: bytes, caller: Caller) -> dict[str, Any]:
    """Run ``operation`` with the JSON ``body``: checked against SageMaker's model, then done in
    one transaction (a refusal changes nothing)."""
    handler = OPERATIONS.get(operation)
    if handler is None:
        raise ApiError(
            "UnknownOperationException",
            f"X-Amz-Target: SageMaker.{operation} is not served here (served: {', '.join(OPERATIONS)}).",
        )
    params = _load(body)
    problems = check_request(operation, params)
    if problems:
        raise _validation(problems)
    with transaction.atomic():
        # Lock the API's rows before reading the policy: a request that waited for another's
        # change then reads the policy as changed, and counts that change as one version only.
        list(SageMakerResource.objects.select_for_update().values_list("pk", flat=True))
        return handler(params, caller)


def _load(body: bytes) -> dict[str, Any]:
    try:
        params = bounded_json.loads(body.decode("utf-8") or "{}")
    except (UnicodeDecodeError, ValueError) as exc:  # JSONRefused (too deep, NaN) is a ValueError
        raise ApiError("SerializationException", f"The body is not JSON: {exc}") from exc
    if not isinstance(params, dict):
        raise ApiError(
            "SerializationException", f"The body must be a JSON object, not {type(params).__name__}."
        )
    return params
