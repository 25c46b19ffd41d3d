"""The data model of the governance policy (POLICY.md section 1) and of the jobs it governs.

Every rule the database can hold is a database constraint: forms and services give the
friendly error first, but a bad row never gets in through any path.
"""

from __future__ import annotations

import math

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from . import choices
from .choices import (
    AuditAction,
    BackendKind,
    BorrowLimitKind,
    JobEventKind,
    JobState,
    NodeState,
    NodeStateSource,
    Role,
)


class Cluster(models.Model):
    """The GPU cluster that this gpugov governs (one per installation) and its backend."""

    name = models.CharField(max_length=100, default="cluster")
    backend_kind = models.CharField(max_length=20, choices=BackendKind.choices, default=BackendKind.SIMULATED)
    backend_settings = models.JSONField(default=dict, blank=True)
    time_zone = models.CharField(max_length=64, default="UTC", help_text="IANA name, e.g. Europe/Berlin")
    # Backend health, written by the allocation loop: the console shows a degraded cluster.
    backend_healthy = models.BooleanField(default=True)
    backend_error = models.TextField(blank=True)
    backend_checked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="cluster_is_singleton")]

    def __str__(self) -> str:
        return self.name


class ClusterPolicy(models.Model):
    """How idle capacity is shared and jobs are ranked, cluster-wide (POLICY.md section 1)."""

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="policy")
    idle_allocation = models.CharField(
        max_length=32, choices=choices.IDLE_ALLOCATION_CHOICES, default="fair-share"
    )
    task_ranking = models.CharField(max_length=32, choices=choices.TASK_RANKING_CHOICES, default="priority")
    share_unallocated = models.BooleanField(
        default=True, help_text="Offer capacity in no team's quota to every team that may borrow."
    )
    queueing = models.CharField(max_length=32, choices=choices.QUEUEING_CHOICES, default="best-effort-fifo")
    # Fairness over time (docs/fairness.md): 0 keeps the share of this instant alone.
    fair_share_half_life_s = models.PositiveIntegerField(
        default=0,
        help_text="Seconds after which borrowing counts half in fair share; 0: only borrowing now counts.",
    )
    fair_share_history_percent = models.PositiveSmallIntegerField(
        default=0,
        help_text="How much of a team's fair share is its decayed borrowing (0-100); the rest is borrowing now.",
    )
    min_runtime_s = models.PositiveIntegerField(
        default=0,
        help_text="Seconds a job runs after each start before it may be preempted (docs/preemption.md section 1)",
    )
    preemption_grace_s = models.PositiveIntegerField(
        default=0,
        help_text="Seconds a preempted job gets to stop once signalled; 0: stopped at once "
        "(docs/preemption.md section 5)",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "cluster policies"
        constraints = [
            models.CheckConstraint(
                condition=Q(idle_allocation__in=[c for c, _ in choices.IDLE_ALLOCATION_CHOICES]),
                name="policy_idle_allocation_valid",
            ),
            models.CheckConstraint(
                condition=Q(task_ranking__in=[c for c, _ in choices.TASK_RANKING_CHOICES]),
                name="policy_task_ranking_valid",
            ),
            models.CheckConstraint(
                condition=Q(queueing__in=[c for c, _ in choices.QUEUEING_CHOICES]),
                name="policy_queueing_valid",
            ),
            models.CheckConstraint(
                condition=Q(fair_share_history_percent__lte=100),
                name="policy_fair_share_history_percent_valid",
            ),
            models.CheckConstraint(condition=Q(min_runtime_s__gte=0), name="policy_min_runtime_non_negative"),
            models.CheckConstraint(
                condition=Q(preemption_grace_s__gte=0), name="policy_preemption_grace_non_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"Policy of {self.cluster}"


class InstanceType(models.Model):
    """A kind of accelerator node. Quotas and jobs are counted in whole GPUs of one type and,
    when the type declares them, in vCPU, memory and GPU partitions (docs/resources.md 1)."""

    name = models.CharField(max_length=64, unique=True, help_text="e.g. ml.p5.48xlarge")
    gpus_per_node = models.PositiveSmallIntegerField()
    # docs/resources.md 1: 0 and {} (every existing row) count GPUs alone.
    vcpus_per_node = models.PositiveIntegerField(default=0, help_text="0: vCPU not counted")
    memory_gib_per_node = models.PositiveIntegerField(default=0, help_text="GiB; 0: memory not counted")
    partitions_per_node = models.JSONField(
        default=dict, blank=True, help_text='{profile: count per node}, e.g. {"mig-1g.10gb": 14}'
    )
    price_per_gpu_hour = models.DecimalField(max_digits=10, decimal_places=4, default=0)
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(gpus_per_node__gte=1), name="instance_type_gpus_per_node_positive"
            ),
            models.CheckConstraint(
                condition=Q(price_per_gpu_hour__gte=0), name="instance_type_price_non_negative"
            ),
            models.CheckConstraint(
                condition=Q(name__regex=r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$"), name="instance_type_name_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    """A node of the cluster. Only ready nodes count towards capacity (POLICY.md section 1)."""

    name = models.CharField(max_length=128, unique=True)
    instance_type = models.ForeignKey(InstanceType, on_delete=models.PROTECT, related_name="nodes")
    gpus = models.PositiveSmallIntegerField()
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.READY)
    state_since = models.DateTimeField()
    reason = models.CharField(max_length=200, blank=True, help_text="Why it is draining or down")

    class Meta:
        ordering = ["instance_type__name", "name"]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=NodeState.values), name="node_state_valid"),
        ]

    def __str__(self) -> str:
        return self.name


