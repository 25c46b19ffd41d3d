"""The contract between gpugov and a cluster backend (the thing that actually runs jobs).

gpugov decides admission and placement (the engine); a backend only executes: it reports its
nodes and the jobs gpugov started, starts a job on exactly the nodes and GPUs it is given,
preempts and cancels. One module per kind (``simulated``, ``slurm``, ...) registers its class
here; a Cluster row names its kind and holds the backend's settings as JSON.

Rules every backend follows:

* Pure Python: no Django import, so the engine, the backends and their tests run without a
  database. Backends return the dataclasses below, never ORM rows or raw JSON.
* Errors: an unreachable backend (connection refused, timeout) raises
  :class:`TransientBackendError`, and the allocation loop retries with backoff; a job is NEVER
  marked failed because of it. A request that is itself wrong (unknown node, too many GPUs,
  bad settings) raises :class:`PermanentBackendError`, whose message names the field or value.
* ``start``, ``preempt`` and ``cancel`` are idempotent, keyed by gpugov's ``job_id``: the loop
  may repeat a call after a crash or a timeout without creating a second copy of a job.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar


class BackendError(Exception):
    """Base class of every error a backend raises."""


class TransientBackendError(BackendError):
    """The backend could not be reached or did not answer in time.

    The allocation loop retries with backoff; jobs are never marked failed because of it.
    """


class PermanentBackendError(BackendError):
    """The request itself is wrong (e.g. an unknown node); retrying will not help.

    The message names the field or value at fault (and, for Slurm, quotes Slurm's message).
    """


class NodeState(StrEnum):
    """A node as the engine sees it: usable, being emptied, or gone."""

    READY = "ready"
    DRAINING = "draining"
    DOWN = "down"


class BackendJobState(StrEnum):
    """A job as the backend reports it.

    ``PENDING`` covers a job that was preempted and is held, waiting for gpugov to place it
    again; a backend never restarts a pending job on its own. ``RUNNING`` also covers a job
    the backend has placed on the given nodes and is about to start (``started_at`` is then
    None): for gpugov its GPUs are taken.
    """

    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class BackendNode:
    """One node: its name, instance type, how many whole GPUs it has in all, and its state.

    ``vcpus``, ``memory_gib`` and ``partitions`` ((profile, count), sorted by profile) are what
    the backend reads of the node's other resources (docs/resources.md 1); None where it does
    not know them. GPUs cut into partitions are not counted in ``gpus``.
    """

    name: str
    instance_type: str
    gpus: int
    state: NodeState
    reason: str = ""
    vcpus: int | None = None
    memory_gib: int | None = None
    partitions: tuple[tuple[str, int], ...] | None = None


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What gpugov asks a backend to run.

    ``gpus`` is the job's total; ``duration_s`` (when known) bounds its run time.
    ``progress_kept_s``: seconds of work its checkpoints kept from earlier runs (docs/
    preemption.md section 2). A backend that models run time (the simulated one) runs it that
    much shorter; a real one restarts the application, which resumes from its checkpoint.
    """

    job_id: str
    team: str
    name: str
    instance_type: str
    gpus: int
    command: str = ""
    image: str = ""
    duration_s: int | None = None
    progress_kept_s: float = 0.0
    # docs/resources.md 3: what the job takes on EACH of its nodes beyond GPUs (``job_resources``
    # spread over its nodes): vCPU and memory (0: not counted, the instance type declares none)
    # and partitions ((profile, count), sorted by profile). A job of partitions alone has
    # ``gpus`` 0 and is placed on one node with 0 GPUs.
    vcpus_per_node: int = 0
    memory_gib_per_node: int = 0
    partitions_per_node: tuple[tuple[str, int], ...] = ()

    @property
    def counts_gpus_only(self) -> bool:
        """Whether the job asks GPUs alone, as every job did before resources."""
        return not (self.vcpus_per_node or self.memory_gib_per_node or self.partitions_per_node)


@dataclass(frozen=True, slots=True)
class BackendJob:
    """What the backend reports of a job gpugov started.

    ``nodes`` is ``((node name, gpus on that node), ...)`` while the job holds nodes (and, for a
    finished job, the nodes it last ran on when the backend still says so). Times are Unix
    seconds.
    """

    job_id: str
    external_id: str
    state: BackendJobState
    nodes: tuple[tuple[str, int], ...] = ()
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    reason: str = ""
    # A pending job the backend will not start by itself (Slurm: held). One it may start on
    # its own is made so by the loop (``preempt``), since gpugov alone decides what runs.
    held: bool = False


class ClusterBackend(ABC):
    """One cluster, driven through its own interface. Subclasses set ``kind`` and register."""

    kind: ClassVar[str]

    def __init__(self, settings: Mapping[str, Any]) -> None:
        """``settings`` is the Cluster row's backend settings (JSON); validate them here and
        raise :class:`PermanentBackendError` naming the bad key and value."""
        self.settings: Mapping[str, Any] = settings

    @abstractmethod
    def list_nodes(self) -> list[BackendNode]:
        """Every node of the cluster with its instance type, GPUs and state."""

    @abstractmethod
    def list_jobs(self) -> list[BackendJob]:
        """Every job gpugov started that the backend still knows (running, held or recently ended)."""

    @abstractmethod
    def start(self, job: JobSpec, nodes: tuple[tuple[str, int], ...]) -> str:
        """Run ``job`` on exactly these ``(node, gpus)`` and return the backend's id for it.

        On each node the job also takes ``job.vcpus_per_node``, ``job.memory_gib_per_node`` and
        ``job.partitions_per_node``; a start that does not fit there is refused
        (:class:`PermanentBackendError` naming the node and the numbers).

        Idempotent: if the backend already knows this ``job_id`` it does not start a second
        copy; it returns the known id (restarting a held copy on the given nodes).
        """

    @abstractmethod
    def preempt(self, job_id: str) -> bool:
        """Stop the job and return it to pending (its progress is lost); idempotent.

        The backend must not restart it on its own: only a later ``start`` does. Returns True
        when the job is pending there now (stopped by this call or before), False when it has
        ended (or is ending) by itself, or is unknown: nothing was preempted, and the GPUs it
        held are not free until the backend reports it ended.
        """

    @abstractmethod
    def signal(self, job_id: str) -> bool:
        """Tell the running job to stop (SIGTERM to its processes) without taking it off its
        nodes; idempotent (docs/preemption.md section 5, grace).

        The job keeps its nodes until it ends by itself, which the backend then reports as any
        end, or until ``preempt`` kills it and returns it to pending. Returns True when the job
        runs there (signalled by this call or before), False when it has ended (or is ending)
        by itself, or is unknown: nothing was signalled.
        """

    @abstractmethod
    def cancel(self, job_id: str) -> None:
        """Stop the job for good; idempotent (cancelling an ended or unknown job is a no-op)."""

    def health(self) -> None:
        """Raise :class:`TransientBackendError` when the backend cannot be reached."""
        self.list_nodes()


REGISTRY: dict[str, type[ClusterBackend]] = {}


def register(cls: type[ClusterBackend]) -> type[ClusterBackend]:
    """Class decorator: make ``cls`` available under ``cls.kind``."""
    kind = getattr(cls, "kind", None)
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"{cls.__name__} must set a non-empty string `kind` to be registered")
    known = REGISTRY.get(kind)
    if known is not None and known is not cls:
        raise TypeError(f"backend kind {kind!r} is already registered by {known.__name__}")
    REGISTRY[kind] = cls
    return cls


def get_backend(kind: str, settings: Mapping[str, Any]) -> ClusterBackend:
    """The backend of this ``kind`` configured with ``settings``.

    Raises :class:`PermanentBackendError` for an unknown kind, naming it and the known kinds.
    """
    cls = REGISTRY.get(kind)
    if cls is None:
        known = ", ".join(sorted(REGISTRY)) or "(none)"
        raise PermanentBackendError(f"unknown backend kind {kind!r}; known kinds: {known}")
    return cls(settings)
