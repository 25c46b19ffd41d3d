"""One what-if run: the window's history replayed under the live policy and under each draft.

``execute(run_id)`` is what the Celery task calls. It is safe to call twice: only the call
that moves the run from ``queued`` to ``running`` does anything. Progress is written at most
every half second from the simulator's progress callback, which also reads the run's cancel
flag and stops the replay by raising :class:`RunCancelled` (the flag is checked between
chunks of the replay, never in the middle of a cycle).
"""

from __future__ import annotations

import gzip
import json
import logging
import time
import traceback
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from allocations import engine
from allocations.models import InstanceType, WhatIfRun, WhatIfRunState
from allocations.simulation import ScenarioError, SimulationError, parse_scenario
from allocations.simulation.replay import Replay

from . import drafts, figures, history, services

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 0.5


class RunCancelled(Exception):
    """The run's cancel flag was found set between two chunks of a replay."""


# --- The scenario of a run -----------------------------------------------------------------------
def pack(data: Mapping[str, Any]) -> bytes:
    return gzip.compress(json.dumps(data, separators=(",", ":")).encode(), compresslevel=6)


def unpack(blob: bytes | memoryview) -> dict[str, Any]:
    return json.loads(gzip.decompress(bytes(blob)))


def instance_types(history_data: Mapping[str, Any]) -> dict[str, engine.InstanceType]:
    """The window's instance types by name, as its nodes give them (their first node's), so
    the teams' quotas are written for the resources the replay counts (docs/resources.md 2)."""
    types: dict[str, engine.InstanceType] = {}
    for node in history_data["cluster"]["nodes"]:
        types.setdefault(
            node["instance_type"],
            engine.InstanceType(
                name=node["instance_type"],
                gpus_per_node=node["gpus"],
                vcpus_per_node=node.get("vcpus", 0),
                memory_gib_per_node=node.get("memory_gib", 0),
                partitions_per_node=tuple(sorted(node.get("partitions", {}).items())),
            ),
        )
    return dict(sorted(types.items()))


def scenario_data(
    history_data: Mapping[str, Any], policies: list[dict[str, Any]], key: str
) -> dict[str, Any]:
    """The complete scenario (SCENARIO.md) of one policy of a run: the window's cluster, jobs
    and events with that policy and its teams. ``manage.py simulate`` on this, dumped as YAML,
    replays exactly what the run replayed."""
    entry = next(p for p in policies if p["key"] == key)
    body = entry["body"]
    live = policies[0]["body"]
    types = instance_types(history_data)
    classes = {pc["name"] for pc in body["priority_classes"]}
    jobs = []
    for job in history_data["jobs"]:
        if "priority" in job and job["priority"] not in classes:
            # POLICY.md section 1: a job whose class the policy lacks has priority 0.
            job = {k: v for k, v in job.items() if k != "priority"}
        jobs.append(job)
    return {
        "name": f"what-if run, {entry['name']}",
        "cluster": history_data["cluster"],
        "policy": drafts.scenario_policy(body),
        "teams": drafts.scenario_teams(body, types, live),
        "jobs": jobs,
        "events": history_data["events"],
        "horizon": history_data["horizon"],
        "options": history_data["options"],
    }


