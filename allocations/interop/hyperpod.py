"""The policy as Amazon SageMaker HyperPod task governance requests, and back.

Export gives one bundle (a JSON object):

    {
      "Format": "gpugov-hyperpod/1",
      "ClusterSchedulerConfig": {<a CreateClusterSchedulerConfig request>},
      "ComputeQuotas": [{<a CreateComputeQuota request>}, ...],   # one per team
      "Warnings": ["what HyperPod cannot express", ...]
    }

Each request is what ``aws sagemaker create-cluster-scheduler-config --cli-input-json`` (or
``create-compute-quota``) takes. Import accepts such a bundle, or one request on its own.

Mapping (POLICY.md section 1 -> SageMaker's model):

- priority classes -> ``SchedulerConfig.PriorityClasses`` (at most 10 there);
  ``idle_allocation`` -> ``FairShare`` Enabled/Disabled; ``share_unallocated`` ->
  ``IdleResourceSharing`` Enabled/Disabled.
- a team -> a compute quota named ``<team>-quota`` with ``ComputeQuotaTarget`` TeamName and
  FairShareWeight, ``ActivationState`` Enabled/Disabled from ``active``, ``Description`` = the
  display name; ``sharing`` -> ``ResourceSharingConfig.Strategy``; ``preempt_team_tasks`` ->
  ``PreemptTeamTasks``.
- a team quota -> ``ComputeQuotaResources`` {InstanceType, Accelerators: GPUs, VCpu, MemoryInGiB,
  AcceleratorPartition {Type, Count}} (docs/resources.md 2: the resources the quota names; a
  quota in instances -> {InstanceType, Count}); its absolute borrow limits of vCPU, memory and
  partitions -> its ``AbsoluteBorrowLimits`` entry's VCpu, MemoryInGiB, AcceleratorPartition
  (an entry without Accelerators leaves the GPUs to the percentage); a borrow limit
  in percent -> the team-wide ``BorrowLimit`` (the most common percentage of the team's quotas;
  a quota with another percentage becomes an absolute limit, with a warning); an absolute
  borrow limit -> ``AbsoluteBorrowLimits`` {InstanceType, Accelerators}; an unlimited one -> an
  absolute limit of the model's maximum (10000000), read back as unlimited.

Not expressible, hence a warning: lend limits, reclaim, preempt-while-borrowing and its
maximum priority, ``lower-or-newer-equal-priority``, ``task_ranking: first-come-first-serve``,
``queueing: strict-fifo``, more than 10 priority classes, instance types SageMaker does not know,
fairness over time (docs/fairness.md), what a team may ask for (docs/limits.md) and minimum
runtimes (docs/preemption.md section 1).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from allocations import bounded_json, choices
from allocations.choices import BorrowLimitKind
from allocations.models import Team, TeamQuota
from allocations.policy_fields import QUOTA_RESOURCE_DEFAULTS

from .policy import (
    ImportedPolicy,
    PolicyState,
    QuotaSettings,
    TeamSettings,
    limit_warnings,
    preemption_cost_warnings,
    read_policy,
)
from .shapes import Problem, check_request, join_path, shape_at

FORMAT = "gpugov-hyperpod/1"
SCHEDULER_OPERATION = "CreateClusterSchedulerConfig"
QUOTA_OPERATION = "CreateComputeQuota"
# The pattern of a ClusterArn is checked; this one passes it and says what to do.
PLACEHOLDER_CLUSTER_ARN = "arn:aws:sagemaker:set-hyperpod-cluster-arn:000000000000:cluster/placeholder0"
CLUSTER_ARN_SETTING = "hyperpod_cluster_arn"
BUNDLE_KEYS = ("Format", "ClusterSchedulerConfig", "ComputeQuotas", "Warnings")

SHARING_TO_STRATEGY = {"lend-and-borrow": "LendAndBorrow", "lend": "Lend", "dont-lend": "DontLend"}
STRATEGY_TO_SHARING = {v: k for k, v in SHARING_TO_STRATEGY.items()}
PREEMPT_TO_HYPERPOD = {
    "lower-priority": "LowerPriority",
    "lower-or-newer-equal-priority": "LowerPriority",
    "never": "Never",
}
PREEMPT_FROM_HYPERPOD = {"LowerPriority": "lower-priority", "Never": "never"}
# SageMaker's documented range of BorrowLimit (its model allows 0..10000).
DOCUMENTED_BORROW_PERCENT = (1, 500)


def _model_max(operation: str, *members: str) -> int:
    return int(shape_at(operation, *members).metadata["max"])


def max_priority_classes() -> int:
    return _model_max(SCHEDULER_OPERATION, "SchedulerConfig", "PriorityClasses")


def unlimited_accelerators() -> int:
    """The model's largest accelerator count: an absolute borrow limit this large is unlimited."""
    return _model_max(
        QUOTA_OPERATION,
        "ComputeQuotaConfig",
        "ResourceSharingConfig",
        "AbsoluteBorrowLimits",
        "[]",
        "Accelerators",
    )


