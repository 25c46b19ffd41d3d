"""What a deployment loads when it sets only what docs/deploy.md asks for (no
``DJANGO_SETTINGS_MODULE``, ``DJANGO_DEBUG`` off) passes ``check --deploy``, through each entry
point: ``manage.py``, gunicorn's ``gpugov_site.wsgi`` and Celery's ``gpugov_site.celery``. Each
case runs in a fresh process, since settings are read once per process."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import pytest

from tests.conftest import REPO

# What a deployment sets (docs/deploy.md), and nothing that chooses the settings module.
DEPLOYMENT_ENV = {
    "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),  # made per run; none is written in the repo
    "DJANGO_ALLOWED_HOSTS": "gpugov.example.com",
    "DJANGO_CSRF_TRUSTED_ORIGINS": "https://gpugov.example.com",
}
CHECK = "from django.core.management import call_command; call_command('check', '--deploy', '--fail-level', 'WARNING')"


def run(argv: list[str], tmp_path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    environ.update(
        DEPLOYMENT_ENV, GPUGOV_VAR_DIR=str(tmp_path), DJANGO_STATIC_ROOT=str(tmp_path / "static"), **env
    )
    return subprocess.run(
        [sys.executable, *argv], cwd=REPO, env=environ, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        ["-c", f"import gpugov_site.wsgi; {CHECK}"],
        ["-c", f"import django, gpugov_site.celery; django.setup(); {CHECK}"],
    ],
    ids=["manage.py", "wsgi", "celery"],
)
def test_check_deploy_is_clean_on_what_a_deployment_loads(argv, tmp_path):
    result = run(argv, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout + result.stderr


def test_a_plain_http_deployment_says_so_and_the_check_flags_it(tmp_path):
    """``DJANGO_HTTPS=false`` (a trial behind nothing) turns HTTPS off, and check --deploy
    names each consequence: the check above can fail."""
    result = run(
        ["manage.py", "check", "--deploy", "--fail-level", "WARNING"], tmp_path, DJANGO_HTTPS="false"
    )
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stdout + result.stderr, warning


def test_make_runs_debug_settings_serve_plain_http(tmp_path):
    """``make run`` (scripts/run_dev.py) turns DEBUG on and serves http://127.0.0.1: no
    redirect to https:// and cookies that a plain-HTTP browser sends back."""
    show = (
        "from django.conf import settings as s; "
        "print(s.DEBUG, s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS)"
    )
    result = run(["manage.py", "shell", "-v", "0", "-c", show], tmp_path, DJANGO_DEBUG="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "False", "False", "False", "0"]


def test_production_refuses_plain_http(tmp_path):
    result = run(
        ["manage.py", "check"],
        tmp_path,
        DJANGO_SETTINGS_MODULE="gpugov_site.settings.production",
        DJANGO_HTTPS="false",
    )
    assert result.returncode != 0
    assert "DJANGO_HTTPS must not be off in production" in result.stderr
