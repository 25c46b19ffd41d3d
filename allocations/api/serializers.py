"""Serializers of the REST API: the shape of every resource and field errors for bad input.

Every error names the field (the key) and quotes the value that was sent, so a client can tell
which of its values was refused and why. The rules themselves are the services'.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from allocations import access, policy_fields
from allocations.choices import JobState
from allocations.models import (
    ClusterPolicy,
    InstanceType,
    Job,
    JobEvent,
    Membership,
    Node,
    PriorityClass,
    Team,
    TeamQuota,
)
from allocations.services import memberships
from allocations.services.jobs import MAX_REQUESTED_DURATION
from allocations.services.policy import MAX_RESOURCE


def with_values(detail: Any, data: Any) -> Any:
    """``detail`` (DRF's errors by field) with the value sent for each field appended to its
    messages, e.g. ``{"gpus": ["Ensure this value is greater than or equal to 1. (got -2)"]}``."""
    if not isinstance(detail, Mapping) or not isinstance(data, Mapping):
        return detail
    named: dict[str, Any] = {}
    for field, messages in detail.items():
        if field in data and isinstance(messages, list):
            sent = data[field]
            named[field] = [
                msg if repr(sent) in str(msg) or str(sent) in str(msg) else f"{msg} (got {sent!r})"
                for msg in messages
            ]
        else:
            named[field] = messages
    return named


def drf_error(exc: DjangoValidationError) -> serializers.ValidationError:
    """A service's ValidationError (keyed by field) as DRF's 400."""
    if hasattr(exc, "error_dict"):
        return serializers.ValidationError(exc.message_dict)
    return serializers.ValidationError({"non_field_errors": exc.messages})


class NameField(serializers.SlugRelatedField):
    """A related object named by a slug field. A name with a NUL character is refused here:
    PostgreSQL cannot even compare such a string, so the lookup itself would fail."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, str) and "\x00" in data:
            self.fail("does_not_exist", slug_name=self.slug_field, value=data)
        return super().to_internal_value(data)


def team_by_name() -> NameField:
    """A team named by its name. Serializers that take one from any user narrow its queryset to
    the teams that user sees, hence the message."""
    return NameField(
        slug_field="name",
        queryset=Team.objects.all(),
        error_messages={"does_not_exist": "No team called {value} that you can see."},
    )


def instance_type_by_name() -> NameField:
    """An instance type named by its name."""
    return NameField(
        slug_field="name",
        queryset=InstanceType.objects.all(),
        error_messages={"does_not_exist": "No instance type is called {value}."},
    )


class ErrorsQuoteValues:
    """Mixin: field errors quote the value that was sent."""

    def to_internal_value(self, data: Any) -> Any:
        try:
            return super().to_internal_value(data)  # type: ignore[misc]
        except serializers.ValidationError as exc:
            raise serializers.ValidationError(with_values(exc.detail, data)) from exc


class CountField(serializers.IntegerField):
    """A whole count whose errors quote the value: inside a mapping, ``with_values`` does not
    reach it."""

    def to_internal_value(self, data: Any) -> int:
        try:
            return int(super().to_internal_value(data))
        except serializers.ValidationError as exc:
            raise serializers.ValidationError([f"{msg} (got {data!r})" for msg in exc.detail]) from exc


def partitions_field(low: int, help_text: str, **kwargs: Any) -> serializers.DictField:
    """{partition profile: count} (docs/resources.md 8): the counts are checked here, the
    profiles' names by the services (against the instance type's, where it has one)."""
    return serializers.DictField(
        child=CountField(min_value=low, max_value=MAX_RESOURCE),
        required=False,
        help_text=help_text,
        **kwargs,
    )


def resource_field(help_text: str, *, allow_null: bool = True) -> serializers.IntegerField:
    """A whole amount of vCPU or GiB, within what the database holds."""
    return serializers.IntegerField(
        required=False, allow_null=allow_null, min_value=0, max_value=MAX_RESOURCE, help_text=help_text
    )


class InstanceTypeSerializer(ErrorsQuoteValues, serializers.ModelSerializer):
    # docs/resources.md 1: 0, 0 and {} count GPUs alone.
    vcpus_per_node = resource_field("vCPU per node; 0: not counted", allow_null=False)
    memory_gib_per_node = resource_field("GiB of memory per node; 0: not counted", allow_null=False)
    partitions_per_node = partitions_field(1, 'GPU partitions per node by profile, e.g. {"mig-1g.10gb": 14}')

    class Meta:
        model = InstanceType
        fields = list(policy_fields.INSTANCE_TYPE_FIELDS)


class NodeSerializer(ErrorsQuoteValues, serializers.ModelSerializer):
    instance_type = instance_type_by_name()

    class Meta:
        model = Node
        fields = [*policy_fields.NODE_FIELDS, "state_since"]
        read_only_fields = ["state_since"]
        extra_kwargs = {
            "gpus": {"required": False, "help_text": "Default: the instance type's GPUs per node"}
        }


class PriorityClassSerializer(ErrorsQuoteValues, serializers.ModelSerializer):
    class Meta:
        model = PriorityClass
        fields = list(policy_fields.PRIORITY_CLASS_FIELDS)


class ClusterPolicySerializer(ErrorsQuoteValues, serializers.ModelSerializer):
    class Meta:
        model = ClusterPolicy
        fields = [*policy_fields.CLUSTER_POLICY_FIELDS, "updated_at"]
        read_only_fields = ["updated_at"]


class TeamSerializer(ErrorsQuoteValues, serializers.ModelSerializer):
    role = serializers.SerializerMethodField(help_text="Your role in the team (empty for cluster admins)")
    # What the team may ask for (docs/limits.md): classes by name; the service checks they exist.
    allowed_priority_classes = serializers.ListField(
        child=serializers.CharField(max_length=63),
        required=False,
        max_length=64,
        help_text="Names of the priority classes its members may submit; empty = all",
    )
    default_priority_class = NameField(
        slug_field="name",
        queryset=PriorityClass.objects.all(),
        required=False,
        allow_null=True,
        error_messages={"does_not_exist": "The policy defines no priority class called {value}."},
        help_text="The class of a job submitted without one; null = the lowest allowed class",
    )

    class Meta:
        model = Team
        fields = [*policy_fields.TEAM_FIELDS, "role"]

    def get_role(self, team: Team) -> str:
        request = self.context.get("request")
        return (access.role_in(request.user, team) or "") if request else ""


class QuotaSerializer(ErrorsQuoteValues, serializers.ModelSerializer):
    """A team's quota of one instance type. Writing one (cluster admins) sets it: it is created
    on first use, then changed; ``team`` and ``instance_type`` cannot change afterwards."""

    team = team_by_name()
    instance_type = instance_type_by_name()
    # docs/resources.md 2: the per-resource form (null and {}: the ratio rule, or 0 of a
    # partition), instances, and absolute borrow limits of the other resources.
    vcpus = resource_field("vCPU; null: the ratio of the GPUs (docs/resources.md 2)")
    memory_gib = resource_field("GiB of memory; null: the ratio of the GPUs, else of the vCPU")
    partitions = partitions_field(0, "GPU partitions by profile; a profile not named: 0")
    instances = resource_field("N nodes' worth of every resource; stands alone (the GPUs follow)")
    borrow_limit_vcpus = resource_field("Most vCPU borrowed; null: the percentage")
    borrow_limit_memory_gib = resource_field("Most GiB of memory borrowed; null: the percentage")
    borrow_limit_partitions = partitions_field(
        0, "Most partitions borrowed by profile; not named: the percentage"
    )

    class Meta:
        model = TeamQuota
        fields = ["id", "team", "instance_type", *policy_fields.QUOTA_FIELDS]
        # team_quota_set is an upsert: the pair's uniqueness is not a client error here.
        validators: list[Any] = []


class PendingReasonSerializer(serializers.Serializer):
    """Why a pending job waits, in the engine's words with its numbers (POLICY.md section 5)."""

    job = serializers.IntegerField(source="pk")
    name = serializers.CharField()
    team = serializers.CharField(source="team.name")
    instance_type = serializers.CharField(source="instance_type.name")
    gpus = serializers.IntegerField()
    code = serializers.CharField(source="pending_reason_code")
    message = serializers.CharField(source="pending_reason_message")


class JobSerializer(serializers.ModelSerializer):
    team = NameField(slug_field="name", read_only=True)
    instance_type = NameField(slug_field="name", read_only=True)
    priority_class = NameField(slug_field="name", read_only=True)
    submitter = NameField(slug_field="username", read_only=True)
    pending_reason = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id",
            "team",
            "name",
            "submitter",
            "instance_type",
            "gpus",
            *policy_fields.JOB_RESOURCE_FIELDS,
            "priority_class",
            "command",
            "image",
            "requested_duration",
            "checkpoint_interval_s",
            "state",
            "submitted_at",
            "started_at",
            "finished_at",
            "pending_reason",
            "nodes",
            "preemption_count",
            "last_preempted_at",
            "progress_kept_s",
            "lost_gpu_seconds",
            # docs/preemption.md section 5: a victim within its grace (null otherwise).
            "terminating_since",
            "grace_ends_at",
            "preempted_for",
            "preempted_reason",
        ]
        read_only_fields = fields

    @extend_schema_field(
        {
            "type": "object",
            "nullable": True,
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }
    )
    def get_pending_reason(self, job: Job) -> dict[str, str] | None:
        if job.state != JobState.PENDING or not job.pending_reason_code:
            return None
        return {"code": job.pending_reason_code, "message": job.pending_reason_message}