class NodeStateChange(models.Model):
    """One change of a node's state (or its first state, when it was added): the node page's
    history. Append-only; written by the node services (an administrator, ``actor_name``), the
    allocation loop's node sync and the simulated backend (what the cluster reported)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="state_changes")
    at = models.DateTimeField()
    old_state = models.CharField(max_length=16, blank=True, help_text="Empty when the node was added")
    state = models.CharField(max_length=16, choices=NodeState.choices)
    reason = models.CharField(max_length=200, blank=True)
    source = models.CharField(max_length=16, choices=NodeStateSource.choices)
    actor_name = models.CharField(max_length=150, blank=True, help_text="The administrator, if one")

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["node", "at"], name="nodestate_node_at")]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=NodeState.values), name="nodestate_state_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} {self.old_state or 'added'} -> {self.state} at {self.at:%Y-%m-%d %H:%M:%S}"


class PriorityClass(models.Model):
    """A priority class; higher weight = higher priority. A job with no class has priority 0."""

    name = models.CharField(max_length=63, unique=True)
    weight = models.PositiveSmallIntegerField()
    description = models.CharField(max_length=200, blank=True)
    min_runtime_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Seconds; empty: the cluster policy's minimum runtime (docs/preemption.md section 1)",
    )
    preemption_grace_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Seconds; empty: the cluster policy's preemption grace (docs/preemption.md section 5)",
    )

    class Meta:
        ordering = ["-weight", "name"]
        verbose_name_plural = "priority classes"
        constraints = [
            models.CheckConstraint(condition=Q(weight__gte=0, weight__lte=100), name="priority_weight_0_100"),
            models.CheckConstraint(
                condition=Q(min_runtime_s__isnull=True) | Q(min_runtime_s__gte=0),
                name="priority_min_runtime_non_negative",
            ),
            models.CheckConstraint(
                condition=Q(preemption_grace_s__isnull=True) | Q(preemption_grace_s__gte=0),
                name="priority_preemption_grace_non_negative",
            ),
            models.CheckConstraint(
                condition=Q(name__regex=choices.DNS_LABEL_REGEX), name="priority_name_dns_label"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.weight})"


class Team(models.Model):
    """A team and its team-wide settings (POLICY.md section 1); quotas are per instance type."""

    name = models.CharField(max_length=choices.TEAM_NAME_MAX_LENGTH, unique=True)
    display_name = models.CharField(max_length=100, blank=True)
    active = models.BooleanField(default=True, help_text="When off, none of the team's jobs start.")
    fair_share_weight = models.PositiveSmallIntegerField(default=1)
    sharing = models.CharField(max_length=32, choices=choices.SHARING_CHOICES, default="lend-and-borrow")
    preempt_team_tasks = models.CharField(
        max_length=32, choices=choices.PREEMPT_TEAM_TASKS_CHOICES, default="lower-priority"
    )
    reclaim = models.CharField(max_length=32, choices=choices.RECLAIM_CHOICES, default="any")
    # Empty: POLICY.md's default (lower-priority, or never when reclaim is never).
    preempt_while_borrowing = models.CharField(
        max_length=32, choices=choices.PREEMPT_WHILE_BORROWING_CHOICES, blank=True, default=""
    )
    preempt_while_borrowing_max_priority = models.PositiveSmallIntegerField(null=True, blank=True)
    # What a team may ask for (docs/limits.md), checked at submission only: a limit lowered
    # later leaves the jobs already submitted as they are.
    allowed_priority_classes = models.JSONField(
        default=list, blank=True, help_text="Names of the classes its members may submit; empty = all"
    )
    default_priority_class = models.ForeignKey(
        PriorityClass,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="default_for_teams",
        help_text="The class of a job submitted without one; empty = the lowest allowed class",
    )
    max_gpus_per_job = models.PositiveIntegerField(null=True, blank=True, help_text="Empty = no limit")
    max_pending_jobs_per_member = models.PositiveIntegerField(
        null=True, blank=True, help_text="Empty = no limit"
    )
    max_pending_jobs = models.PositiveIntegerField(null=True, blank=True, help_text="Empty = no limit")
    # Unlike the limits above, enforced by the allocation engine at each cycle (docs/limits.md):
    # a member's pending job waits while it would take the member past it.
    max_running_gpus_per_member = models.PositiveIntegerField(
        null=True, blank=True, help_text="Empty = no limit"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(name__regex=choices.DNS_LABEL_REGEX), name="team_name_dns_label"
            ),
            models.CheckConstraint(
                condition=Q(fair_share_weight__gte=0, fair_share_weight__lte=100), name="team_weight_0_100"
            ),
            models.CheckConstraint(
                condition=Q(sharing__in=[c for c, _ in choices.SHARING_CHOICES]), name="team_sharing_valid"
            ),
            models.CheckConstraint(
                condition=Q(reclaim__in=[c for c, _ in choices.RECLAIM_CHOICES]), name="team_reclaim_valid"
            ),
            models.CheckConstraint(
                condition=Q(preempt_team_tasks__in=[c for c, _ in choices.PREEMPT_TEAM_TASKS_CHOICES]),
                name="team_preempt_team_tasks_valid",
            ),
            models.CheckConstraint(
                condition=Q(preempt_while_borrowing__in=["", "lower-priority", "never"]),
                name="team_preempt_while_borrowing_valid",
            ),
            # POLICY.md section 1: lower-priority together with reclaim: never is refused.
            models.CheckConstraint(
                condition=~Q(reclaim="never", preempt_while_borrowing="lower-priority"),
                name="team_no_borrow_preemption_without_reclaim",
            ),
            models.CheckConstraint(
                condition=Q(preempt_while_borrowing_max_priority__isnull=True)
                | Q(preempt_while_borrowing_max_priority__lte=100),
                name="team_max_priority_0_100",
            ),
            models.CheckConstraint(
                condition=Q(max_gpus_per_job__isnull=True) | Q(max_gpus_per_job__gte=1),
                name="team_max_gpus_per_job_positive",
            ),
            models.CheckConstraint(
                condition=Q(max_pending_jobs_per_member__isnull=True) | Q(max_pending_jobs_per_member__gte=1),
                name="team_max_pending_per_member_positive",
            ),
            models.CheckConstraint(
                condition=Q(max_pending_jobs__isnull=True) | Q(max_pending_jobs__gte=1),
                name="team_max_pending_jobs_positive",
            ),
            models.CheckConstraint(
                condition=Q(max_running_gpus_per_member__isnull=True) | Q(max_running_gpus_per_member__gte=1),
                name="team_max_running_gpus_per_member_positive",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class TeamQuota(models.Model):
    """A team's quota of one instance type with its borrow and lend limits."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas")
    instance_type = models.ForeignKey(InstanceType, on_delete=models.PROTECT, related_name="quotas")
    quota = models.PositiveIntegerField(default=0, help_text="Guaranteed GPUs")
    borrow_limit_kind = models.CharField(
        max_length=16, choices=BorrowLimitKind.choices, default=BorrowLimitKind.PERCENT
    )
    borrow_limit_percent = models.PositiveIntegerField(default=50, help_text="0 to 10000")
    borrow_limit = models.PositiveIntegerField(null=True, blank=True, help_text="GPUs (absolute cap)")
    lend_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="At most this many unused GPUs are lent; empty = the whole quota"
    )
    # docs/resources.md 2: the per-resource form (None and {}: not named, the ratio rule gives
    # vCPU and memory, a partition is 0) or ``instances`` (N nodes' worth of everything, when
    # ``quota`` is N times the type's GPUs per node). Every existing row names none: GPUs alone.
    vcpus = models.PositiveIntegerField(null=True, blank=True, help_text="vCPU; empty: the ratio")
    memory_gib = models.PositiveIntegerField(null=True, blank=True, help_text="GiB; empty: the ratio")
    partitions = models.JSONField(default=dict, blank=True, help_text="{profile: count}")
    instances = models.PositiveIntegerField(null=True, blank=True, help_text="N nodes' worth of everything")
    # Absolute borrow limits of the other resources; one not named keeps the percentage.
    borrow_limit_vcpus = models.PositiveIntegerField(null=True, blank=True)
    borrow_limit_memory_gib = models.PositiveIntegerField(null=True, blank=True)
    borrow_limit_partitions = models.JSONField(default=dict, blank=True, help_text="{profile: count}")

    class Meta:
        ordering = ["team__name", "instance_type__name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "instance_type"], name="one_quota_per_team_and_type"),
            models.CheckConstraint(condition=Q(quota__gte=0), name="quota_non_negative"),
            models.CheckConstraint(
                condition=Q(borrow_limit_percent__gte=0, borrow_limit_percent__lte=10000),
                name="quota_borrow_percent_0_10000",
            ),
            models.CheckConstraint(
                condition=Q(borrow_limit__isnull=True) | Q(borrow_limit__gte=0),
                name="quota_borrow_limit_non_negative",
            ),
            models.CheckConstraint(
                condition=~Q(borrow_limit_kind="absolute") | Q(borrow_limit__isnull=False),
                name="quota_absolute_borrow_limit_set",
            ),
            models.CheckConstraint(
                condition=Q(borrow_limit_kind__in=BorrowLimitKind.values),
                name="quota_borrow_limit_kind_valid",
            ),
            models.CheckConstraint(
                condition=Q(lend_limit__isnull=True) | Q(lend_limit__gte=0, lend_limit__lte=F("quota")),
                name="quota_lend_limit_within_quota",
            ),
            # docs/resources.md 2: instances stands alone.
            models.CheckConstraint(
                condition=Q(instances__isnull=True) | Q(vcpus__isnull=True, memory_gib__isnull=True),
                name="quota_instances_alone",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team} / {self.instance_type}: {self.quota}"


class Membership(models.Model):
    """A user's role in a team (access.py decides what each role may do)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    weekly_report = models.BooleanField(default=True, help_text="Receive the team's weekly report by email")

    class Meta:
        ordering = ["team__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="one_membership_per_user_and_team"),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="membership_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class Job(models.Model):
    """A job of a team, from submission to its end. ``submitted_at`` is kept across requeues
    (a preempted job keeps its place, POLICY.md section 4)."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs")
    submitter = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="jobs"
    )
    name = models.CharField(max_length=200)
    instance_type = models.ForeignKey(InstanceType, on_delete=models.PROTECT, related_name="jobs")
    gpus = models.PositiveIntegerField()
    # docs/resources.md 3: vCPU and memory asked (None: its GPUs' share of their node, every
    # existing row) and GPU partitions asked ({profile: count}; a job of partitions alone has
    # 0 GPUs).
    vcpus = models.PositiveIntegerField(null=True, blank=True)
    memory_gib = models.PositiveIntegerField(null=True, blank=True)
    partitions = models.JSONField(default=dict, blank=True)
    priority_class = models.ForeignKey(
        PriorityClass, on_delete=models.SET_NULL, null=True, blank=True, related_name="jobs"
    )
    command = models.TextField(blank=True)
    image = models.CharField(max_length=300, blank=True)
    requested_duration = models.PositiveIntegerField(null=True, blank=True, help_text="Seconds")
    checkpoint_interval_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Seconds between its checkpoints; empty: none (docs/preemption.md section 2)",
    )
    # What preemptions cost it (docs/preemption.md section 2), written by the allocation loop:
    # the seconds of work its checkpoints kept, and the GPU-seconds its preemptions threw away.
    progress_kept_s = models.FloatField(default=0)
    lost_gpu_seconds = models.FloatField(default=0)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.PENDING)
    submitted_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    pending_reason_code = models.CharField(max_length=32, blank=True)
    pending_reason_message = models.CharField(max_length=500, blank=True)
    nodes = models.JSONField(default=list, blank=True, help_text="[[node name, GPUs], ...] while running")
    start_seq = models.BigIntegerField(default=0)
    preemption_count = models.PositiveIntegerField(default=0)
    last_preempted_at = models.DateTimeField(null=True, blank=True)
    # docs/preemption.md section 5, written by the allocation loop: a running job preempted with
    # a grace was signalled at ``terminating_since`` and keeps its nodes until it ends or
    # ``grace_ends_at`` (then it is killed and requeued); ``preempted_for`` waits for it,
    # out of the cycles, and ``preempted_reason`` is why (POLICY.md section 4). All empty
    # otherwise.
    terminating_since = models.DateTimeField(null=True, blank=True)
    grace_ends_at = models.DateTimeField(null=True, blank=True)
    preempted_for = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    preempted_reason = models.CharField(max_length=32, blank=True)
    external_id = models.CharField(max_length=100, blank=True, help_text="The backend's id of the job")
    # The key a resubmit carried (the API's Idempotency-Key header, the form's one-time token),
    # empty without one: the same key from the same submitter gives back this job.
    idempotency_key = models.CharField(max_length=255, blank=True, default="", editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["state", "team"], name="job_state_team"),
            models.Index(fields=["team", "state", "submitted_at"], name="job_team_state_submitted"),
            models.Index(fields=["submitted_at"], name="job_submitted_at"),
            # The running and pending jobs in id order, as every allocation cycle reads them:
            # a few hundred entries however many jobs have ended.
            models.Index(fields=["id"], condition=Q(state__in=choices.ACTIVE_JOB_STATES), name="job_live"),
        ]
        constraints = [
            # A job asks for GPUs, partitions or both; never for nothing (docs/resources.md 3).
            models.CheckConstraint(condition=Q(gpus__gte=1) | ~Q(partitions={}), name="job_asks_something"),
            models.CheckConstraint(condition=Q(state__in=JobState.values), name="job_state_valid"),
            models.CheckConstraint(
                condition=Q(checkpoint_interval_s__isnull=True) | Q(checkpoint_interval_s__gte=0),
                name="job_checkpoint_interval_non_negative",
            ),
            models.CheckConstraint(
                condition=Q(progress_kept_s__gte=0), name="job_progress_kept_non_negative"
            ),
            models.CheckConstraint(
                condition=Q(lost_gpu_seconds__gte=0), name="job_lost_gpu_seconds_non_negative"
            ),
            # Only a running job terminates, and then with the end of its grace.
            models.CheckConstraint(
                condition=Q(terminating_since__isnull=True)
                | Q(state=JobState.RUNNING, grace_ends_at__isnull=False),
                name="job_terminating_only_running",
            ),
            # Concurrent requests with one key: one insert wins, the others read its job.
            models.UniqueConstraint(
                fields=["submitter", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="job_idempotency_key_once_per_submitter",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    @property
    def grace_left_s(self) -> int | None:
        """Whole seconds left of its grace while it terminates (docs/preemption.md section 5),
        for the job pages; None when it does not."""
        if self.terminating_since is None or self.grace_ends_at is None:
            return None
        from django.utils import timezone

        return max(0, math.ceil((self.grace_ends_at - timezone.now()).total_seconds()))


class JobEvent(models.Model):
    """Append-only history of a job: written by services, never updated or deleted."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=16, choices=JobEventKind.choices)
    at = models.DateTimeField()
    nodes = models.JSONField(default=list, blank=True)
    reason = models.CharField(max_length=32, blank=True)
    preemptor = models.ForeignKey(Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    message = models.CharField(max_length=500, blank=True)
    # For a preempted event (docs/preemption.md section 2): how long the run lasted, and the
    # GPU-seconds of work it lost (since its last checkpoint, times its GPUs).
    ran_s = models.FloatField(null=True, blank=True)
    lost_gpu_seconds = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["kind", "at"], name="jobevent_kind_at")]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=JobEventKind.values), name="jobevent_kind_valid"),
            models.CheckConstraint(
                condition=Q(ran_s__isnull=True) | Q(ran_s__gte=0), name="jobevent_ran_non_negative"
            ),
            models.CheckConstraint(
                condition=Q(lost_gpu_seconds__isnull=True) | Q(lost_gpu_seconds__gte=0),
                name="jobevent_lost_gpu_seconds_non_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.kind} at {self.at:%Y-%m-%d %H:%M:%S}"


class AuditEntry(models.Model):
    """Who changed which field of which policy object, from what to what, and when."""

    at = models.DateTimeField(db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    actor_name = models.CharField(max_length=150, blank=True, help_text="Kept when the user is deleted")
    action = models.CharField(max_length=16, choices=AuditAction.choices)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200)
    field = models.CharField(max_length=64, blank=True)
    old_value = models.TextField(blank=True)
    new_value = models.TextField(blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["object_type", "object_id"], name="audit_object")]

    def __str__(self) -> str:
        return f"{self.actor_name} {self.action} {self.object_type} {self.object_repr} {self.field}"


class CycleRun(models.Model):
    """One run of the allocation loop (``services.loop.run_allocation_cycle``): how long each
    phase took, what it changed, what it had to correct, and whether the backend answered."""

    started_at = models.DateTimeField(db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    trigger = models.CharField(max_length=32, help_text="beat, request, manual, test, ...")
    ok = models.BooleanField(default=False)
    backend_outage = models.BooleanField(default=False, help_text="The backend could not be reached")
    # Duration of each phase in milliseconds (POLICY.md section 3: sync, snapshot, engine, apply, record).
    sync_ms = models.FloatField(default=0)
    snapshot_ms = models.FloatField(default=0)
    engine_ms = models.FloatField(default=0)
    apply_ms = models.FloatField(default=0)
    record_ms = models.FloatField(default=0)
    started = models.PositiveIntegerField(default=0)
    preempted = models.PositiveIntegerField(default=0)
    ended = models.PositiveIntegerField(default=0, help_text="Jobs found finished, failed or cancelled")
    pending = models.PositiveIntegerField(default=0)
    corrections = models.PositiveIntegerField(
        default=0, help_text="Differences between the database and the backend that the sync repaired"
    )
    notes = models.JSONField(default=list, blank=True, help_text="One line per correction")
    errors = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"cycle {self.pk} at {self.started_at:%Y-%m-%d %H:%M:%S} ({self.trigger})"


class SimulatedJob(models.Model):
    """What the simulated backend runs (``backends/simulated.py``): its own record of a job,
    separate from Job so that the loop's sync can compare the two as it does with Slurm."""

    job_id = models.CharField(max_length=64, unique=True, help_text="gpugov's id of the job")
    external_id = models.CharField(max_length=100)
    name = models.CharField(max_length=200, blank=True)
    team = models.CharField(max_length=64, blank=True)
    instance_type = models.CharField(max_length=64)
    gpus = models.PositiveIntegerField()
    state = models.CharField(max_length=16, help_text="pending, running, finished, failed, cancelled")
    nodes = models.JSONField(default=list, blank=True)
    # What it takes on each of its nodes beyond GPUs ({"vcpus": n, "memory_gib": n, profile: n};
    # {}: GPUs alone, every existing row), so that a start that does not fit is refused.
    resources = models.JSONField(default=dict, blank=True)
    duration_s = models.FloatField(help_text="Wall-clock seconds it runs once started (after speed-up)")
    started_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["state", "ends_at"], name="simjob_state_ends_at")]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=["pending", "running", "finished", "failed", "cancelled"]),
                name="simjob_state_valid",
            )
        ]

    def __str__(self) -> str:
        return f"{self.external_id} ({self.state})"


