"""The cluster of a scenario (SCENARIO.md): its nodes, its policy and its teams, read from the
file, and the policy and teams again from the events that update them (``events.py``), each
read into the engine's own dataclass (``Node``, ``ClusterPolicy``, ``Team``) so that the
replay hands them to ``allocate`` unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from allocations.engine.resources import (
    GPUS,
    MEMORY,
    RESERVED,
    VCPUS,
    is_profile_name,
    quota_resources,
    type_resources,
)
from allocations.engine.snapshot import (
    ClusterPolicy,
    IdleAllocation,
    InstanceType,
    Node,
    PreemptTeamTasks,
    PreemptWhileBorrowing,
    PriorityClass,
    Queueing,
    Quota,
    Reclaim,
    Sharing,
    TaskRanking,
    Team,
)

from .reading import Reader, key_path, show

TEAM_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


# --------------------------------------------------------------------------------------------
# Nodes


# docs/resources.md 1: what a node has besides GPUs, as node_pools and nodes entries name it.
POOL_RESOURCE_KEYS = ("vcpus_per_node", "memory_gib_per_node", "partitions_per_node")
NODE_RESOURCE_KEYS = ("vcpus", "memory_gib", "partitions")
# One node's resources: (GPUs, vCPU, memory GiB, partitions by profile).
NodeFigures = tuple[int, int, int, tuple[tuple[str, int], ...]]


def _partitions(r: Reader, raw: object, path: str) -> tuple[tuple[str, int], ...] | None:
    """A mapping of partition profile -> count (docs/resources.md 8), sorted by profile."""
    if not isinstance(raw, Mapping):
        r.bad(path, "must be a mapping of partition profile to a count", raw)
        return None
    out: dict[str, int] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not is_profile_name(key):
            r.bad(
                key_path(path, key),
                "is no partition profile name (lower case letters, digits, '-' and '.', none of "
                + ", ".join(sorted(RESERVED))
                + ")",
                key,
            )
            continue
        count = r.whole(value, key_path(path, key), minimum=1)
        if count is not None:
            out[key] = count
    return tuple(sorted(out.items()))


def _node_figures(
    r: Reader, given: Mapping[str, Any], path: str, keys: Sequence[str], gpus: int
) -> NodeFigures:
    """A node's resources besides its GPUs, from the keys ``keys`` (a pool's or a node's)."""
    vcpus_key, memory_key, partitions_key = keys
    vcpus = r.whole(given[vcpus_key], f"{path}.{vcpus_key}", minimum=1) if vcpus_key in given else 0
    memory = r.whole(given[memory_key], f"{path}.{memory_key}", minimum=1) if memory_key in given else 0
    partitions = (
        _partitions(r, given[partitions_key], f"{path}.{partitions_key}") if partitions_key in given else ()
    )
    return (gpus, vcpus or 0, memory or 0, partitions or ())


def _figures_text(figures: NodeFigures) -> str:
    gpus, vcpus, memory, partitions = figures
    parts = [f"{gpus} GPUs"] + [f"{vcpus} vCPU"] * bool(vcpus) + [f"{memory} GiB"] * bool(memory)
    parts += [f"{count} {profile}" for profile, count in partitions]
    return ", ".join(parts)


