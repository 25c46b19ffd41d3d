"""Scenario files (../shared/spec/SCENARIO.md): YAML or JSON in, validated frozen dataclasses out.

Every problem is reported with the path of the bad value (``jobs[3].gpus: must be a whole number
>= 1, got -2``); all problems of a file are collected and raised together as one
:class:`ScenarioError`, so that nothing is simulated from a file that is partly wrong.

The cluster, teams and policy are built as the engine's own dataclasses (``Node``, ``Team``,
``ClusterPolicy``), so the replay hands them to ``allocate`` unchanged. Events that change teams
or the policy are resolved here, in time order, into the complete ``Team``/``ClusterPolicy``
they leave behind; that same sweep lets each job be judged "can never fit" (POLICY.md section 2)
at its submit time with the events up to then applied.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from allocations.engine.snapshot import (
    ClusterPolicy,
    IdleAllocation,
    InstanceType,
    Job,
    Node,
    PendingCode,
    PendingReason,
    PreemptionReason,
    PreemptTeamTasks,
    PreemptWhileBorrowing,
    PriorityClass,
    Queueing,
    Quota,
    Reclaim,
    Sharing,
    Snapshot,
    TaskRanking,
    Team,
)

NeverFits = Callable[[Snapshot, Job], PendingReason | None]

# Shown in one ScenarioError message; the full list stays on ``ScenarioError.errors``.
MAX_ERRORS_SHOWN = 20
# Unusable trace rows quoted per kind in the skip report.
SKIP_EXAMPLES = 3
MAX_GPUS = 1_000_000  # per job: anything above is a typo, and keeps messages short
TEAM_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class ScenarioError(Exception):
    """A scenario file that cannot be simulated; ``errors`` lists every problem found, each
    starting with the path of the bad value."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        shown = self.errors[:MAX_ERRORS_SHOWN]
        more = len(self.errors) - len(shown)
        text = "\n".join(shown) + (f"\n... and {more} more" if more > 0 else "")
        super().__init__(text)


# --------------------------------------------------------------------------------------------
# The loaded scenario


@dataclass(frozen=True, slots=True)
class ScenarioJob:
    """One job of the file (or one usable row of its trace). ``seq`` is its position in the
    file, which the engine uses where POLICY.md says "then id"."""

    id: str
    team: str
    instance_type: str
    gpus: int
    submit: float
    duration: float | None  # None: runs until cancelled or the end
    seq: int
    priority: str | None = None
    running_since: float | None = None
    path: str = ""  # where it came from, for messages: "jobs[3]" or "jobs_csv line 17"


@dataclass(frozen=True, slots=True)
class NodeDown:
    instance_type: str
    count: int


@dataclass(frozen=True, slots=True)
class NodeUp:
    instance_type: str
    count: int


@dataclass(frozen=True, slots=True)
class Cancel:
    job_id: str


@dataclass(frozen=True, slots=True)
class UpdateTeam:
    """The team as it is after the update (partial updates are resolved at load time)."""

    team: Team


@dataclass(frozen=True, slots=True)
class UpdatePolicy:
    """The policy as it is after the update."""

    policy: ClusterPolicy


EventAction = NodeDown | NodeUp | Cancel | UpdateTeam | UpdatePolicy


@dataclass(frozen=True, slots=True)
class Event:
    at: float
    action: EventAction
    seq: int  # file order, which orders the events of one time
    path: str


@dataclass(frozen=True, slots=True)
class Expect:
    """The ``expect:`` block (SCENARIO.md): the simulator ignores it, tests assert it."""

    until: float | None = None
    running: tuple[str, ...] | None = None
    pending: Mapping[str, str] = field(default_factory=dict)
    preempted: Mapping[str, tuple[str, str]] | None = None
    rejected: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TraceReport:
    """What a ``jobs_csv`` trace gave: rows read, rows used, and the unusable rows skipped by
    kind, with the first few of each kind quoted (line number and value)."""

    path: str
    rows: int
    used: int
    skipped: Mapping[str, int]
    examples: Mapping[str, tuple[str, ...]]

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())

    def describe(self) -> str:
        if not self.skipped:
            return f"{self.path}: used all {self.rows} rows"
        parts = []
        for kind, count in self.skipped.items():
            parts.append(f"{count} {kind} ({'; '.join(self.examples.get(kind, ()))})")
        return f"{self.path}: used {self.used} of {self.rows} rows; skipped " + ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    instance_types: tuple[InstanceType, ...]
    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]
    policy: ClusterPolicy
    jobs: tuple[ScenarioJob, ...]
    events: tuple[Event, ...]
    horizon: float | None = None
    keep_unfit: bool = False
    # Cycles only at multiples of this many seconds (``options.cycle_interval``), as the loop
    # that runs every so many seconds; 0: at every time something happens (SCENARIO.md).
    cycle_interval: int = 0
    # Jobs that can never fit, kept with keep_unfit: they end ``rejected`` with this reason.
    rejected: Mapping[str, PendingReason] = field(default_factory=dict)
    trace: TraceReport | None = None
    expect: Expect | None = None


