"""URL wiring: the console, the team pages and the API live in the allocations app."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("django-admin/", admin.site.urls),
    # The throttled password reset pages first: they take the names of Django's own.
    path("accounts/", include("allocations.views.accounts")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("allocations.urls")),
]

handler404 = "allocations.views.errors.page_not_found"
handler500 = "allocations.views.errors.server_error"
