"""The Celery application. Its broker and beat schedule come from Django settings."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpugov_site.settings.base")

# ``autodiscover_tasks`` finds ``allocations.tasks``; the feature packages' task modules are
# listed here, so that nothing has to import them for their side effect.
app = Celery("gpugov", include=["allocations.whatif.tasks"])
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
