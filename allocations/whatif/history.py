"""A past window of the cluster as a scenario (SCENARIO.md), to replay under other policies.

Time 0 is the window's start and the horizon its length. The scenario holds:

* the cluster: today's nodes (a node's history is its audited state changes, below), each
  with its instance type's vCPU, memory and GPU partitions where the type counts them
  (docs/resources.md 1);
* the jobs alive in the window, with the run time they really had: ``finished_at -
  started_at`` of their last run for finished and failed jobs, else the requested duration,
  else none (runs to the end), and the vCPU, memory and partitions they asked
  (docs/resources.md 3: left out, the ratio of their GPUs). A job running when the window opens is ``running_since`` its
  last start; a job waiting then has a negative ``submit``. A cancelled job is cancelled at
  the time it really was (the user's decision does not depend on the policy). Rejected jobs
  never ran under any policy and are left out;
* events: each audited change of a node's state (ready <-> draining/down) in the window, as a
  ``node_down``/``node_up`` of its instance type. Nodes not ready when the window opens go
  down at 0.

What cannot be replayed is skipped and counted by reason (``skipped``), never guessed.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Q

from allocations.choices import JobState, NodeState
from allocations.models import AuditEntry, InstanceType, Job, Node
from allocations.simulation.replay import initial_placement

# Seconds in a scenario are kept to the millisecond: exact enough, and short in the YAML.
DIGITS = 3


@dataclass
class HistoryScenario:
    """The policy-free part of a scenario (``cluster``, ``jobs``, ``events``, ``horizon``,
    ``options``), with what was left out and why. ``job_classes`` keeps each job's priority
    class name: a policy that lacks the class gives the job priority 0 (POLICY.md section 1)."""

    data: dict[str, Any]
    skipped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    # Replayed otherwise than they ran, and why (the same shape as ``skipped``/``examples``).
    adjusted: dict[str, int] = field(default_factory=dict)
    adjusted_examples: dict[str, list[str]] = field(default_factory=dict)

    def skip(self, reason: str, example: str) -> None:
        _note(self.skipped, self.examples, reason, example)

    def adjust(self, reason: str, example: str) -> None:
        _note(self.adjusted, self.adjusted_examples, reason, example)


def _note(counts: dict[str, int], examples: dict[str, list[str]], reason: str, example: str) -> None:
    counts[reason] = counts.get(reason, 0) + 1
    shown = examples.setdefault(reason, [])
    if len(shown) < 3:
        shown.append(example)


def _seconds(moment: datetime, start: datetime, step: int = 0) -> float:
    """Seconds from ``start``; with a ``step``, rounded up to a multiple of it (a job is never
    decided before it was submitted)."""
    seconds = (moment - start).total_seconds()
    if step:
        return float(math.ceil(seconds / step) * step)
    return round(seconds, DIGITS)


def _duration(seconds: float, step: int) -> float:
    """A run time; with a ``step``, the nearest multiple of it (at least one step when > 0)."""
    if step:
        return float(max(step, round(seconds / step) * step)) if seconds > 0 else 0.0
    return round(seconds, DIGITS)


# Long: the scenario's three parts (nodes, their events, jobs) in the order each needs the one
# before, every part a few lines of one query and its loop.
def build(start: datetime, end: datetime, *, step: int = 0) -> HistoryScenario:
    """The window [start, end) of the history as a scenario without its policy and teams.

    ``step`` (seconds, 0 = exact) puts every submit, run time and event on a grid: jobs that
    the loop would see within one step are decided together, as the loop (which runs every
    few seconds) does, and a replay runs far fewer cycles; waits move by less than a step.
    The cycles run on that grid too (``options.cycle_interval``): a back-off retry waits for
    the next step, as the loop's next cycle."""
    out = HistoryScenario(data={})
    horizon = _seconds(end, start)

    # 1. Nodes: today's, grouped by instance type; a scenario needs one GPU count per type.
    # Every node of a type has the type's other resources (docs/resources.md 1).
    resources = {
        row["name"]: _type_resources(row) for row in InstanceType.objects.values(*TYPE_RESOURCE_KEYS)
    }
    nodes: list[dict[str, Any]] = []
    per_node: dict[str, int] = {}
    node_rows = list(
        Node.objects.order_by("instance_type__name", "name").values(
            "pk", "name", "instance_type__name", "gpus", "state"
        )
    )
    kept: dict[int, dict[str, Any]] = {}
    for row in node_rows:
        type_name = row["instance_type__name"]
        if per_node.setdefault(type_name, row["gpus"]) != row["gpus"]:
            out.skip("node with another GPU count than its type's first node", row["name"])
            continue
        nodes.append(
            {
                "name": row["name"],
                "instance_type": type_name,
                "gpus": row["gpus"],
                **resources.get(type_name, {}),
            }
        )
        kept[row["pk"]] = row

    # 2. Node states through the window, from the audit trail of node changes.
    events = _node_events(kept, start, end, out, step)

    # 3. Jobs alive in the window, in primary-key order (the engine's "then id").
    jobs: list[dict[str, Any]] = []
    rows = (
        Job.objects.filter(submitted_at__lt=end)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=start))
        .exclude(state=JobState.REJECTED)
        .order_by("pk")
        .values(
            "pk",
            "team__name",
            "instance_type__name",
            "gpus",
            "priority_class__name",
            "state",
            "submitted_at",
            "started_at",
            "finished_at",
            "requested_duration",
            "updated_at",
            "vcpus",
            "memory_gib",
            "partitions",
        )
    )
    for row in rows.iterator(chunk_size=5000):
        job = _job(row, start, per_node, out, step, resources)
        if job is None:
            continue
        jobs.append(job)
        if row["state"] == JobState.CANCELLED:
            cancelled = row["finished_at"] or row["updated_at"]
            if cancelled < end:
                events.append({"at": max(0.0, _seconds(cancelled, start, step)), "cancel": job["id"]})
    events.sort(key=lambda e: e["at"])  # stable: node events before cancels of the same time
    _fit_running(nodes, jobs, out)

    out.data = {
        "cluster": {"nodes": nodes},
        "jobs": jobs,
        "events": events,
        "horizon": horizon,
        "options": {"keep_unfit": True, **({"cycle_interval": step} if step else {})},
    }
    return out


