"""Hypothesis over every form of the site: each page's POST forms (and the GET filter forms)
are read from the page itself, then sent with random values in every field: text, huge and
negative numbers, NUL characters, other options than the offered ones, missing fields.

No answer is a 5xx (the test client re-raises a view's exception, so a crash fails here with
its traceback), and when the form comes back with errors, each error belongs to a named field
of that form (or says, in a non-field error, which fields it is about).
"""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest
from django import forms as django_forms
from django.db import transaction
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.conftest import FUZZ_COUNTS

FORM_RE = re.compile(r"<form\b([^>]*)>(.*?)</form>", re.S | re.I)
FIELD_RE = re.compile(r"<(input|select|textarea)\b([^>]*)>", re.I)
ATTR_RE = re.compile(r'([a-zA-Z_:-]+)="([^"]*)"')
OPTION_RE = re.compile(r'<option\b[^>]*value="([^"]*)"', re.I)

# Values that have broken forms elsewhere: NUL (PostgreSQL refuses it in text), numbers past
# 64 bits, floats where integers go, non-ASCII, HTML, very long text, dates out of range.
NASTY = [
    "",
    " ",
    "\x00",
    "0",
    "-1",
    "1e309",
    "NaN",
    "inf",
    "9" * 30,
    "-9223372036854775809",
    "2.5",
    "\uff11\uff12",  # full-width digits
    "team-a",
    "<script>x</script>",
    "é" * 300,
    "x" * 5000,
    "9999-12-31",
    "0000-00-00",
    "2026-02-30",
    "[]",
    '{"a": 1}',
]
VALUE = st.one_of(st.sampled_from(NASTY), st.text(max_size=40), st.integers().map(str))


def page_forms(html: str, method: str) -> list[dict[str, Any]]:
    """The forms of a page with ``method``: their action and each field's name and options."""
    found = []
    for attrs, body in FORM_RE.findall(html):
        attr = dict(ATTR_RE.findall(attrs))
        if attr.get("method", "get").lower() != method:
            continue
        fields: dict[str, list[str]] = {}
        for tag, field_attrs in FIELD_RE.findall(body):
            a = dict(ATTR_RE.findall(field_attrs))
            name = a.get("name")
            if not name or name == "csrfmiddlewaretoken" or a.get("type") in ("submit", "button"):
                continue
            options = [a["value"]] if "value" in a else []
            if tag.lower() == "select":
                select = body[body.find(field_attrs) :]
                options = OPTION_RE.findall(select[: select.find("</select>")])
            fields.setdefault(name, []).extend(unescape(o) for o in options)
        buttons = re.findall(r'<button\b[^>]*name="([^"]+)"[^>]*value="([^"]*)"', body)
        found.append({"action": unescape(attr.get("action", "")), "fields": fields, "buttons": buttons})
    return found


def bound_forms(response: Any) -> list[django_forms.BaseForm]:
    if not response.context:
        return []
    seen: list[django_forms.BaseForm] = []
    # One Context per rendered template (a ContextList) or a single one.
    contexts = response.context if isinstance(response.context, list) else [response.context]
    values = [v for context in contexts for v in context.flatten().values()]
    for value in values:
        candidates = value if isinstance(value, list | tuple) else [value]
        for form in candidates:
            if isinstance(form, django_forms.BaseForm) and form.is_bound and form not in seen:
                seen.append(form)
    return seen


def assert_errors_name_fields(response: Any, where: str) -> None:
    for form in bound_forms(response):
        for field, messages in form.errors.items():
            if field == "__all__":
                text = " ".join(messages)
                # A non-field error must say what it is about: one of the form's fields or labels.
                named = [
                    n
                    for n, f in form.fields.items()
                    if n in text or n.replace("_", " ") in text or str(f.label or "").lower() in text.lower()
                ]
                assert named or len(form.fields) <= 1, f"{where}: non-field error names no field: {messages}"
            else:
                assert field in form.fields, f"{where}: error for unknown field {field!r}: {messages}"
                assert messages