# Long: node_pools and nodes are read in SCENARIO.md's order, each entry in a few lines with its
# own path in the errors; both share add_node, which checks every node of a type is alike.
def read_cluster(r: Reader, raw: object) -> tuple[tuple[InstanceType, ...], tuple[Node, ...]]:
    cluster = r.mapping(raw, "cluster", ("node_pools", "nodes"))
    if cluster is None:
        return (), ()
    if not cluster.get("node_pools") and not cluster.get("nodes"):
        r.error("cluster", "needs node_pools or nodes")
    per_type: dict[str, NodeFigures] = {}
    nodes: list[Node] = []
    names: set[str] = set()
    counters: dict[str, int] = {}

    def add_node(name: str, instance_type: str, figures: NodeFigures, path: str) -> None:
        known = per_type.setdefault(instance_type, figures)
        if known != figures:
            if known[0] != figures[0]:
                r.error(
                    path, f"every {instance_type} node must have the same GPUs ({known[0]}), got {figures[0]}"
                )
            else:
                r.error(
                    path,
                    f"every {instance_type} node must have the same resources "
                    f"({_figures_text(known)}), got {_figures_text(figures)}",
                )
            return
        if name in names:
            r.error(path, f"duplicate node name {show(name)}")
            return
        names.add(name)
        nodes.append(Node(name=name, instance_type=instance_type, gpus=figures[0]))

    for i, pool_raw in enumerate(r.sequence(cluster.get("node_pools", []), "cluster.node_pools") or []):
        path = f"cluster.node_pools[{i}]"
        pool = r.mapping(
            pool_raw,
            path,
            ("instance_type", "count", "gpus_per_node", *POOL_RESOURCE_KEYS),
            required=("instance_type", "count", "gpus_per_node"),
        )
        if pool is None or not {"instance_type", "count", "gpus_per_node"} <= pool.keys():
            continue
        errors_before = len(r.errors)
        instance_type = r.text(pool["instance_type"], f"{path}.instance_type")
        count = r.whole(pool["count"], f"{path}.count", minimum=0)
        gpus = r.whole(pool["gpus_per_node"], f"{path}.gpus_per_node", minimum=1)
        figures = _node_figures(r, pool, path, POOL_RESOURCE_KEYS, gpus or 0)
        if instance_type is None or count is None or gpus is None or len(r.errors) > errors_before:
            continue
        for _ in range(count):
            counters[instance_type] = counters.get(instance_type, 0) + 1
            add_node(f"{instance_type}-{counters[instance_type]:04d}", instance_type, figures, path)
    for i, node_raw in enumerate(r.sequence(cluster.get("nodes", []), "cluster.nodes") or []):
        path = f"cluster.nodes[{i}]"
        node = r.mapping(
            node_raw,
            path,
            ("name", "instance_type", "gpus", *NODE_RESOURCE_KEYS),
            required=("name", "instance_type", "gpus"),
        )
        if node is None or not {"name", "instance_type", "gpus"} <= node.keys():
            continue
        errors_before = len(r.errors)
        name = r.text(node["name"], f"{path}.name")
        instance_type = r.text(node["instance_type"], f"{path}.instance_type")
        gpus = r.whole(node["gpus"], f"{path}.gpus", minimum=1)
        figures = _node_figures(r, node, path, NODE_RESOURCE_KEYS, gpus or 0)
        if (
            name is not None
            and instance_type is not None
            and gpus is not None
            and len(r.errors) == errors_before
        ):
            add_node(name, instance_type, figures, path)
    types = tuple(
        InstanceType(name, gpus, vcpus, memory, partitions)
        for name, (gpus, vcpus, memory, partitions) in per_type.items()
    )
    return types, tuple(nodes)


# --------------------------------------------------------------------------------------------
# Settings of one value each, read alike in the policy and the teams

SettingReader = Callable[[Reader, object, str], Any]


def _choice(enum: type[Any]) -> SettingReader:
    return lambda r, value, path: r.choice(value, path, enum)


def _read_settings(
    r: Reader, given: Mapping[str, Any], path: str, readers: Mapping[str, SettingReader]
) -> dict[str, Any]:
    """The keys of ``readers`` that ``given`` has, each read by its reader (with its own path
    in the errors), in the order of ``readers``."""
    return {key: read(r, given[key], f"{path}.{key}") for key, read in readers.items() if key in given}


# --------------------------------------------------------------------------------------------
# Policy

POLICY_KEYS = (
    "idle_allocation",
    "task_ranking",
    "share_unallocated",
    "queueing",
    "priority_classes",
    "fair_share_half_life_s",
    "fair_share_history_percent",
    "min_runtime_s",
    "preemption_grace_s",
)
CLASS_KEYS = ("name", "weight", "min_runtime_s", "preemption_grace_s")
# docs/preemption.md 7: a day at most, a typo above that.
MAX_MIN_RUNTIME_S = 86_400


