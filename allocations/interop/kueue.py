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

GPUs are the resource ``nvidia.com/gpu``. Where an instance type counts more (docs/resources.md),
every flavor of the one resource group covers ``cpu``, ``memory`` (in ``Gi``) and
``nvidia.com/mig-<profile>`` too, with each team's quota as the ratio rule resolves it (Kueue
has no ratio rule) and 0 of a resource the flavor's type lacks; a cluster of GPUs alone covers
``nvidia.com/gpu`` alone, as before. What Kueue configures outside these objects (fair
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
from allocations.engine import resources as engine_resources
from allocations.models import InstanceType, Team, TeamQuota
from allocations.policy_fields import (
    INSTANCE_TYPE_FIELDS,
    QUOTA_DEFAULTS,
    QUOTA_FIELDS,
    engine_instance_type,
    engine_quota,
)

from .policy import PolicyState, limit_warnings, preemption_cost_warnings, read_policy

API_VERSION = "kueue.x-k8s.io/v1beta2"
GPU = "nvidia.com/gpu"
CPU = "cpu"
MEMORY = "memory"
MIG_PREFIX = "nvidia.com/"  # a partition profile mig-1g.10gb is nvidia.com/mig-1g.10gb
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
    _resource_warnings(state, warnings)
    warnings += preemption_cost_warnings(state, "Kueue")
    problems = [problem for manifest in manifests for problem in structural_problems(manifest)]
    return KueueExport(manifests=manifests, warnings=warnings, problems=problems)


def _engine_type(instance_type: InstanceType) -> engine_resources.InstanceType:
    return engine_instance_type({f: getattr(instance_type, f) for f in INSTANCE_TYPE_FIELDS})


def kueue_resource(name: str) -> str:
    """gpugov's resource name (docs/resources.md 1) as Kueue's (Kubernetes') resource name."""
    return {engine_resources.GPUS: GPU, engine_resources.VCPUS: CPU, engine_resources.MEMORY: MEMORY}.get(
        name, f"{MIG_PREFIX}{name}"
    )


def quantity(name: str, amount: int) -> int | str:
    """A Kubernetes quantity: memory in GiB as ``Gi``, every other resource a whole number."""
    return f"{amount}Gi" if name == engine_resources.MEMORY else amount


def covered_resources(state: PolicyState) -> list[str]:
    """gpugov's names of the resources the resource group covers: GPUs, then vCPU, memory and
    the partition profiles any instance type declares (docs/resources.md 1's order)."""
    names = [engine_resources.GPUS]
    types = [_engine_type(t) for t in state.instance_types]
    if any(t.vcpus_per_node for t in types):
        names.append(engine_resources.VCPUS)
    if any(t.memory_gib_per_node for t in types):
        names.append(engine_resources.MEMORY)
    names += sorted({profile for t in types for profile, _ in t.partitions_per_node})
    return names


def _quota_resources(instance_type: InstanceType, quota: TeamQuota | None) -> dict[str, int]:
    """A team's quota of each of the type's resources, the ratio rule applied."""
    values = {f: getattr(quota, f) for f in QUOTA_FIELDS} if quota is not None else dict(QUOTA_DEFAULTS)
    return engine_resources.quota_resources(_engine_type(instance_type), engine_quota(values))


def _cohort(state: PolicyState, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if state.policy.share_unallocated and state.instance_types:
        covered = covered_resources(state)
        flavors = []
        for t in state.instance_types:
            quota_sum = dict.fromkeys(covered, 0)
            for team in state.teams:
                quota = next((q for q in state.quotas(team) if q.instance_type_id == t.pk), None)
                if quota is None:
                    continue
                for resource, amount in _quota_resources(t, quota).items():
                    quota_sum[resource] += amount
            per_node = engine_resources.type_resources(_engine_type(t))
            ready_nodes = state.ready_nodes.get(t.name, 0)
            capacity = {r: per_node.get(r, 0) * ready_nodes for r in covered}
            capacity[engine_resources.GPUS] = state.ready_capacity.get(t.name, 0)
            flavors.append(
                {
                    "name": t.name,
                    "resources": [
                        {
                            "name": kueue_resource(r),
                            "nominalQuota": quantity(r, max(0, capacity[r] - quota_sum[r])),
                        }
                        for r in covered
                    ],
                }
            )
        spec["resourceGroups"] = [
            {"coveredResources": [kueue_resource(r) for r in covered], "flavors": flavors}
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


def _other_resource_limits(
    team: Team, instance_type: InstanceType, quota: TeamQuota | None, name: str, amount: int
) -> dict[str, Any]:
    """borrowingLimit and lendingLimit of a resource besides GPUs (docs/resources.md 2): its
    own absolute borrow limit or the percentage, and the whole quota lent (none: dont-lend)."""
    out: dict[str, Any] = {}
    if team.sharing != "lend-and-borrow" or quota is None:
        out["borrowingLimit"] = quantity(name, 0)
    else:
        values = {f: getattr(quota, f) for f in QUOTA_FIELDS}
        max_use = engine_resources.max_use_resources(_engine_type(instance_type), engine_quota(values))
        most = max_use.get(name, amount)
        if most is not None:
            out["borrowingLimit"] = quantity(name, max(0, most - amount))
    if team.sharing == "dont-lend":
        out["lendingLimit"] = quantity(name, 0)
    return out


def _flavor_resources(
    team: Team, instance_type: InstanceType, quota: TeamQuota | None, covered: list[str]
) -> list[dict[str, Any]]:
    """The flavor's entry of every covered resource, in the group's order."""
    resources = _quota_resources(instance_type, quota)
    out = []
    for name in covered:
        if name == engine_resources.GPUS:
            resource: dict[str, Any] = {"name": GPU, "nominalQuota": quota.quota if quota else 0}
            borrow = borrowing_limit(team, quota)
            if borrow is not None:
                resource["borrowingLimit"] = borrow
            lend = lending_limit(team, quota)
            if lend is not None:
                resource["lendingLimit"] = lend
        else:
            amount = resources.get(name, 0)
            resource = {"name": kueue_resource(name), "nominalQuota": quantity(name, amount)}
            resource.update(_other_resource_limits(team, instance_type, quota, name, amount))
        out.append(resource)
    return out


def _cluster_queue(state: PolicyState, team: Team, cohort: str, warnings: list[str]) -> dict[str, Any]:
    quotas = {q.instance_type.name: q for q in state.quotas(team)}
    covered = covered_resources(state)
    flavors = [
        {"name": t.name, "resources": _flavor_resources(team, t, quotas.get(t.name), covered)}
        for t in state.instance_types
    ]

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
        spec["resourceGroups"] = [
            {"coveredResources": [kueue_resource(r) for r in covered], "flavors": flavors}
        ]
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


def _resource_warnings(state: PolicyState, warnings: list[str]) -> None:
    """Kueue's one resource group covers every resource for every flavor: a type that does not
    count vCPU or memory gets a quota of 0 of it there (docs/resources.md 1)."""
    covered = covered_resources(state)
    for t in state.instance_types:
        it = _engine_type(t)
        missing = [
            kueue_resource(name)
            for name, per_node in (
                (engine_resources.VCPUS, it.vcpus_per_node),
                (engine_resources.MEMORY, it.memory_gib_per_node),
            )
            if name in covered and not per_node
        ]
        if missing:
            warnings.append(
                f"{t.name} does not count {' or '.join(missing)}, which other instance types do: Kueue "
                f"covers every resource for every flavor, so its {', '.join(missing)} quota is 0 and a "
                "workload asking for it is not admitted there. Declare its vCPU and memory per node."
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
            # CEL: every flavor lists exactly the covered resources (Kueue's webhook: by name,
            # in their order).
            names = [resource.get("name") for resource in flavor.get("resources", [])]
            if names != list(group.get("coveredResources", [])):
                problems.append(
                    f"{where}: resourceGroups[{i}] flavor {flavor.get('name')} does not cover each resource"
                )
            for resource in flavor.get("resources", []):
                for limit in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    value = resource.get(limit)
                    if isinstance(value, str) and re.fullmatch(r"[0-9]+Gi", value):
                        continue  # memory, in GiB
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
