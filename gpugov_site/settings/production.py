# ruff: noqa: F403, F405  (the base settings, star-imported like test.py)
"""Production settings: the base settings behind HTTPS, with nothing left to chance.

``DJANGO_SETTINGS_MODULE=gpugov_site.settings.production``. Every value still comes from the
environment (docs/deploy.md lists them). The base settings already serve HTTPS wherever DEBUG
is off; this file refuses what must not reach production (DEBUG, plain HTTP, a generated
secret key) and serves static files under hashed names. ``manage.py check --deploy`` is clean
with it (tests/security/test_deploy_check.py) and with the base settings a deployment loads by
default (tests/security/test_deployment_defaults.py).
"""

import os

from django.core.exceptions import ImproperlyConfigured

from .base import *

if not os.environ.get("DJANGO_SECRET_KEY"):
    # base.py would generate one per machine: web machines must share one, set explicitly.
    raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set in production (50+ random characters)")
if DEBUG:
    raise ImproperlyConfigured("DJANGO_DEBUG must not be on in production")
# The HTTPS settings themselves (secure cookies, HSTS, the redirect) are base.py's, so that a
# deployment that forgets this module is not left on plain HTTP.
if not HTTPS:
    raise ImproperlyConfigured("DJANGO_HTTPS must not be off in production")

# Static files collected once per release (`manage.py collectstatic`), hashed names, cached
# for a year by browsers.
STORAGES = {
    **STORAGES,
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