def known_instance_types() -> frozenset[str]:
    shape = shape_at(QUOTA_OPERATION, "ComputeQuotaConfig", "ComputeQuotaResources", "[]", "InstanceType")
    return frozenset(getattr(shape, "enum", []) or [])


def quota_name(team_name: str) -> str:
    return f"{team_name}-quota"


@dataclass(slots=True)
class HyperPodExport:
    """The bundle, what HyperPod cannot express, and any problem SageMaker's model finds in it
    (none, unless the export has a bug: tests assert it is empty)."""

    bundle: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def json(self) -> str:
        return json.dumps(self.bundle, indent=2) + "\n"


# --- Export --------------------------------------------------------------------------------------
def export_policy(state: PolicyState | None = None) -> HyperPodExport:
    """The whole policy as a bundle of HyperPod requests, validated against SageMaker's model."""
    state = state or read_policy()
    warnings: list[str] = []
    arn = _cluster_arn(state, warnings)
    scheduler = _scheduler_request(state, arn, warnings)
    sagemaker_types = known_instance_types()
    quotas = [_quota_request(state, team, arn, sagemaker_types, warnings) for team in state.teams]
    warnings += preemption_cost_warnings(state, "HyperPod")
    bundle = {
        "Format": FORMAT,
        "ClusterSchedulerConfig": scheduler,
        "ComputeQuotas": quotas,
        "Warnings": warnings,
    }
    problems = check_request(SCHEDULER_OPERATION, scheduler, "ClusterSchedulerConfig")
    for i, request in enumerate(quotas):
        problems += check_request(QUOTA_OPERATION, request, f"ComputeQuotas[{i}]")
    return HyperPodExport(bundle=bundle, warnings=warnings, problems=problems)


def _cluster_arn(state: PolicyState, warnings: list[str]) -> str:
    arn = (state.cluster.backend_settings or {}).get(CLUSTER_ARN_SETTING) if state.cluster else None
    if isinstance(arn, str) and arn:
        return arn
    warnings.append(
        f"ClusterArn is the placeholder {PLACEHOLDER_CLUSTER_ARN}: set the cluster's backend setting "
        f"{CLUSTER_ARN_SETTING!r} to your HyperPod cluster's ARN, or edit the requests."
    )
    return PLACEHOLDER_CLUSTER_ARN