def _fit_running(nodes: list[dict[str, Any]], jobs: list[dict[str, Any]], out: HistoryScenario) -> None:
    """Jobs running when the window opened are placed on today's nodes as the replay places
    them (``initial_placement``). One that finds no room there (nodes removed since, or the
    replay packing them otherwise than they ran) waits from its submission instead of making
    the window impossible to replay; each is noted."""
    running = sorted(
        (job["running_since"], i) for i, job in enumerate(jobs) if job.get("running_since") is not None
    )
    places = initial_placement(
        [(n["name"], n["instance_type"], n["gpus"]) for n in nodes],
        [(jobs[i]["instance_type"], jobs[i]["gpus"]) for _, i in running],
    )
    for (_, i), place in zip(running, places, strict=True):
        if place is None:
            job = jobs[i]
            del job["running_since"]
            out.adjust(
                "running when the window opened, with no room on today's nodes: replayed waiting from its submission",
                f"job {job['id']} ({job['gpus']} GPUs of {job['instance_type']})",
            )


TYPE_RESOURCE_KEYS = ("name", "vcpus_per_node", "memory_gib_per_node", "partitions_per_node")


def _type_resources(row: dict[str, Any]) -> dict[str, Any]:
    """An instance type's resources besides GPUs as a scenario node's keys (docs/resources.md 8),
    those it does not count left out (a type of GPUs alone writes none)."""
    out: dict[str, Any] = {}
    if row["vcpus_per_node"]:
        out["vcpus"] = row["vcpus_per_node"]
    if row["memory_gib_per_node"]:
        out["memory_gib"] = row["memory_gib_per_node"]
    if row["partitions_per_node"]:
        out["partitions"] = {str(k): int(v) for k, v in sorted(row["partitions_per_node"].items())}
    return out


def _job_resources(
    row: dict[str, Any], job_id: str, node: dict[str, Any], gpus_per_node: int, out: HistoryScenario
) -> dict[str, Any] | None:
    """What a job asked besides GPUs as scenario keys (docs/resources.md 3), or None when its
    instance type, as it is today, cannot give it (the scenario would refuse the job): a
    resource the type no longer counts, or more than its nodes have."""
    gpus = row["gpus"]
    nodes = gpus // gpus_per_node if gpus > gpus_per_node else 1
    asks: dict[str, Any] = {}
    for key in ("vcpus", "memory_gib"):
        amount = row[key]
        if amount is None:
            continue
        if amount > nodes * node.get(key, 0):
            out.skip(
                f"asks more {key} than its instance type's nodes have today",
                f"job {job_id} ({amount} {key} of {row['instance_type__name']})",
            )
            return None
        asks[key] = amount
    partitions = {str(k): int(v) for k, v in sorted((row["partitions"] or {}).items())}
    if partitions:
        have = node.get("partitions", {})
        if nodes > 1 or any(count > have.get(profile, 0) for profile, count in partitions.items()):
            out.skip(
                "asks partitions its instance type's nodes do not have today",
                f"job {job_id} ({partitions} of {row['instance_type__name']})",
            )
            return None
        asks["partitions"] = partitions
    return asks


