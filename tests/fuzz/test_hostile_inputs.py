"""Hostile inputs, enumerated: shapes that could make a page or call answer 500, sent to every
operation of the API (bodies, query and path parameters), to each field of the POST forms of
the pages in FORM_PAGES, and to the report URLs with weeks at the ends of the calendar. No
answer may be a 5xx.

The shapes:

* JSON nested 1,000 levels deep (2 KB), as arrays and as objects, which would make Python's
  parser recurse past its limit; and nesting just inside the parser's bound, in each field;
* integers longer than the 4,300 digits ``int()`` reads, and long ones it reads (4,000 digits,
  2**63) that the database cannot hold;
* formset management forms whose TOTAL_FORMS / INITIAL_FORMS are not the served rows;
* ISO weeks whose start or end no ``datetime`` holds (9999-W52, 0001-W01), in every report
  URL, as every team role; and the calendar's first and last days in each field of the
  pages' filter (GET) forms.

Nothing here is random: the cases are listed, so every run sends the same requests and their
number is fixed (about 1,300; some 20 seconds on two cores). Each form post runs in a savepoint
rolled back afterwards, so one case cannot change the page the next one reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html import unescape
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from django.test import Client
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from allocations.bounded_json import MAX_DEPTH
from tests import factories as f
from tests.fuzz.conftest import FUZZ_COUNTS
from tests.fuzz.test_forms import GET_PAGES, page_forms

pytestmark = pytest.mark.slow

LONG = "9" * 5001  # past int()'s 4,300 digits
BIG = "9" * 4000  # int() reads it; no column holds it
DEEP_ARRAYS = "[" * 1000 + "]" * 1000
DEEP_OBJECTS = '{"a": ' * 1000 + "1" + "}" * 1000
JUST_INSIDE = "[" * (MAX_DEPTH - 1) + "1" + "]" * (MAX_DEPTH - 1)  # in a body's object: at the bound

# --- The API -------------------------------------------------------------------------------------
# Read at collection, as tests/fuzz/test_api_schema.py does: generating the schema reads no table.
SCHEMA = SchemaGenerator().get_schema(request=None, public=True)
UNSAFE = ("post", "put", "patch", "delete")


def _body_fields(operation: dict[str, Any]) -> list[str]:
    """The writable members of an operation's JSON body (none when it takes no body)."""
    schema = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    if "$ref" in schema:
        schema = SCHEMA["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return sorted(name for name, spec in schema.get("properties", {}).items() if not spec.get("readOnly"))


OPERATIONS = sorted(
    (method, path, _body_fields(operation), "requestBody" in operation)
    for path, operations in SCHEMA["paths"].items()
    for method, operation in operations.items()
    if method in UNSAFE
)


def _api_bodies(fields: list[str]) -> Iterator[tuple[str, str, bool]]:
    """(what, body, refused by the parser) for one operation."""
    yield "arrays nested 1,000 deep", DEEP_ARRAYS, True
    yield "objects nested 1,000 deep", DEEP_OBJECTS, True
    yield "a 5,001-digit number", LONG, True
    for field in fields:
        key = json.dumps(field)
        yield f"{field}: a 5,001-digit number", f"{{{key}: {LONG}}}", True
        yield f"{field}: arrays nested 1,000 deep", f"{{{key}: {DEEP_ARRAYS}}}", True
        yield f"{field}: a 4,000-digit number", f"{{{key}: {BIG}}}", False
        yield f"{field}: 2**63", f"{{{key}: {2**63}}}", False
        yield f"{field}: nested to the bound", f"{{{key}: {JUST_INSIDE}}}", False


def _concrete(path: str, personas: Any) -> str:
    """``path`` with each parameter replaced by a row of that collection that exists (a
    request to a missing row would answer 404 before reading its body)."""
    from allocations.models import Job, Membership, PriorityClass, TeamQuota

    keys = {
        "teams": "team-a",
        "instance-types": personas.instance_type.name,
        "nodes": personas.nodes[0].name,
        "priority-classes": PriorityClass.objects.order_by("weight").first().name,
        "memberships": Membership.objects.filter(team=personas.team).order_by("pk").first().pk,
        "quotas": TeamQuota.objects.filter(team=personas.team).first().pk,
        "jobs": Job.objects.filter(team=personas.team).order_by("pk").first().pk,
    }

    def key(match: re.Match[str]) -> str:
        collection = path[: match.start()].rstrip("/").rsplit("/", 1)[1]
        return str(keys.get(collection, 1))

    return re.sub(r"\{[^}]+\}", key, path)


@pytest.fixture
def a_job(personas: Any) -> Any:
    return f.make_job(personas.team, personas.instance_type, 8, submitter=personas.member, command="true")


@pytest.fixture
def unthrottled(settings: Any) -> None:
    """The token endpoint's rate would otherwise stop the cases before they reach the parser."""
    settings.GPUGOV_THROTTLE_RATES = dict.fromkeys(
        getattr(settings, "GPUGOV_THROTTLE_RATES", {}), "100000/hour"
    )


@pytest.mark.parametrize(
    ("method", "path", "fields", "has_body"),
    OPERATIONS,
    ids=[f"{method.upper()} {path}" for method, path, _, _ in OPERATIONS],
)
def test_hostile_json_to_an_api_operation_is_never_a_server_error(
    personas, a_job, unthrottled, method, path, fields, has_body
):
    client = APIClient()
    if not path.startswith("/api/v1/auth/"):  # the token endpoint is tried before sign-in
        client.force_authenticate(personas.cluster_admin)
    url = _concrete(path, personas)
    for what, body, refused_by_parser in _api_bodies(fields):
        with transaction.atomic():
            response = getattr(client, method)(url, body, content_type="application/json")
            transaction.set_rollback(True)
        FUZZ_COUNTS["hostile API requests"] += 1
        FUZZ_COUNTS[f"{response.status_code // 100}xx"] += 1
        where = f"{method.upper()} {url} with {what}"
        assert response.status_code < 500, f"{where}: {response.status_code}"
        if has_body and refused_by_parser:
            assert response.status_code == 400, f"{where}: {response.status_code}"
            assert "JSON parse error" in response.json()["detail"], where


def _query_parameters(operation: dict[str, Any]) -> list[str]:
    return sorted(p["name"] for p in operation.get("parameters", []) if p["in"] == "query")


READS = sorted(
    (path, _query_parameters(operation))
    for path, operations in SCHEMA["paths"].items()
    for method, operation in operations.items()
    if method == "get" and _query_parameters(operation)
)


@pytest.mark.parametrize(("path", "parameters"), READS, ids=[f"GET {path}" for path, _ in READS])
def test_huge_numbers_in_each_query_parameter_are_never_a_server_error(personas, a_job, path, parameters):
    client = APIClient()
    client.force_authenticate(personas.cluster_admin)
    url = _concrete(path, personas)
    for parameter in parameters:
        for value in (LONG, BIG, str(2**63), "-" + str(2**63 + 1)):
            response = client.get(url, {parameter: value})
            FUZZ_COUNTS["hostile API requests"] += 1
            FUZZ_COUNTS[f"{response.status_code // 100}xx"] += 1
            assert response.status_code < 500, (
                f"GET {url}?{parameter}={value[:12]}...: {response.status_code}"
            )


KEYED = sorted(path for path in SCHEMA["paths"] if "{" in path)


def test_huge_numbers_as_each_path_parameter_are_never_a_server_error(personas):
    client = APIClient()
    client.force_authenticate(personas.cluster_admin)
    for path in KEYED:
        for value in (LONG, BIG, str(2**63)):
            url = re.sub(r"\{[^}]+\}", value, path)
            response = client.get(url)
            FUZZ_COUNTS["hostile API requests"] += 1
            assert response.status_code < 500, f"GET {path} with {value[:12]}...: {response.status_code}"


# --- The console's forms ---------------------------------------------------------------------------
# (persona, page): every page with a POST form, as the persona who may use it.
FORM_PAGES = [
    ("cluster_admin", "/console/teams/new/"),
    ("cluster_admin", "/console/teams/team-a/"),
    ("cluster_admin", "/console/priority-classes/"),
    ("cluster_admin", "/console/priority-classes/{priority_class}/"),
    ("cluster_admin", "/console/policy/"),
    ("cluster_admin", "/console/nodes/"),
    ("cluster_admin", "/console/nodes/{node}/edit/"),
    ("cluster_admin", "/console/instance-types/"),
    ("cluster_admin", "/console/instance-types/{instance_type}/"),
    ("cluster_admin", "/console/import/"),
    ("cluster_admin", "/whatif/"),
    ("cluster_admin", "/whatif/drafts/{draft}/"),
    ("cluster_admin", "/whatif/drafts/{draft}/teams/team-b/"),
    ("cluster_admin", "/reports/"),
    ("cluster_admin", "/reports/settings/"),
    ("member", "/teams/team-a/submit/"),
    ("member", "/reports/settings/"),
    ("team_admin", "/teams/team-a/members/"),
]
MANAGEMENT = re.compile(r"-(TOTAL|INITIAL|MIN_NUM|MAX_NUM)_FORMS$")
# Counts that are not the served rows (personas have one instance type: one quota row).
COUNTS = ["0", "-1", "2", "1001", LONG, ""]
JSON_TEXTS = [DEEP_ARRAYS, DEEP_OBJECTS, '{"a": ' + LONG + "}"]
TEXTAREA_RE = re.compile(r'<textarea\b[^>]*\bname="([^"]+)"', re.I)
FILE_RE = re.compile(r'<input\b[^>]*\btype="file"[^>]*\bname="([^"]+)"', re.I)


def _form_cases(html: str, form: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """(what, body, must be refused) for one form: its served values with one field made
    hostile at a time. A row count that is not the served one must be refused (no redirect)."""
    served = {name: options[0] if options else "" for name, options in form["fields"].items()}
    if form["buttons"]:
        served.update([form["buttons"][0]])
    textareas = set(TEXTAREA_RE.findall(html))
    files = set(FILE_RE.findall(html))
    for name in form["fields"]:
        if MANAGEMENT.search(name):
            values = COUNTS
        elif name in files:
            for text in JSON_TEXTS:
                upload = SimpleUploadedFile("hostile.json", text.encode(), content_type="application/json")
                yield f"{name}: a file of {text[:12]!r}...", {**served, name: upload}, False
            continue
        elif name in textareas:
            values = [LONG, *JSON_TEXTS]
        else:
            values = [LONG, BIG]
        refused = name.endswith(("-TOTAL_FORMS", "-INITIAL_FORMS"))
        for value in values:
            yield f"{name}={value[:12]!r}... ({len(value)} characters)", {**served, name: value}, refused


@pytest.fixture
def draft(personas: Any) -> Any:
    from allocations.models import PolicyDraft

    client = Client()
    client.force_login(personas.cluster_admin)
    client.post("/whatif/", {"draft-name": "hostile"})
    return PolicyDraft.objects.get(name="hostile")


@pytest.mark.parametrize(("persona", "page"), FORM_PAGES, ids=[f"{p} {page}" for p, page in FORM_PAGES])
def test_hostile_values_in_each_form_field_are_never_a_server_error(personas, draft, persona, page):
    from allocations.models import Node, PriorityClass

    client = Client()
    client.force_login(getattr(personas, persona))
    path = page.format(
        priority_class=PriorityClass.objects.order_by("weight").first().pk,
        node=Node.objects.order_by("pk").first().pk,
        instance_type=personas.instance_type.pk,
        draft=draft.pk,
    )
    response = client.get(path)
    assert response.status_code == 200, path
    html = response.content.decode()
    forms = [form for form in page_forms(html, "post") if form["fields"]]
    assert forms, f"no form with fields on {path}"
    for form in forms:
        action = form["action"] or path
        for what, body, must_be_refused in _form_cases(html, form):
            with transaction.atomic():
                try:
                    response = client.post(action, body)
                except Exception as exc:  # the test client re-raises a view's exception
                    raise AssertionError(f"POST {action} with {what} raised {exc!r}") from exc
                finally:
                    transaction.set_rollback(True)
            FUZZ_COUNTS["hostile form posts"] += 1
            FUZZ_COUNTS[f"{response.status_code // 100}xx"] += 1
            assert response.status_code < 500, f"POST {action} with {what}: {response.status_code}"
            if must_be_refused:
                assert response.status_code in (200, 400), f"POST {action} with {what} was accepted"


def test_the_form_cases_cover_the_management_form_and_json_fields():
    html = (
        '<form method="post"><input type="hidden" name="quota-TOTAL_FORMS" value="1">'
        '<textarea name="document"></textarea><input type="file" name="file">'
        '<input type="number" name="gpus" value="1"></form>'
    )
    [form] = page_forms(html, "post")
    cases = [what for what, _, _ in _form_cases(html, form)]
    assert sum(what.startswith("quota-TOTAL_FORMS=") for what in cases) == len(COUNTS)
    assert sum(what.startswith("document=") for what in cases) == 1 + len(JSON_TEXTS)
    assert sum(what.startswith("file: ") for what in cases) == len(JSON_TEXTS)
    assert sum(what.startswith("gpus=") for what in cases) == 2


# --- The pages' filters (GET forms) ------------------------------------------------------------
FILTER_VALUES = [LONG, BIG, "9999-12-31", "0001-01-01", "9999-W52"]


@pytest.mark.parametrize(("persona", "page"), GET_PAGES, ids=[f"{p} {page}" for p, page in GET_PAGES])
def test_hostile_values_in_each_filter_field_are_never_a_server_error(personas, persona, page):
    client = Client()
    client.force_login(getattr(personas, persona))
    fields = sorted(
        {name for form in page_forms(client.get(page).content.decode(), "get") for name in form["fields"]}
    )
    assert fields, f"no filter form on {page}"
    for name in fields:
        for value in FILTER_VALUES:
            response = client.get(page, {name: value})
            FUZZ_COUNTS["hostile filter requests"] += 1
            FUZZ_COUNTS[f"{response.status_code // 100}xx"] += 1
            assert response.status_code in (200, 400), (
                f"GET {page}?{name}={value[:12]}: {response.status_code}"
            )


# --- Report URLs -----------------------------------------------------------------------------------
WEEKS = ["9999-W52", "0001-W01", "0001-W07", "0000-W01", "2026-W54"]
REPORT_READERS = ["cluster_admin", "team_admin", "member", "viewer", "other_member"]


@pytest.mark.parametrize("week", WEEKS)
@pytest.mark.parametrize("time_zone", ["UTC", "Europe/Berlin"])
def test_report_urls_with_a_week_outside_the_calendar_are_never_a_server_error(
    personas, settings, week, time_zone
):
    from allocations.models import Cluster

    settings.REPORT_CHART_BROWSER = "off"  # the week is refused before any chart is drawn
    Cluster.objects.filter(pk=1).update(time_zone=time_zone)
    for persona in REPORT_READERS:
        client = Client()
        client.force_login(getattr(personas, persona))
        for url in (
            f"/reports/{week}/cluster/",
            f"/reports/{week}/teams/team-a/",
            f"/reports/{week}/teams/team-b/",
        ):
            response = client.get(url)
            FUZZ_COUNTS["hostile report requests"] += 1
            assert response.status_code in (400, 403, 404), f"GET {url} as {persona}: {response.status_code}"
    client = Client()
    client.force_login(personas.cluster_admin)
    response = client.post("/reports/send/", {"week": week, "report": "all"})
    FUZZ_COUNTS["hostile report requests"] += 1
    assert response.status_code == 400, f"POST /reports/send/ week={week}: {response.status_code}"
    assert f"week: {week!r}" in unescape(response.content.decode())
