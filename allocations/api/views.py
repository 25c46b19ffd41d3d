"""The REST API (``/api/v1/``): the same access rules as the pages, through ``access.py``.

Lists are filtered by ``access.visible_to``; an object outside it answers 404 like a missing
one; a visible object the user may not change answers 403. Anonymous requests answer 401.
Cluster-wide facts (instance types, nodes, priority classes, the policy) are read by staff and
by anyone with a role in a team.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

import django.forms
import django_filters
import django_filters.fields
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.authentication import SessionAuthentication
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.generics import GenericAPIView, get_object_or_404
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from allocations import access, policy_fields
from allocations.choices import JobEventKind, JobState
from allocations.engine import PendingCode
from allocations.engine.accounting import account_snapshot
from allocations.models import (
    ApiToken,
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
from allocations.selectors.jobs import with_related
from allocations.selectors.snapshot import build_snapshot
from allocations.services import jobs as job_services
from allocations.services import memberships
from allocations.services import policy as policy_services
from allocations.services.tokens import api_token_create, api_token_revoke, api_tokens_revoke, live_tokens
from allocations.throttles import ApiTokenThrottle

from . import serializers as s
from .auth import ApiTokenCreatedSerializer, ApiTokenSerializer, HashedTokenAuthentication


class CanReadCluster(permissions.BasePermission):
    message = "Cluster facts are for cluster administrators and team members."

    def has_permission(self, request: Request, view: Any) -> bool:
        return access.can_read_cluster(request.user)


class ApiView:
    """Mixin of every API view: token first, so an anonymous request answers 401 with
    ``WWW-Authenticate: Token`` (session auth alone would answer 403)."""

    authentication_classes = [HashedTokenAuthentication, SessionAuthentication]
    permission_classes = [permissions.IsAuthenticated]


def require_cluster_admin(request: Request) -> None:
    if not access.is_cluster_admin(request.user):
        raise PermissionDenied("Only cluster administrators change the cluster's policy.")


class AdminWrites:
    """Create, change and delete for cluster admins only, through the policy services (which
    validate the rules and write the audit trail); everyone else who sees the object gets 403.

    ``create_service(actor=..., **fields)``, ``update_service(actor=..., <object_kwarg>=obj,
    **changes)`` and ``delete_service(actor=..., <object_kwarg>=obj)``.
    """

    create_service: Any
    update_service: Any
    delete_service: Any
    object_kwarg: str

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        require_cluster_admin(request)
        serializer = self.get_serializer(data=request.data)  # type: ignore[attr-defined]
        serializer.is_valid(raise_exception=True)
        try:
            obj = type(self).create_service(actor=request.user, **serializer.validated_data)
        except DjangoValidationError as exc:
            _raise_400(exc)
        return Response(self.get_serializer(obj).data, status=status.HTTP_201_CREATED)  # type: ignore[attr-defined]

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        obj = self.get_object()  # type: ignore[attr-defined]  # 404 before 403: invisible is missing
        require_cluster_admin(request)
        serializer = self.get_serializer(obj, data=request.data, partial=kwargs.get("partial", False))  # type: ignore[attr-defined]
        serializer.is_valid(raise_exception=True)
        try:
            obj = type(self).update_service(
                actor=request.user, **{self.object_kwarg: obj}, **serializer.validated_data
            )
        except DjangoValidationError as exc:
            _raise_400(exc)
        return Response(self.get_serializer(obj).data)  # type: ignore[attr-defined]

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.update(request, *args, partial=True, **kwargs)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        obj = self.get_object()  # type: ignore[attr-defined]
        require_cluster_admin(request)
        try:
            type(self).delete_service(actor=request.user, **{self.object_kwarg: obj})
        except DjangoValidationError as exc:
            _raise_400(exc)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ClusterReadView(ApiView, AdminWrites, viewsets.ModelViewSet):  # type: ignore[type-arg]
    """Read by staff and team members; written by cluster admins."""

    permission_classes = [permissions.IsAuthenticated, CanReadCluster]


class InstanceTypeViewSet(ClusterReadView):
    """Instance types of the cluster (GPUs per node)."""

    queryset = InstanceType.objects.order_by("name")
    serializer_class = s.InstanceTypeSerializer
    create_service = staticmethod(policy_services.instance_type_create)
    update_service = staticmethod(policy_services.instance_type_update)
    delete_service = staticmethod(policy_services.instance_type_delete)
    object_kwarg = "instance_type"
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9.-]+"


class UtcIsoDateTimeField(django_filters.fields.IsoDateTimeField):
    """An ISO 8601 time, turned into UTC: PostgreSQL refuses offsets beyond +-15:59, which
    Python accepts, and a time whose UTC equivalent falls outside years 1-9999 is refused here."""

    def to_python(self, value: Any) -> Any:
        value = super().to_python(value)
        if value is None:
            return None
        try:
            return value.astimezone(UTC)
        except OverflowError as exc:
            raise DjangoValidationError(f"{value.isoformat()} is out of range.", code="invalid") from exc


class UtcIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField


class NodeFilter(django_filters.FilterSet):
    instance_type = django_filters.CharFilter(field_name="instance_type__name")

    class Meta:
        model = Node
        fields = ["instance_type", "state"]


class NodeViewSet(ClusterReadView):
    """The cluster's nodes and their state (only ``ready`` nodes count towards capacity)."""

    queryset = Node.objects.select_related("instance_type").order_by("name")
    serializer_class = s.NodeSerializer
    create_service = staticmethod(policy_services.node_create)
    update_service = staticmethod(policy_services.node_update)
    delete_service = staticmethod(policy_services.node_delete)
    object_kwarg = "node"
    filterset_class = NodeFilter
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"