# --------------------------------------------------------------------------------------------
# Reading values with their paths


def _show(value: object) -> str:
    """A value as the user wrote it, for an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, Mapping | list | tuple):
        text = json.dumps(value, default=str)
        return text if len(text) <= 60 else text[:57] + "..."
    text = str(value)
    return text if len(text) <= 20 or not isinstance(value, int | float) else f"{value:.6g}"


def _key_path(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


class _Reader:
    """Collects errors while reading the raw (parsed YAML/JSON) scenario."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        # Teams refused for a bad setting: their jobs are not also reported as "unknown team".
        self.refused_teams: set[str] = set()

    def error(self, path: str, message: str) -> None:
        self.errors.append(f"{path}: {message}")

    def bad(self, path: str, expected: str, value: object) -> None:
        self.errors.append(f"{path}: {expected}, got {_show(value)}")

    def mapping(
        self, value: object, path: str, allowed: Iterable[str], required: Iterable[str] = ()
    ) -> dict[str, Any] | None:
        """``value`` as a mapping with only ``allowed`` keys (unknown keys are errors)."""
        if not isinstance(value, Mapping):
            self.bad(path or "(file)", "must be a mapping", value)
            return None
        allowed = set(allowed)
        for key in value:
            if not isinstance(key, str) or key not in allowed:
                where = _key_path(path, key)
                self.error(where, f"unknown key (expected one of: {', '.join(sorted(allowed))})")
        for key in required:
            if key not in value:
                self.error(_key_path(path, key), "is required")
        return {k: v for k, v in value.items() if isinstance(k, str) and k in allowed}

    def sequence(self, value: object, path: str) -> list[Any] | None:
        if not isinstance(value, list):
            self.bad(path, "must be a list", value)
            return None
        return value

    def whole(self, value: object, path: str, minimum: int = 0, maximum: int | None = None) -> int | None:
        """A whole number in [minimum, maximum]; 2.0 is accepted as 2, booleans are not numbers."""
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and isinstance(value, float):
            ok = math.isfinite(value) and value.is_integer()
        number = int(value) if ok else None  # type: ignore[arg-type]
        if number is None or number < minimum or (maximum is not None and number > maximum):
            bounds = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
            self.bad(path, f"must be a whole number {bounds}", value)
            return None
        return number

    def number(
        self, value: object, path: str, minimum: float | None = None, what: str = "a number"
    ) -> float | None:
        """A finite number (seconds), at least ``minimum`` when given."""
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or (minimum is not None and value < minimum):  # type: ignore[operator]
            bounds = "" if minimum is None else f" >= {minimum:g}"
            self.bad(path, f"must be {what}{bounds}", value)
            return None
        return value  # type: ignore[return-value]

    def choice(self, value: object, path: str, enum: type[Any]) -> Any:
        names = [member.value for member in enum]
        if value not in names:
            self.bad(path, f"must be one of {', '.join(names)}", value)
            return None
        return enum(value)

    def boolean(self, value: object, path: str) -> bool | None:
        if not isinstance(value, bool):
            self.bad(path, "must be true or false", value)
            return None
        return value

    def text(self, value: object, path: str) -> str | None:
        if not isinstance(value, str) or not value:
            self.bad(path, "must be a non-empty string", value)
            return None
        return value


# --------------------------------------------------------------------------------------------
# Cluster


def _read_cluster(r: _Reader, raw: object) -> tuple[tuple[InstanceType, ...], tuple[Node, ...]]:
    cluster = r.mapping(raw, "cluster", ("node_pools", "nodes"))
    if cluster is None:
        return (), ()
    if not cluster.get("node_pools") and not cluster.get("nodes"):
        r.error("cluster", "needs node_pools or nodes")
    gpus_per_node: dict[str, int] = {}
    nodes: list[Node] = []
    names: set[str] = set()
    counters: dict[str, int] = {}

    def add_node(name: str, instance_type: str, gpus: int, path: str) -> None:
        known = gpus_per_node.setdefault(instance_type, gpus)
        if known != gpus:
            r.error(path, f"every {instance_type} node must have the same GPUs ({known}), got {gpus}")
            return
        if name in names:
            r.error(path, f"duplicate node name {_show(name)}")
            return
        names.add(name)
        nodes.append(Node(name=name, instance_type=instance_type, gpus=gpus))

    for i, pool_raw in enumerate(r.sequence(cluster.get("node_pools", []), "cluster.node_pools") or []):
        path = f"cluster.node_pools[{i}]"
        pool = r.mapping(
            pool_raw,
            path,
            ("instance_type", "count", "gpus_per_node"),
            required=("instance_type", "count", "gpus_per_node"),
        )
        if pool is None or len(pool) < 3:
            continue
        instance_type = r.text(pool["instance_type"], f"{path}.instance_type")
        count = r.whole(pool["count"], f"{path}.count", minimum=0)
        gpus = r.whole(pool["gpus_per_node"], f"{path}.gpus_per_node", minimum=1)
        if instance_type is None or count is None or gpus is None:
            continue
        for _ in range(count):
            counters[instance_type] = counters.get(instance_type, 0) + 1
            add_node(f"{instance_type}-{counters[instance_type]:04d}", instance_type, gpus, path)
    for i, node_raw in enumerate(r.sequence(cluster.get("nodes", []), "cluster.nodes") or []):
        path = f"cluster.nodes[{i}]"
        node = r.mapping(
            node_raw, path, ("name", "instance_type", "gpus"), required=("name", "instance_type", "gpus")
        )
        if node is None or len(node) < 3:
            continue
        name = r.text(node["name"], f"{path}.name")
        instance_type = r.text(node["instance_type"], f"{path}.instance_type")
        gpus = r.whole(node["gpus"], f"{path}.gpus", minimum=1)
        if name is not None and instance_type is not None and gpus is not None:
            add_node(name, instance_type, gpus, path)
    types = tuple(InstanceType(name, per_node) for name, per_node in gpus_per_node.items())
    return types, tuple(nodes)