def _min_runtime(r: Reader, value: object, path: str) -> float | None:
    number = r.number(value, path, minimum=0, what="a number of seconds")
    if number is not None and number > MAX_MIN_RUNTIME_S:
        r.bad(path, f"must be at most {MAX_MIN_RUNTIME_S:,} seconds (a day)", value)
        return None
    return None if number is None else float(number)


def _grace(r: Reader, value: object, path: str) -> float | None:
    """docs/preemption.md 5: how long a victim may take to stop; a day at most, as a minimum
    runtime."""
    return _min_runtime(r, value, path)


_POLICY_READERS: dict[str, SettingReader] = {
    "idle_allocation": _choice(IdleAllocation),
    "task_ranking": _choice(TaskRanking),
    "share_unallocated": Reader.boolean,
    "queueing": _choice(Queueing),
    # Fairness over time (docs/fairness.md); the engine takes seconds as a float.
    "fair_share_half_life_s": lambda r, value, path: _float(r.number(value, path, minimum=0)),
    "fair_share_history_percent": lambda r, value, path: r.whole(value, path, 0, 100),
    "min_runtime_s": _min_runtime,
    "preemption_grace_s": _grace,
}


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def read_policy(r: Reader, raw: object, path: str, base: ClusterPolicy) -> ClusterPolicy:
    """The policy ``base`` with the keys given in ``raw`` replaced (every key is optional)."""
    policy = r.mapping(raw, path, POLICY_KEYS)
    if policy is None:
        return base
    changes = _read_settings(r, policy, path, _POLICY_READERS)
    if "priority_classes" in policy:
        classes: list[PriorityClass] = []
        items = r.sequence(policy["priority_classes"], f"{path}.priority_classes") or []
        if len(items) > 32:
            r.error(f"{path}.priority_classes", f"at most 32 classes, got {len(items)}")
        for i, item_raw in enumerate(items):
            item_path = f"{path}.priority_classes[{i}]"
            item = r.mapping(item_raw, item_path, CLASS_KEYS, required=("name", "weight"))
            if item is None or not {"name", "weight"} <= item.keys():
                continue
            name = r.text(item["name"], f"{item_path}.name")
            weight = r.whole(item["weight"], f"{item_path}.weight", minimum=0, maximum=100)
            # docs/preemption.md 1: the class's own minimum runtime; left out, the policy's.
            min_runtime = None
            if item.get("min_runtime_s") is not None:
                min_runtime = _min_runtime(r, item["min_runtime_s"], f"{item_path}.min_runtime_s")
                if min_runtime is None:
                    continue
            # docs/preemption.md 5: the class's own grace; left out, the policy's.
            grace = None
            if item.get("preemption_grace_s") is not None:
                grace = _grace(r, item["preemption_grace_s"], f"{item_path}.preemption_grace_s")
                if grace is None:
                    continue
            if name is not None and any(c.name == name for c in classes):
                r.error(f"{item_path}.name", f"duplicate priority class {show(name)}")
            elif name is not None and weight is not None:
                classes.append(PriorityClass(name, weight, min_runtime, grace))
        changes["priority_classes"] = tuple(classes)
    return replace(base, **{k: v for k, v in changes.items() if v is not None})


# --------------------------------------------------------------------------------------------
# Teams

TEAM_KEYS = (
    "name",
    "active",
    "quota",
    "sharing",
    "borrow_limit_percent",
    "borrow_limit",
    "lend_limit",
    "fair_share_weight",
    "preempt_team_tasks",
    "reclaim",
    "preempt_while_borrowing",
    "max_running_gpus_per_member",
)
# The team's own settings; its quotas and preemption while borrowing are read below.
_TEAM_READERS: dict[str, SettingReader] = {
    "active": Reader.boolean,
    "sharing": _choice(Sharing),
    "fair_share_weight": lambda r, value, path: r.whole(value, path, 0, 100),
    "preempt_team_tasks": _choice(PreemptTeamTasks),
    "reclaim": _choice(Reclaim),
    # null: no limit (an update_team may lift one).
    "max_running_gpus_per_member": lambda r, value, path: None if value is None else r.whole(value, path, 1),
}


