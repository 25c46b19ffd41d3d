"""Django's admin at /django-admin/: a secondary, technical view (the console is the product).

Policy objects are edited through the console's forms and saved by the same services, so a
change here is validated and audited like any other. Quotas, jobs, job events and audit
entries are read-only here: quotas are set on the console's team page, jobs belong to the
teams and the allocation loop, events and audit entries are history.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone

from allocations import policy_fields
from allocations.forms import policy as forms
from allocations.models import (
    AccessKey,
    ApiToken,
    AuditEntry,
    Cluster,
    ClusterPolicy,
    InstanceType,
    Job,
    JobEvent,
    Membership,
    Node,
    NodeStateChange,
    PriorityClass,
    Team,
    TeamQuota,
)
from allocations.services import access_keys as access_key_services
from allocations.services import memberships
from allocations.services import policy as services
from allocations.services import tokens as token_services


class ServiceAdmin(admin.ModelAdmin):
    """Saves through ``create``/``update`` services (validated by the console form's rules);
    deleting is left to the console, where a refusal can be explained.

    ``update`` takes the row as ``instance_kwarg``; without one, it is the service of a
    one-per-cluster row (the cluster, its policy), which finds the row itself.
    """

    create: Callable[..., Any] | None = None
    update: Callable[..., Any] | None = None
    instance_kwarg = ""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.create is not None and super().has_add_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        values = form.service_values()
        if change:
            assert self.update is not None
            changed = {name: values[name] for name in form.changed_data if name in values}
            instance = {self.instance_kwarg: obj} if self.instance_kwarg else {}
            saved = type(self).update(actor=request.user, **instance, **changed)
        else:
            assert self.create is not None
            saved = type(self).create(actor=request.user, **values)
        obj.pk = saved.pk


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Cluster)
class ClusterAdmin(ServiceAdmin):
    form = forms.ClusterForm
    update = staticmethod(services.cluster_update)
    list_display = ["name", "backend_kind", "backend_healthy", "time_zone"]


@admin.register(ClusterPolicy)
class ClusterPolicyAdmin(ServiceAdmin):
    form = forms.ClusterPolicyForm
    update = staticmethod(services.cluster_policy_update)
    list_display = ["cluster", "idle_allocation", "task_ranking", "share_unallocated", "queueing"]


@admin.register(InstanceType)
class InstanceTypeAdmin(ServiceAdmin):
    form = forms.InstanceTypeForm
    create = staticmethod(services.instance_type_create)
    update = staticmethod(services.instance_type_update)
    instance_kwarg = "instance_type"
    list_display = ["name", "gpus_per_node", "price_per_gpu_hour"]


class ReadOnlyInline(admin.TabularInline):
    """Rows shown under their parent, every field read-only: none added, changed or deleted."""

    extra = 0
    can_delete = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class NodeStateChangeInline(ReadOnlyInline):
    model = NodeStateChange
    fields = ["at", "old_state", "state", "reason", "source", "actor_name"]


@admin.register(Node)
class NodeAdmin(ServiceAdmin):
    form = forms.NodeForm
    create = staticmethod(services.node_create)
    update = staticmethod(services.node_update)
    instance_kwarg = "node"
    list_display = ["name", "instance_type", "gpus", "state", "state_since", "reason"]
    list_filter = ["state", "instance_type"]
    search_fields = ["name"]
    inlines = [NodeStateChangeInline]


@admin.register(PriorityClass)
class PriorityClassAdmin(ServiceAdmin):
    form = forms.PriorityClassForm
    create = staticmethod(services.priority_class_create)
    update = staticmethod(services.priority_class_update)
    instance_kwarg = "priority_class"
    list_display = ["name", "weight", "description"]


class TeamQuotaInline(ReadOnlyInline):
    model = TeamQuota
    fields = ["instance_type", *policy_fields.QUOTA_FIELDS]


@admin.register(Team)
class TeamAdmin(ServiceAdmin):
    form = forms.TeamForm
    create = staticmethod(services.team_create)
    update = staticmethod(services.team_update)
    instance_kwarg = "team"
    inlines = [TeamQuotaInline]
    list_display = ["name", "display_name", "active", "fair_share_weight", "sharing", "reclaim"]
    list_filter = ["active", "sharing"]
    search_fields = ["name", "display_name"]


@admin.register(Membership)
class MembershipAdmin(ServiceAdmin):
    form = forms.MembershipRoleForm
    update = staticmethod(memberships.membership_update)
    instance_kwarg = "membership"
    list_display = ["user", "team", "role", "weekly_report"]
    list_filter = ["role", "team"]


@admin.register(TeamQuota)
class TeamQuotaAdmin(ReadOnlyAdmin):
    list_display = [
        "team",
        "instance_type",
        "quota",
        "borrow_limit_kind",
        "borrow_limit_percent",
        "lend_limit",
    ]
    list_filter = ["instance_type"]


class JobEventInline(ReadOnlyInline):
    model = JobEvent
    fk_name = "job"
    fields = ["at", "kind", "reason", "nodes", "preemptor", "message", "ran_s", "lost_gpu_seconds"]


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ["id", "name", "team", "state", "instance_type", "gpus", "priority_class", "submitted_at"]
    list_filter = ["state", "team", "instance_type"]
    search_fields = ["name", "external_id"]
    list_select_related = ["team", "instance_type", "priority_class"]
    inlines = [JobEventInline]


@admin.register(JobEvent)
class JobEventAdmin(ReadOnlyAdmin):
    list_display = ["at", "job", "kind", "reason", "message"]
    list_filter = ["kind"]
    list_select_related = ["job"]


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = [
        "at",
        "actor_name",
        "action",
        "object_type",
        "object_repr",
        "field",
        "old_value",
        "new_value",
    ]
    list_filter = ["action", "object_type"]
    search_fields = ["object_repr", "actor_name", "field"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """API tokens: listed by their key's first characters (the key itself is not stored) and
    deleted to revoke them (one, or a selection: search a username and select all to revoke
    every token of that user), through the token services. They are made through
    ``POST /api/v1/auth/token/``, never here."""

    list_display = ["prefix", "user", "created_at", "expires_at", "last_used_at", "state"]
    list_select_related = ["user"]
    search_fields = ["user__username", "prefix"]
    readonly_fields = ["user", "prefix", "created_at", "expires_at", "last_used_at", "state"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="state")
    def state(self, token: ApiToken) -> str:
        """Accepted, or why not (an expired or revoked token stays listed until its owner makes
        a new one or it is deleted here)."""
        return token_services.token_state(token, timezone.now())

    def delete_model(self, request: HttpRequest, obj: ApiToken) -> None:
        token_services.api_token_revoke(actor=request.user, token=obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        token_services.api_tokens_revoke(actor=request.user, tokens=queryset)


@admin.register(AccessKey)
class AccessKeyAdmin(admin.ModelAdmin):
    """Access keys for SageMaker's API: listed by id (the secret is not stored) and deleted to
    revoke them, through the access key services (audited). They are made on the Access keys
    page or by ``manage.py issue_access_key``, never here."""

    list_display = ["access_key_id", "user", "created_at", "last_used_at"]
    list_select_related = ["user"]
    search_fields = ["user__username", "access_key_id"]
    readonly_fields = ["user", "access_key_id", "created_at", "last_used_at"]
    exclude = ["salt"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: AccessKey) -> None:
        access_key_services.access_key_revoke(actor=request.user, key=obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for key in queryset.select_related("user"):
            access_key_services.access_key_revoke(actor=request.user, key=key)
