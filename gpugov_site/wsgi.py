"""WSGI entry point (gunicorn gpugov_site.wsgi)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpugov_site.settings.base")

application = get_wsgi_application()
