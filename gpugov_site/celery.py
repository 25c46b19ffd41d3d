"""The Celery application. Its broker and beat schedule come from Django settings."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpugov_site.settings.base")

app = Celery("gpugov")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
