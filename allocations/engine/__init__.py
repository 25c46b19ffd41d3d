"""The allocation engine: a pure function from a cluster snapshot to a plan (POLICY.md).

No Django, Celery, Plotly or ORM import here: the Celery loop, ``manage.py simulate`` and the
what-if lab all call the same ``allocate(snapshot, now)``.
"""

# The mypyc-compiled build of these modules, when it is up to date, is found before them
# (``compiled.py`` says when; ``BUILD`` below says which runs).
from . import compiled as _compiled

_build_path = _compiled.package_path()
if _build_path is not None:
    __path__.insert(0, _build_path)

from . import cycle as _cycle  # noqa: E402 - after the build is on the path
from .cost import last_checkpoint_s, lost_work_s, min_runtime_of, preemption_grace_of  # noqa: E402
from .cycle import allocate  # noqa: E402
from .preemption import back_off_end  # noqa: E402
from .ranking import job_priority  # noqa: E402
from .snapshot import (  # noqa: E402
    ClusterPolicy,
    IdleAllocation,
    InstanceType,
    Job,
    Node,
    PendingCode,
    PendingReason,
    PendingReasons,
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
from .state import never_fits  # noqa: E402

# "compiled" or "interpreted": which build of the engine this process runs.
BUILD = "compiled" if _build_path is not None and _cycle.__file__.startswith(_build_path) else "interpreted"

__all__ = [
    "BUILD",
    "ClusterPolicy",
    "IdleAllocation",
    "InstanceType",
    "Job",
    "Node",
    "PendingCode",
    "PendingReason",
    "PendingReasons",
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
    "back_off_end",
    "job_priority",
    "last_checkpoint_s",
    "lost_work_s",
    "min_runtime_of",
    "never_fits",
    "preemption_grace_of",
]
