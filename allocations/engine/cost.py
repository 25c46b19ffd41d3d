"""What a preemption costs (docs/preemption.md sections 1 and 2): how long a running job is
protected by its minimum runtime, and how much of its work a preemption now would throw away.

Lost work is the time since the job's last checkpoint in its current run (since its start
without checkpoints); lost GPU-seconds are that times its GPUs. Checkpoints fall every
``checkpoint_interval_s`` seconds after ``started_at``.
"""

from __future__ import annotations

from .snapshot import ClusterPolicy, Job


def min_runtimes(policy: ClusterPolicy) -> dict[str, float]:
    """Each priority class's minimum runtime by name, its own or the policy's."""
    default = float(policy.min_runtime_s)
    return {
        pc.name: default if pc.min_runtime_s is None else float(pc.min_runtime_s)
        for pc in policy.priority_classes
    }


def min_runtime_of(policy: ClusterPolicy, job: Job) -> float:
    """The minimum runtime of ``job`` (seconds): its priority class's, else the policy's (a job
    with no class, or a class the policy no longer has, takes the policy's)."""
    if job.priority_class is not None:
        for pc in policy.priority_classes:
            if pc.name == job.priority_class:
                return float(policy.min_runtime_s if pc.min_runtime_s is None else pc.min_runtime_s)
    return float(policy.min_runtime_s)


def preemption_grace_of(policy: ClusterPolicy, job: Job) -> float:
    """docs/preemption.md 5: how long ``job``, preempted, may take to stop once signalled
    (seconds): its priority class's grace, else the policy's, as ``min_runtime_of``."""
    if job.priority_class is not None:
        for pc in policy.priority_classes:
            if pc.name == job.priority_class:
                own = pc.preemption_grace_s
                return float(policy.preemption_grace_s if own is None else own)
    return float(policy.preemption_grace_s)


def _ran(job: Job, now: float) -> float:
    if job.started_at is None:
        return 0.0
    return max(0.0, now - job.started_at)


def lost_work_s(job: Job, now: float) -> float:
    """Seconds of work a preemption at ``now`` throws away: the time since the job's last
    checkpoint in this run, or since its start without checkpoints."""
    ran = _ran(job, now)
    interval = job.checkpoint_interval_s
    if not interval or interval <= 0:
        return ran
    return ran % interval


def last_checkpoint_s(job: Job, now: float) -> float:
    """Seconds of this run kept by its last checkpoint: the run so far less the lost work."""
    ran = _ran(job, now)
    return ran - lost_work_s(job, now)