# --- History: capacity samples and their rollups (dashboards, issue 6) ------------------------
# Written only by services/history.py: one sample a minute, rolled up into hours and days.
# Rollups hold sums of GPU-minutes (so an hour is exactly the sum of its minutes and a day the
# sum of its hours) and ``minutes``, the count of samples summed; averages are sums / minutes.


class HistoryPeriod(models.TextChoices):
    HOUR = "hour", "Hour"
    DAY = "day", "Day"


# Rows that counted a preemption: few among the minutes, so the preemption charts read them
# through partial indexes instead of every sample of the range.
ANY_PREEMPTION = (
    Q(preempted_in_team__gt=0)
    | Q(preempted_reclaim__gt=0)
    | Q(preempted_reclaim_while_borrowing__gt=0)
    | Q(preempted_fair_share__gt=0)
)


class TeamUsageMinute(models.Model):
    """One team on one instance type at one minute (accounting of POLICY.md section 2).

    Preemptions count the team's jobs preempted in the minute before ``minute``, by reason and
    by how long the victim had run, with the GPU-seconds of work they lost. Rows that would be all zeros are not written."""

    minute = models.DateTimeField()
    # No index of its own: (team, minute) serves lookups by team, and PostgreSQL would pick a
    # team-only index and filter the minutes of every day kept (several times slower:
    # docs/dashboards.md, Performance).
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+", db_index=False)
    instance_type = models.ForeignKey(InstanceType, on_delete=models.CASCADE, related_name="+")
    quota = models.PositiveIntegerField(default=0)
    used = models.PositiveIntegerField(default=0)
    used_within_quota = models.PositiveIntegerField(default=0)
    borrowed = models.PositiveIntegerField(default=0)
    lent = models.FloatField(default=0, help_text="GPUs of its quota used by other teams")
    idle_quota = models.FloatField(default=0)
    pending_gpus = models.PositiveIntegerField(default=0)
    running_jobs = models.PositiveIntegerField(default=0)
    pending_jobs = models.PositiveIntegerField(default=0)
    preempted_in_team = models.PositiveIntegerField(default=0)
    preempted_reclaim = models.PositiveIntegerField(default=0)
    preempted_reclaim_while_borrowing = models.PositiveIntegerField(default=0)
    preempted_fair_share = models.PositiveIntegerField(default=0)
    # What those preemptions cost (docs/preemption.md section 2): the work they threw away,
    # and the same preemptions counted by how long each victim had run since its last start.
    lost_gpu_seconds = models.FloatField(default=0)
    preempted_ran_under_10m = models.PositiveIntegerField(default=0)
    preempted_ran_10_to_60m = models.PositiveIntegerField(default=0)
    preempted_ran_over_1h = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["minute", "team_id", "instance_type_id"]
        constraints = [
            models.UniqueConstraint(fields=["minute", "team", "instance_type"], name="team_minute_unique"),
        ]
        indexes = [
            models.Index(fields=["team", "minute"], name="team_minute_team"),
            models.Index(fields=["minute"], condition=ANY_PREEMPTION, name="team_minute_preempted"),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.instance_type_id} at {self.minute:%Y-%m-%d %H:%M}"