def _per_type(r: Reader, raw: object, path: str, types: Mapping[str, InstanceType]) -> dict[str, object]:
    """A mapping of instance type -> value, every type known to the cluster."""
    if not isinstance(raw, Mapping):
        r.bad(path, "must be a mapping of instance type to GPUs", raw)
        return {}
    out: dict[str, object] = {}
    for key, value in raw.items():
        if key not in types:
            known = ", ".join(types) or "none"
            r.error(key_path(path, key), f"unknown instance type {show(key)} (the cluster has: {known})")
            continue
        out[key] = value
    return out


def _resource_amounts(
    r: Reader, raw: Mapping[Any, Any], path: str, it: InstanceType, extra: tuple[str, ...] = ()
) -> dict[str, int] | None:
    """A mapping of the instance type's resources (and ``extra`` keys) to whole amounts >= 0
    (docs/resources.md 2); None when any is wrong."""
    known = type_resources(it)
    out: dict[str, int] = {}
    ok = True
    for key, value in raw.items():
        if not isinstance(key, str) or (key not in known and key not in extra):
            ok = False
            r.bad(key_path(path, key), _unknown_resource(it, key), key)
            continue
        amount = r.whole(value, key_path(path, key), minimum=0)
        if amount is None:
            ok = False
        else:
            out[key] = amount
    return out if ok else None


def _unknown_resource(it: InstanceType, key: object) -> str:
    """Why ``key`` is no resource of ``it``: a resource the type does not declare, or an unknown
    partition profile (docs/resources.md 8)."""
    if key in (VCPUS, MEMORY):
        return f"{it.name} declares no {key} (add {key}_per_node to its node pool)"
    known = ", ".join(type_resources(it))
    if not it.partitions_per_node:
        return f"no resource of {it.name}, which has no partitions (its resources: {known})"
    return f"unknown resource or partition profile of {it.name} (its resources: {known})"


def _quota_form(r: Reader, raw: Mapping[Any, Any], path: str, it: InstanceType, current: Quota) -> Quota:
    """A quota given per resource or as ``instances`` (docs/resources.md 2)."""
    amounts = _resource_amounts(r, raw, path, it, ("instances",))
    if amounts is None:
        return current
    if "instances" in amounts:
        if len(amounts) > 1:
            others = ", ".join(k for k in amounts if k != "instances")
            r.error(
                f"{path}.instances", f"stands alone: N nodes' worth of every resource (also given: {others})"
            )
            return current
        n = amounts["instances"]
        return replace(current, quota=n * it.gpus_per_node, resources=(), instances=n)
    if not amounts:
        r.bad(path, "must name at least one resource, or instances", dict(raw))
        return current
    others = tuple(sorted((k, v) for k, v in amounts.items() if k != GPUS))
    return replace(current, quota=amounts.get(GPUS, 0), resources=others, instances=None)


def _borrow_limits(r: Reader, raw: Mapping[Any, Any], path: str, it: InstanceType, current: Quota) -> Quota:
    """Absolute borrow limits per resource (docs/resources.md 2); a resource not named keeps
    the percentage."""
    amounts = _resource_amounts(r, raw, path, it)
    if amounts is None:
        return current
    others = tuple(sorted((k, v) for k, v in amounts.items() if k != GPUS))
    return replace(current, borrow_limit=amounts.get(GPUS), borrow_unlimited=False, borrow_limits=others)