def _scheduler_request(state: PolicyState, arn: str, warnings: list[str]) -> dict[str, Any]:
    """The cluster policy and priority classes as one CreateClusterSchedulerConfig request."""
    policy = state.policy
    limit = max_priority_classes()
    classes = list(state.priority_classes)  # highest weight first
    if len(classes) > limit:
        dropped = ", ".join(f"{pc.name} ({pc.weight})" for pc in classes[limit:])
        warnings.append(
            f"HyperPod takes at most {limit} priority classes: the {limit} of highest weight are "
            f"exported; left out: {dropped}."
        )
        classes = classes[:limit]
    if policy.task_ranking == "first-come-first-serve":
        warnings.append(
            "task_ranking is first-come-first-serve: HyperPod always ranks a team's tasks by their "
            "priority class, so tasks will be ranked by the exported classes."
        )
    if policy.queueing == "strict-fifo":
        warnings.append("queueing is strict-fifo: HyperPod has no strict FIFO queueing (it is best-effort).")
    if policy.fair_share_half_life_s and policy.fair_share_history_percent:
        warnings.append(
            f"fair share counts borrowing over time (half-life {policy.fair_share_half_life_s} s, "
            f"{policy.fair_share_history_percent}% history): HyperPod's fair share looks at this instant "
            "only (docs/fairness.md)."
        )
    cluster_name = state.cluster.name if state.cluster else "cluster"
    return {
        "Name": _entity_name(f"gpugov-{cluster_name}"),
        "ClusterArn": arn,
        "SchedulerConfig": {
            "PriorityClasses": [{"Name": pc.name, "Weight": pc.weight} for pc in classes],
            "FairShare": "Enabled" if policy.idle_allocation == "fair-share" else "Disabled",
            "IdleResourceSharing": "Enabled" if policy.share_unallocated else "Disabled",
        },
        "Description": _description(f"Cluster policy exported by gpugov from {cluster_name}")[:1024],
    }


def _description(text: str) -> str:
    """``text`` without control and unassigned characters, which SageMaker's description
    pattern (letters, marks, separators, symbols, numbers, punctuation) refuses."""
    return "".join(c for c in text if not unicodedata.category(c).startswith("C"))


def _entity_name(text: str) -> str:
    """``text`` as a SageMaker entity name: letters, digits and '-', at most 63 characters."""
    cleaned = "".join(c if c.isascii() and c.isalnum() else "-" for c in text).strip("-")
    return (cleaned or "gpugov")[:63].rstrip("-")


def _quota_request(
    state: PolicyState, team: Team, arn: str, sagemaker_types: frozenset[str], warnings: list[str]
) -> dict[str, Any]:
    """One team as a CreateComputeQuota request; what does not fit goes to ``warnings``."""
    quotas = [q for q in state.quotas(team) if _exportable(team, q, sagemaker_types, warnings)]
    resources = [_quota_resources(team, q, warnings) for q in quotas]

    # Borrow limits: the team-wide percentage is the most common one (ties: the one covering
    # more GPUs of quota); the quotas with another percentage get an absolute limit.
    percents: dict[int, tuple[int, int]] = {}
    for q in quotas:
        if q.borrow_limit_kind == BorrowLimitKind.PERCENT:
            count, gpus = percents.get(q.borrow_limit_percent, (0, 0))
            percents[q.borrow_limit_percent] = (count + 1, gpus + q.quota)
    team_percent = max(percents, key=lambda pct: (*percents[pct], -pct)) if percents else 50
    absolute: list[dict[str, Any]] = []
    for q in quotas:
        limit = _absolute_borrow_limit(team, q, team_percent, warnings)
        entry: dict[str, Any] = {"InstanceType": q.instance_type.name}
        if limit is not None:
            entry["Accelerators"] = limit
        entry.update(
            _other_resources(
                team, q, q.borrow_limit_vcpus, q.borrow_limit_memory_gib, q.borrow_limit_partitions, warnings
            )
        )
        if len(entry) > 1:
            absolute.append(entry)
    low, high = DOCUMENTED_BORROW_PERCENT
    if percents and not low <= team_percent <= high:
        warnings.append(
            f"{team.name}: borrow limit {team_percent}% is outside the 1-500% that SageMaker documents "
            "(its model accepts 0-10000)."
        )
    sharing: dict[str, Any] = {"Strategy": SHARING_TO_STRATEGY[team.sharing], "BorrowLimit": team_percent}
    if absolute:
        sharing["AbsoluteBorrowLimits"] = absolute

    _team_warnings(team, warnings)
    request: dict[str, Any] = {
        "Name": _entity_name(quota_name(team.name)),
        "ClusterArn": arn,
        "ComputeQuotaConfig": {
            "ComputeQuotaResources": resources,
            "ResourceSharingConfig": sharing,
            "PreemptTeamTasks": PREEMPT_TO_HYPERPOD[team.preempt_team_tasks],
        },
        "ComputeQuotaTarget": {"TeamName": team.name, "FairShareWeight": team.fair_share_weight},
        "ActivationState": "Enabled" if team.active else "Disabled",
    }
    if team.display_name:
        request["Description"] = _description(team.display_name)
    return request


