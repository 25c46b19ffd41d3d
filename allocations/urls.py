"""The app's URLs: each views module brings its own list."""

from django.urls import include, path

from .views import console, cycles, dashboards, docs, interop, reports, sagemaker, teams, whatif

app_name = "allocations"

urlpatterns = [
    *console.urlpatterns,
    *teams.urlpatterns,
    *cycles.urlpatterns,
    *dashboards.urlpatterns,
    *interop.urlpatterns,
    *sagemaker.urlpatterns,
    *reports.urlpatterns,
    *whatif.urlpatterns,
    *docs.urlpatterns,
    path("api/", include("allocations.api.urls")),
]
