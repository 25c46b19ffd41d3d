"""API URLs, included by ``allocations/urls.py`` at ``api/``: ``/api/v1/...``, the OpenAPI schema
at ``/api/schema/`` and interactive docs at ``/api/docs/`` (Swagger UI served locally)."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from . import views

router = DefaultRouter()
router.register("teams", views.TeamViewSet, basename="team")
router.register("quotas", views.QuotaViewSet, basename="quota")
router.register("memberships", views.MembershipViewSet, basename="membership")
router.register("instance-types", views.InstanceTypeViewSet, basename="instance-type")
router.register("nodes", views.NodeViewSet, basename="node")
router.register("priority-classes", views.PriorityClassViewSet, basename="priority-class")
router.register("jobs", views.JobViewSet, basename="job")
router.register("job-events", views.JobEventViewSet, basename="job-event")
router.register("pending-reasons", views.PendingReasonViewSet, basename="pending-reason")
router.register("usage", views.UsageViewSet, basename="usage")

urlpatterns = [
    path("v1/auth/token/", views.TokenView.as_view(), name="api-token"),
    path("v1/auth/token/<int:pk>/", views.TokenDetailView.as_view(), name="api-token-detail"),
    path("v1/policy/", views.ClusterPolicyView.as_view(), name="api-policy"),
    path("v1/", include(router.urls)),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file: no inline <script>, so the
    # Content-Security-Policy (allocations/security.py) needs no exception.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="allocations:api-schema"), name="api-docs"),
]