def _quota_resources(team: Team, quota: TeamQuota, warnings: list[str]) -> dict[str, Any]:
    """A quota as a ``ComputeQuotaResourceConfig`` (docs/resources.md 2): ``Count`` for a quota
    in instances, else its GPUs (left out when they are 0 and another resource is named: the
    ratio then starts from that one, as in gpugov) and the other resources it names."""
    entry: dict[str, Any] = {"InstanceType": quota.instance_type.name}
    if quota.instances is not None:
        entry["Count"] = quota.instances
        return entry
    others = _other_resources(team, quota, quota.vcpus, quota.memory_gib, quota.partitions, warnings)
    if quota.quota or not others:
        entry["Accelerators"] = quota.quota
    entry.update(others)
    return entry


def _other_resources(
    team: Team,
    quota: TeamQuota,
    vcpus: int | None,
    memory_gib: int | None,
    partitions: dict[str, int],
    warnings: list[str],
) -> dict[str, Any]:
    """VCpu, MemoryInGiB and AcceleratorPartition of an entry; HyperPod takes one partition
    profile an entry, so a quota naming several keeps the largest count (a warning)."""
    out: dict[str, Any] = {}
    if vcpus is not None:
        out["VCpu"] = vcpus
    if memory_gib is not None:
        out["MemoryInGiB"] = memory_gib
    if partitions:
        profile, count = max(sorted(partitions.items()), key=lambda item: item[1])
        out["AcceleratorPartition"] = {"Type": profile, "Count": count}
        if len(partitions) > 1:
            left_out = ", ".join(f"{p}: {c}" for p, c in sorted(partitions.items()) if p != profile)
            warnings.append(
                f"{team.name} / {quota.instance_type.name}: HyperPod takes one partition profile per "
                f"instance type; {profile}: {count} is exported, left out: {left_out}."
            )
    return out


def _exportable(team: Team, quota: TeamQuota, sagemaker_types: frozenset[str], warnings: list[str]) -> bool:
    if quota.instance_type.name in sagemaker_types:
        return True
    warnings.append(
        f"{team.name}: quota of {quota.quota} GPUs of {quota.instance_type.name} left out: SageMaker "
        "does not know that instance type."
    )
    return False


def _absolute_borrow_limit(
    team: Team, quota: TeamQuota, team_percent: int, warnings: list[str]
) -> int | None:
    """The quota's borrow limit in GPUs when the team-wide percentage does not say it."""
    name = f"{team.name} / {quota.instance_type.name}"
    if quota.borrow_limit_kind == BorrowLimitKind.ABSOLUTE:
        return quota.borrow_limit or 0
    if quota.borrow_limit_kind == BorrowLimitKind.UNLIMITED:
        warnings.append(
            f"{name}: unlimited borrowing is approximated by an absolute borrow limit of "
            f"{unlimited_accelerators()} accelerators (the model's maximum)."
        )
        return unlimited_accelerators()
    if quota.borrow_limit_percent != team_percent:
        gpus = quota.quota * quota.borrow_limit_percent // 100
        warnings.append(
            f"{name}: borrow limit {quota.borrow_limit_percent}% differs from the team's {team_percent}% "
            f"(HyperPod has one percentage per team): exported as an absolute limit of {gpus} GPUs."
        )
        return gpus
    return None