class PriorityClassViewSet(ClusterReadView):
    """The priority classes the policy defines (higher weight = higher priority)."""

    queryset = PriorityClass.objects.order_by("-weight", "name")
    serializer_class = s.PriorityClassSerializer
    create_service = staticmethod(policy_services.priority_class_create)
    update_service = staticmethod(policy_services.priority_class_update)
    delete_service = staticmethod(policy_services.priority_class_delete)
    object_kwarg = "priority_class"
    lookup_field = "name"


class ClusterPolicyView(ApiView, GenericAPIView):  # type: ignore[type-arg]
    """The cluster policy (one per cluster); cluster admins change it with PATCH."""

    permission_classes = [permissions.IsAuthenticated, CanReadCluster]
    serializer_class = s.ClusterPolicySerializer
    pagination_class = None
    filter_backends: list[Any] = []

    def _policy(self) -> ClusterPolicy:
        return ClusterPolicy.objects.filter(cluster_id=1).first() or ClusterPolicy(cluster_id=1)

    def get(self, request: Request) -> Response:
        return Response(self.get_serializer(self._policy()).data)

    def patch(self, request: Request) -> Response:
        require_cluster_admin(request)
        serializer = self.get_serializer(self._policy(), data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        try:
            policy = policy_services.cluster_policy_update(actor=request.user, **serializer.validated_data)
        except DjangoValidationError as exc:
            _raise_400(exc)
        return Response(self.get_serializer(policy).data)


class TeamViewSet(ApiView, AdminWrites, viewsets.ModelViewSet):  # type: ignore[type-arg]
    """The teams you see: yours (every team for cluster admins, who also create, change and
    delete them; a team with jobs on record is deactivated instead of deleted)."""

    serializer_class = s.TeamSerializer
    lookup_field = "name"
    create_service = staticmethod(policy_services.team_create)
    update_service = staticmethod(policy_services.team_update)
    delete_service = staticmethod(policy_services.team_delete)
    object_kwarg = "team"

    def get_queryset(self) -> QuerySet[Team]:
        return access.visible_teams(self.request.user).order_by("name")


class QuotaFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__name")
    instance_type = django_filters.CharFilter(field_name="instance_type__name")

    class Meta:
        model = TeamQuota
        fields = ["team", "instance_type"]


def _set_quota(*, actor: Any, row: TeamQuota | None = None, **fields: Any) -> TeamQuota:
    """Create or change a quota (``team_quota_set``); its team and type are fixed once set."""
    team = fields.pop("team", None) if row is None else row.team
    instance_type = fields.pop("instance_type", None) if row is None else row.instance_type
    if row is not None:
        for fixed in ("team", "instance_type"):
            if fixed in fields and fields.pop(fixed) != getattr(row, fixed):
                raise DjangoValidationError(
                    {fixed: f"A quota's {fixed} cannot change; set the other quota instead."}
                )
    result = policy_services.team_quota_set(actor=actor, team=team, instance_type=instance_type, **fields)
    if result is None:  # all defaults where none existed: nothing to store, show the defaults
        result = TeamQuota(team=team, instance_type=instance_type, **policy_fields.QUOTA_DEFAULTS)
    return result


def _delete_quota(*, actor: Any, row: TeamQuota) -> None:
    """Back to the defaults (quota 0): a missing row means exactly that."""
    policy_services.team_quota_set(
        actor=actor, team=row.team, instance_type=row.instance_type, **policy_fields.QUOTA_DEFAULTS
    )


class QuotaViewSet(ApiView, AdminWrites, viewsets.ModelViewSet):  # type: ignore[type-arg]
    """Quotas of the teams you see, per instance type, with their borrow and lend limits.
    Cluster admins set them (POST creates or changes the team's quota of that type)."""

    serializer_class = s.QuotaSerializer
    filterset_class = QuotaFilter
    create_service = staticmethod(_set_quota)
    update_service = staticmethod(_set_quota)
    delete_service = staticmethod(_delete_quota)
    object_kwarg = "row"  # not "quota": that is one of the quota's own fields

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
    submitted_after = UtcIsoDateTimeFilter(field_name="submitted_at", lookup_expr="gte")
    submitted_before = UtcIsoDateTimeFilter(field_name="submitted_at", lookup_expr="lt")

    class Meta:
        model = Job
        fields = ["team", "state", "instance_type", "priority_class", "submitted_after", "submitted_before"]


def _raise_400(exc: DjangoValidationError, renamed: dict[str, str] | None = None) -> None:
    """A service's refusal as a 400 (``renamed``: the service's field name -> the API's)."""
    error = s.drf_error(exc)
    if renamed and isinstance(error.detail, dict):
        error.detail = {renamed.get(key, key): value for key, value in error.detail.items()}
    raise error from exc


@extend_schema_view(
    create=extend_schema(request=s.JobSubmitSerializer, responses={201: s.JobSerializer}),
    cancel=extend_schema(request=None, responses=s.JobSerializer),
    resubmit=extend_schema(
        request=None,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description=(
                    "1 to 255 printable ASCII characters. A repeat with the same key (same user) "
                    "makes no second job: it answers 200 with the job the first request made."
                ),
            )
        ],
        responses={201: s.JobSerializer, 200: s.JobSerializer},
    ),
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
        """Submit a new job copying this ended one: 201 with the new job. With an
        ``Idempotency-Key`` header, a repeat of the request by the same user (a retry after a
        timeout, a second click) answers 200 with the job the first one made."""
        job = self.get_object()
        if not (access.can_manage_job(request.user, job) and access.can_submit(request.user, job.team)):
            raise PermissionDenied("Only its submitter or a team admin may resubmit it.")
        key = request.headers.get("Idempotency-Key")
        try:
            new_job, created = job_services.job_resubmit(user=request.user, job=job, idempotency_key=key)
        except DjangoValidationError as exc:
            _raise_400(exc, {"idempotency_key": "Idempotency-Key"})
        return Response(
            s.JobSerializer(self.get_queryset().get(pk=new_job.pk)).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def events(self, request: Request, pk: str | None = None) -> Response:
        """The job's whole history, oldest first."""
        job = self.get_object()
        events = JobEvent.objects.filter(job=job).order_by("at", "pk")
        return Response(s.JobEventSerializer(events, many=True).data)


def _jobs_the_user_sees(request: Any) -> QuerySet[Job]:
    """The ``job`` filter's choices: only visible jobs, so that another team's job id is refused
    exactly like a missing one (no request, as when the schema is generated: none)."""
    if request is None:
        return Job.objects.none()
    return access.visible_jobs(request.user)


class JobEventFilter(django_filters.FilterSet):
    # A number box, not a <select> of every job the user sees (DRF's browsable API draws it).
    job = django_filters.ModelChoiceFilter(
        queryset=_jobs_the_user_sees,
        widget=django.forms.NumberInput,
        error_messages={"invalid_choice": "No job you can see has the id %(value)s."},
        help_text="Job id",
    )
    team = django_filters.CharFilter(field_name="job__team__name")
    kind = django_filters.MultipleChoiceFilter(choices=JobEventKind.choices)
    after = UtcIsoDateTimeFilter(field_name="at", lookup_expr="gte")
    before = UtcIsoDateTimeFilter(field_name="at", lookup_expr="lt")

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
        # Instance types are cluster facts: someone who may not read them is told that a real
        # one is unknown, exactly like a made-up one.
        readable_types = InstanceType.objects.all()
        if not access.can_read_cluster(request.user):
            readable_types = readable_types.none()
        if instance_type is not None and not readable_types.filter(name=instance_type).exists():
            raise ValidationError({"instance_type": [f"No instance type is called {instance_type!r}."]})
        return Response(self.get_serializer(rows, many=True).data)


class MembershipFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__name")

    class Meta:
        model = Membership
        fields = ["team", "role"]


class MembershipViewSet(ApiView, viewsets.ModelViewSet):  # type: ignore[type-arg]
    """Members of the teams you see. Team admins (and cluster admins) add people, change roles
    and remove them; the team's last team admin can be neither demoted nor removed."""

    serializer_class = s.MembershipSerializer
    filterset_class = MembershipFilter
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[Membership]:
        queryset = Membership.objects.select_related("team", "user").order_by("team__name", "user__username")
        return access.visible_to(self.request.user, queryset)

    def _require_manager(self, team: Team) -> None:
        if not access.can_manage_members(self.request.user, team):
            raise PermissionDenied(f"Only team admins of {team.name} manage its members.")

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        self._require_manager(data["team"])
        try:
            membership = memberships.membership_add(
                actor=request.user, team=data["team"], user=data["user"], role=data.get("role", "member")
            )
        except DjangoValidationError as exc:
            _raise_400(exc, {"user": "username"})
        return Response(self.get_serializer(membership).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        membership = self.get_object()
        self._require_manager(membership.team)
        serializer = self.get_serializer(membership, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        for fixed in ("team", "user"):
            if fixed in serializer.validated_data and serializer.validated_data[fixed] != getattr(
                membership, fixed
            ):
                name = "username" if fixed == "user" else fixed
                raise ValidationError(
                    {name: [f"A membership's {name} cannot change; add a new one instead."]}
                )
        try:
            if "role" in serializer.validated_data:
                membership = memberships.membership_update(
                    actor=request.user, membership=membership, role=serializer.validated_data["role"]
                )
        except DjangoValidationError as exc:
            _raise_400(exc)
        return Response(self.get_serializer(membership).data)

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.partial_update(request, *args, **kwargs)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        membership = self.get_object()
        self._require_manager(membership.team)
        try:
            memberships.membership_remove(actor=request.user, membership=membership)
        except DjangoValidationError as exc:
            _raise_400(exc)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _refused(description: str) -> OpenApiResponse:
    return OpenApiResponse(
        response=inline_serializer("Refusal", {"detail": serializers.CharField()}), description=description
    )


@extend_schema_view(
    post=extend_schema(
        operation_id="v1_auth_token_create",
        summary="Make a token from a username and password",
        request=AuthTokenSerializer,
        responses={
            200: ApiTokenCreatedSerializer,
            400: OpenApiResponse(description="Wrong credentials, or the user holds the most tokens allowed"),
            429: _refused("Too many requests from this address, or too many failed sign-ins"),
        },
        auth=[],
    ),
    get=extend_schema(
        operation_id="v1_auth_token_list",
        summary="Your tokens, without their keys",
        responses=ApiTokenSerializer(many=True),
    ),
    delete=extend_schema(
        operation_id="v1_auth_token_revoke_all", summary="Revoke all your tokens", responses={204: None}
    ),
)
class TokenView(APIView):
    """``/api/v1/auth/token/``: ``POST`` a username and password for a new token, its key shown
    this once; ``GET`` your tokens that are still accepted (never their keys); ``DELETE``
    revokes all of them. A token lasts ``GPUGOV_API_TOKEN_LIFETIME_DAYS``, ends when its
    owner's password changes, and a user holds at most ``GPUGOV_API_TOKEN_LIMIT``
    (``services/tokens.py``).

    ``POST`` carries no credentials but the password: it is throttled per client address
    (``GPUGOV_THROTTLE_RATES["api-token"]``) and its failures count towards django-axes' lockout
    exactly like the login page's. ``GET`` and ``DELETE`` authenticate like every API view.
    """

    serializer_class = ApiTokenSerializer
    pagination_class = None

    def _exchanges_a_password(self) -> bool:
        # Django's View.setup() sets self.request before DRF asks for authenticators.
        return getattr(getattr(self, "request", None), "method", None) == "POST"

    def get_authenticators(self) -> list[Any]:
        if self._exchanges_a_password():
            return []
        return [HashedTokenAuthentication(), SessionAuthentication()]

    def get_permissions(self) -> list[Any]:
        return [] if self._exchanges_a_password() else [permissions.IsAuthenticated()]

    def get_throttles(self) -> list[Any]:
        return [ApiTokenThrottle()] if self._exchanges_a_password() else []

    def post(self, request: Request) -> Response:
        # Django's own request, so that django-axes marks it when the username is locked out and
        # its middleware answers 429 (on DRF's wrapper the mark would be lost: a plain 400).
        serializer = AuthTokenSerializer(data=request.data, context={"request": request._request})
        serializer.is_valid(raise_exception=True)
        try:
            token, key = api_token_create(user=serializer.validated_data["user"])
        except DjangoValidationError as exc:
            _raise_400(exc)
        return Response(ApiTokenCreatedSerializer(token, context={"request": request, "key": key}).data)

    def get(self, request: Request) -> Response:
        tokens = live_tokens(request.user)
        return Response(ApiTokenSerializer(tokens, many=True, context={"request": request}).data)

    def delete(self, request: Request) -> Response:
        api_tokens_revoke(actor=request.user, tokens=ApiToken.objects.filter(user=request.user))
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema_view(
    delete=extend_schema(
        operation_id="v1_auth_token_revoke", summary="Revoke one of your tokens", responses={204: None}
    )
)
class TokenDetailView(ApiView, APIView):
    """``DELETE /api/v1/auth/token/<id>/``: revoke one of your tokens (another user's token
    answers 404 like a missing one; administrators revoke anyone's in the Django admin)."""

    serializer_class = ApiTokenSerializer

    def delete(self, request: Request, pk: int) -> Response:
        token = get_object_or_404(ApiToken.objects.filter(user=request.user), pk=pk)
        api_token_revoke(actor=request.user, token=token)
        return Response(status=status.HTTP_204_NO_CONTENT)