# Long: a team entry's keys are read in SCENARIO.md's order, each in a few lines with its own
# path in the errors; split, each part would take the reader, the path and the quotas along.
def read_team(
    r: Reader,
    raw: object,
    path: str,
    types: Mapping[str, InstanceType],
    policy: ClusterPolicy,
    base: Team | None,
) -> Team | None:
    """A team from ``raw``; with ``base`` (update_team) only the keys given change."""
    team = r.mapping(raw, path, TEAM_KEYS, required=("name",))
    if team is None or "name" not in team:
        return None
    name = r.text(team["name"], f"{path}.name")
    if name is None:
        return None
    if base is None and (len(name) > 40 or not TEAM_NAME.match(name)):
        r.bad(f"{path}.name", "must be a DNS label (a-z, 0-9 and '-', at most 40 characters)", name)
    current = base or Team(name=name)
    errors_before = len(r.errors)
    quotas = {t: current.quotas.get(t, Quota()) for t in types}
    changes = _read_settings(r, team, path, _TEAM_READERS)
    if "quota" in team:
        for t, value in _per_type(r, team["quota"], f"{path}.quota", types).items():
            if isinstance(value, Mapping):
                quotas[t] = _quota_form(r, value, f"{path}.quota.{t}", types[t], quotas[t])
                continue
            gpus = r.whole(value, f"{path}.quota.{t}", minimum=0)
            if gpus is not None:
                quotas[t] = replace(quotas[t], quota=gpus, resources=(), instances=None)
    if "borrow_limit_percent" in team:
        pct = r.whole(team["borrow_limit_percent"], f"{path}.borrow_limit_percent", 0, 10000)
        if pct is not None:
            quotas = {t: replace(q, borrow_limit_percent=pct) for t, q in quotas.items()}
    if "borrow_limit" in team:
        raw_limit = team["borrow_limit"]
        if raw_limit == "unlimited":
            quotas = {
                t: replace(q, borrow_limit=None, borrow_unlimited=True, borrow_limits=())
                for t, q in quotas.items()
            }
        elif isinstance(raw_limit, Mapping):
            for t, value in _per_type(r, raw_limit, f"{path}.borrow_limit", types).items():
                if value == "unlimited":
                    quotas[t] = replace(quotas[t], borrow_limit=None, borrow_unlimited=True, borrow_limits=())
                    continue
                if isinstance(value, Mapping):
                    quotas[t] = _borrow_limits(r, value, f"{path}.borrow_limit.{t}", types[t], quotas[t])
                    continue
                gpus = r.whole(value, f"{path}.borrow_limit.{t}", minimum=0)
                if gpus is not None:
                    quotas[t] = replace(
                        quotas[t], borrow_limit=gpus, borrow_unlimited=False, borrow_limits=()
                    )
        else:
            r.bad(
                f"{path}.borrow_limit", "must be 'unlimited' or a mapping of instance type to GPUs", raw_limit
            )
    if "lend_limit" in team:
        for t, value in _per_type(r, team["lend_limit"], f"{path}.lend_limit", types).items():
            if value is None:
                quotas[t] = replace(quotas[t], lend_limit=None)
                continue
            gpus = r.whole(value, f"{path}.lend_limit.{t}", minimum=0)
            if gpus is not None:
                quotas[t] = replace(quotas[t], lend_limit=gpus)
    if "preempt_while_borrowing" in team:
        pwb_path = f"{path}.preempt_while_borrowing"
        pwb = team["preempt_while_borrowing"]
        if isinstance(pwb, str):
            changes["preempt_while_borrowing"] = r.choice(pwb, pwb_path, PreemptWhileBorrowing)
            changes["preempt_while_borrowing_max_priority"] = None
        else:
            spec = r.mapping(pwb, pwb_path, ("policy", "max_priority"), required=("policy",))
            if spec is not None and "policy" in spec:
                changes["preempt_while_borrowing"] = r.choice(
                    spec["policy"], f"{pwb_path}.policy", PreemptWhileBorrowing
                )
                max_priority = spec.get("max_priority")
                if isinstance(max_priority, str):
                    weights = {c.name: c.weight for c in policy.priority_classes}
                    if max_priority not in weights:
                        r.bad(
                            f"{pwb_path}.max_priority",
                            "must be a weight 0..100 or a priority class",
                            max_priority,
                        )
                    max_priority = weights.get(max_priority)
                elif max_priority is not None:
                    max_priority = r.whole(max_priority, f"{pwb_path}.max_priority", 0, 100)
                changes["preempt_while_borrowing_max_priority"] = max_priority

    if len(r.errors) > errors_before:
        r.refused_teams.add(name)
        return None
    for t, q in quotas.items():
        if q.lend_limit is not None and q.lend_limit > q.quota:
            r.error(f"{path}.lend_limit.{t}", f"must be at most the quota ({q.quota}), got {q.lend_limit}")
    result = replace(current, name=name, quotas=quotas, **changes)
    if (
        result.reclaim is Reclaim.NEVER
        and result.preempt_while_borrowing is PreemptWhileBorrowing.LOWER_PRIORITY
    ):
        r.error(
            f"{path}.preempt_while_borrowing",
            "'lower-priority' is refused together with reclaim: never (POLICY.md section 1)",
        )
    return result