def _team_warnings(team: Team, warnings: list[str]) -> None:
    """Team settings HyperPod has no field for."""
    if not team.active:
        warnings.append(
            f"{team.name} is inactive: exported with ActivationState Disabled. In gpugov none of its "
            "jobs start; in HyperPod a disabled compute allocation only stops applying its quota."
        )
    if team.preempt_team_tasks == "lower-or-newer-equal-priority":
        warnings.append(
            f"{team.name}: preempt_team_tasks lower-or-newer-equal-priority is exported as LowerPriority "
            "(HyperPod cannot preempt newer tasks of equal priority)."
        )
    if team.reclaim != "any":
        warnings.append(
            f"{team.name}: reclaim {team.reclaim} cannot be expressed (HyperPod always reclaims lent quota)."
        )
    if team.preempt_while_borrowing or team.preempt_while_borrowing_max_priority is not None:
        setting = team.preempt_while_borrowing or "default"
        if team.preempt_while_borrowing_max_priority is not None:
            setting += f", max priority {team.preempt_while_borrowing_max_priority}"
        warnings.append(f"{team.name}: preempt_while_borrowing ({setting}) cannot be expressed in HyperPod.")
    warnings.extend(limit_warnings(team, "HyperPod"))
    for quota in team.quotas.all():
        if quota.lend_limit is not None:
            warnings.append(
                f"{team.name} / {quota.instance_type.name}: lend limit {quota.lend_limit} GPUs cannot be "
                "expressed (HyperPod lends the whole unused quota)."
            )


