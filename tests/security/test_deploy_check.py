"""``manage.py check --deploy`` under the production settings, in a fresh process with a
realistic environment (the settings module is read once per process)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

from tests.conftest import REPO

PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "gpugov_site.settings.production",
    # A fresh key of production length and variety, made per run (none is written in the repo).
    "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
    "DJANGO_ALLOWED_HOSTS": "gpugov.example.com",
    "DJANGO_CSRF_TRUSTED_ORIGINS": "https://gpugov.example.com",
}


def run_manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    environ.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_under_production_settings(tmp_path):
    result = run_manage(
        "check", "--deploy", "--fail-level", "WARNING", GPUGOV_VAR_DIR=str(tmp_path), **PRODUCTION_ENV
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_flags_the_base_settings(tmp_path):
    """The same check fails on the development settings (`make run`'s, DEBUG on): the test
    above can fail."""
    env = {**PRODUCTION_ENV, "DJANGO_SETTINGS_MODULE": "gpugov_site.settings.base", "DJANGO_DEBUG": "1"}
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", GPUGOV_VAR_DIR=str(tmp_path), **env)
    assert result.returncode != 0
    assert "security.W018" in result.stderr + result.stdout  # DEBUG on
    assert "security.W004" in result.stderr + result.stdout  # no HSTS


def test_production_refuses_to_start_without_a_secret_key(tmp_path):
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "DJANGO_SECRET_KEY"}
    result = run_manage("check", GPUGOV_VAR_DIR=str(tmp_path), **env)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set in production" in result.stderr


def test_production_refuses_debug(tmp_path):
    result = run_manage("check", GPUGOV_VAR_DIR=str(tmp_path), DJANGO_DEBUG="true", **PRODUCTION_ENV)
    assert result.returncode != 0
    assert "DJANGO_DEBUG must not be on in production" in result.stderr