class CapacityMinute(models.Model):
    """One instance type at one minute: ready capacity, allocated, idle, unallocated GPUs,
    pending demand, and ``idle_while_waiting`` = min(idle, pending demand)."""

    minute = models.DateTimeField()
    instance_type = models.ForeignKey(InstanceType, on_delete=models.CASCADE, related_name="+")
    capacity = models.PositiveIntegerField(default=0)
    allocated = models.PositiveIntegerField(default=0)
    idle = models.PositiveIntegerField(default=0)
    unallocated = models.PositiveIntegerField(default=0)
    pending_gpus = models.PositiveIntegerField(default=0)
    pending_jobs = models.PositiveIntegerField(default=0)
    idle_while_waiting = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["minute", "instance_type_id"]
        constraints = [
            models.UniqueConstraint(fields=["minute", "instance_type"], name="capacity_minute_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.instance_type_id} at {self.minute:%Y-%m-%d %H:%M}"


class TeamUsageRollup(models.Model):
    """Sums of a team's minutes on one instance type over an hour or a day (GPU-minutes)."""

    period = models.CharField(max_length=4, choices=HistoryPeriod.choices)
    start = models.DateTimeField()
    # No index of its own, as for the minutes: (period, team, start) serves the dashboards.
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+", db_index=False)
    instance_type = models.ForeignKey(InstanceType, on_delete=models.CASCADE, related_name="+")
    quota_gpu_minutes = models.BigIntegerField(default=0)
    used_gpu_minutes = models.BigIntegerField(default=0)
    used_within_quota_gpu_minutes = models.BigIntegerField(default=0)
    borrowed_gpu_minutes = models.BigIntegerField(default=0)
    lent_gpu_minutes = models.FloatField(default=0)
    idle_quota_gpu_minutes = models.FloatField(default=0)
    pending_gpu_minutes = models.BigIntegerField(default=0)
    running_job_minutes = models.BigIntegerField(default=0)
    pending_job_minutes = models.BigIntegerField(default=0)
    peak_used = models.PositiveIntegerField(default=0)
    peak_pending_gpus = models.PositiveIntegerField(default=0)
    preempted_in_team = models.PositiveIntegerField(default=0)
    preempted_reclaim = models.PositiveIntegerField(default=0)
    preempted_reclaim_while_borrowing = models.PositiveIntegerField(default=0)
    preempted_fair_share = models.PositiveIntegerField(default=0)
    lost_gpu_seconds = models.FloatField(default=0)
    preempted_ran_under_10m = models.PositiveIntegerField(default=0)
    preempted_ran_10_to_60m = models.PositiveIntegerField(default=0)
    preempted_ran_over_1h = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["period", "start", "team_id", "instance_type_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["period", "start", "team", "instance_type"], name="team_rollup_unique"
            ),
            models.CheckConstraint(condition=Q(period__in=HistoryPeriod.values), name="team_rollup_period"),
        ]
        indexes = [
            models.Index(fields=["period", "team", "start"], name="team_rollup_team"),
            models.Index(fields=["period", "start"], condition=ANY_PREEMPTION, name="team_rollup_preempted"),
        ]

    def __str__(self) -> str:
        return f"{self.period} {self.start:%Y-%m-%d %H:%M} {self.team_id}/{self.instance_type_id}"


class CapacityRollup(models.Model):
    """Sums of an instance type's minutes over an hour or a day (GPU-minutes); ``minutes`` is
    the number of minute samples summed, the denominator of every average of the period."""

    period = models.CharField(max_length=4, choices=HistoryPeriod.choices)
    start = models.DateTimeField()
    instance_type = models.ForeignKey(InstanceType, on_delete=models.CASCADE, related_name="+")
    minutes = models.PositiveIntegerField(default=0)
    capacity_gpu_minutes = models.BigIntegerField(default=0)
    allocated_gpu_minutes = models.BigIntegerField(default=0)
    idle_gpu_minutes = models.BigIntegerField(default=0)
    unallocated_gpu_minutes = models.BigIntegerField(default=0)
    pending_gpu_minutes = models.BigIntegerField(default=0)
    pending_job_minutes = models.BigIntegerField(default=0)
    idle_while_waiting_gpu_minutes = models.BigIntegerField(default=0)
    peak_allocated = models.PositiveIntegerField(default=0)
    peak_pending_gpus = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["period", "start", "instance_type_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["period", "start", "instance_type"], name="capacity_rollup_unique"
            ),
            models.CheckConstraint(
                condition=Q(period__in=HistoryPeriod.values), name="capacity_rollup_period"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.period} {self.start:%Y-%m-%d %H:%M} {self.instance_type_id}"


# --- Reports: weekly utilization emails (issue 7) ------------------------------------------------
# Written only by reports/services.py.


class PendingReasonSample(models.Model):
    """How many of a team's jobs of one instance type waited with one pending reason
    (POLICY.md section 5) at one sampling instant, and for how many minutes the sample stands.

    Jobs lose their reason when they start, so the weekly reports' "most frequent pending
    reasons" and the borrow-cap recommendation come from these samples."""

    at = models.DateTimeField()
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    instance_type = models.ForeignKey(InstanceType, on_delete=models.CASCADE, related_name="+")
    code = models.CharField(max_length=32, choices=choices.PENDING_CODE_CHOICES)
    jobs = models.PositiveIntegerField(default=0)
    gpus = models.PositiveIntegerField(default=0)
    minutes = models.PositiveSmallIntegerField(help_text="Minutes this sample stands for")

    class Meta:
        ordering = ["at", "team_id", "instance_type_id", "code"]
        constraints = [
            models.UniqueConstraint(
                fields=["at", "team", "instance_type", "code"], name="pending_reason_sample_unique"
            ),
            models.CheckConstraint(condition=Q(minutes__gte=1), name="pending_reason_sample_minutes"),
        ]
        indexes = [models.Index(fields=["at"], name="pending_reason_sample_at")]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.instance_type_id} {self.code} x{self.jobs} at {self.at:%Y-%m-%d %H:%M}"