# --- Import --------------------------------------------------------------------------------------
class ImportRefused(Exception):
    """The document is not a valid policy: every problem, each with its JSON path."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


def parse(text: str | bytes, state: PolicyState | None = None) -> ImportedPolicy:
    """A bundle (or one request) as the policy it sets. Raises ImportRefused listing every
    problem with its JSON path; nothing is written here."""
    state = state or read_policy()
    document = _load_json(text)
    scheduler, quotas = _split(document)
    problems: list[Problem] = []
    if scheduler is not None:
        problems += check_request(SCHEDULER_OPERATION, scheduler[1], scheduler[0])
    for path, request in quotas:
        problems += check_request(QUOTA_OPERATION, request, path)
    if problems:
        raise ImportRefused(problems)

    imported = ImportedPolicy()
    if scheduler is not None:
        _read_scheduler(scheduler[0], scheduler[1], imported, problems)
    seen_teams: dict[str, str] = {}
    known_types = {t.name: t for t in state.instance_types}
    for path, request in quotas:
        team = _read_quota(path, request, known_types, imported, problems)
        if team is None:
            continue
        team_path = join_path(path, "ComputeQuotaTarget.TeamName")
        if team.name in seen_teams:
            problems.append(
                Problem(team_path, f"team {team.name!r} is already given at {seen_teams[team.name]}")
            )
        seen_teams[team.name] = team_path
        imported.teams.append(team)
    if problems:
        raise ImportRefused(problems)
    _keep_equivalent_settings(imported, state)
    arn = _configured_arn(state)
    for path, request in ([scheduler] if scheduler else []) + quotas:
        given = request.get("ClusterArn")
        if arn and given != arn:
            imported.warnings.append(
                f"{join_path(path, 'ClusterArn')}: {given!r} is not this cluster's ARN {arn!r}."
            )
    return imported


def _keep_equivalent_settings(imported: ImportedPolicy, state: PolicyState) -> None:
    """Leave alone what the export approximated and the import says back unchanged: a team's
    ``lower-or-newer-equal-priority`` (exported as LowerPriority), and a percentage borrow limit
    exported as the absolute limit it amounts to. Re-importing an export then changes nothing."""
    teams = {team.name: team for team in state.teams}
    for settings in imported.teams:
        team = teams.get(settings.name)
        if team is None:
            continue
        if (
            settings.values.get("preempt_team_tasks") == "lower-priority"
            and team.preempt_team_tasks == "lower-or-newer-equal-priority"
        ):
            del settings.values["preempt_team_tasks"]
        current = {q.instance_type.name: q for q in state.quotas(team)}
        for quota in settings.quotas or []:
            existing = current.get(quota.instance_type)
            values = quota.values
            # A request names only the resources it gives: one the stored quota names and the
            # request leaves out goes back to its default (the request is the whole quota).
            for name, default in QUOTA_RESOURCE_DEFAULTS.items():
                if existing is not None and name not in values and getattr(existing, name) != default:
                    values[name] = default
            if (
                existing is not None
                and existing.borrow_limit_kind == BorrowLimitKind.PERCENT
                and values.get("borrow_limit_kind") == BorrowLimitKind.ABSOLUTE
                and values.get("quota") == existing.quota
                and values.get("borrow_limit") == existing.quota * existing.borrow_limit_percent // 100
            ):
                for name in ("borrow_limit_kind", "borrow_limit", "borrow_limit_percent"):
                    values.pop(name, None)


def _configured_arn(state: PolicyState) -> str | None:
    arn = (state.cluster.backend_settings or {}).get(CLUSTER_ARN_SETTING) if state.cluster else None
    return arn if isinstance(arn, str) and arn else None


def _load_json(text: str | bytes) -> Any:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ImportRefused([Problem("", f"is not UTF-8 text (byte {exc.start})")]) from exc
    if not text.strip():
        raise ImportRefused([Problem("", "is empty: paste or upload the exported JSON")])
    try:
        document = bounded_json.loads(text, long_numbers=True)
    except json.JSONDecodeError as exc:
        raise ImportRefused(
            [Problem("", f"is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}")]
        ) from exc
    except ValueError as exc:  # nested too deeply, or NaN / Infinity
        raise ImportRefused([Problem("", f"is not valid JSON: {exc}")]) from exc
    long_numbers = list(_long_numbers(document, ""))
    if long_numbers:
        raise ImportRefused(long_numbers)
    return document


def _long_numbers(value: Any, path: str) -> Iterator[Problem]:
    """Each integer too long for Python, with its path: int() would raise on it later."""
    if isinstance(value, bounded_json.LongNumber):
        yield Problem(path, value.describe())
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _long_numbers(item, join_path(path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _long_numbers(item, f"{path}[{i}]")


def _split(document: Any) -> tuple[tuple[str, Any] | None, list[tuple[str, Any]]]:
    """The scheduler request and the quota requests with their paths, from a bundle or from a
    single request (recognised by its members)."""
    if not isinstance(document, dict):
        raise ImportRefused([Problem("", f"must be a JSON object, not {type(document).__name__}")])
    if "SchedulerConfig" in document:
        return ("", document), []
    if "ComputeQuotaConfig" in document or "ComputeQuotaTarget" in document:
        return None, [("", document)]
    problems = [
        Problem(key, f"is not a member of a {FORMAT} bundle (members: {', '.join(BUNDLE_KEYS)})")
        for key in document
        if key not in BUNDLE_KEYS
    ]
    if "Format" in document and document["Format"] != FORMAT:
        problems.append(Problem("Format", f"{document['Format']!r} is not {FORMAT!r}"))
    if "ClusterSchedulerConfig" not in document and "ComputeQuotas" not in document:
        problems.append(
            Problem("", "holds neither ClusterSchedulerConfig nor ComputeQuotas, nor is it a single request")
        )
    quotas = document.get("ComputeQuotas", [])
    if not isinstance(quotas, list):
        problems.append(Problem("ComputeQuotas", f"must be a list, not {type(quotas).__name__}"))
        quotas = []
    warnings = document.get("Warnings", [])
    if not isinstance(warnings, list):
        problems.append(Problem("Warnings", f"must be a list of texts, not {type(warnings).__name__}"))
    if problems:
        raise ImportRefused(problems)
    scheduler = document.get("ClusterSchedulerConfig")
    return (
        ("ClusterSchedulerConfig", scheduler) if scheduler is not None else None,
        [(f"ComputeQuotas[{i}]", request) for i, request in enumerate(quotas)],
    )


def _read_scheduler(
    path: str, request: dict[str, Any], imported: ImportedPolicy, problems: list[Problem]
) -> None:
    config = request["SchedulerConfig"]
    fair_share = config.get("FairShare", "Enabled")  # SageMaker's default
    imported.cluster_policy["idle_allocation"] = (
        "fair-share" if fair_share == "Enabled" else "first-come-first-serve"
    )
    if "IdleResourceSharing" in config:
        imported.cluster_policy["share_unallocated"] = config["IdleResourceSharing"] == "Enabled"
    if "PriorityClasses" in config:
        classes: dict[str, int] = {}
        for i, item in enumerate(config["PriorityClasses"]):
            item_path = join_path(path, f"SchedulerConfig.PriorityClasses[{i}].Name")
            name = item["Name"]
            if name in classes:
                problems.append(Problem(item_path, f"priority class {name!r} is given twice"))
            elif len(name) > 63:
                problems.append(Problem(item_path, f"{name!r} is longer than 63 characters"))
            classes[name] = item["Weight"]
        imported.priority_classes = classes


def _read_quota(
    path: str,
    request: dict[str, Any],
    known_types: dict[str, Any],
    imported: ImportedPolicy,
    problems: list[Problem],
) -> TeamSettings | None:
    """One CreateComputeQuota request as a team's settings and its complete set of quotas."""
    target = request["ComputeQuotaTarget"]
    name = target["TeamName"]
    if len(name) > choices.TEAM_NAME_MAX_LENGTH:
        problems.append(
            Problem(
                join_path(path, "ComputeQuotaTarget.TeamName"),
                f"{name!r} is longer than {choices.TEAM_NAME_MAX_LENGTH} characters",
            )
        )
        return None
    config = request["ComputeQuotaConfig"]
    sharing = config.get("ResourceSharingConfig", {"Strategy": "LendAndBorrow"})
    values: dict[str, Any] = {
        "active": request.get("ActivationState", "Enabled") == "Enabled",
        "fair_share_weight": target.get("FairShareWeight", 0),  # SageMaker's default is 0
        "sharing": STRATEGY_TO_SHARING[sharing["Strategy"]],
        "preempt_team_tasks": PREEMPT_FROM_HYPERPOD[config.get("PreemptTeamTasks", "LowerPriority")],
    }
    if "Description" in request:
        description = request["Description"]
        if len(description) > 100:
            problems.append(
                Problem(
                    join_path(path, "Description"), "is longer than 100 characters (gpugov's display name)"
                )
            )
        values["display_name"] = description[:100]

    percent = sharing.get("BorrowLimit", 50)
    quotas: dict[str, QuotaSettings] = {}
    resources = config.get("ComputeQuotaResources", [])
    for item_path, type_name, gpus, others in _resources(
        join_path(path, "ComputeQuotaConfig.ComputeQuotaResources"), resources, known_types, problems
    ):
        quotas[type_name] = QuotaSettings(
            type_name,
            {
                "quota": gpus or 0,
                "borrow_limit_kind": "percent",
                "borrow_limit_percent": percent,
                "borrow_limit": None,
                **others,
            },
            path=item_path,
        )
    limits = sharing.get("AbsoluteBorrowLimits", [])
    for item_path, type_name, gpus, others in _resources(
        join_path(path, "ComputeQuotaConfig.ResourceSharingConfig.AbsoluteBorrowLimits"),
        limits,
        known_types,
        problems,
        borrow_limits=True,
    ):
        quota = quotas.setdefault(
            type_name,
            QuotaSettings(type_name, {"quota": 0}, path=item_path),
        )
        quota.values.update(others)
        if gpus is None:
            continue  # no Accelerators: the GPUs keep the team's percentage
        # The percentage says nothing for a quota with a limit in GPUs: its stored one is kept.
        quota.values.pop("borrow_limit_percent", None)
        if gpus >= unlimited_accelerators():
            quota.values.update(borrow_limit_kind="unlimited", borrow_limit=None)
        else:
            quota.values.update(borrow_limit_kind="absolute", borrow_limit=gpus)
    return TeamSettings(name, values, list(quotas.values()), path=path)