# (persona, page): the pages whose forms are fuzzed, as the persona who may use them.
POST_PAGES = [
    ("cluster_admin", "/console/teams/new/"),
    ("cluster_admin", "/console/teams/team-a/"),
    ("cluster_admin", "/console/priority-classes/"),
    ("cluster_admin", "/console/priority-classes/{priority_class}/"),
    ("cluster_admin", "/console/policy/"),
    ("cluster_admin", "/console/nodes/"),
    ("cluster_admin", "/console/nodes/{node}/edit/"),
    ("cluster_admin", "/console/instance-types/"),
    ("cluster_admin", "/console/instance-types/{instance_type}/"),
    ("cluster_admin", "/whatif/"),
    ("member", "/teams/team-a/submit/"),
    ("team_admin", "/teams/team-a/members/"),
    ("member", "/reports/settings/"),
    ("cluster_admin", "/reports/settings/"),
]
GET_PAGES = [
    ("cluster_admin", "/console/jobs/"),
    ("cluster_admin", "/console/audit/"),
    ("cluster_admin", "/dashboards/cluster/"),
    ("member", "/dashboards/teams/team-a/"),
]


def _path(template: str, personas: Any) -> str:
    from allocations.models import Node, PriorityClass

    return template.format(
        priority_class=PriorityClass.objects.order_by("weight").first().pk,
        node=Node.objects.order_by("pk").first().pk,
        instance_type=personas.instance_type.pk,
    )


FUZZ_SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
    derandomize=True,  # the same posts on every run: a CI failure is repeatable; raise the count to explore
)


@pytest.mark.slow
@pytest.mark.parametrize(("persona", "page"), POST_PAGES, ids=[p for _, p in POST_PAGES])
def test_random_form_posts_never_crash_and_errors_name_fields(personas, persona, page):
    client = Client()
    client.force_login(getattr(personas, persona))
    path = _path(page, personas)
    html = client.get(path).content.decode()
    forms = page_forms(html, "post")
    forms = [f for f in forms if f["fields"]]
    assert forms, f"no form with fields on {path}"

    @FUZZ_SETTINGS
    @given(data=st.data())
    def post_random(data: Any) -> None:
        form = data.draw(st.sampled_from(forms))
        body: dict[str, Any] = {}
        for name, options in form["fields"].items():
            choice = data.draw(st.integers(0, 3))
            if choice == 0:
                continue  # the field left out
            if choice == 1 and options:
                body[name] = data.draw(st.sampled_from(options))
            else:
                body[name] = data.draw(VALUE)
        if form["buttons"]:
            button, value = data.draw(st.sampled_from(form["buttons"]))
            body[button] = value
        action = form["action"] or path
        # Each request in a savepoint rolled back: the page stays as it was for the next one.
        with transaction.atomic():
            response = client.post(action, body)
            transaction.set_rollback(True)
        FUZZ_COUNTS["form posts"] += 1
        assert response.status_code < 500, f"POST {action} {body!r}: {response.status_code}"
        assert_errors_name_fields(response, f"POST {action} {body!r}")

    post_random()


@pytest.mark.slow
@pytest.mark.parametrize(("persona", "page"), GET_PAGES, ids=[p for _, p in GET_PAGES])
def test_random_filter_values_never_crash(personas, persona, page):
    client = Client()
    client.force_login(getattr(personas, persona))
    html = client.get(page).content.decode()
    fields: dict[str, list[str]] = {}
    for form in page_forms(html, "get"):
        fields.update(form["fields"])
    assert fields, f"no filter form on {page}"

    @FUZZ_SETTINGS
    @given(data=st.data())
    def get_random(data: Any) -> None:
        query = {name: data.draw(VALUE) for name in fields if data.draw(st.booleans())}
        response = client.get(page, query)
        FUZZ_COUNTS["filter requests"] += 1
        assert response.status_code < 500, f"GET {page} {query!r}: {response.status_code}"
        assert response.status_code in (200, 400), f"GET {page} {query!r}: {response.status_code}"

    get_random()


def test_page_forms_reads_fields_and_options():
    html = """<form method="post" action="/x/"><input type="hidden" name="csrfmiddlewaretoken" value="t">
    <input name="gpus" type="number"><select name="role"><option value="member">M</option>
    <option value="viewer" selected>V</option></select><textarea name="command"></textarea>
    <button type="submit" name="action" value="delete">Delete</button></form>"""
    [form] = page_forms(html, "post")
    assert form["action"] == "/x/"
    assert form["fields"] == {"gpus": [], "role": ["member", "viewer"], "command": []}
    assert form["buttons"] == [("action", "delete")]