class ReportPreference(models.Model):
    """A user's choice about the cluster report (team reports use ``Membership.weekly_report``)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    cluster_report = models.BooleanField(default=True, help_text="Cluster admins: receive the cluster report")

    def __str__(self) -> str:
        return f"report preferences of {self.user}"


class ReportDeliveryState(models.TextChoices):
    SENDING = "sending", "Sending"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"


class ReportDelivery(models.Model):
    """One weekly report to one recipient: claimed (inserted) before it is sent, so a week's
    report goes out once however many senders run. ``report`` is ``cluster`` or ``team:<id>``."""

    week = models.DateField(help_text="Monday of the ISO week reported")
    report = models.CharField(max_length=32)
    team = models.ForeignKey(Team, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    email = models.EmailField()
    state = models.CharField(max_length=8, choices=ReportDeliveryState.choices)
    claimed_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-week", "report", "email"]
        verbose_name_plural = "report deliveries"
        constraints = [
            models.UniqueConstraint(fields=["week", "report", "user"], name="report_delivery_once"),
            models.CheckConstraint(
                condition=Q(state__in=ReportDeliveryState.values), name="report_delivery_state_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.report} {self.week:%G-W%V} to {self.email} ({self.state})"


# --- What-if: policy drafts and their replays over past windows (issue 10) ----------------------
# Written only by the what-if lab's services (allocations/whatif/services.py).


class PolicyDraft(models.Model):
    """A named copy of the whole live policy that a cluster admin edits without changing the
    cluster: ``body`` holds the cluster policy, the priority classes and every team with its
    quotas (the layout is ``allocations.whatif.drafts``'s). Applying it makes it live."""

    name = models.CharField(max_length=100, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    body = models.JSONField(default=dict)
    applied_at = models.DateTimeField(null=True, blank=True, help_text="When it last became the live policy")

    class Meta:
        ordering = ["-updated_at", "-id"]

    def __str__(self) -> str:
        return self.name


class WhatIfRunState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class WhatIfRun(models.Model):
    """One replay of a past window's jobs under the live policy and under each chosen draft.

    ``policies`` keeps the bodies replayed (the live policy and each draft as they were when
    the run was asked for), ``scenario`` the gzipped scenario (cluster, jobs, events) built
    from the history, so that the run's results and its export stay what was replayed however
    the drafts and the history change afterwards."""

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    drafts = models.ManyToManyField(PolicyDraft, related_name="runs", blank=True)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    time_step = models.PositiveIntegerField(
        default=60, help_text="Seconds: submits, run times and events are put on this grid (0: exact)"
    )
    state = models.CharField(max_length=16, choices=WhatIfRunState.choices, default=WhatIfRunState.QUEUED)
    progress = models.FloatField(default=0, help_text="0 to 1")
    progress_message = models.CharField(max_length=200, blank=True)
    cancel_requested = models.BooleanField(default=False)
    policies = models.JSONField(default=list, help_text="[{key, name, body}, ...], the live policy first")
    scenario = models.BinaryField(null=True, blank=True, editable=False)
    results = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    celery_task_id = models.CharField(max_length=64, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Written with every progress report: a running run whose heartbeat stops lost its worker.
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=WhatIfRunState.values), name="whatif_run_state_valid"
            ),
            models.CheckConstraint(condition=Q(window_end__gt=F("window_start")), name="whatif_run_window"),
            models.CheckConstraint(condition=Q(progress__gte=0, progress__lte=1), name="whatif_run_progress"),
        ]

    def __str__(self) -> str:
        return f"what-if run {self.pk} ({self.state})"