# --- Executing a run -----------------------------------------------------------------------------
class _Progress:
    """The simulator's progress callback for replay ``index`` of ``count``."""

    def __init__(self, run_id: int, index: int, count: int, label: str) -> None:
        self.run_id, self.index, self.count, self.label = run_id, index, count, label
        self.last = 0.0

    def report(self, fraction: float, message: str, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < PROGRESS_EVERY_S:
            return
        self.last = now
        overall = min(1.0, (self.index + fraction) / self.count)
        if not services.whatif_run_progress(run_id=self.run_id, progress=overall, message=message):
            raise RunCancelled

    def __call__(self, now: float, end: float | None, done: int, total: int) -> None:
        fraction = now / end if end else (done / total if total else 1.0)
        self.report(
            max(0.0, min(1.0, fraction)),
            f"Replaying under {self.label}: {100 * fraction:.0f}% of the window, {done:,} of {total:,} jobs done",
        )


def execute(run_id: int) -> str:
    """Run the what-if run ``run_id`` if it is still queued; returns its final state."""
    if not services.whatif_run_claim(run_id=run_id):
        return WhatIfRun.objects.filter(pk=run_id).values_list("state", flat=True).first() or "missing"
    try:
        results = _replay_all(run_id)
    except RunCancelled:
        services.whatif_run_fail(run_id=run_id, state=WhatIfRunState.CANCELLED, progress_message="Cancelled")
        return WhatIfRunState.CANCELLED
    except (ScenarioError, SimulationError) as exc:
        error = f"{type(exc).__name__}: {exc}"[:20000]
        services.whatif_run_fail(run_id=run_id, state=WhatIfRunState.FAILED, error=error)
        return WhatIfRunState.FAILED
    except Exception as exc:  # a bug must still end the run visibly, not leave it "running"
        log.exception("what-if run %s failed", run_id)
        error = "".join(traceback.format_exception_only(exc))[:20000]
        services.whatif_run_fail(run_id=run_id, state=WhatIfRunState.FAILED, error=error)
        return WhatIfRunState.FAILED
    return services.whatif_run_complete(run_id=run_id, results=results)


def _replay_all(run_id: int) -> dict[str, Any]:
    """1. The window's history as a scenario (stored with the run); 2. one replay per policy,
    with the engine wrapped to record pending reasons; 3. figures and comparisons."""
    run = WhatIfRun.objects.get(pk=run_id)
    policies = run.policies
    # 1. The history, once: a run that is retried replays the same scenario.
    if run.scenario:
        history_data = unpack(run.scenario)
        skipped: dict[str, Any] = run.results.get("skipped", {})
        adjusted: dict[str, Any] = run.results.get("adjusted", {})
    else:
        built = history.build(run.window_start, run.window_end, step=run.time_step)
        history_data = built.data
        skipped = {"counts": built.skipped, "examples": built.examples}
        adjusted = {"counts": built.adjusted, "examples": built.adjusted_examples}
        services.whatif_run_store_scenario(
            run_id=run_id, scenario=pack(history_data), results={"skipped": skipped, "adjusted": adjusted}
        )
    prices = {
        name: float(price) for name, price in InstanceType.objects.values_list("name", "price_per_gpu_hour")
    }

    # 2. One replay per policy, the live one first: side by side in forked processes when
    # there are cores for it (``WHATIF_PROCESSES``), else one after the other here.
    outcomes: list[dict[str, Any]] = []
    per_job: dict[str, dict[str, dict[str, Any]]] = {}
    processes = min(len(policies), max(1, int(settings.WHATIF_PROCESSES)))
    if processes > 1:
        replayed = _replay_in_processes(run_id, history_data, policies, prices, processes)
    else:
        replayed = []
        for index, entry in enumerate(policies):
            progress = _Progress(run_id, index, len(policies), entry["name"])
            progress.report(0.0, f"Replaying under {entry['name']}", force=True)
            replayed.append(replay_policy(history_data, policies, index, prices, progress))
            progress.report(1.0, f"Replayed under {entry['name']}", force=True)
    for entry, (shown, jobs) in zip(policies, replayed, strict=True):
        outcomes.append({"key": entry["key"], "name": entry["name"], **shown})
        per_job[entry["key"]] = jobs

    # 3. Each draft against the live policy: the jobs whose wait changed most.
    comparisons = [
        {"key": entry["key"], "jobs": figures.wait_changes(per_job[services.LIVE], per_job[entry["key"]])}
        for entry in policies[1:]
    ]
    return {
        "skipped": skipped,
        "adjusted": adjusted,
        "jobs": len(history_data["jobs"]),
        "nodes": len(history_data["cluster"]["nodes"]),
        "node_events": sum(1 for e in history_data["events"] if "cancel" not in e),
        "policies": outcomes,
        "comparisons": comparisons,
    }


def replay_policy(
    history_data: Mapping[str, Any],
    policies: list[dict[str, Any]],
    index: int,
    prices: Mapping[str, float],
    progress: Any = None,
    engine: Any = None,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The window replayed under policy ``index``: its figures and its jobs (no database).
    ``engine`` is the ``allocate`` the replay calls (default: a new engine ``Session``)."""
    from allocations.engine.session import Session

    scenario = parse_scenario(scenario_data(history_data, policies, policies[index]["key"]), keep_unfit=True)
    recorder = figures.ReasonRecorder(engine if engine is not None else Session())
    result = Replay(scenario, allocate=recorder, progress=progress).run()
    recorder.finish(result.end_time)
    return figures.figures(result, scenario, prices, recorder)


# Set in each forked process (``_child_start``): where its replay writes how far it got.
_shared_progress: Any = None


def _child_start(shared: Any) -> None:
    global _shared_progress
    _shared_progress = shared


def _replay_in_child(
    history_data: Mapping[str, Any], policies: list[dict[str, Any]], index: int, prices: Mapping[str, float]
) -> tuple[str, Any, Any]:
    """``replay_policy`` in a forked process. It touches no database connection (those it
    inherited are the worker's); the two errors a run reports are sent back as data, since
    ``ScenarioError`` does not survive pickling as it was raised."""
    shared = _shared_progress

    def progress(now: float, end: float | None, done: int, total: int) -> None:
        fraction = now / end if end else (done / total if total else 1.0)
        shared[index] = max(0.0, min(1.0, fraction))

    try:
        shown, jobs = replay_policy(history_data, policies, index, prices, progress)
    except ScenarioError as exc:
        return ("scenario", exc.errors, None)
    except SimulationError as exc:
        return ("simulation", str(exc), None)
    shared[index] = 1.0
    return ("ok", shown, jobs)


def _replay_in_processes(
    run_id: int,
    history_data: Mapping[str, Any],
    policies: list[dict[str, Any]],
    prices: Mapping[str, float],
    processes: int,
) -> list[tuple[dict[str, Any], dict[str, dict[str, Any]]]]:
    """Every policy's replay in a pool of ``processes`` forked processes. The worker reports
    their mean progress and reads the cancel flag as ``_Progress`` does; a cancel (or any
    error) terminates the pool."""
    # billiard (Celery's own multiprocessing) rather than the standard library's: a task of
    # Celery's prefork pool runs in a daemonic process, which the standard library forbids to
    # have children.
    import billiard

    context = billiard.get_context("fork")
    shared = context.Array("d", len(policies), lock=False)
    names = ", ".join(entry["name"] for entry in policies)
    progress = _Progress(run_id, 0, 1, names)
    progress.report(0.0, f"Replaying under {names}, {processes} at a time", force=True)
    with context.Pool(processes, initializer=_child_start, initargs=(shared,)) as pool:
        waiting = [
            pool.apply_async(_replay_in_child, (history_data, policies, index, prices))
            for index in range(len(policies))
        ]
        while True:
            unfinished = [r for r in waiting if not r.ready()]
            if not unfinished:
                break
            unfinished[0].wait(PROGRESS_EVERY_S)
            fractions = list(shared)
            done = sum(1 for f in fractions if f >= 1.0)
            progress.report(
                sum(fractions) / len(fractions),
                f"Replaying under {names}: {100 * sum(fractions) / len(fractions):.0f}% "
                f"({done} of {len(policies)} replays done)",
            )
        replies = [r.get() for r in waiting]
    out: list[tuple[dict[str, Any], dict[str, dict[str, Any]]]] = []
    for kind, first, second in replies:
        if kind == "scenario":
            raise ScenarioError(first)
        if kind == "simulation":
            raise SimulationError(first)
        out.append((first, second))
    progress.report(1.0, f"Replayed under {names}", force=True)
    return out


def export_yaml(run: WhatIfRun, key: str) -> str:
    """The scenario that ``run`` replayed under policy ``key`` as a YAML file for
    ``manage.py simulate`` (which then prints the same figures). KeyError: no such policy."""
    import yaml

    if not run.scenario:
        raise KeyError("scenario")
    if not any(p["key"] == key for p in run.policies):
        raise KeyError(key)
    data = scenario_data(unpack(run.scenario), run.policies, key)
    header = (
        f"# gpugov what-if run {run.pk}: {run.window_start:%Y-%m-%d %H:%M} to {run.window_end:%Y-%m-%d %H:%M} UTC\n"
        "# time 0 is the start of the window; replay with: python manage.py simulate THIS_FILE\n"
    )
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120)
