# ruff: noqa: F403, F405  (the base settings, star-imported like test.py)
"""Production settings: the base settings behind HTTPS, with nothing left to chance.

``DJANGO_SETTINGS_MODULE=gpugov_site.settings.production``. Every value still comes from the
environment (docs/deploy.md lists them); this file only refuses what must not reach
production (DEBUG, a generated secret key) and turns on what HTTPS makes possible: secure
cookies, HSTS and the redirect to https://. ``manage.py check --deploy`` is clean with it
(tests/security/test_deploy_check.py).
"""

import os

from django.core.exceptions import ImproperlyConfigured

from .base import *

if not os.environ.get("DJANGO_SECRET_KEY"):
    # base.py would generate one per machine: web machines must share one, set explicitly.
    raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set in production (50+ random characters)")
if DEBUG:
    raise ImproperlyConfigured("DJANGO_DEBUG must not be on in production")

# Behind a TLS-terminating load balancer that sets X-Forwarded-Proto (docs/security.md);
# set DJANGO_SECURE_PROXY_SSL_HEADER=false when gunicorn itself is reached over TLS.
if env_bool("DJANGO_SECURE_PROXY_SSL_HEADER", True):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
# The load balancer's health check and Prometheus may scrape over plain HTTP inside the network.
SECURE_REDIRECT_EXEMPT = [r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
# The header's "preload" only allows a submission to the browsers' list (hstspreload.org), it
# submits nothing; set false if subdomains of this domain must stay reachable over HTTP.
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", True)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"

SESSION_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_AGE = env_int("DJANGO_SESSION_COOKIE_AGE", 8 * 3600)  # a working day
CSRF_COOKIE_SECURE = True
CSRF_COOKIE_HTTPONLY = True  # the pages send the token from the form, never from JavaScript
X_FRAME_OPTIONS = "DENY"

# Static files collected once per release (`manage.py collectstatic`), hashed names, cached
# for a year by browsers.
STORAGES = {
    **STORAGES,
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
