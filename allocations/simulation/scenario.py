"""Scenario files (../shared/spec/SCENARIO.md): YAML or JSON in, validated frozen dataclasses out.

Every problem is reported with the path of the bad value (``jobs[3].gpus: must be a whole number
>= 1, got -2``); all problems of a file are collected and raised together as one
:class:`ScenarioError`, so that nothing is simulated from a file that is partly wrong.

This module reads the file from the top (``parse_scenario``, ``load_scenario``) and its jobs
and ``expect:``; beside it ``cluster.py`` reads the nodes, policy and teams (built as the
engine's own ``Node``, ``ClusterPolicy`` and ``Team``, which the replay hands to ``allocate``
unchanged), ``trace.py`` a ``jobs_csv`` trace, ``events.py`` the events and the walk along the
timeline that judges each job "can never fit" (POLICY.md section 2) at its submit time, and
``reading.py`` what they share. The names other modules import stay importable from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from allocations import bounded_json
from allocations.engine.resources import UNITS
from allocations.engine.snapshot import (
    ClusterPolicy,
    InstanceType,
    Node,
    PendingCode,
    PendingReason,
    PreemptionReason,
    Team,
)

from .cluster import read_cluster, read_policy, read_team
from .events import (
    Cancel,
    Event,
    EventAction,
    NeverFits,
    NodeDown,
    NodeUp,
    UpdatePolicy,
    UpdateTeam,
    read_events,
    sweep,
)
from .reading import Reader, ScenarioError, ScenarioJob, default_type, job_field, show
from .trace import TraceReport, read_trace, team_name_from_trace

__all__ = [
    "Cancel",
    "Event",
    "EventAction",
    "Expect",
    "NeverFits",
    "NodeDown",
    "NodeUp",
    "Scenario",
    "ScenarioError",
    "ScenarioJob",
    "TraceReport",
    "UpdatePolicy",
    "UpdateTeam",
    "load_scenario",
    "parse_scenario",
    "read_cycle_interval",
    "team_name_from_trace",
]

MAX_GPUS = 1_000_000  # per job: anything above is a typo, and keeps messages short


@dataclass(frozen=True, slots=True)
class Expect:
    """The ``expect:`` block (SCENARIO.md): the simulator ignores it, tests assert it."""

    until: float | None = None
    running: tuple[str, ...] | None = None
    pending: Mapping[str, str] = field(default_factory=dict)
    preempted: Mapping[str, tuple[str, str]] | None = None
    rejected: Mapping[str, str] = field(default_factory=dict)


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
# Jobs

JOB_KEYS = (
    "id",
    "team",
    "gpus",
    "instance_type",
    "priority",
    "submit",
    "duration",
    "running_since",
    "submitter",
    "checkpoint_interval_s",
    "vcpus",
    "memory_gib",
    "partitions",
)


# Long: a job entry's keys are read in SCENARIO.md's order, each in a few lines with its own
# path in the errors, as ``cluster.read_team`` reads a team's.
def _read_job(
    r: Reader,
    raw: object,
    path: str,
    seq: int,
    types: Mapping[str, InstanceType],
    teams: Mapping[str, Team],
    classes: set[str],
) -> ScenarioJob | None:
    # docs/resources.md 8: a job of partitions may leave its GPUs out.
    required = ("id", "team") if isinstance(raw, Mapping) and "partitions" in raw else ("id", "team", "gpus")
    job = r.mapping(raw, path, JOB_KEYS, required=required)
    if job is None or not set(required) <= job.keys():
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
    gpus = r.whole(job.get("gpus", 0), f"{path}.gpus", minimum=0 if "partitions" in job else 1)
    if gpus is not None and gpus > MAX_GPUS:
        r.bad(f"{path}.gpus", f"must be at most {MAX_GPUS:,}", gpus)
    instance_type = job.get("instance_type", default_type(types))
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
    submitter = job.get("submitter")
    if submitter is not None:
        submitter = r.text(submitter, f"{path}.submitter")
    duration = job.get("duration")
    if duration is not None:
        duration = r.number(duration, f"{path}.duration", minimum=0, what="a number of seconds")
    checkpoint = job.get("checkpoint_interval_s")
    if checkpoint is not None:
        checkpoint = r.number(
            checkpoint, f"{path}.checkpoint_interval_s", minimum=0, what="a number of seconds"
        )
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
    asks = _job_resources(r, job, path, types[instance_type], gpus)
    if asks is None:
        return None
    vcpus, memory_gib, partitions = asks
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
        submitter=submitter,
        checkpoint_interval_s=checkpoint or None,
        vcpus=vcpus,
        memory_gib=memory_gib,
        partitions=partitions,
    )


def _job_resources(
    r: Reader, job: Mapping[str, Any], path: str, it: InstanceType, gpus: int
) -> tuple[int | None, int | None, tuple[tuple[str, int], ...]] | None:
    """A job's vCPU, memory and partitions (docs/resources.md 3), each at most what its nodes
    have: one node, or a whole-node job's nodes (no partitions then); None when any is wrong."""
    errors_before = len(r.errors)
    nodes = gpus // it.gpus_per_node if gpus > it.gpus_per_node else 1
    where = f"one {it.name} node" if nodes == 1 else f"{nodes} {it.name} nodes"
    out: list[int | None] = []
    for key, per_node in (("vcpus", it.vcpus_per_node), ("memory_gib", it.memory_gib_per_node)):
        if job.get(key) is None:
            out.append(None)
            continue
        amount = r.whole(job[key], f"{path}.{key}", minimum=0)
        if amount is not None and not per_node:
            r.bad(
                f"{path}.{key}", f"{it.name} declares no {key} (add {key}_per_node to its node pool)", amount
            )
        elif amount is not None and amount > nodes * per_node:
            r.bad(f"{path}.{key}", f"more than {where} has ({nodes * per_node:,} {UNITS[key]})", amount)
        out.append(amount)
    partitions: dict[str, int] = {}
    raw = job.get("partitions")
    if raw is not None and not isinstance(raw, Mapping):
        r.bad(f"{path}.partitions", "must be a mapping of partition profile to a count", raw)
    elif raw is not None:
        have = dict(it.partitions_per_node)
        if not have:
            r.bad(f"{path}.partitions", f"{it.name} has no partitions", dict(raw))
        elif nodes > 1:
            r.bad(f"{path}.partitions", "a job of whole nodes asks for no partitions", dict(raw))
        else:
            for profile, value in raw.items():
                count = r.whole(value, f"{path}.partitions.{profile}", minimum=1)
                if profile not in have:
                    known = ", ".join(have)
                    r.bad(
                        f"{path}.partitions",
                        f"unknown partition profile of {it.name} (it has: {known})",
                        profile,
                    )
                elif count is not None and count > have[profile]:
                    r.bad(
                        f"{path}.partitions.{profile}",
                        f"more than one {it.name} node has ({have[profile]})",
                        count,
                    )
                elif count is not None:
                    partitions[profile] = count
    if gpus == 0 and not partitions and len(r.errors) == errors_before:
        r.bad(f"{path}.gpus", "must be at least 1 when the job asks for no partitions", gpus)
    if len(r.errors) > errors_before:
        return None
    return out[0], out[1], tuple(sorted(partitions.items()))