# --- API tokens (security: keys stored hashed) -------------------------------------------------
class ApiToken(models.Model):
    """A key for ``Authorization: Token <key>``, stored only as its SHA-256 hex digest.

    The key itself is shown once, when the token is made (``POST /api/v1/auth/token/``); a
    copy of the database is therefore no list of working keys. ``prefix`` (the key's first
    characters) lets an administrator tell tokens apart in the admin without the key.
    A token is refused from ``expires_at`` on, and once its owner's password changes
    (``password_digest`` no longer matches); ``services/tokens.py`` makes and revokes them.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=8, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    password_digest = models.CharField(
        max_length=64, editable=False, help_text="SHA-256 of the owner's stored password hash when made"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(key_hash__regex=r"^[0-9a-f]{64}$"), name="api_token_key_hash_hex"
            ),
            models.CheckConstraint(
                condition=Q(password_digest__regex=r"^[0-9a-f]{64}$"), name="api_token_password_digest_hex"
            ),
            models.CheckConstraint(
                condition=Q(expires_at__gt=F("created_at")), name="api_token_expires_after_creation"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


# --- SageMaker's API (allocations/interop/sagemaker_api.py) --------------------------------------
class AccessKey(models.Model):
    """An access key for SigV4-signed calls to ``/aws/sagemaker/`` (docs/interop.md).

    SigV4 needs the secret itself to recompute each request's signature, so it cannot be kept as
    a one-way hash. It is not stored at all: it is derived from ``SECRET_KEY`` and this row's
    random ``salt`` (``services/access_keys.py``), so a copy of the database alone is no list of
    working secrets, and deleting the row revokes the key (docs/security.md).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="access_keys")
    access_key_id = models.CharField(max_length=20, unique=True, editable=False)
    salt = models.CharField(max_length=32, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(access_key_id__regex=r"^GKIA[A-Z2-7]{16}$"), name="access_key_id_shape"
            ),
            models.CheckConstraint(condition=Q(salt__regex=r"^[0-9a-f]{32}$"), name="access_key_salt_hex"),
        ]

    def __str__(self) -> str:
        return f"{self.access_key_id} ({self.user})"


