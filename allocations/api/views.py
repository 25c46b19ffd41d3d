"""The REST API (``/api/v1/``): the same access rules as the pages, through ``access.py``.

Lists are filtered by ``access.visible_to``; an object outside it answers 404 like a missing
one; a visible object the user may not change answers 403. Anonymous requests answer 401.
Cluster-wide facts (instance types, nodes, priority classes, the policy) are read by staff and
by anyone with a role in a team.
"""

from __future__ import annotations

from typing import Any

import django_filters
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from allocations import access
from allocations.choices import JobEventKind, JobState
from allocations.engine import PendingCode
from allocations.engine.accounting import account_snapshot
from allocations.models import (
    ClusterPolicy,
    InstanceType,
    Job,
    JobEvent,
    Node,
    PriorityClass,
    Team,
    TeamQuota,
)
from allocations.selectors.jobs import with_related
from allocations.selectors.snapshot import build_snapshot
from allocations.services import jobs as job_services

from . import serializers as s


class CanReadCluster(permissions.BasePermission):
    message = "Cluster facts are for cluster administrators and team members."

    def has_permission(self, request: Request, view: Any) -> bool:
        return access.can_read_cluster(request.user)


class ApiView:
    """Mixin of every API view: token first, so an anonymous request answers 401 with
    ``WWW-Authenticate: Token`` (session auth alone would answer 403)."""

    authentication_classes = [TokenAuthentication, SessionAuthentication]
    permission_classes = [permissions.IsAuthenticated]


class ClusterReadView(ApiView, viewsets.ReadOnlyModelViewSet):  # type: ignore[type-arg]
    permission_classes = [permissions.IsAuthenticated, CanReadCluster]


class InstanceTypeViewSet(ClusterReadView):
    """Instance types of the cluster (GPUs per node)."""

    queryset = InstanceType.objects.order_by("name")
    serializer_class = s.InstanceTypeSerializer
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9.-]+"


class NodeFilter(django_filters.FilterSet):
    instance_type = django_filters.CharFilter(field_name="instance_type__name")

    class Meta:
        model = Node
        fields = ["instance_type", "state"]


class NodeViewSet(ClusterReadView):
    """The cluster's nodes and their state (only ``ready`` nodes count towards capacity)."""

    queryset = Node.objects.select_related("instance_type").order_by("name")
    serializer_class = s.NodeSerializer
    filterset_class = NodeFilter
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"


class PriorityClassViewSet(ClusterReadView):
    """The priority classes the policy defines (higher weight = higher priority)."""

    queryset = PriorityClass.objects.order_by("-weight", "name")
    serializer_class = s.PriorityClassSerializer
    lookup_field = "name"


class ClusterPolicyViewSet(ApiView, viewsets.GenericViewSet):  # type: ignore[type-arg]
    """The cluster policy (one per cluster)."""

    permission_classes = [permissions.IsAuthenticated, CanReadCluster]
    serializer_class = s.ClusterPolicySerializer
    pagination_class = None
    filter_backends: list[Any] = []

    @extend_schema(responses=s.ClusterPolicySerializer)
    def list(self, request: Request) -> Response:
        policy = ClusterPolicy.objects.filter(cluster_id=1).first() or ClusterPolicy(cluster_id=1)
        return Response(self.get_serializer(policy).data)


class TeamViewSet(ApiView, viewsets.ReadOnlyModelViewSet):  # type: ignore[type-arg]
    """The teams you see: yours (every team for cluster admins)."""

    serializer_class = s.TeamSerializer
    lookup_field = "name"

    def get_queryset(self) -> QuerySet[Team]:
        return access.visible_teams(self.request.user).order_by("name")


class QuotaFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__name")
    instance_type = django_filters.CharFilter(field_name="instance_type__name")

    class Meta:
        model = TeamQuota
        fields = ["team", "instance_type"]


class QuotaViewSet(ApiView, viewsets.ReadOnlyModelViewSet):  # type: ignore[type-arg]
    """Quotas of the teams you see, per instance type, with their borrow and lend limits."""

    serializer_class = s.QuotaSerializer
    filterset_class = QuotaFilter

    def get_queryset(self) -> QuerySet[TeamQuota]:
        queryset = TeamQuota.objects.select_related("team", "instance_type").order_by(
            "team__name", "instance_type__name"
        )
        return access.visible_to(self.request.user, queryset)


class JobFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__name", help_text="Team name")
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices, help_text="Repeat for several")
    instance_type = django_filters.CharFilter(field_name="instance_type__name")
    priority_class = django_filters.CharFilter(field_name="priority_class__name")
    submitted_after = django_filters.IsoDateTimeFilter(field_name="submitted_at", lookup_expr="gte")
    submitted_before = django_filters.IsoDateTimeFilter(field_name="submitted_at", lookup_expr="lt")

    class Meta:
        model = Job
        fields = ["team", "state", "instance_type", "priority_class", "submitted_after", "submitted_before"]


def _raise_400(exc: DjangoValidationError) -> None:
    raise s.drf_error(exc) from exc


