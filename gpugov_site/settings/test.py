"""Test settings: the base settings with fast password hashing and email kept in memory."""

from .base import *

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
# Tests serve static files through the finders; nothing is collected into STATIC_ROOT.
WHITENOISE_AUTOREFRESH = True
WHITENOISE_USE_FINDERS = True
# Django's test client calls authenticate() without a request, which django-axes refuses;
# tests/security/test_login_throttling.py turns it back on and drives the real login page.
AXES_ENABLED = False
# The test client and the live server speak plain HTTP, as `make run` does; the HTTPS settings
# a deployment gets are checked in processes of their own (tests/security/test_deploy*.py).
HTTPS = False
SECURE_SSL_REDIRECT = SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = False
SECURE_HSTS_SECONDS = 0