class SageMakerResource(models.Model):
    """The identity SageMaker's API gives a part of the policy: a team's compute quota, or the
    cluster's scheduler config. The settings themselves stay in Team, TeamQuota, ClusterPolicy
    and PriorityClass; this row keeps the id, the name, the version and who made it.

    ``version`` counts changes from any source: ``state_digest`` is a digest of the settings
    when the version was last counted, and a read that finds them changed (by the console or
    an import) counts one more. A row with ``deleted_at`` set answers ResourceNotFound.
    """

    class Kind(models.TextChoices):
        COMPUTE_QUOTA = "compute-quota", "compute quota"
        CLUSTER_SCHEDULER_CONFIG = "cluster-scheduler-config", "cluster scheduler config"

    kind = models.CharField(max_length=32, choices=Kind.choices)
    resource_id = models.CharField(max_length=12, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    name = models.CharField(max_length=63)
    cluster_arn = models.CharField(max_length=256)
    # A scheduler config's Description (gpugov has no field of its own for it); a compute
    # quota's is its team's display name.
    description = models.CharField(max_length=1024, blank=True)
    version = models.PositiveIntegerField(default=1)
    state_digest = models.CharField(max_length=64)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=150, blank=True)
    last_modified_at = models.DateTimeField()
    last_modified_by = models.CharField(max_length=150, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(resource_id__regex=r"^[a-z0-9]{12}$"), name="sagemaker_resource_id"
            ),
            models.CheckConstraint(condition=Q(version__gte=1), name="sagemaker_resource_version"),
            models.CheckConstraint(
                condition=(Q(kind="compute-quota") & Q(team__isnull=False))
                | (Q(kind="cluster-scheduler-config") & Q(team__isnull=True)),
                name="sagemaker_resource_team_iff_quota",
            ),
            # One compute quota per team, one scheduler config per cluster.
            models.UniqueConstraint(fields=["team"], name="sagemaker_resource_one_per_team"),
            models.UniqueConstraint(
                fields=["kind"],
                condition=Q(kind="cluster-scheduler-config"),
                name="sagemaker_resource_one_scheduler_config",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.resource_id} ({self.name})"
