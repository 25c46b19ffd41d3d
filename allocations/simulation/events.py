"""The events of a scenario (SCENARIO.md ``events:``) and the one walk along its timeline.

Events that change teams or the policy are resolved here, in time order, into the complete
``Team``/``ClusterPolicy`` they leave behind, and node events are checked against the nodes
the events before them leave up. That same walk judges each job "can never fit" (POLICY.md
section 2) at its submit time, with the events up to then applied: once per shape of job
(team, instance type, GPUs, priority) and state of the cluster, not once per job.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from allocations.engine.snapshot import (
    ClusterPolicy,
    InstanceType,
    Job,
    Node,
    PendingReason,
    Snapshot,
    Team,
)
from allocations.engine.state import NeverFitJudge

from .cluster import read_policy, read_team
from .reading import Reader, ScenarioJob, default_type, job_field

NeverFits = Callable[[Snapshot, Job], PendingReason | None]

EVENT_KINDS = ("node_down", "node_up", "cancel", "update_team", "update_policy")


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


@dataclass
class RawEvent:
    """An event as read, before the walk checks it against the state it finds."""

    at: float
    seq: int
    path: str
    kind: str
    body: Any


def read_events(r: Reader, raw: object, types: Mapping[str, InstanceType]) -> list[RawEvent]:
    """The events of the file that read well, in time order (then file order)."""
    out: list[RawEvent] = []
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
            instance_type = spec.get("instance_type", default_type(types))
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
            out.append(RawEvent(at, i, path, kind, body))
    out.sort(key=lambda e: (e.at, e.seq))
    return out


# Long: one pass over time that applies the events in order and judges each job against the
# cluster as it is at its submit time; its state (nodes, teams, policy, the current judge) is
# local to the pass, and split into functions it would have to travel between them.
def sweep(
    r: Reader,
    jobs: Sequence[ScenarioJob],
    ids: Container[str],
    raw_events: Sequence[RawEvent],
    nodes: tuple[Node, ...],
    types: tuple[InstanceType, ...],
    teams: dict[str, Team],
    policy: ClusterPolicy,
    keep_unfit: bool,
    never_fits: NeverFits | None,
    unjudged: set[str],
) -> tuple[list[Event], dict[str, PendingReason]]:
    """Walk the timeline once: resolve the events into complete teams/policies, check their
    node counts and cancelled ids (``ids``: every job's), and judge every job "can never fit"
    at its submit time with the events up to then applied (jobs already running at 0 are not
    judged: they run, nor those in ``unjudged``).

    Its errors come in the order of the timeline: an event's before the jobs submitted at its
    time or later, the jobs' by submit time, then file order."""
    # The jobs to judge, bucketed by the number of events (in time order) before them: the
    # events at or before their submit time. No sort of every job is needed.
    # A job of partitions alone (docs/resources.md 3) asks no GPU to judge; its partitions
    # were held to one node's when it was read.
    judged = [job for job in jobs if job.running_since is None and job.id not in unjudged and job.gpus > 0]
    times = [raw.at for raw in raw_events]
    buckets: dict[int, list[ScenarioJob]] = {0: judged}
    if times:
        buckets = {}
        for job in judged:
            buckets.setdefault(bisect_right(times, job.submit), []).append(job)
    up = {node.name: True for node in nodes}
    # Each node as it is up and as it is down, made once rather than at each state.
    as_up = {node.name: replace(node, ready=True) for node in nodes}
    as_down = {node.name: replace(node, ready=False) for node in nodes}
    teams = dict(teams)
    events: list[Event] = []
    # The errors of the walk, each with its place on the timeline (time, 0 for an event and 1
    # for a job, then the event's place in time order or the job's in the file).
    errors: list[tuple[tuple[float, int, int], str]] = []
    unfit: list[tuple[ScenarioJob, PendingReason]] = []
    verdicts: dict[tuple[str, str, int, str | None], PendingReason | None] = {}
    judge: Callable[[ScenarioJob], PendingReason | None] | None = None  # of the current state
    for e in range(len(raw_events) + 1):
        if e > 0:
            raw = raw_events[e - 1]
            errors_before = len(r.errors)
            action = _resolve_event(r, raw, up, nodes, types, teams, policy, ids)
            errors.extend(((raw.at, 0, e), message) for message in r.errors[errors_before:])
            del r.errors[errors_before:]
            if action is not None:
                if isinstance(action, UpdateTeam):
                    teams[action.team.name] = action.team
                elif isinstance(action, UpdatePolicy):
                    policy = action.policy
                events.append(Event(raw.at, action, raw.seq, raw.path))
                judge = None
        bucket_jobs = buckets.get(e)
        if not bucket_jobs:
            continue
        if judge is None:
            verdicts.clear()
            snapshot = Snapshot(
                instance_types=types,
                nodes=tuple(as_up[n.name] if up[n.name] else as_down[n.name] for n in nodes),
                teams=tuple(teams.values()),
                policy=policy,
                jobs=(),
            )
            judge = _judge_with(never_fits, snapshot)
        for job in bucket_jobs:
            key = (job.team, job.instance_type, job.gpus, job.priority)
            verdict = verdicts.get(key, _UNJUDGED)
            if verdict is _UNJUDGED:
                verdict = verdicts[key] = judge(job)
            if verdict is not None:
                unfit.append((job, verdict))
    unfit.sort(key=lambda pair: (pair[0].submit, pair[0].seq))
    rejected: dict[str, PendingReason] = {}
    for job, verdict in unfit:
        if keep_unfit:
            rejected[job.id] = verdict
        else:
            message = (
                f"{job_field(job, 'gpus')}: job {job.id!r} can never fit (submitted at {job.submit:g}): "
                f"{verdict.message}; use --keep-unfit to keep it as rejected"
            )
            errors.append(((job.submit, 1, job.seq), message))
    errors.sort(key=lambda error: error[0])
    r.errors.extend(message for _, message in errors)
    return events, rejected


# Not a verdict: the shape is yet to be judged (None is the verdict "may fit some day").
_UNJUDGED: Any = object()


def _judge_with(
    never_fits: NeverFits | None, snapshot: Snapshot
) -> Callable[[ScenarioJob], PendingReason | None]:
    """The "can never fit" judgement of the jobs of one state of the cluster (``snapshot``).
    The engine's (``never_fits`` None) is made by one ``NeverFitJudge`` per state, which reads
    the nodes and each team's bounds once, where each call of ``never_fits`` reads them again
    (a trace with hundreds of node events asks for a hundred shapes at each)."""
    if never_fits is None:
        judge = NeverFitJudge(snapshot).judge
        return lambda job: judge(job.team, job.instance_type, job.gpus)
    given = never_fits

    def ask(job: ScenarioJob) -> PendingReason | None:
        probe = Job(
            id=job.id,
            team=job.team,
            instance_type=job.instance_type,
            gpus=job.gpus,
            submit_time=job.submit,
            seq=job.seq,
            priority_class=job.priority,
        )
        return given(snapshot, probe)

    return ask


def _resolve_event(
    r: Reader,
    raw: RawEvent,
    up: dict[str, bool],
    nodes: Sequence[Node],
    instance_types: Sequence[InstanceType],
    teams: Mapping[str, Team],
    policy: ClusterPolicy,
    ids: Container[str],
) -> EventAction | None:
    """One event checked against the state the events before it leave (node counts)."""
    path = f"{raw.path}.{raw.kind}"
    # The types with nodes, with all their resources (an update_team's quotas may name them).
    with_nodes = {node.instance_type for node in nodes}
    types = {it.name: it for it in instance_types if it.name in with_nodes}
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
        team = read_team(r, raw.body, path, types, policy, teams[name])
        return UpdateTeam(team) if team is not None else None
    errors_before = len(r.errors)
    new_policy = read_policy(r, raw.body, path, policy)
    return UpdatePolicy(new_policy) if len(r.errors) == errors_before else None
