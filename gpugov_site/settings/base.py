"""gpugov settings: one complete file, driven by environment variables.

Embedded default (nothing set): SQLite in ``var/gpugov.sqlite3`` and Celery's filesystem broker
in ``var/celery/``, so ``make run`` works on a bare machine. Production and CI set
``DATABASE_URL`` (PostgreSQL) and ``REDIS_URL`` (broker, results and cache).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(os.environ.get("GPUGOV_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ValueError(f"environment variable {name}={value!r} is not a whole number") from exc


def _secret_key() -> str:
    """The key from DJANGO_SECRET_KEY, else one generated once and kept in var/ (never in git)."""
    key = os.environ.get("DJANGO_SECRET_KEY")
    if key:
        return key
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = [h for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

# --- HTTPS and security headers -------------------------------------------------------------
# Served over HTTPS wherever DEBUG is off, so that a deployment that loads these settings (the
# default of manage.py, wsgi.py and celery.py) is as safe as production.py; `make run` turns
# DEBUG on and serves plain HTTP. DJANGO_HTTPS=false: a trial reached over plain HTTP behind
# nothing (docs/deploy.md); `check --deploy` then warns, as it should.
HTTPS = env_bool("DJANGO_HTTPS", not DEBUG)
# Behind a TLS-terminating load balancer that sets X-Forwarded-Proto (docs/security.md);
# set DJANGO_SECURE_PROXY_SSL_HEADER=false when gunicorn itself is reached over TLS.
if HTTPS and env_bool("DJANGO_SECURE_PROXY_SSL_HEADER", True):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = HTTPS and env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
# The load balancer's health check and Prometheus may scrape over plain HTTP inside the network.
SECURE_REDIRECT_EXEMPT = [r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 31_536_000) if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS and env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
# The header's "preload" only allows a submission to the browsers' list (hstspreload.org), it
# submits nothing; set false if subdomains of this domain must stay reachable over HTTP.
SECURE_HSTS_PRELOAD = HTTPS and env_bool("DJANGO_SECURE_HSTS_PRELOAD", True)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
SESSION_COOKIE_SECURE = HTTPS
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_AGE = env_int("DJANGO_SESSION_COOKIE_AGE", 8 * 3600)  # a working day
CSRF_COOKIE_SECURE = HTTPS
CSRF_COOKIE_HTTPONLY = True  # the pages send the token from the form, never from JavaScript
X_FRAME_OPTIONS = "DENY"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI served from our static files, not a CDN
    "axes",  # login throttling (AXES_* below)
    "allocations",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Outside WhiteNoise, so that static files (an SVG is a document too) get the policy.
    "allocations.security.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A view's 404 is the product's page even with DEBUG on: Django's technical page would show
    # the URL patterns and the lookup that failed (another team's name, an id).
    "allocations.views.errors.NotFoundMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into its lockout response.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "gpugov_site.urls"
WSGI_APPLICATION = "gpugov_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "allocations.context_processors.console",  # navigation, cluster name and health
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
DATABASE_URL = os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'gpugov.sqlite3'}"
# Health checks: a kept connection that the server ended (a PostgreSQL restart) is replaced
# before a request uses it, instead of failing that request (tests/chaos/test_faults_found.py).
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 60), conn_health_checks=True
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (web, worker, beat) share the file: wait for locks, write-ahead log.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis, Celery, cache -------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_RESULT_BACKEND = REDIS_URL
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    _broker_dir = VAR_DIR / "celery" / "broker"
    _broker_dir.mkdir(parents=True, exist_ok=True)
    (VAR_DIR / "celery" / "processed").mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(VAR_DIR / "celery" / "processed"),
        # Exchange tables; kombu's default is ./control, relative to the working directory.
        "control_folder": str(VAR_DIR / "celery" / "control"),
        "store_processed": False,
    }
    CELERY_RESULT_BACKEND = f"file://{VAR_DIR / 'celery' / 'results'}"
    (VAR_DIR / "celery" / "results").mkdir(parents=True, exist_ok=True)
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache"),
        }
    }
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# Seconds between allocation cycles (the loop also runs soon after any change).
ALLOCATION_INTERVAL = env_int("ALLOCATION_INTERVAL", 5)
if ALLOCATION_INTERVAL < 1:
    raise ValueError(f"environment variable ALLOCATION_INTERVAL={ALLOCATION_INTERVAL} must be at least 1")
# Every periodic task, from one module (allocations/schedule.py).
from allocations.schedule import beat_schedule  # noqa: E402

CELERY_BEAT_SCHEDULE = beat_schedule(ALLOCATION_INTERVAL)

# Bearer token that Prometheus sends to /metrics; empty: the endpoint is off (404).
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")

# Capacity history (services/history.py): days kept of minute samples and of hour/day rollups.
HISTORY_MINUTE_DAYS = env_int("HISTORY_MINUTE_DAYS", 14)
HISTORY_HOUR_DAYS = env_int("HISTORY_HOUR_DAYS", 400)
HISTORY_DAY_DAYS = env_int("HISTORY_DAY_DAYS", 3650)
# A what-if run with no progress report for this long lost its worker and is marked failed
# (progress is reported every half second while it replays).
WHATIF_STALE_AFTER_S = env_int("WHATIF_STALE_AFTER_S", 600)
# The replays of one what-if run (the live policy and each draft) run side by side in this
# many processes forked from the worker; 1 replays them one after the other in the worker.
WHATIF_PROCESSES = env_int("WHATIF_PROCESSES", max(1, os.cpu_count() or 1))

# --- Auth, i18n, static ---------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# django-axes first: a locked-out username+IP is refused before the password is even checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5)  # failed logins per username+IP before lockout
# Failed logins from one address, whatever the usernames, before that address is locked out:
# password spraying (a few tries on many users) stays under the per-username limit. gpugov's
# own setting, read by allocations/security.py's handler.
AXES_ADDRESS_FAILURE_LIMIT = env_int("AXES_ADDRESS_FAILURE_LIMIT", 20)
AXES_COOLOFF_TIME = env_int("AXES_COOLOFF_MINUTES", 15) / 60  # hours; then the lockout lifts by itself
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_HANDLER = "allocations.security.AddressLimitAxesHandler"
AXES_LOCKOUT_CALLABLE = "allocations.security.lockout_response"  # JSON for the API, a page otherwise
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False  # no banner on every manage.py command; lockouts are still logged
# The client's address, for axes and every throttle: REMOTE_ADDR, or behind GPUGOV_PROXY_COUNT
# load balancers that append to X-Forwarded-For, the address the outermost one saw. Without it
# every client behind a balancer shares one address (docs/security.md).
AXES_CLIENT_IP_CALLABLE = "allocations.security.client_address"
GPUGOV_PROXY_COUNT = env_int("GPUGOV_PROXY_COUNT", 0)
# API tokens (allocations/services/tokens.py): days each one is accepted, and how many one user
# may hold at once (one more is refused until the user revokes one).
GPUGOV_API_TOKEN_LIFETIME_DAYS = env_int("GPUGOV_API_TOKEN_LIFETIME_DAYS", 30)
GPUGOV_API_TOKEN_LIMIT = env_int("GPUGOV_API_TOKEN_LIMIT", 5)
if GPUGOV_API_TOKEN_LIFETIME_DAYS < 1:
    raise ValueError(f"GPUGOV_API_TOKEN_LIFETIME_DAYS={GPUGOV_API_TOKEN_LIFETIME_DAYS} must be at least 1")
if GPUGOV_API_TOKEN_LIMIT < 1:
    raise ValueError(f"GPUGOV_API_TOKEN_LIMIT={GPUGOV_API_TOKEN_LIMIT} must be at least 1")
# SageMaker's API at /aws/sagemaker/ (docs/interop.md "HyperPod's API"): the region requests are
# signed for, the account its ARNs name (the configured HyperPod cluster ARN's account wins), and
# how many access keys one user may hold.
GPUGOV_AWS_REGION = os.environ.get("GPUGOV_AWS_REGION", "us-west-2")
GPUGOV_AWS_ACCOUNT_ID = os.environ.get("GPUGOV_AWS_ACCOUNT_ID", "000000000000")
GPUGOV_ACCESS_KEY_LIMIT = env_int("GPUGOV_ACCESS_KEY_LIMIT", 2)
if GPUGOV_ACCESS_KEY_LIMIT < 1:
    raise ValueError(f"GPUGOV_ACCESS_KEY_LIMIT={GPUGOV_ACCESS_KEY_LIMIT} must be at least 1")
# Requests per client address (and per email for password resets), "<count>/<second|minute|
# hour|day>", counted in the cache (allocations/throttles.py); over the rate answers 429.
GPUGOV_THROTTLE_RATES = {
    "api-token": os.environ.get("GPUGOV_THROTTLE_API_TOKEN", "20/hour"),
    "password-reset-address": os.environ.get("GPUGOV_THROTTLE_PASSWORD_RESET_ADDRESS", "10/hour"),
    "password-reset-email": os.environ.get("GPUGOV_THROTTLE_PASSWORD_RESET_EMAIL", "3/hour"),
    "password-reset-confirm": os.environ.get("GPUGOV_THROTTLE_PASSWORD_RESET_CONFIRM", "30/hour"),
}
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT", BASE_DIR / "staticfiles"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

# --- REST API -------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "allocations.api.auth.HashedTokenAuthentication",  # keys stored as SHA-256 only
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "allocations.api.parsers.BoundedJSONParser",  # deep nesting and huge numbers are a 400
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "gpugov API",
    "DESCRIPTION": "Govern a shared GPU cluster between teams: quotas, lending, borrowing, priorities.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # /api/docs/ loads Swagger UI from drf-spectacular-sidecar's static files: works offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Email ----------------------------------------------------------------------------------
EMAIL_HOST = os.environ.get("EMAIL_HOST", "127.0.0.1")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "gpugov@localhost")
if not os.environ.get("EMAIL_HOST"):
    EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
GPUGOV_BASE_URL = os.environ.get("GPUGOV_BASE_URL", "http://127.0.0.1:8000")
# Weekly reports (services/reports.py): sent from this weekday (0 = Monday) and hour on, in the
# cluster's time zone; charts drawn by this Chromium ("off": the emails go without images).
WEEKLY_REPORT_WEEKDAY = env_int("WEEKLY_REPORT_WEEKDAY", 0)
WEEKLY_REPORT_HOUR = env_int("WEEKLY_REPORT_HOUR", 7)
REPORT_CHART_BROWSER = os.environ.get("REPORT_CHART_BROWSER", "/usr/bin/chromium")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}