class JobSubmitSerializer(ErrorsQuoteValues, serializers.Serializer):
    """What a client sends to submit a job. ``team``: one of the teams you see."""

    team = team_by_name()
    name = serializers.CharField(max_length=200)
    instance_type = instance_type_by_name()
    gpus = serializers.IntegerField(
        min_value=0,
        required=False,
        help_text="Whole GPUs; may be left out, or 0, when it asks for partitions",
    )
    # docs/resources.md 3: null takes its GPUs' share of their node.
    vcpus = resource_field("vCPU; null: its GPUs' share of their node")
    memory_gib = resource_field("GiB of memory; null: its GPUs' share of their node")
    partitions = partitions_field(1, "GPU partitions by profile, at most one node's")
    priority_class = NameField(
        slug_field="name",
        queryset=PriorityClass.objects.all(),
        required=False,
        allow_null=True,
        error_messages={"does_not_exist": "The policy defines no priority class called {value}."},
        help_text="Default: the team's default class (docs/limits.md).",
    )
    command = serializers.CharField(required=False, allow_blank=True, default="")
    image = serializers.CharField(required=False, allow_blank=True, default="", max_length=300)
    requested_duration = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_REQUESTED_DURATION, help_text="Seconds"
    )
    checkpoint_interval_s = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_REQUESTED_DURATION,
        help_text="Seconds between the job's checkpoints; null: it keeps none (docs/preemption.md section 2)",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            # A team the user cannot see is "missing", exactly like one that does not exist.
            self.fields["team"].queryset = access.visible_teams(request.user)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not (attrs.get("command", "").strip() or attrs.get("image", "").strip()):
            raise serializers.ValidationError({"command": "Give a command or an image to run."})
        if "gpus" not in attrs:
            if not attrs.get("partitions"):
                raise serializers.ValidationError({"gpus": "This field is required (or partitions)."})
            attrs["gpus"] = 0
        return attrs