@extend_schema_view(
    create=extend_schema(request=s.JobSubmitSerializer, responses={201: s.JobSerializer}),
    cancel=extend_schema(request=None, responses=s.JobSerializer),
    resubmit=extend_schema(request=None, responses={201: s.JobSerializer}),
    events=extend_schema(responses=s.JobEventSerializer(many=True)),
)
class JobViewSet(ApiView, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):  # type: ignore[type-arg]
    """Jobs of the teams you see. Submit (team admins and members), cancel and resubmit (your
    own jobs, or any job of a team you administer), and each job's history."""

    filterset_class = JobFilter

    def get_queryset(self) -> QuerySet[Job]:
        return access.visible_to(
            self.request.user, with_related(Job.objects.order_by("-submitted_at", "-pk"))
        )

    def get_serializer_class(self) -> type[Any]:
        return s.JobSubmitSerializer if self.action == "create" else s.JobSerializer

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = s.JobSubmitSerializer(data=request.data, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        team = data.pop("team")
        if not access.can_submit(request.user, team):
            raise PermissionDenied(f"Viewers of {team.name} cannot submit jobs.")
        try:
            job = job_services.job_submit(user=request.user, team=team, **data)
        except DjangoValidationError as exc:
            _raise_400(exc)
        job = self.get_queryset().get(pk=job.pk)
        return Response(
            s.JobSerializer(job, context=self.get_serializer_context()).data, status=status.HTTP_201_CREATED
        )

    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel a pending or running job (a running one is stopped on the backend)."""
        job = self.get_object()
        if not access.can_manage_job(request.user, job):
            raise PermissionDenied("Only its submitter or a team admin may cancel it.")
        try:
            job_services.job_cancel(user=request.user, job=job)
        except DjangoValidationError as exc:
            _raise_400(exc)
        return Response(s.JobSerializer(self.get_queryset().get(pk=job.pk)).data)

    @action(detail=True, methods=["post"])
    def resubmit(self, request: Request, pk: str | None = None) -> Response:
        """Submit a new job copying this ended one."""
        job = self.get_object()
        if not (access.can_manage_job(request.user, job) and access.can_submit(request.user, job.team)):
            raise PermissionDenied("Only its submitter or a team admin may resubmit it.")
        try:
            new_job = job_services.job_resubmit(user=request.user, job=job)
        except DjangoValidationError as exc:
            _raise_400(exc)
        return Response(
            s.JobSerializer(self.get_queryset().get(pk=new_job.pk)).data, status=status.HTTP_201_CREATED
        )

    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def events(self, request: Request, pk: str | None = None) -> Response:
        """The job's whole history, oldest first."""
        job = self.get_object()
        events = JobEvent.objects.filter(job=job).order_by("at", "pk")
        return Response(s.JobEventSerializer(events, many=True).data)


class JobEventFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="job__team__name")
    kind = django_filters.MultipleChoiceFilter(choices=JobEventKind.choices)
    after = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="gte")
    before = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="lt")

    class Meta:
        model = JobEvent
        fields = ["job", "team", "kind", "after", "before"]


class JobEventViewSet(ApiView, viewsets.ReadOnlyModelViewSet):  # type: ignore[type-arg]
    """Events of the jobs you see (submitted, started, preempted, requeued, finished, ...)."""

    serializer_class = s.JobEventSerializer
    filterset_class = JobEventFilter

    def get_queryset(self) -> QuerySet[JobEvent]:
        return access.visible_to(self.request.user, JobEvent.objects.order_by("-at", "-pk"))


class PendingReasonFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__name")
    instance_type = django_filters.CharFilter(field_name="instance_type__name")
    code = django_filters.ChoiceFilter(
        field_name="pending_reason_code", choices=[(c.value, c.value) for c in PendingCode]
    )

    class Meta:
        model = Job
        fields = ["team", "instance_type", "code"]


class PendingReasonViewSet(ApiView, viewsets.GenericViewSet, mixins.ListModelMixin):  # type: ignore[type-arg]
    """Why each pending job you see waits: the engine's code and message, with its numbers."""

    serializer_class = s.PendingReasonSerializer
    filterset_class = PendingReasonFilter

    def get_queryset(self) -> QuerySet[Job]:
        queryset = Job.objects.filter(state=JobState.PENDING).select_related("team", "instance_type")
        return access.visible_to(self.request.user, queryset.order_by("submitted_at", "pk"))


class UsageViewSet(ApiView, viewsets.GenericViewSet):  # type: ignore[type-arg]
    """Quota, usage, borrowed and lent GPUs right now, per team you see and instance type."""

    serializer_class = s.UsageSerializer
    pagination_class = None
    filter_backends: list[Any] = []  # filtered by hand: the rows are the engine's accounting

    @extend_schema(
        parameters=[
            OpenApiParameter("team", OpenApiTypes.STR, description="Team name"),
            OpenApiParameter("instance_type", OpenApiTypes.STR),
        ],
        responses=s.UsageSerializer(many=True),
    )
    def list(self, request: Request) -> Response:
        visible = set(access.visible_teams(request.user).values_list("name", flat=True))
        team = request.query_params.get("team")
        instance_type = request.query_params.get("instance_type")
        accounting = account_snapshot(build_snapshot(timezone.now()))
        rows = [
            row
            for row in accounting.teams
            if row.team in visible
            and (team is None or row.team == team)
            and (instance_type is None or row.instance_type == instance_type)
        ]
        if instance_type is not None and not InstanceType.objects.filter(name=instance_type).exists():
            raise ValidationError({"instance_type": [f"No instance type is called {instance_type!r}."]})
        return Response(self.get_serializer(rows, many=True).data)