def _quota_entry(q: Quota) -> int | dict[str, int]:
    """A quota as a scenario writes it: GPUs, per resource, or instances (docs/resources.md 2)."""
    if q.instances is not None:
        return {"instances": q.instances}
    if q.resources:
        return {GPUS: q.quota, **dict(q.resources)}
    return q.quota


def _absolute_borrow_limits(it: InstanceType, q: Quota) -> dict[str, int]:
    """Every resource's borrow cap as an absolute limit (docs/resources.md 2)."""
    absolute = dict(q.borrow_limits)
    if q.borrow_limit is not None:
        absolute[GPUS] = q.borrow_limit
    return {
        name: absolute.get(name, amount * q.borrow_limit_percent // 100)
        for name, amount in quota_resources(it, q).items()
    }


def team_scenario(team: Team, types: Sequence[str] | Mapping[str, InstanceType]) -> dict[str, Any]:
    """``team`` as an entry of a scenario's ``teams:`` (SCENARIO.md) over the instance types
    ``types`` (names, or the types by name), which ``read_team`` reads back as the same team there.

    A scenario has one borrow percentage per team: the quotas whose percentage differs from the
    team's most common one get the same cap as an absolute limit (``quota * percent // 100``,
    the engine's own rounding), so a replay limits borrowing exactly as the team's rows do; on
    an instance type given with resources beyond GPUs, every resource's cap (docs/resources.md 2)."""
    rows = {name: team.quotas.get(name, Quota()) for name in types}
    percents = [
        q.borrow_limit_percent for q in rows.values() if not q.borrow_unlimited and q.borrow_limit is None
    ]
    percent = (
        max(set(percents), key=lambda p: (percents.count(p), -p))
        if percents
        else Quota().borrow_limit_percent
    )
    out: dict[str, Any] = {
        "name": team.name,
        "active": team.active,
        "sharing": team.sharing.value,
        "fair_share_weight": team.fair_share_weight,
        "preempt_team_tasks": team.preempt_team_tasks.value,
        "reclaim": team.reclaim.value,
        "quota": {name: _quota_entry(q) for name, q in rows.items()},
        "borrow_limit_percent": percent,
    }
    borrow: dict[str, Any] = {}
    lend: dict[str, Any] = {}
    for name, q in rows.items():
        if q.borrow_unlimited:
            borrow[name] = "unlimited"
        elif (
            isinstance(types, Mapping)
            and len(type_resources(types[name])) > 1
            and q.borrow_limit_percent != percent
        ):
            borrow[name] = _absolute_borrow_limits(types[name], q)
        elif q.borrow_limits:
            # docs/resources.md 2: limits per resource; GPUs left out keep the percentage.
            limits = dict(q.borrow_limits)
            if q.borrow_limit is not None:
                limits[GPUS] = q.borrow_limit
            elif q.borrow_limit_percent != percent:
                limits[GPUS] = q.quota * q.borrow_limit_percent // 100
            borrow[name] = limits
        elif q.borrow_limit is not None:
            borrow[name] = q.borrow_limit
        elif q.borrow_limit_percent != percent:
            borrow[name] = q.quota * q.borrow_limit_percent // 100
        if q.lend_limit is not None:
            lend[name] = q.lend_limit
    if borrow:
        out["borrow_limit"] = borrow
    if lend:
        out["lend_limit"] = lend
    if team.preempt_while_borrowing is not None:
        max_priority = team.preempt_while_borrowing_max_priority
        policy = team.preempt_while_borrowing.value
        out["preempt_while_borrowing"] = (
            policy if max_priority is None else {"policy": policy, "max_priority": max_priority}
        )
    if team.max_running_gpus_per_member is not None:
        out["max_running_gpus_per_member"] = team.max_running_gpus_per_member
    return out