class JobEventSerializer(serializers.ModelSerializer):
    preemptor = serializers.PrimaryKeyRelatedField(read_only=True)

    class Meta:
        model = JobEvent
        fields = [
            "id",
            "job",
            "kind",
            "at",
            "nodes",
            "reason",
            "preemptor",
            "message",
            "ran_s",
            "lost_gpu_seconds",
        ]


class UsageSerializer(serializers.Serializer):
    """A team's quota and use of one instance type right now (POLICY.md section 2)."""

    team = serializers.CharField()
    instance_type = serializers.CharField()
    quota = serializers.IntegerField()
    used = serializers.IntegerField()
    used_within_quota = serializers.IntegerField()
    borrowed = serializers.IntegerField()
    lent = serializers.FloatField()
    idle_quota = serializers.FloatField()
    pending_gpus = serializers.IntegerField()
    pending_jobs = serializers.IntegerField()


class MembershipSerializer(ErrorsQuoteValues, serializers.ModelSerializer):
    """A user's role in a team. Team admins add (``team``, ``username``, ``role``), change the
    role and remove; the last team admin of a team stays."""

    team = team_by_name()
    # Among the users the requester may add (``memberships.addable_users``, set below): a name
    # they may not add is answered like a name nobody has.
    username = NameField(
        source="user",
        slug_field="username",
        queryset=get_user_model().objects.none(),
        error_messages={"does_not_exist": "No user called {value} can be added to this team."},
    )

    class Meta:
        model = Membership
        fields = ["id", "team", "username", "role"]
        validators: list[Any] = []  # "already in the team" is the service's field error

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            self.fields["team"].queryset = access.visible_teams(request.user)
            self.fields["username"].queryset = memberships.addable_users(request.user)