# --------------------------------------------------------------------------------------------
# Policy

POLICY_KEYS = ("idle_allocation", "task_ranking", "share_unallocated", "queueing", "priority_classes")


def _read_policy(r: _Reader, raw: object, path: str, base: ClusterPolicy) -> ClusterPolicy:
    """The policy ``base`` with the keys given in ``raw`` replaced (every key is optional)."""
    policy = r.mapping(raw, path, POLICY_KEYS)
    if policy is None:
        return base
    changes: dict[str, Any] = {}
    if "idle_allocation" in policy:
        changes["idle_allocation"] = r.choice(
            policy["idle_allocation"], f"{path}.idle_allocation", IdleAllocation
        )
    if "task_ranking" in policy:
        changes["task_ranking"] = r.choice(policy["task_ranking"], f"{path}.task_ranking", TaskRanking)
    if "share_unallocated" in policy:
        changes["share_unallocated"] = r.boolean(policy["share_unallocated"], f"{path}.share_unallocated")
    if "queueing" in policy:
        changes["queueing"] = r.choice(policy["queueing"], f"{path}.queueing", Queueing)
    if "priority_classes" in policy:
        classes: list[PriorityClass] = []
        items = r.sequence(policy["priority_classes"], f"{path}.priority_classes") or []
        if len(items) > 32:
            r.error(f"{path}.priority_classes", f"at most 32 classes, got {len(items)}")
        for i, item_raw in enumerate(items):
            item_path = f"{path}.priority_classes[{i}]"
            item = r.mapping(item_raw, item_path, ("name", "weight"), required=("name", "weight"))
            if item is None or len(item) < 2:
                continue
            name = r.text(item["name"], f"{item_path}.name")
            weight = r.whole(item["weight"], f"{item_path}.weight", minimum=0, maximum=100)
            if name is not None and any(c.name == name for c in classes):
                r.error(f"{item_path}.name", f"duplicate priority class {_show(name)}")
            elif name is not None and weight is not None:
                classes.append(PriorityClass(name, weight))
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
)


def _per_type(r: _Reader, raw: object, path: str, types: Mapping[str, InstanceType]) -> dict[str, object]:
    """A mapping of instance type -> value, every type known to the cluster."""
    if not isinstance(raw, Mapping):
        r.bad(path, "must be a mapping of instance type to GPUs", raw)
        return {}
    out: dict[str, object] = {}
    for key, value in raw.items():
        if key not in types:
            known = ", ".join(types) or "none"
            r.error(_key_path(path, key), f"unknown instance type {_show(key)} (the cluster has: {known})")
            continue
        out[key] = value
    return out


