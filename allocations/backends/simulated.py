"""The simulated backend (kind ``simulated``): a cluster held in gpugov's own database.

It lets ``make run`` show a live cluster with no hardware, and it behaves like a real backend
towards the allocation loop: it keeps its own record of every job it was asked to run
(``SimulatedJob`` rows, separate from ``Job``), so the loop's sync compares two independent
views exactly as it does with Slurm, and a crash between "the backend started it" and "the
database says so" is repaired the same way.

* Nodes are the ``Node`` rows: draining or returning a node in the console is what the cluster
  reports. Optional random failures (``node_failure_rate`` per node per hour, seeded) take a
  node down and fail the jobs on it; the node returns after ``node_repair_s``.
* A job runs for its requested duration on the wall clock divided by ``speedup`` (60: a
  requested hour lasts a minute), or ``default_duration_s`` when it asked for none. A job
  preempted after a checkpoint resumes with that, less the progress it kept
  (``JobSpec.progress_kept_s``, wall-clock seconds: docs/preemption.md section 2).
* ``available: false`` takes the simulated cluster offline: every call raises
  :class:`TransientBackendError`, which is how the console's degraded mode is demonstrated.
* An ended job is listed for ``LISTED_S`` after the cluster recorded its end (as Slurm lists
  one for ``MinJobAge``), then only remembered until ``retention_s``: a repeated ``start``
  still finds it. The cluster moves only when it is called, so a job can end (``finished_at``)
  long before the call that records it: an ended row's ``ends_at`` is that call's moment, and
  listing counts from it, so that the loop learns of every end however long it was away. A
  cycle then reads the live rows and the few just ended, never the day of ended ones.

Unlike the other backends this one needs Django (its state is in the database); the ORM is
imported inside the methods so that importing ``allocations.backends`` stays Django-free.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from allocations.backends.base import (
    BackendJob,
    BackendJobState,
    BackendNode,
    ClusterBackend,
    JobSpec,
    NodeState,
    PermanentBackendError,
    TransientBackendError,
    register,
)

FAILURE_REASON = "simulated failure"
# setting: (type, default, lowest allowed value)
SETTINGS: dict[str, tuple[type, Any, float | None]] = {
    "speedup": (float, 1.0, None),
    "default_duration_s": (float, 3600.0, None),
    "node_failure_rate": (float, 0.0, 0.0),
    "node_repair_s": (float, 600.0, 0.0),
    "seed": (int, 0, None),
    "retention_s": (float, 86400.0, 0.0),
}
# available: false takes the cluster offline; demo_workload is read by services/demo.py.
OTHER_SETTINGS = {"available", "demo_workload"}
LIVE_STATES = ("pending", "running")
# The reason of a running job told to stop within its grace (docs/preemption.md section 5).
SIGNALLED_REASON = "signalled (SIGTERM): stopping within its grace"
ENDED_STATES = ("finished", "failed", "cancelled")
# Slurm's default MinJobAge: many cycles' worth, so a cycle that fails after reading the list
# still leaves the next ones time to learn of the ends it held.
LISTED_S = 300.0


def _now() -> datetime:
    from django.utils import timezone

    return timezone.now()


@register
class SimulatedBackend(ClusterBackend):
    """A cluster whose nodes are the Node rows and whose jobs are SimulatedJob rows."""

    kind = "simulated"

    def __init__(self, settings: Mapping[str, Any]) -> None:
        """Validate the settings; each bad one is named with its value."""
        super().__init__(settings)
        if not isinstance(settings, Mapping):
            raise PermanentBackendError(f"backend_settings must be an object, not {settings!r}")
        for key, (kind, default, lowest) in SETTINGS.items():
            value = settings.get(key, default)
            is_number = isinstance(value, int | float) and not isinstance(value, bool)
            if not is_number or not math.isfinite(value) or (kind is int and not isinstance(value, int)):
                what = "a whole number" if kind is int else "a number"
                raise PermanentBackendError(f"backend_settings.{key} must be {what}, not {value!r}")
            if lowest is not None and value < lowest:
                raise PermanentBackendError(
                    f"backend_settings.{key} must be at least {lowest}, not {value!r}"
                )
            setattr(self, key, kind(value))
        if self.speedup <= 0:
            raise PermanentBackendError(f"backend_settings.speedup must be above 0, not {self.speedup!r}")
        if self.default_duration_s <= 0:
            raise PermanentBackendError(
                f"backend_settings.default_duration_s must be above 0, not {self.default_duration_s!r}"
            )
        unknown = sorted(set(settings) - set(SETTINGS) - OTHER_SETTINGS)
        if unknown:
            known = ", ".join(sorted({*SETTINGS, *OTHER_SETTINGS}))
            raise PermanentBackendError(
                f"backend_settings.{unknown[0]} is not a setting of the simulated backend (known: {known})"
            )
        available = settings.get("available", True)
        if not isinstance(available, bool):
            raise PermanentBackendError(
                f"backend_settings.available must be true or false, not {available!r}"
            )
        self.available = available
        # Resources in use per node and the running jobs' placements, loaded once per instance (a
        # cycle starts many jobs: one read instead of one per start) and kept up to date by
        # this instance's start/preempt/cancel; dropped whenever the cluster advances.
        self._used: dict[str, dict[str, int]] | None = None
        self._placed: dict[str, dict[str, dict[str, int]]] = {}

    # --- the cluster's own life: jobs end, nodes fail and return ---------------------------------

    def _reachable(self) -> None:
        if not self.available:
            raise TransientBackendError(
                "the simulated cluster is offline (backend_settings.available is false)"
            )

    def _advance(self, now: datetime) -> None:
        """Move the simulated cluster to ``now``: finish jobs whose time is up, fail and repair
        nodes, forget jobs that ended long ago. Idempotent for a given ``now``."""
        from django.db.models import F

        from allocations.models import Node, SimulatedJob

        self._used = None
        # finished_at is when its time was up; ends_at becomes now, when the cluster saw it.
        SimulatedJob.objects.filter(state="running", ends_at__lte=now).update(
            state="finished", finished_at=F("ends_at"), ends_at=now, exit_code=0
        )
        if self.node_failure_rate > 0:
            self._fail_and_repair_nodes(now, Node, SimulatedJob)
        # A range of the (state, ends_at) index: only the rows that are deleted are read.
        SimulatedJob.objects.filter(
            state__in=ENDED_STATES, ends_at__lt=now - timedelta(seconds=self.retention_s)
        ).delete()

    def _fail_and_repair_nodes(self, now: datetime, node_model: Any, job_model: Any) -> None:
        """Each ready node fails in a given minute with probability rate/60, decided by a
        generator seeded with (seed, node, minute): the same seed gives the same failures."""
        minute = int(now.timestamp() // 60)
        probability = self.node_failure_rate / 60
        for node in node_model.objects.filter(state="ready"):
            if random.Random(f"{self.seed}:{node.name}:{minute}").random() < probability:
                node.state, node.state_since, node.reason = "down", now, f"{FAILURE_REASON} at {now:%H:%M:%S}"
                node.save(update_fields=["state", "state_since", "reason"])
                # The simulated cluster shares the Node rows, so the loop's sync sees no change:
                # the node page's history is written here.
                _record_state(node, "ready", now)
                for job in job_model.objects.filter(state="running").order_by():
                    if any(name == node.name for name, _ in job.nodes):
                        job.state, job.finished_at, job.ends_at, job.exit_code = "failed", now, now, 137
                        job.reason = f"node {node.name} failed"
                        job.save(update_fields=["state", "finished_at", "ends_at", "exit_code", "reason"])
        repaired = node_model.objects.filter(
            state="down",
            reason__startswith=FAILURE_REASON,
            state_since__lte=now - timedelta(seconds=self.node_repair_s),
        )
        for node in repaired:
            node.state, node.state_since, node.reason = "ready", now, ""
            node.save(update_fields=["state", "state_since", "reason"])
            _record_state(node, "down", now)

    # --- the contract -----------------------------------------------------------------------------

    def list_nodes(self) -> list[BackendNode]:
        from allocations.models import Node

        self._reachable()
        self._advance(_now())
        # A simulated node has its instance type's resources (docs/resources.md 1); vCPU and
        # memory of a type that does not count them are not known (None).
        return [
            BackendNode(
                name=name,
                instance_type=type_name,
                gpus=gpus,
                state=NodeState(state),
                reason=reason,
                vcpus=vcpus or None,
                memory_gib=memory_gib or None,
                partitions=tuple(sorted((partitions or {}).items())),
            )
            for name, type_name, gpus, state, reason, vcpus, memory_gib, partitions in Node.objects.order_by(
                "name"
            ).values_list(
                "name",
                "instance_type__name",
                "gpus",
                "state",
                "reason",
                "instance_type__vcpus_per_node",
                "instance_type__memory_gib_per_node",
                "instance_type__partitions_per_node",
            )
        ]

    def list_jobs(self) -> list[BackendJob]:
        """The running and held jobs, and those whose end was recorded in the last ``LISTED_S``."""
        from django.db.models import Q

        from allocations.models import SimulatedJob

        self._reachable()
        now = _now()
        self._advance(now)
        listed = SimulatedJob.objects.filter(
            Q(state__in=LIVE_STATES)
            | Q(state__in=ENDED_STATES, ends_at__gte=now - timedelta(seconds=min(LISTED_S, self.retention_s)))
        )
        return [
            BackendJob(
                job_id=job_id,
                external_id=external_id,
                state=BackendJobState(state),
                nodes=tuple((str(name), int(gpus)) for name, gpus in nodes),
                started_at=started_at.timestamp() if started_at else None,
                finished_at=finished_at.timestamp() if finished_at else None,
                exit_code=exit_code,
                reason=reason,
                held=state == "pending",  # a preempted job starts again only when told
            )
            for _, job_id, external_id, state, nodes, started_at, finished_at, exit_code, reason in sorted(
                # Sorted here: an ORDER BY id would tempt SQLite into walking the whole table.
                listed.order_by().values_list(
                    "id",
                    "job_id",
                    "external_id",
                    "state",
                    "nodes",
                    "started_at",
                    "finished_at",
                    "exit_code",
                    "reason",
                ),
                key=lambda row: row[0],
            )
        ]

    def start(self, job: JobSpec, nodes: tuple[tuple[str, int], ...]) -> str:
        """Run ``job`` on ``nodes``; a job already known is not started twice (a held one is
        restarted on the given nodes)."""
        from django.db import transaction

        from allocations.models import Node, SimulatedJob

        self._reachable()
        now = _now()
        with transaction.atomic():
            known = SimulatedJob.objects.select_for_update().filter(job_id=job.job_id).first()
            if known is not None and known.state != "pending":
                return known.external_id
            self._check_placement(job, nodes, Node, SimulatedJob)
            # A job resumed from a checkpoint runs only the rest of its duration. Kept progress
            # is counted on the loop's clock, the wall clock, like the run it was kept from.
            duration = max(
                0.0, (job.duration_s or self.default_duration_s) / self.speedup - job.progress_kept_s
            )
            fields = {
                "state": "running",
                "nodes": [[name, gpus] for name, gpus in nodes],
                "started_at": now,
                "ends_at": now + timedelta(seconds=duration),
                "duration_s": duration,
                "finished_at": None,
                "exit_code": None,
                "reason": "",
            }
            if known is not None:
                for key, value in fields.items():
                    setattr(known, key, value)
                known.resources = _per_node(job)
                known.save()
                self._place(job.job_id, nodes, job)
                return known.external_id
            # ON CONFLICT DO NOTHING: a concurrent start of the same job that won keeps its copy,
            # so the job runs once (and the external id is the same either way).
            SimulatedJob.objects.bulk_create(
                [
                    SimulatedJob(
                        job_id=job.job_id,
                        external_id=f"sim-{job.job_id}",
                        name=job.name,
                        team=job.team,
                        instance_type=job.instance_type,
                        gpus=job.gpus,
                        resources=_per_node(job),
                        **fields,
                    )
                ],
                ignore_conflicts=True,
            )
            self._place(job.job_id, nodes, job)
            return f"sim-{job.job_id}"

    def _usage(self, job_model: Any) -> dict[str, dict[str, int]]:
        """Resources in use per node (``gpus``, ``vcpus``, ``memory_gib``, each partition
        profile), read once per instance, then kept up to date."""
        if self._used is None:
            self._placed = {
                job_id: _taken(nodes, resources)
                for job_id, nodes, resources in job_model.objects.filter(state="running")
                .order_by()
                .values_list("job_id", "nodes", "resources")
            }
            self._used = defaultdict(lambda: defaultdict(int))
            for placement in self._placed.values():
                _add(self._used, placement, 1)
        return self._used

    def _place(
        self, job_id: str, nodes: Iterable[tuple[str, int]] | None, job: JobSpec | None = None
    ) -> None:
        """Record that ``job_id`` now runs on ``nodes`` (None: it no longer runs)."""
        if self._used is None:
            return
        _add(self._used, self._placed.pop(job_id, {}), -1)
        if nodes is not None and job is not None:
            self._placed[job_id] = _taken(nodes, _per_node(job))
            _add(self._used, self._placed[job_id], 1)

    def _check_placement(
        self, job: JobSpec, nodes: tuple[tuple[str, int], ...], node_model: Any, job_model: Any
    ) -> None:
        """Refuse a placement a real cluster would refuse, naming the node and the numbers."""
        if not nodes:
            raise PermanentBackendError(f"job {job.job_id}: nodes must not be empty")
        total = sum(gpus for _, gpus in nodes)
        if total != job.gpus:
            raise PermanentBackendError(
                f"job {job.job_id}: nodes hold {total} GPUs but the job asks for {job.gpus}"
            )
        known = {
            row.name: row
            for row in node_model.objects.select_related("instance_type").filter(
                name__in=[name for name, _ in nodes]
            )
        }
        used = {name: dict(amounts) for name, amounts in self._usage(job_model).items()}
        for name, amounts in self._placed.get(job.job_id, {}).items():  # its own held copy
            for resource, amount in amounts.items():
                used.setdefault(name, {})[resource] = used.get(name, {}).get(resource, 0) - amount
        for name, gpus in nodes:
            node = known.get(name)
            if node is None:
                raise PermanentBackendError(f"job {job.job_id}: unknown node {name!r}")
            if node.state != "ready":
                raise PermanentBackendError(f"job {job.job_id}: node {name!r} is {node.state}, not ready")
            if node.instance_type.name != job.instance_type:
                raise PermanentBackendError(
                    f"job {job.job_id}: node {name!r} is a {node.instance_type.name}, not a {job.instance_type}"
                )
            here = used.get(name, {})
            # A job of partitions alone takes no GPU of its node (docs/resources.md 3).
            if gpus < (0 if job.partitions_per_node else 1) or here.get("gpus", 0) + gpus > node.gpus:
                free = node.gpus - here.get("gpus", 0)
                raise PermanentBackendError(
                    f"job {job.job_id}: node {name!r} has {free} of {node.gpus} GPUs free, {gpus} asked"
                )
            it = node.instance_type
            has = {"vcpus": it.vcpus_per_node, "memory_gib": it.memory_gib_per_node}
            has.update(it.partitions_per_node or {})
            for resource, asked in _per_node(job).items():
                if asked and here.get(resource, 0) + asked > has.get(resource, 0):
                    free = has.get(resource, 0) - here.get(resource, 0)
                    raise PermanentBackendError(
                        f"job {job.job_id}: node {name!r} has {free} of {has.get(resource, 0)} "
                        f"{UNITS.get(resource, resource)} free, {asked} asked"
                    )

    def preempt(self, job_id: str) -> bool:
        """A job whose time is up has finished, as on a real cluster: not preempted (False)."""
        from allocations.models import SimulatedJob

        self._reachable()
        self._advance(_now())
        stopped = SimulatedJob.objects.filter(job_id=job_id, state="running").update(
            state="pending", nodes=[], started_at=None, ends_at=None, reason="preempted"
        )
        self._place(job_id, None)
        return bool(stopped) or SimulatedJob.objects.filter(job_id=job_id, state="pending").exists()

    def signal(self, job_id: str) -> bool:
        """A simulated job has no process to signal: it runs on, holding its nodes, until its
        time is up or ``preempt`` kills it; its reason says it was signalled."""
        from allocations.models import SimulatedJob

        self._reachable()
        self._advance(_now())
        return bool(
            SimulatedJob.objects.filter(job_id=job_id, state="running").update(reason=SIGNALLED_REASON)
        )

    def cancel(self, job_id: str) -> None:
        from allocations.models import SimulatedJob

        self._reachable()
        now = _now()
        SimulatedJob.objects.filter(job_id=job_id, state__in=LIVE_STATES).update(
            state="cancelled", nodes=[], finished_at=now, ends_at=now, reason="cancelled"
        )
        self._place(job_id, None)

    def health(self) -> None:
        self._reachable()


# How a resource is written in a refusal ("12 of 96 vCPU free").
UNITS = {"vcpus": "vCPU", "memory_gib": "GiB memory"}


def _per_node(job: JobSpec) -> dict[str, int]:
    """What the job takes on each of its nodes beyond GPUs (JobSpec's per-node fields)."""
    out = {"vcpus": job.vcpus_per_node, "memory_gib": job.memory_gib_per_node}
    out.update(job.partitions_per_node)
    return {name: amount for name, amount in out.items() if amount}


def _taken(nodes: Iterable[Any], resources: Mapping[str, int] | None) -> dict[str, dict[str, int]]:
    """Per node of ``nodes`` ([name, gpus] pairs), what a job takes there."""
    return {str(name): {"gpus": int(gpus), **(resources or {})} for name, gpus in nodes}


def _add(used: dict[str, dict[str, int]], taken: Mapping[str, Mapping[str, int]], sign: int) -> None:
    for name, amounts in taken.items():
        for resource, amount in amounts.items():
            used[name][resource] += sign * amount


def _record_state(node: Any, old_state: str, now: datetime) -> None:
    """A failure or repair of the simulated cluster in the node's history."""
    from allocations.models import NodeStateChange

    NodeStateChange.objects.create(
        node=node, at=now, old_state=old_state, state=node.state, reason=node.reason, source="cluster"
    )
