"""Schemathesis over the whole OpenAPI schema at ``/api/schema/``: every operation, with
requests generated from its parameters and bodies, as a cluster admin and as a team member.

No request may answer 5xx; a 400 must be a mapping from the refused field(s) to messages
(DRF's shape), so that a client can tell which field to fix. The requests go through
Django's WSGI application in this process, so they read the test database.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from allocations.api.auth import token_create
from tests.fuzz.conftest import FUZZ_COUNTS

# 48 operations x 2 roles x 8 generated examples, plus the boundary values of schemathesis's
# coverage phase: several thousand requests in a few minutes on two cores.
EXAMPLES_PER_OPERATION = 8


# Loaded at collection (pytest-django has set Django up by then); serving the schema reads no
# table, so no database is needed yet.
from gpugov_site.wsgi import application  # noqa: E402

schema = schemathesis.openapi.from_wsgi("/api/schema/", application)


def assert_field_errors(case: Any, response: Any) -> None:
    """A 400 names what was wrong: ``{"field": ["message", ...], ...}`` or ``{"detail": ...}``
    for a request that is wrong as a whole."""
    body = response.json()
    where = f"{case.method} {case.formatted_path} body={case.body!r} query={case.query!r}"
    assert isinstance(body, dict) and body, f"400 without field errors for {where}: {body!r}"
    for field, messages in body.items():
        assert field, f"400 with an unnamed field for {where}: {body!r}"
        assert messages, f"400 with an empty message for {field} in {where}: {body!r}"


FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,  # no example database in the repository's working tree
    derandomize=True,  # the same requests on every run: CI is repeatable; raise the count to explore
)


def call_as(case: Any, user: Any, role: str) -> None:
    """One generated request with ``user``'s token: never a 5xx, a 400 names its fields."""
    if not hasattr(user, "_fuzz_key"):
        user._fuzz_key = token_create(user=user)[1]
    response = case.call(headers={"Authorization": f"Token {user._fuzz_key}"})
    FUZZ_COUNTS["requests"] += 1
    FUZZ_COUNTS[f"{response.status_code // 100}xx"] += 1
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} as {role} answered {response.status_code}: "
        f"body={case.body!r} query={case.query!r}\n{response.text[:2000]}"
    )
    if response.status_code == 400:
        assert_field_errors(case, response)


@pytest.mark.slow
@schema.parametrize()
@FUZZ_SETTINGS
def test_no_request_of_a_cluster_admin_gets_a_server_error(case: Any, personas: Any) -> None:
    call_as(case, personas.cluster_admin, "cluster admin")


@pytest.mark.slow
@schema.parametrize()
@FUZZ_SETTINGS
def test_no_request_of_a_member_gets_a_server_error(case: Any, personas: Any) -> None:
    call_as(case, personas.member, "member")
