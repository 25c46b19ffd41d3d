"""The allocation engine: a pure function from a cluster snapshot to a plan (POLICY.md).

No Django, Celery, Plotly or ORM import here: the Celery loop, ``manage.py simulate`` and the
what-if lab all call the same ``allocate(snapshot, now)``.
"""

from .cycle import allocate
from .ranking import job_priority
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
from .state import never_fits

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
    "allocate",
    "job_priority",
    "never_fits",
]