def _resources(
    path: str,
    resources: Iterable[dict[str, Any]],
    known_types: dict[str, Any],
    problems: list[Problem],
    *,
    borrow_limits: bool = False,
) -> Iterator[tuple[str, str, int | None, dict[str, Any]]]:
    """(path, instance type, GPUs or None when not given, the other resources as quota fields)
    of each entry of the list of per-type resources at ``path`` that can be imported (an entry
    of ``AbsoluteBorrowLimits`` with ``borrow_limits``); an entry that repeats an instance type
    is a problem."""
    seen: set[str] = set()
    for i, resource in enumerate(resources):
        item_path = join_path(path, f"[{i}]")
        type_name = resource["InstanceType"]
        instance_type = known_types.get(type_name)
        if instance_type is None:
            known = ", ".join(sorted(known_types)) or "none yet"
            problems.append(
                Problem(
                    join_path(item_path, "InstanceType"),
                    f"{type_name!r} is not an instance type of this cluster (known: {known})",
                )
            )
            continue
        before = len(problems)
        others = _resource_fields(item_path, resource, instance_type, problems, borrow_limits)
        named = any(member in resource for member in (*HYPERPOD_RESOURCES, "AcceleratorPartition"))
        gpus = _gpus(item_path, resource, instance_type, problems, named, borrow_limits)
        if len(problems) > before:
            continue
        if type_name in seen:
            problems.append(Problem(join_path(item_path, "InstanceType"), f"{type_name!r} is given twice"))
            continue
        seen.add(type_name)
        if resource.get("Count") is not None and not borrow_limits:
            others["instances"] = int(resource["Count"])
        yield item_path, type_name, gpus, others


