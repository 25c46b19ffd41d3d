"""The policy as Kubernetes Kueue manifests (API ``kueue.x-k8s.io/v1beta2``).

POLICY.md follows HyperPod, whose engine is Kueue with every team in one cohort, so most
settings map one to one:

- an instance type -> a ResourceFlavor (nodes labelled ``node.kubernetes.io/instance-type``);
- the cluster -> one Cohort; with ``share_unallocated`` the capacity in no team's quota is the
  Cohort's own ``nominalQuota``, which Kueue lends to every ClusterQueue of the cohort;
- a team -> a ClusterQueue (``nominalQuota`` = quota, ``borrowingLimit`` from the borrow limit
  and ``sharing``, ``lendingLimit`` from ``lend_limit`` and ``dont-lend``, ``fairSharing.weight``,
  ``preemption`` from ``preempt_team_tasks`` / ``reclaim`` / ``preempt_while_borrowing``,
  ``queueingStrategy`` from ``queueing``, ``stopPolicy: Hold`` for an inactive team) and a
  LocalQueue of the same name in the team's namespace;
- a priority class -> a WorkloadPriorityClass whose value is the weight.

GPUs are the resource ``nvidia.com/gpu``. What Kueue configures outside these objects (fair
sharing is a setting of Kueue's controller, as is admission fair sharing, the nearest to
fairness over time, docs/fairness.md) or cannot express (what a team may ask for,
docs/limits.md; minimum runtimes, docs/preemption.md section 1) is a warning.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from allocations.choices import BorrowLimitKind
from allocations.models import Team, TeamQuota

from .policy import PolicyState, limit_warnings, preemption_cost_warnings, read_policy

API_VERSION = "kueue.x-k8s.io/v1beta2"
GPU = "nvidia.com/gpu"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpugov"}
KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass")
# A DNS subdomain (RFC 1123), the name rule of these objects and of their references.
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

WITHIN_CLUSTER_QUEUE = {
    "lower-priority": "LowerPriority",
    "lower-or-newer-equal-priority": "LowerOrNewerEqualPriority",
    "never": "Never",
}
RECLAIM_WITHIN_COHORT = {"any": "Any", "lower-priority": "LowerPriority", "never": "Never"}
QUEUEING_STRATEGY = {"best-effort-fifo": "BestEffortFIFO", "strict-fifo": "StrictFIFO"}


@dataclass(slots=True)
class KueueExport:
    """The manifests, what Kueue configures elsewhere or cannot express, and anything a
    Kubernetes API server would refuse (none unless a name is not a DNS name: tests assert it)."""

    manifests: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def yaml(self) -> str:
        """Multi-document YAML, as ``kubectl apply -f`` takes it."""
        return yaml.safe_dump_all(self.manifests, sort_keys=False, explicit_start=True)

    def json(self) -> str:
        """A ``v1`` List of the same objects (``kubectl apply -f`` takes it too)."""
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": self.manifests}, indent=2) + "\n"


def cohort_name(state: PolicyState) -> str:
    """The cohort's name: the cluster's name as a DNS label, else ``gpugov``."""
    name = state.cluster.name if state.cluster else ""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63].rstrip("-")
    return cleaned or "gpugov"


def _metadata(name: str, namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata["labels"] = dict(MANAGED_BY)
    return metadata


def export_manifests(state: PolicyState | None = None) -> KueueExport:
    """Every manifest of the policy, in the order they can be applied (flavors and the cohort
    before the queues that refer to them)."""
    state = state or read_policy()
    warnings: list[str] = []
    cohort = cohort_name(state)
    manifests: list[dict[str, Any]] = []

    # 1. Flavors: one per instance type.
    for instance_type in state.instance_types:
        manifests.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceFlavor",
                "metadata": _metadata(instance_type.name),
                "spec": {"nodeLabels": {INSTANCE_TYPE_LABEL: instance_type.name}},
            }
        )

    # 2. The cohort, holding the unallocated capacity when the policy shares it.
    manifests.append(_cohort(state, cohort))

    # 3. A ClusterQueue and a LocalQueue per team.
    for team in state.teams:
        manifests.append(_cluster_queue(state, team, cohort, warnings))
        warnings.extend(limit_warnings(team, "Kueue"))
        manifests.append(
            {
                "apiVersion": API_VERSION,
                "kind": "LocalQueue",
                "metadata": _metadata(team.name, namespace=team.name),
                "spec": {"clusterQueue": team.name},
            }
        )

    # 4. Priority classes.
    for pc in state.priority_classes:
        manifest: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": _metadata(pc.name),
            "value": pc.weight,
        }
        if pc.description:
            manifest["description"] = pc.description
        manifests.append(manifest)

    _policy_warnings(state, warnings)
    warnings += preemption_cost_warnings(state, "Kueue")
    problems = [problem for manifest in manifests for problem in structural_problems(manifest)]
    return KueueExport(manifests=manifests, warnings=warnings, problems=problems)


def _cohort(state: PolicyState, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if state.policy.share_unallocated and state.instance_types:
        quota_sum: dict[str, int] = {}
        for team in state.teams:
            for quota in state.quotas(team):
                quota_sum[quota.instance_type.name] = quota_sum.get(quota.instance_type.name, 0) + quota.quota
        ready = state.ready_capacity
        spec["resourceGroups"] = [
            {
                "coveredResources": [GPU],
                "flavors": [
                    {
                        "name": t.name,
                        "resources": [
                            {
                                "name": GPU,
                                "nominalQuota": max(0, ready.get(t.name, 0) - quota_sum.get(t.name, 0)),
                            }
                        ],
                    }
                    for t in state.instance_types
                ],
            }
        ]
    return {"apiVersion": API_VERSION, "kind": "Cohort", "metadata": _metadata(name), "spec": spec}


def borrowing_limit(team: Team, quota: TeamQuota | None) -> int | None:
    """GPUs the team may borrow on top of its quota (None: no limit), POLICY.md section 2."""
    if team.sharing != "lend-and-borrow":
        return 0
    if quota is None:
        return 0  # a missing quota is quota 0 with the default 50%: 0 GPUs
    if quota.borrow_limit_kind == BorrowLimitKind.UNLIMITED:
        return None
    if quota.borrow_limit_kind == BorrowLimitKind.ABSOLUTE:
        return quota.borrow_limit or 0
    return quota.quota * quota.borrow_limit_percent // 100


def lending_limit(team: Team, quota: TeamQuota | None) -> int | None:
    """GPUs of the quota others may use (None: the whole quota)."""
    if team.sharing == "dont-lend":
        return 0
    if quota is None or quota.lend_limit is None:
        return None
    return min(quota.lend_limit, quota.quota)


def _cluster_queue(state: PolicyState, team: Team, cohort: str, warnings: list[str]) -> dict[str, Any]:
    quotas = {q.instance_type.name: q for q in state.quotas(team)}
    flavors = []
    for instance_type in state.instance_types:
        quota = quotas.get(instance_type.name)
        resource: dict[str, Any] = {"name": GPU, "nominalQuota": quota.quota if quota else 0}
        borrow = borrowing_limit(team, quota)
        if borrow is not None:
            resource["borrowingLimit"] = borrow
        lend = lending_limit(team, quota)
        if lend is not None:
            resource["lendingLimit"] = lend
        flavors.append({"name": instance_type.name, "resources": [resource]})

    preemption: dict[str, Any] = {
        "reclaimWithinCohort": RECLAIM_WITHIN_COHORT[team.reclaim],
        "withinClusterQueue": WITHIN_CLUSTER_QUEUE[team.preempt_team_tasks],
    }
    while_borrowing = team.preempt_while_borrowing or (
        "never" if team.reclaim == "never" else "lower-priority"
    )
    # Kueue takes borrowWithinCohort only with classical preemption; under fair sharing its
    # preemption strategies decide, as POLICY.md section 4's fair-share rules do here.
    if state.policy.idle_allocation == "fair-share":
        preemption["borrowWithinCohort"] = {"policy": "Never"}
    elif while_borrowing == "lower-priority":
        borrow_within: dict[str, Any] = {"policy": "LowerPriority"}
        if team.preempt_while_borrowing_max_priority is not None:
            borrow_within["maxPriorityThreshold"] = team.preempt_while_borrowing_max_priority
        preemption["borrowWithinCohort"] = borrow_within
    else:
        preemption["borrowWithinCohort"] = {"policy": "Never"}

    spec: dict[str, Any] = {
        "cohortName": cohort,
        # Workloads of the team's namespace only (the LocalQueue lives there).
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.name}},
        "queueingStrategy": QUEUEING_STRATEGY[state.policy.queueing],
        "fairSharing": {"weight": team.fair_share_weight},
        "preemption": preemption,
    }
    if flavors:
        spec["resourceGroups"] = [{"coveredResources": [GPU], "flavors": flavors}]
    if not team.active:
        spec["stopPolicy"] = "Hold"  # admits nothing new; what runs keeps running
    return {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": _metadata(team.name), "spec": spec}


def _policy_warnings(state: PolicyState, warnings: list[str]) -> None:
    policy = state.policy
    if policy.idle_allocation == "fair-share":
        warnings.append(
            "idle_allocation is fair-share: enable fair sharing in Kueue's controller configuration "
            "(fairSharing.preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]); "
            "it is not part of these manifests."
        )
    else:
        warnings.append(
            "idle_allocation is first-come-first-serve: leave fair sharing off in Kueue's controller "
            "configuration (classical preemption)."
        )
    if policy.task_ranking == "first-come-first-serve":
        warnings.append(
            "task_ranking is first-come-first-serve: Kueue always orders by priority; give workloads no "
            "priority class to rank them by creation time only."
        )
    if policy.fair_share_half_life_s and policy.fair_share_history_percent:
        warnings.append(
            f"fair share counts borrowing over time (half-life {policy.fair_share_half_life_s} s, "
            f"{policy.fair_share_history_percent}% history): closest in Kueue is admission fair sharing "
            f"(admissionFairSharing.usageHalfLifeTime: {policy.fair_share_half_life_s}s in the controller "
            "configuration), which orders admission by decayed usage alone and does not enter preemption "
            "(docs/fairness.md)."
        )


def structural_problems(manifest: dict[str, Any]) -> list[str]:
    """What a Kubernetes API server would refuse beyond the CRD's OpenAPI schema: object names,
    and the CEL rules of the ClusterQueue and Cohort CRDs that gpugov's manifests touch. Needs
    no CRD file, so it runs everywhere."""
    problems: list[str] = []
    kind = manifest.get("kind")
    name = (manifest.get("metadata") or {}).get("name", "")
    where = f"{kind}/{name}"
    if manifest.get("apiVersion") != API_VERSION:
        problems.append(f"{where}: apiVersion {manifest.get('apiVersion')!r} is not {API_VERSION}")
    if kind not in KINDS:
        problems.append(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
    if not isinstance(name, str) or len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        problems.append(f"{where}: metadata.name {name!r} is not a DNS subdomain")
    if kind == "LocalQueue" and not DNS_SUBDOMAIN.match(str(manifest["metadata"].get("namespace", ""))):
        problems.append(f"{where}: metadata.namespace is missing or not a DNS label")
    spec = manifest.get("spec") or {}
    for i, group in enumerate(spec.get("resourceGroups", [])):
        for flavor in group.get("flavors", []):
            # CEL: every flavor lists exactly the covered resources.
            if len(flavor.get("resources", [])) != len(group.get("coveredResources", [])):
                problems.append(
                    f"{where}: resourceGroups[{i}] flavor {flavor.get('name')} does not cover each resource"
                )
            for resource in flavor.get("resources", []):
                for limit in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    value = resource.get(limit)
                    if value is not None and (not isinstance(value, int) or value < 0):
                        problems.append(
                            f"{where}: {flavor.get('name')} {limit} {value!r} must be a whole number >= 0"
                        )
                # CEL: borrowingLimit needs a cohort.
                if kind == "ClusterQueue" and "borrowingLimit" in resource and not spec.get("cohortName"):
                    problems.append(f"{where}: borrowingLimit without a cohortName")
    preemption = spec.get("preemption") or {}
    if (
        preemption.get("reclaimWithinCohort") == "Never"
        and (preemption.get("borrowWithinCohort") or {}).get("policy", "Never") != "Never"
    ):
        problems.append(f"{where}: borrowWithinCohort needs reclaimWithinCohort other than Never")
    return problems
