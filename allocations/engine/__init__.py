"""The allocation engine: a pure function from a cluster snapshot to a plan (POLICY.md).

No Django, Celery, Plotly or ORM import here: the Celery loop, ``manage.py simulate`` and the
what-if lab all call the same ``allocate(snapshot, now)``.
"""

from .snapshot import (
    ClusterPolicy,
    IdleAllocation,
    InstanceType,
    Job,
    Node,
    PendingCode,
    PendingReason,
    Plan,
    Preemption,
    PreemptionReason,
    PreemptTeamTasks,
    PreemptWhileBorrowing,
    PriorityClass,
    Queueing,
    Quota,
    Reclaim,
    Sharing,
    Snapshot,
    Start,
    TaskRanking,
    Team,
)

__all__ = [
    "ClusterPolicy",
    "IdleAllocation",
    "InstanceType",
    "Job",
    "Node",
    "PendingCode",
    "PendingReason",
    "Plan",
    "PreemptTeamTasks",
    "PreemptWhileBorrowing",
    "Preemption",
    "PreemptionReason",
    "PriorityClass",
    "Queueing",
    "Quota",
    "Reclaim",
    "Sharing",
    "Snapshot",
    "Start",
    "TaskRanking",
    "Team",
]