def _read_team(
    r: _Reader,
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
    changes: dict[str, Any] = {}

    if "active" in team:
        changes["active"] = r.boolean(team["active"], f"{path}.active")
    if "sharing" in team:
        changes["sharing"] = r.choice(team["sharing"], f"{path}.sharing", Sharing)
    if "fair_share_weight" in team:
        changes["fair_share_weight"] = r.whole(team["fair_share_weight"], f"{path}.fair_share_weight", 0, 100)
    if "preempt_team_tasks" in team:
        changes["preempt_team_tasks"] = r.choice(
            team["preempt_team_tasks"], f"{path}.preempt_team_tasks", PreemptTeamTasks
        )
    if "reclaim" in team:
        changes["reclaim"] = r.choice(team["reclaim"], f"{path}.reclaim", Reclaim)
    if "quota" in team:
        for t, value in _per_type(r, team["quota"], f"{path}.quota", types).items():
            gpus = r.whole(value, f"{path}.quota.{t}", minimum=0)
            if gpus is not None:
                quotas[t] = replace(quotas[t], quota=gpus)
    if "borrow_limit_percent" in team:
        pct = r.whole(team["borrow_limit_percent"], f"{path}.borrow_limit_percent", 0, 10000)
        if pct is not None:
            quotas = {t: replace(q, borrow_limit_percent=pct) for t, q in quotas.items()}
    if "borrow_limit" in team:
        raw_limit = team["borrow_limit"]
        if raw_limit == "unlimited":
            quotas = {t: replace(q, borrow_limit=None, borrow_unlimited=True) for t, q in quotas.items()}
        elif isinstance(raw_limit, Mapping):
            for t, value in _per_type(r, raw_limit, f"{path}.borrow_limit", types).items():
                if value == "unlimited":
                    quotas[t] = replace(quotas[t], borrow_limit=None, borrow_unlimited=True)
                    continue
                gpus = r.whole(value, f"{path}.borrow_limit.{t}", minimum=0)
                if gpus is not None:
                    quotas[t] = replace(quotas[t], borrow_limit=gpus, borrow_unlimited=False)
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


# --------------------------------------------------------------------------------------------
# Jobs

JOB_KEYS = ("id", "team", "gpus", "instance_type", "priority", "submit", "duration", "running_since")


def _default_type(types: Mapping[str, InstanceType]) -> str | None:
    return next(iter(types)) if len(types) == 1 else None


def _read_job(
    r: _Reader,
    raw: object,
    path: str,
    seq: int,
    types: Mapping[str, InstanceType],
    teams: Mapping[str, Team],
    classes: set[str],
) -> ScenarioJob | None:
    job = r.mapping(raw, path, JOB_KEYS, required=("id", "team", "gpus"))
    if job is None or not {"id", "team", "gpus"} <= job.keys():
        return None
    errors_before = len(r.errors)
    job_id = job["id"]
    if isinstance(job_id, int) and not isinstance(job_id, bool):
        job_id = str(job_id)
    job_id = r.text(job_id, f"{path}.id")
    team = job["team"]
    if not isinstance(team, str) or (team not in teams and team not in r.refused_teams):
        r.bad(f"{path}.team", f"unknown team (teams: {', '.join(teams)})", team)
    refused = isinstance(team, str) and team in r.refused_teams  # reported already: skip silently
    gpus = r.whole(job["gpus"], f"{path}.gpus", minimum=1)
    if gpus is not None and gpus > MAX_GPUS:
        r.bad(f"{path}.gpus", f"must be at most {MAX_GPUS:,}", gpus)
    instance_type = job.get("instance_type", _default_type(types))
    if instance_type is None:
        r.error(f"{path}.instance_type", "is required when the cluster has more than one instance type")
    elif not isinstance(instance_type, str) or instance_type not in types:
        r.bad(
            f"{path}.instance_type",
            f"unknown instance type (the cluster has: {', '.join(types)})",
            instance_type,
        )
    priority = job.get("priority")
    if priority is not None and (not isinstance(priority, str) or priority not in classes):
        r.bad(
            f"{path}.priority",
            f"unknown priority class (classes: {', '.join(sorted(classes)) or 'none'})",
            priority,
        )
    submit = r.number(job.get("submit", 0), f"{path}.submit")
    duration = job.get("duration")
    if duration is not None:
        duration = r.number(duration, f"{path}.duration", minimum=0, what="a number of seconds")
    running_since = job.get("running_since")
    if running_since is not None:
        running_since = r.number(running_since, f"{path}.running_since", what="a number of seconds")
        if running_since is not None and running_since > 0:
            r.bad(f"{path}.running_since", "must be <= 0 (running when the simulation starts)", running_since)
        elif running_since is not None and duration is not None and running_since + duration <= 0:
            r.bad(
                f"{path}.duration",
                f"must be more than {-running_since:g} (running_since {running_since:g}: it would end "
                "before the simulation starts)",
                duration,
            )
    if refused or len(r.errors) > errors_before:
        return None
    assert job_id is not None and gpus is not None and submit is not None and instance_type is not None
    return ScenarioJob(
        id=job_id,
        team=team,
        instance_type=instance_type,
        gpus=gpus,
        submit=submit,
        duration=duration,
        seq=seq,
        priority=priority,
        running_since=running_since,
        path=path,
    )


def _field(job: ScenarioJob, name: str) -> str:
    """The path of one field of a job: ``jobs[3].gpus``, or ``jobs_csv line 17 (gpus)``."""
    return f"{job.path}.{name}" if job.path.startswith("jobs[") else f"{job.path} ({name})"


def team_name_from_trace(value: str) -> str:
    """A trace's team value made a team name the way a person would expect (SCENARIO.md):
    lowercased, every run of characters other than a-z, 0-9 and '-' replaced by '-'."""
    return re.sub(r"[^a-z0-9-]+", "-", value.strip().lower()).strip("-")


TRACE_COLUMNS = ("id", "team", "gpus", "submit", "duration", "priority", "instance_type")


def _read_trace(
    r: _Reader,
    raw: object,
    base_dir: Path,
    first_seq: int,
    types: Mapping[str, InstanceType],
    nodes: Sequence[Node],
    teams: Mapping[str, Team],
    classes: set[str],
    strict: bool,
) -> tuple[list[ScenarioJob], TraceReport | None]:
    """The usable rows of a ``jobs_csv`` trace as jobs, and what was skipped (or, with
    ``strict``, every unusable row as an error)."""
    spec = r.mapping(raw, "jobs_csv", ("path", "columns", "priority_values"), required=("path", "columns"))
    if spec is None or not {"path", "columns"} <= spec.keys():
        return [], None
    rel = r.text(spec["path"], "jobs_csv.path")
    columns = r.mapping(
        spec["columns"], "jobs_csv.columns", TRACE_COLUMNS, required=("team", "gpus", "submit", "duration")
    )
    priority_values = spec.get("priority_values", {})
    if not isinstance(priority_values, Mapping):
        r.bad(
            "jobs_csv.priority_values", "must be a mapping of trace value to priority class", priority_values
        )
        priority_values = {}
    for key, value in priority_values.items():
        if value is not None and value not in classes:
            r.bad(f"jobs_csv.priority_values.{key}", "unknown priority class", value)
    if rel is None or columns is None:
        return [], None
    file = (base_dir / rel).resolve()
    try:
        handle = file.open(newline="", encoding="utf-8")
    except OSError as exc:
        r.error("jobs_csv.path", f"cannot read {file}: {exc.strerror}")
        return [], None
    with handle:
        try:
            # The whole trace is decoded here, so a file that is not UTF-8 is refused before use.
            lines = handle.read().splitlines(keepends=True)
        except UnicodeDecodeError as exc:
            r.error("jobs_csv.path", f"{rel} is not UTF-8 text (byte {exc.start}); save the trace as UTF-8")
            return [], None
        reader = csv.reader(lines)
        header = next(reader, [])
        index: dict[str, int] = {}
        for key, column in columns.items():
            if column not in header:
                r.bad(
                    f"jobs_csv.columns.{key}",
                    f"no such column in {rel} (columns: {', '.join(header)})",
                    column,
                )
            else:
                index[key] = header.index(column)
        if len(index) < len(columns):
            return [], None
        rows = list(reader)

    capacity: dict[str, int] = {}
    for node in nodes:
        capacity[node.instance_type] = capacity.get(node.instance_type, 0) + node.gpus
    skipped: dict[str, int] = {}
    examples: dict[str, list[str]] = {}
    jobs: list[ScenarioJob] = []
    seen: set[str] = set()
    default_type = _default_type(types)

    def skip(kind: str, line: int, column: str, value: str) -> None:
        skipped[kind] = skipped.get(kind, 0) + 1
        quoted = examples.setdefault(kind, [])
        if len(quoted) < SKIP_EXAMPLES:
            quoted.append(f"line {line}: {column}={value!r}")
        if strict:
            r.error(f"jobs_csv line {line}", f"{kind}: {column}={value!r}")

    def cell(row: list[str], key: str) -> str:
        i = index[key]
        return row[i].strip() if i < len(row) else ""

    for n, row in enumerate(rows):
        line = n + 2  # the header is line 1
        if not any(c.strip() for c in row):
            continue
        values = {key: cell(row, key) for key in index}
        try:
            gpus_f = float(values["gpus"])
            submit = float(values["submit"])
            duration: float | None = float(values["duration"])
        except ValueError:
            bad_key = next(k for k in ("gpus", "submit", "duration") if not _is_number(values[k]))
            skip("with a bad number", line, columns[bad_key], values[bad_key])
            continue
        if not (math.isfinite(gpus_f) and math.isfinite(submit) and math.isfinite(duration or 0)):
            skip("with a bad number", line, columns["gpus"], values["gpus"])
            continue
        if not gpus_f.is_integer():
            skip("with a bad number", line, columns["gpus"], values["gpus"])
            continue
        gpus = int(gpus_f)
        team = team_name_from_trace(values["team"])
        instance_type = values.get("instance_type") or default_type
        if gpus < 1:
            skip("with 0 GPUs", line, columns["gpus"], values["gpus"])
        elif duration is not None and duration < 0:
            skip("with a negative duration", line, columns["duration"], values["duration"])
        elif team not in teams:
            skip("of an unknown team", line, columns["team"], values["team"])
        elif instance_type not in types:
            skip(
                "of an unknown instance type",
                line,
                columns.get("instance_type", "instance_type"),
                str(instance_type),
            )
        elif gpus > capacity.get(instance_type, 0):
            skip("with more GPUs than the cluster", line, columns["gpus"], values["gpus"])
        else:
            job_id = values.get("id") or f"line-{line}"
            if job_id in seen:
                skip("with a duplicate id", line, columns.get("id", "id"), job_id)
                continue
            seen.add(job_id)
            priority = None
            if "priority" in values:
                raw_priority = values["priority"]
                priority = (
                    priority_values.get(raw_priority, raw_priority) if priority_values else raw_priority
                )
                priority = priority or None
                if priority is not None and priority not in classes:
                    skip("of an unknown priority class", line, columns["priority"], raw_priority)
                    continue
            jobs.append(
                ScenarioJob(
                    id=job_id,
                    team=team,
                    instance_type=instance_type,
                    gpus=gpus,
                    submit=submit,
                    duration=duration,
                    seq=first_seq + len(jobs),
                    priority=priority,
                    path=f"jobs_csv line {line}",
                )
            )
    report = TraceReport(
        path=str(rel),
        rows=len(rows),
        used=len(jobs),
        skipped=skipped,
        examples={k: tuple(v) for k, v in examples.items()},
    )
    return jobs, report


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# Events

EVENT_KINDS = ("node_down", "node_up", "cancel", "update_team", "update_policy")


@dataclass
class _RawEvent:
    at: float
    seq: int
    path: str
    kind: str
    body: Any


def _read_events(r: _Reader, raw: object, types: Mapping[str, InstanceType]) -> list[_RawEvent]:
    out: list[_RawEvent] = []
    for i, item_raw in enumerate(r.sequence(raw, "events") or []):
        path = f"events[{i}]"
        item = r.mapping(item_raw, path, ("at", *EVENT_KINDS), required=("at",))
        if item is None or "at" not in item:
            continue
        at = r.number(item["at"], f"{path}.at", minimum=0, what="a number of seconds")
        kinds = [k for k in EVENT_KINDS if k in item]
        if len(kinds) != 1:
            r.error(path, f"must have exactly one of {', '.join(EVENT_KINDS)}, got {len(kinds)}")
            continue
        kind = kinds[0]
        body = item[kind]
        if kind in ("node_down", "node_up"):
            spec = r.mapping(body, f"{path}.{kind}", ("instance_type", "count"))
            if spec is None:
                continue
            instance_type = spec.get("instance_type", _default_type(types))
            if instance_type not in types:
                r.bad(
                    f"{path}.{kind}.instance_type",
                    f"unknown instance type (the cluster has: {', '.join(types)})",
                    instance_type,
                )
            count = r.whole(spec.get("count", 1), f"{path}.{kind}.count", minimum=1)
            if instance_type not in types or count is None:
                continue
            body = (instance_type, count)
        elif kind == "cancel":
            if isinstance(body, int) and not isinstance(body, bool):
                body = str(body)
            if r.text(body, f"{path}.cancel") is None:
                continue
        if at is not None:
            out.append(_RawEvent(at, i, path, kind, body))
    out.sort(key=lambda e: (e.at, e.seq))
    return out


# --------------------------------------------------------------------------------------------
# Expect


def _read_expect(r: _Reader, raw: object, job_ids: set[str]) -> Expect | None:
    spec = r.mapping(raw, "expect", ("until", "running", "pending", "preempted", "rejected"))
    if spec is None:
        return None

    def known(job_id: object, path: str) -> str | None:
        job_id = str(job_id) if isinstance(job_id, int) and not isinstance(job_id, bool) else job_id
        if not isinstance(job_id, str) or job_id not in job_ids:
            r.bad(path, "unknown job", job_id)
            return None
        return job_id

    def codes(key: str, allowed: type[Any]) -> dict[str, str]:
        out: dict[str, str] = {}
        value = spec.get(key) or {}
        if not isinstance(value, Mapping):
            r.bad(f"expect.{key}", "must be a mapping of job id to code", value)
            return out
        for job_id, code in value.items():
            job = known(job_id, f"expect.{key}.{job_id}")
            choice = r.choice(code, f"expect.{key}.{job_id}", allowed)
            if job is not None and choice is not None:
                out[job] = choice.value
        return out

    until = None
    if spec.get("until") is not None:
        until = r.number(spec["until"], "expect.until", minimum=0)
    running = None
    if "running" in spec:
        items = r.sequence(spec["running"] or [], "expect.running") or []
        running = tuple(j for i, x in enumerate(items) if (j := known(x, f"expect.running[{i}]")) is not None)
    preempted = None
    if "preempted" in spec:
        preempted = {}
        value = spec["preempted"] or {}
        if not isinstance(value, Mapping):
            r.bad("expect.preempted", "must be a mapping of job id to [reason, preemptor]", value)
        else:
            for job_id, pair in value.items():
                path = f"expect.preempted.{job_id}"
                job = known(job_id, path)
                if not (isinstance(pair, list) and len(pair) == 2):
                    r.bad(path, "must be [reason, preemptor id]", pair)
                    continue
                reason = r.choice(pair[0], f"{path}[0]", PreemptionReason)
                by = known(pair[1], f"{path}[1]")
                if job is not None and reason is not None and by is not None:
                    preempted[job] = (reason.value, by)
    return Expect(
        until=until,
        running=running,
        pending=codes("pending", PendingCode),
        preempted=preempted,
        rejected=codes("rejected", PendingCode),
    )


# --------------------------------------------------------------------------------------------
# The whole file


def read_cycle_interval(value: object) -> tuple[int, str]:
    """A cycle interval and ``""``: a whole number of seconds, 0 (a cycle at every happening)
    or more; else 0 and what it must be."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value, ""
    return 0, "must be a whole number of seconds >= 0 (0: a cycle at every happening)"


TOP_KEYS = (
    "name",
    "cluster",
    "policy",
    "teams",
    "jobs",
    "jobs_csv",
    "events",
    "horizon",
    "options",
    "expect",
)


def parse_scenario(
    data: object,
    *,
    base_dir: Path | str = ".",
    name: str = "scenario",
    keep_unfit: bool = False,
    strict: bool = False,
    never_fits: NeverFits | None = None,
    cycle_interval: int | None = None,
) -> Scenario:
    """A :class:`Scenario` from parsed YAML/JSON ``data``, or :class:`ScenarioError`.

    ``keep_unfit`` (or ``options.keep_unfit`` in the file) keeps jobs that can never fit, to end
    ``rejected``; ``strict`` refuses a trace with unusable rows instead of skipping them.
    ``never_fits`` is the engine's judgement (POLICY.md section 2), the real one by default.
    ``cycle_interval`` (seconds; 0: a cycle at every happening), when given, stands instead of
    the file's ``options.cycle_interval``.
    """
    r = _Reader()
    top = r.mapping(data, "", TOP_KEYS, required=("cluster", "teams"))
    if top is None:
        raise ScenarioError(r.errors)
    if "name" in top:
        name = r.text(top["name"], "name") or name
    types_list, nodes = _read_cluster(r, top.get("cluster", {}))
    types = {t.name: t for t in types_list}
    policy = ClusterPolicy()
    if top.get("policy") is not None:
        policy = _read_policy(r, top["policy"], "policy", policy)
    classes = {c.name for c in policy.priority_classes}

    teams: dict[str, Team] = {}
    for i, raw_team in enumerate(r.sequence(top.get("teams", []), "teams") or []):
        team = _read_team(r, raw_team, f"teams[{i}]", types, policy, None)
        if team is None:
            continue
        if team.name in teams:
            r.error(f"teams[{i}].name", f"duplicate team {_show(team.name)}")
            continue
        teams[team.name] = team

    options = r.mapping(top.get("options") or {}, "options", ("keep_unfit", "cycle_interval"))
    if options and "keep_unfit" in options:
        keep_unfit = bool(r.boolean(options["keep_unfit"], "options.keep_unfit")) or keep_unfit
    if cycle_interval is not None:  # the caller's (the command line checks its flag first)
        _, problem = read_cycle_interval(cycle_interval)
        if problem:
            r.bad("cycle_interval", problem, cycle_interval)
    elif options and "cycle_interval" in options:
        cycle_interval, problem = read_cycle_interval(options["cycle_interval"])
        if problem:
            r.bad("options.cycle_interval", problem, options["cycle_interval"])
    horizon = None
    if top.get("horizon") is not None:
        horizon = r.number(top["horizon"], "horizon", minimum=0, what="a number of seconds")

    jobs: list[ScenarioJob] = []
    ids: dict[str, str] = {}
    for i, raw_job in enumerate(r.sequence(top.get("jobs") or [], "jobs") or []):
        job = _read_job(r, raw_job, f"jobs[{i}]", len(jobs), types, teams, classes)
        if job is None:
            continue
        if job.id in ids:
            r.bad(f"jobs[{i}].id", f"duplicate id (first at {ids[job.id]})", job.id)
            continue
        ids[job.id] = job.path
        jobs.append(job)
    trace = None
    if top.get("jobs_csv") is not None:
        trace_jobs, trace = _read_trace(
            r, top["jobs_csv"], Path(base_dir), len(jobs), types, nodes, teams, classes, strict
        )
        for job in trace_jobs:
            if job.id in ids:
                r.bad(f"{job.path}: id", f"duplicate id (first at {ids[job.id]})", job.id)
            ids[job.id] = job.path
        jobs.extend(trace_jobs)

    raw_events = _read_events(r, top.get("events") or [], types)
    expect = _read_expect(r, top["expect"], set(ids)) if top.get("expect") is not None else None
    if r.errors:
        raise ScenarioError(r.errors)

    not_whole = set()
    for job in jobs:
        per_node = types[job.instance_type].gpus_per_node
        if job.gpus > per_node and job.gpus % per_node:
            not_whole.add(job.id)
            r.bad(
                _field(job, "gpus"),
                f"a job larger than one node must ask for whole nodes (multiples of {per_node} on {job.instance_type})",
                job.gpus,
            )
    events, rejected = _sweep(
        r, jobs, raw_events, nodes, types_list, teams, policy, keep_unfit, never_fits, not_whole
    )
    if r.errors:
        raise ScenarioError(r.errors)
    return Scenario(
        name=name,
        instance_types=types_list,
        nodes=nodes,
        teams=tuple(teams.values()),
        policy=policy,
        jobs=tuple(jobs),
        events=tuple(events),
        horizon=horizon,
        keep_unfit=keep_unfit,
        cycle_interval=cycle_interval or 0,
        rejected=rejected,
        trace=trace,
        expect=expect,
    )


def _sweep(
    r: _Reader,
    jobs: Sequence[ScenarioJob],
    raw_events: Sequence[_RawEvent],
    nodes: tuple[Node, ...],
    types: tuple[InstanceType, ...],
    teams: dict[str, Team],
    policy: ClusterPolicy,
    keep_unfit: bool,
    never_fits: NeverFits | None,
    unjudged: set[str],
) -> tuple[list[Event], dict[str, PendingReason]]:
    """Walk the timeline once: resolve the events into complete teams/policies, check their
    node counts and cancelled ids, and judge every job "can never fit" at its submit time with
    the events up to then applied (jobs already running at 0 are not judged: they run)."""
    if never_fits is None:
        from allocations.engine import never_fits as engine_never_fits

        never_fits = engine_never_fits
    ids = {job.id for job in jobs}
    up = {node.name: True for node in nodes}
    teams = dict(teams)
    events: list[Event] = []
    rejected: dict[str, PendingReason] = {}
    verdicts: dict[tuple[str, str, int, str | None], PendingReason | None] = {}
    snapshot: Snapshot | None = None
    order = sorted(
        (j for j in jobs if j.running_since is None and j.id not in unjudged), key=lambda j: (j.submit, j.seq)
    )
    e = 0
    for job in [*order, None]:
        # Apply every event at or before this job's submit time (all of them after the last job).
        while e < len(raw_events) and (job is None or raw_events[e].at <= job.submit):
            raw = raw_events[e]
            e += 1
            action = _resolve_event(r, raw, up, nodes, teams, policy, ids)
            if action is None:
                continue
            if isinstance(action, UpdateTeam):
                teams[action.team.name] = action.team
            elif isinstance(action, UpdatePolicy):
                policy = action.policy
            events.append(Event(raw.at, action, raw.seq, raw.path))
            snapshot = None
        if job is None:
            break
        if snapshot is None:
            verdicts.clear()
            snapshot = Snapshot(
                instance_types=types,
                nodes=tuple(replace(n, ready=up[n.name]) for n in nodes),
                teams=tuple(teams.values()),
                policy=policy,
                jobs=(),
            )
        key = (job.team, job.instance_type, job.gpus, job.priority)
        if key not in verdicts:
            probe = Job(
                id=job.id,
                team=job.team,
                instance_type=job.instance_type,
                gpus=job.gpus,
                submit_time=job.submit,
                seq=job.seq,
                priority_class=job.priority,
            )
            verdicts[key] = never_fits(snapshot, probe)
        verdict = verdicts[key]
        if verdict is None:
            continue
        if keep_unfit:
            rejected[job.id] = verdict
        else:
            r.error(
                _field(job, "gpus"),
                f"job {job.id!r} can never fit (submitted at {job.submit:g}): {verdict.message}; "
                "use --keep-unfit to keep it as rejected",
            )
    return events, rejected


def _resolve_event(
    r: _Reader,
    raw: _RawEvent,
    up: dict[str, bool],
    nodes: Sequence[Node],
    teams: Mapping[str, Team],
    policy: ClusterPolicy,
    ids: set[str],
) -> EventAction | None:
    """One event checked against the state the events before it leave (node counts)."""
    path = f"{raw.path}.{raw.kind}"
    types = {}
    for node in nodes:
        types.setdefault(node.instance_type, InstanceType(node.instance_type, node.gpus))
    if raw.kind in ("node_down", "node_up"):
        instance_type, count = raw.body
        going_down = raw.kind == "node_down"
        # At load time any nodes of the type will do: they all have the same GPUs, and which
        # ones go is decided in the replay (fewest GPUs in use first).
        candidates = [n.name for n in nodes if n.instance_type == instance_type and up[n.name] == going_down]
        if count > len(candidates):
            state = "up" if going_down else "down"
            r.bad(
                f"{path}.count",
                f"only {len(candidates)} {instance_type} nodes are {state} at {raw.at:g}",
                count,
            )
            return None
        for name in candidates[:count]:
            up[name] = not going_down
        return NodeDown(instance_type, count) if going_down else NodeUp(instance_type, count)
    if raw.kind == "cancel":
        if raw.body not in ids:
            r.bad(path, "unknown job", raw.body)
            return None
        return Cancel(raw.body)
    if raw.kind == "update_team":
        name = raw.body.get("name") if isinstance(raw.body, Mapping) else None
        if not isinstance(name, str) or name not in teams:
            r.bad(f"{path}.name", f"unknown team (teams: {', '.join(teams)})", name)
            return None
        team = _read_team(r, raw.body, path, types, policy, teams[name])
        return UpdateTeam(team) if team is not None else None
    errors_before = len(r.errors)
    new_policy = _read_policy(r, raw.body, path, policy)
    return UpdatePolicy(new_policy) if len(r.errors) == errors_before else None


def load_scenario(
    path: Path | str,
    *,
    keep_unfit: bool = False,
    strict: bool = False,
    never_fits: NeverFits | None = None,
    cycle_interval: int | None = None,
) -> Scenario:
    """Read a YAML or JSON scenario file (JSON is YAML, so one parser reads both)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError([f"{file}: cannot read: {exc.strerror}"]) from exc
    except UnicodeDecodeError as exc:
        raise ScenarioError(
            [f"{file}: not UTF-8 text (byte {exc.start}: {exc.object[exc.start : exc.start + 1]!r})"]
        ) from exc
    try:
        data = yaml.safe_load(text) if file.suffix != ".json" else json.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ScenarioError(
            [f"{file}: not valid {'JSON' if file.suffix == '.json' else 'YAML'}: {exc}"]
        ) from exc
    return parse_scenario(
        data,
        base_dir=file.parent,
        name=file.stem,
        keep_unfit=keep_unfit,
        strict=strict,
        never_fits=never_fits,
        cycle_interval=cycle_interval,
    )
