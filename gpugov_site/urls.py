"""URL wiring: the console, the team pages and the API live in the allocations app."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("django-admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("allocations.urls")),
]

handler500 = "allocations.views.errors.server_error"