# --------------------------------------------------------------------------------------------
# Expect


def _read_expect(r: Reader, raw: object, job_ids: set[str]) -> Expect | None:
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


# Long: it reads a scenario's sections in SCENARIO.md's order, each a few lines, and gathers
# every error before refusing, so that one run names them all.
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
    ``never_fits`` is the engine's judgement (POLICY.md section 2), the real one by default,
    asked once per shape of job (team, instance type, GPUs, priority) and state of the cluster.
    ``cycle_interval`` (seconds; 0: a cycle at every happening), when given, stands instead of
    the file's ``options.cycle_interval``.
    """
    r = Reader()
    top = r.mapping(data, "", TOP_KEYS, required=("cluster", "teams"))
    if top is None:
        raise ScenarioError(r.errors)
    if "name" in top:
        name = r.text(top["name"], "name") or name
    types_list, nodes = read_cluster(r, top.get("cluster", {}))
    types = {t.name: t for t in types_list}
    policy = ClusterPolicy()
    if top.get("policy") is not None:
        policy = read_policy(r, top["policy"], "policy", policy)
    classes = {c.name for c in policy.priority_classes}

    teams: dict[str, Team] = {}
    for i, raw_team in enumerate(r.sequence(top.get("teams", []), "teams") or []):
        team = read_team(r, raw_team, f"teams[{i}]", types, policy, None)
        if team is None:
            continue
        if team.name in teams:
            r.error(f"teams[{i}].name", f"duplicate team {show(team.name)}")
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
        trace_jobs, trace = read_trace(
            r, top["jobs_csv"], Path(base_dir), len(jobs), types, nodes, teams, classes, strict
        )
        if ids:
            for job in trace_jobs:
                if job.id in ids:
                    r.bad(f"{job.path}: id", f"duplicate id (first at {ids[job.id]})", job.id)
                ids[job.id] = job.path
        else:  # the trace's own ids are unique (a row that repeats one is skipped)
            ids = {job.id: job.path for job in trace_jobs}
        jobs.extend(trace_jobs)

    raw_events = read_events(r, top.get("events") or [], types)
    expect = _read_expect(r, top["expect"], set(ids)) if top.get("expect") is not None else None
    if r.errors:
        raise ScenarioError(r.errors)

    # Judged once per instance type and size: a trace has a hundred thousand jobs of a few sizes.
    sizes = {(job.instance_type, job.gpus) for job in jobs}
    not_whole_sizes = {
        (instance_type, gpus)
        for instance_type, gpus in sizes
        if gpus > types[instance_type].gpus_per_node and gpus % types[instance_type].gpus_per_node
    }
    not_whole = set()
    for job in jobs if not_whole_sizes else ():
        if (job.instance_type, job.gpus) in not_whole_sizes:
            per_node = types[job.instance_type].gpus_per_node
            not_whole.add(job.id)
            r.bad(
                job_field(job, "gpus"),
                f"a job larger than one node must ask for whole nodes (multiples of {per_node} on {job.instance_type})",
                job.gpus,
            )
    events, rejected = sweep(
        r, jobs, ids, raw_events, nodes, types_list, teams, policy, keep_unfit, never_fits, not_whole
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
    kind = "JSON" if file.suffix == ".json" else "YAML"
    try:
        # Nesting is bounded before either parser recurses (JSON's brackets are YAML's flow
        # style); an integer too long for int() is kept as its digits, so that the reader
        # names its path like any other value of the wrong type.
        bounded_json.check_depth(text)
        data = bounded_json.loads(text, long_numbers=True) if kind == "JSON" else yaml.load(text, _Loader)
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: JSONDecodeError, JSONRefused
        raise ScenarioError([f"{file}: not valid {kind}: {exc}"]) from exc
    except RecursionError as exc:  # block-style YAML nested past Python's limit
        raise ScenarioError([f"{file}: not valid {kind}: nested too deeply"]) from exc
    return parse_scenario(
        data,
        base_dir=file.parent,
        name=file.stem,
        keep_unfit=keep_unfit,
        strict=strict,
        never_fits=never_fits,
        cycle_interval=cycle_interval,
    )


class _Loader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, but an integer too long for ``int()`` is kept as a
    ``LongNumber`` (its digits) instead of raising a ValueError with no path."""


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    try:
        return yaml.SafeLoader.construct_yaml_int(loader, node)
    except ValueError:
        return bounded_json.LongNumber(loader.construct_scalar(node))


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
