"""Wiring of the gpugov Django project: settings, URLs, Celery, WSGI."""

from .celery import app as celery_app

__all__ = ("celery_app",)
