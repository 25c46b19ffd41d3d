"""The team pages' quota formset with a forged management form. With ``quota-INITIAL_FORMS=0``
or ``-1`` Django would treat the served rows as optional extras and validate an unchanged row
with empty ``cleaned_data`` (a KeyError in the view, a 500); ``quota-TOTAL_FORMS=0`` would save
a what-if draft's team without its quotas. Each is an error on the re-rendered form that names
the count and the value, and nothing is saved."""

from __future__ import annotations

import html
import importlib
import re
from pathlib import Path
from typing import Any

import pytest
from django import forms
from django.db.models import Model
from django.forms import formsets, models
from django.test import Client
from django.urls import reverse

import allocations
from allocations.models import AuditEntry, PolicyDraft, Team, TeamQuota
from tests.conftest import PASSWORD

FORGED = [
    ("quota-INITIAL_FORMS", "0"),
    ("quota-INITIAL_FORMS", "-1"),
    ("quota-TOTAL_FORMS", "0"),
    ("quota-TOTAL_FORMS", "-1"),
    ("quota-TOTAL_FORMS", "2"),
]


@pytest.fixture
def admin(personas) -> Client:
    client = Client()
    assert client.login(username=personas.cluster_admin.username, password=PASSWORD)
    return client


def served_post(client: Client, url: str, **changes: str) -> dict[str, Any]:
    """The POST of the page's team form as served: the settings and every quota row unchanged
    (an unchanged row is the one Django skipped), plus ``changes``."""
    response = client.get(url)
    assert response.status_code == 200
    quotas = response.context["quotas"]
    data: dict[str, Any] = {}
    for form in [response.context["form"], quotas.management_form, *quotas.forms]:
        for field in form:
            value = field.value()
            if isinstance(field.field, forms.MultipleChoiceField):  # as a browser: one value a choice
                data[field.html_name] = [str(v.pk if isinstance(v, Model) else v) for v in value or ()]
                continue
            if isinstance(value, bool):
                if value:
                    data[field.html_name] = "on"
                continue
            if isinstance(value, Model):
                value = value.pk
            data[field.html_name] = "" if value is None else str(value)
    return {**data, **changes}


def assert_count_error(response: Any, field: str, value: str) -> None:
    page = html.unescape(response.content.decode())
    assert f"{field} must be 1, the number of rows of this form; got '{value}'." in page


@pytest.mark.parametrize(("field", "value"), FORGED)
def test_a_forged_row_count_on_the_new_team_page_is_a_form_error(personas, admin, field, value):
    url = reverse("allocations:team_create")
    response = admin.post(
        url, served_post(admin, url, name="new-team", fair_share_weight="1", **{field: value})
    )
    assert response.status_code == 200
    assert_count_error(response, field, value)
    assert not Team.objects.filter(name="new-team").exists()
    # As served, the same form creates the team.
    response = admin.post(url, served_post(admin, url, name="new-team", fair_share_weight="1"))
    assert response.status_code == 302 and Team.objects.filter(name="new-team").exists()


@pytest.mark.parametrize(("field", "value"), FORGED)
def test_a_forged_row_count_on_a_team_page_is_a_form_error_and_saves_nothing(personas, admin, field, value):
    url = reverse("allocations:team_detail", kwargs={"name": "team-a"})
    before = list(TeamQuota.objects.filter(team=personas.team).values())
    data = served_post(admin, url, fair_share_weight="7", **{"quota-0-quota": "3", field: value})
    response = admin.post(url, data)
    assert response.status_code == 200
    assert_count_error(response, field, value)
    assert list(TeamQuota.objects.filter(team=personas.team).values()) == before
    assert Team.objects.get(pk=personas.team.pk).fair_share_weight == 1
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize(("field", "value"), FORGED)
def test_a_forged_row_count_on_a_draft_team_leaves_the_draft_as_it_was(personas, admin, field, value):
    admin.post(reverse("allocations:whatif"), {"draft-name": "probe"})
    draft = PolicyDraft.objects.get(name="probe")
    url = reverse("allocations:whatif_draft_team", kwargs={"pk": draft.pk, "name": "team-b"})
    response = admin.post(url, served_post(admin, url, **{field: value}))
    assert response.status_code == 400
    assert_count_error(response, field, value)
    assert PolicyDraft.objects.get(pk=draft.pk).body == draft.body
    team_b = next(t for t in draft.body["teams"] if t["name"] == "team-b")
    assert [q["quota"] for q in team_b["quotas"]] == [8]


def _formset_modules() -> list[str]:
    """The modules of the app whose source builds or defines a formset."""
    root = Path(allocations.__file__).parent
    names = []
    for path in sorted(root.rglob("*.py")):
        if {"engine", "migrations"} & set(path.relative_to(root).parts):
            continue
        if re.search(r"formset_factory\(|\bBase\w*FormSet\b", path.read_text(encoding="utf-8")):
            names.append(".".join(("allocations", *path.relative_to(root).with_suffix("").parts)))
    return names


DJANGOS_BASES = (formsets.BaseFormSet, models.BaseModelFormSet, models.BaseInlineFormSet)


def test_every_formset_of_the_app_takes_its_rows_from_the_page():
    """The same cause elsewhere: any formset the app defines, now or later, is a
    ServedRowsFormSet, so that no page trusts a posted row count."""
    from allocations.forms.policy import ServedRowsFormSet

    found = {}
    for name in _formset_modules():
        for attribute, value in vars(importlib.import_module(name)).items():
            if (
                isinstance(value, type)
                and issubclass(value, formsets.BaseFormSet)
                and value not in DJANGOS_BASES  # imported, not defined here
            ):
                found[f"{name}.{attribute}"] = value
    assert "allocations.forms.policy.TeamQuotaFormSet" in found
    trusting = sorted(name for name, cls in found.items() if not issubclass(cls, ServedRowsFormSet))
    assert trusting == [], f"formsets that trust the posted counts: {trusting}"