# ComputeQuotaResourceConfig's members besides GPUs -> (gpugov's resource, its per-node field).
HYPERPOD_RESOURCES = {
    "VCpu": ("vcpus", "vcpus_per_node"),
    "MemoryInGiB": ("memory_gib", "memory_gib_per_node"),
}


def _resource_fields(
    path: str, resource: dict[str, Any], instance_type: Any, problems: list[Problem], borrow_limits: bool
) -> dict[str, Any]:
    """VCpu, MemoryInGiB and AcceleratorPartition of an entry as the quota's fields (or its
    borrow limits' fields), each checked against the instance type (docs/resources.md 8)."""
    prefix = "borrow_limit_" if borrow_limits else ""
    out: dict[str, Any] = {}
    for member, (name, per_node) in HYPERPOD_RESOURCES.items():
        if member not in resource:
            continue
        value = resource[member]
        if not getattr(instance_type, per_node):
            problems.append(
                Problem(
                    join_path(path, member),
                    f"{value!r}: {instance_type.name} declares no {name} (set its {per_node} first)",
                )
            )
        elif isinstance(value, float) and not value.is_integer():
            problems.append(Problem(join_path(path, member), f"{value!r}: gpugov counts whole {name}"))
        else:
            out[f"{prefix}{name}"] = int(value)
    partition = resource.get("AcceleratorPartition")
    if partition is not None:
        have = instance_type.partitions_per_node or {}
        profile = partition["Type"]
        if profile not in have:
            known = ", ".join(sorted(have)) or "none"
            problems.append(
                Problem(
                    join_path(path, "AcceleratorPartition.Type"),
                    f"{profile!r} is no partition profile of {instance_type.name} (it has: {known})",
                )
            )
        else:
            out[f"{prefix}partitions"] = {profile: int(partition["Count"])}
    return out


def _gpus(
    path: str,
    resource: dict[str, Any],
    instance_type: Any,
    problems: list[Problem],
    has_others: bool = False,
    borrow_limits: bool = False,
) -> int | None:
    """GPUs of a resource entry: ``Accelerators``, or ``Count`` instances of the type's nodes
    (which stand alone); None when neither is given, which only an entry naming another
    resource may do."""
    accelerators, count = resource.get("Accelerators"), resource.get("Count")
    if count is not None:
        if has_others and not borrow_limits:
            problems.append(
                Problem(
                    join_path(path, "Count"),
                    f"{count}: instances stand alone in gpugov (N nodes' worth of every resource); give "
                    "VCpu, MemoryInGiB and AcceleratorPartition without Count",
                )
            )
            return None
        from_count = count * instance_type.gpus_per_node
        if accelerators is not None and accelerators != from_count:
            problems.append(
                Problem(
                    join_path(path, "Accelerators"),
                    f"{accelerators} disagrees with Count {count} x {instance_type.gpus_per_node} GPUs per node",
                )
            )
            return None
        return int(from_count)
    if accelerators is None:
        if not has_others:
            problems.append(
                Problem(
                    join_path(path, "Accelerators"),
                    "is required (or Count, VCpu, MemoryInGiB, AcceleratorPartition)",
                )
            )
        return None
    return int(accelerators)