def _job(
    row: dict[str, Any],
    start: datetime,
    per_node: dict[str, int],
    out: HistoryScenario,
    step: int,
    resources: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any] | None:
    """One Job row as a scenario job, or None: when it cannot be replayed (counted in
    ``skipped``), or when, on the window's grid, it ended as the window opened."""
    job_id = str(row["pk"])
    type_name = row["instance_type__name"]
    if type_name not in per_node:
        out.skip("instance type without nodes", f"job {job_id} ({type_name})")
        return None
    gpus = row["gpus"]
    if gpus > per_node[type_name] and gpus % per_node[type_name]:
        out.skip("larger than a node but not whole nodes", f"job {job_id} ({gpus} GPUs)")
        return None
    asks = _job_resources(row, job_id, (resources or {}).get(type_name, {}), per_node[type_name], out)
    if asks is None:
        return None
    started, finished = row["started_at"], row["finished_at"]
    duration: float | None = None
    if row["state"] in (JobState.FINISHED, JobState.FAILED) and started is not None and finished is not None:
        duration = _duration(max(0.0, (finished - started).total_seconds()), step)
    elif row["requested_duration"] is not None:
        duration = _duration(float(row["requested_duration"]), step)
    job: dict[str, Any] = {
        "id": job_id,
        "team": row["team__name"],
        "instance_type": type_name,
        "gpus": gpus,
        "submit": _seconds(row["submitted_at"], start, step),
        "duration": duration,
        **asks,
    }
    if row["priority_class__name"]:
        job["priority"] = row["priority_class__name"]
    if row["submitted_at"] < start and started is not None and started <= start:
        # Its last run had begun when the window opened (and had not ended before it).
        job["running_since"] = min(0.0, _seconds(started, start, step))
        if duration is not None and job["running_since"] + duration <= 0:
            # On the window's grid its run is over by the time the window opens: one that
            # really ended then has nothing in the window; one whose requested duration was
            # over but that went on runs until it ends in the window (its cancel) or with it.
            if row["state"] in (JobState.FINISHED, JobState.FAILED):
                return None
            job["duration"] = None
    return job


def _node_events(
    nodes: dict[int, dict[str, Any]], start: datetime, end: datetime, out: HistoryScenario, step: int
) -> list[dict[str, Any]]:
    """``node_down``/``node_up`` events from the audited state changes of today's nodes
    (every change since the window opened is read, to work back from today's states)."""
    changes = list(
        AuditEntry.objects.filter(
            object_type=str(Node._meta.verbose_name), field="state", object_id__in=[str(pk) for pk in nodes]
        )
        .filter(at__gte=start)
        .order_by("at", "id")
        .values_list("at", "object_id", "old_value", "new_value")
    )
    # 1. Undo every change since the window opened, newest first: the states at its start.
    ready = {pk: row["state"] == NodeState.READY for pk, row in nodes.items()}
    for _at, object_id, old, _new in reversed(changes):
        ready[int(object_id)] = old == NodeState.READY
    # 2. Nodes not ready then go down at 0.
    type_of = {pk: row["instance_type__name"] for pk, row in nodes.items()}
    events: list[dict[str, Any]] = []
    down_at_start: Counter[str] = Counter(type_of[pk] for pk, up in ready.items() if not up)
    for type_name, count in sorted(down_at_start.items()):
        events.append({"at": 0.0, "node_down": {"instance_type": type_name, "count": count}})
    # 3. The window's changes, oldest first: one event each time a node leaves or regains ready.
    for at, object_id, old, new in changes:
        if at >= end:
            break
        pk = int(object_id)
        was_ready, is_ready = old == NodeState.READY, new == NodeState.READY
        if was_ready == is_ready:
            continue  # draining <-> down: not ready either way
        if ready[pk] != was_ready:
            out.skip(
                "node state change that does not follow the one before",
                f"node {nodes[pk]['name']} at {at:%Y-%m-%d %H:%M}",
            )
            continue
        ready[pk] = is_ready
        kind = "node_up" if is_ready else "node_down"
        events.append({"at": _seconds(at, start, step), kind: {"instance_type": type_of[pk], "count": 1}})
    return events
