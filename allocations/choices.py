"""Choices of the data model. Policy words come from the engine's enums (POLICY.md section 1),
so the database, the forms and the engine never disagree on a spelling."""

from django.db import models

from allocations.engine import (
    IdleAllocation,
    PendingCode,
    PreemptionReason,
    PreemptTeamTasks,
    PreemptWhileBorrowing,
    Queueing,
    Reclaim,
    Sharing,
    TaskRanking,
)

# A DNS label (RFC 1123): lowercase letters, digits and '-', starting and ending alphanumeric.
DNS_LABEL_REGEX = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
TEAM_NAME_MAX_LENGTH = 40
MAX_PRIORITY_CLASSES = 32


def _choices(enum: type, labels: dict[str, str] | None = None) -> list[tuple[str, str]]:
    labels = labels or {}
    return [(member.value, labels.get(member.value, member.value)) for member in enum]


SHARING_CHOICES = _choices(
    Sharing,
    {
        "lend-and-borrow": "Lend and borrow",
        "lend": "Lend only (never borrows)",
        "dont-lend": "Don't lend (never borrows)",
    },
)
PREEMPT_TEAM_TASKS_CHOICES = _choices(
    PreemptTeamTasks,
    {
        "lower-priority": "Lower priority",
        "lower-or-newer-equal-priority": "Lower, or newer of equal priority",
        "never": "Never",
    },
)
RECLAIM_CHOICES = _choices(
    Reclaim, {"any": "Any borrowed job", "lower-priority": "Lower-priority borrowed jobs", "never": "Never"}
)
PREEMPT_WHILE_BORROWING_CHOICES = _choices(
    PreemptWhileBorrowing, {"lower-priority": "Lower-priority borrowed jobs", "never": "Never"}
)
IDLE_ALLOCATION_CHOICES = _choices(
    IdleAllocation, {"fair-share": "Fair share", "first-come-first-serve": "First come, first serve"}
)
TASK_RANKING_CHOICES = _choices(
    TaskRanking, {"priority": "Priority", "first-come-first-serve": "First come, first serve"}
)
QUEUEING_CHOICES = _choices(Queueing, {"best-effort-fifo": "Best-effort FIFO", "strict-fifo": "Strict FIFO"})
PENDING_CODE_CHOICES = _choices(PendingCode)
# The pending codes in plain words (POLICY.md section 5, docs/glossary.md "Why a job waits"),
# shown beside the code and its message, which carries the numbers.
PENDING_CODE_WORDS: dict[str, str] = {
    PendingCode.TEAM_INACTIVE: "The team's allocation is disabled: none of its jobs start.",
    PendingCode.EXCEEDS_MAX: "The job can never fit on this cluster.",
    PendingCode.MEMBER_LIMIT: "Its submitter already runs as many GPUs in the team as one member may.",
    PendingCode.BLOCKED_BY_FIFO: "Under strict FIFO it waits behind its team's first job, which cannot start.",
    PendingCode.BORROW_LIMIT: "Its team would go over its borrow limit.",
    PendingCode.WAITING_FOR_QUOTA: "Its team's quota is full, or lent out and not reclaimable now.",
    PendingCode.CAPACITY_LOST: "Nodes were lost: the ready GPUs cannot hold it beside the running jobs.",
    PendingCode.NO_IDLE_CAPACITY: "Its team must borrow, and no idle GPUs are left to borrow.",
    PendingCode.FRAGMENTED: "Enough GPUs are free, but no node has room for it.",
    PendingCode.MIN_RUNTIME: (
        "It could start by preempting jobs that have not yet run their minimum runtime: it starts "
        "when they have (docs/preemption.md section 1)."
    ),
    PendingCode.PREEMPTING: (
        "It preempted jobs that are stopping within their grace: their GPUs are kept for it, and "
        "it starts when they have stopped (docs/preemption.md section 5)."
    ),
}
PREEMPTION_REASON_CHOICES = _choices(PreemptionReason)


class BackendKind(models.TextChoices):
    SIMULATED = "simulated", "Simulated (embedded)"
    SLURM = "slurm", "Slurm"


class NodeState(models.TextChoices):
    READY = "ready", "Ready"
    DRAINING = "draining", "Draining"
    DOWN = "down", "Down"


class NodeStateSource(models.TextChoices):
    """Who changed a node's state: an administrator (console, API, Django admin) or the cluster
    (the backend reported it to the allocation loop)."""

    ADMIN = "admin", "Administrator"
    CLUSTER = "cluster", "Cluster"


class BorrowLimitKind(models.TextChoices):
    PERCENT = "percent", "Percent of quota"
    ABSOLUTE = "absolute", "GPUs"
    UNLIMITED = "unlimited", "Unlimited"


class Role(models.TextChoices):
    TEAM_ADMIN = "team-admin", "Team admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


class JobState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    FINISHED = "finished", "Finished"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    REJECTED = "rejected", "Rejected"


ACTIVE_JOB_STATES = (JobState.PENDING, JobState.RUNNING)


class JobEventKind(models.TextChoices):
    SUBMITTED = "submitted", "Submitted"
    STARTED = "started", "Started"
    PREEMPTED = "preempted", "Preempted"
    # docs/preemption.md section 5: told to stop (SIGTERM) for a preemptor, within its grace.
    SIGNALLED = "signalled", "Signalled"
    REQUEUED = "requeued", "Requeued"
    FINISHED = "finished", "Finished"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    REJECTED = "rejected", "Rejected"


class AuditAction(models.TextChoices):
    CREATE = "create", "Created"
    UPDATE = "update", "Changed"
    DELETE = "delete", "Deleted"
