"""Documents built to break the parser: an integer of 5,001 digits and a document nested 1,000
levels deep, in a HyperPod import and in the console's backend settings (JSON too). Each is
refused with the field and its value, shortened, rather than Python's ValueError (``int()``
reads at most 4,300 digits from a string) or RecursionError answering 500."""

from __future__ import annotations

import html
import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from allocations.forms.policy import ClusterForm
from allocations.interop import hyperpod
from allocations.models import AuditEntry, Cluster, TeamQuota
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

LONG = "9" * 5001
DEEP = "[" * 1000 + "]" * 1000
ACCELERATORS = "ComputeQuotas[0].ComputeQuotaConfig.ComputeQuotaResources[0].Accelerators"


def bundle_with_long_accelerators() -> str:
    """The export of personas' policy with team-a's GPUs replaced by ``LONG``."""
    bundle = hyperpod.export_policy().bundle
    bundle["ComputeQuotas"][0]["ComputeQuotaConfig"]["ComputeQuotaResources"][0]["Accelerators"] = 424242
    return json.dumps(bundle).replace("424242", LONG)


def page_text(response) -> str:
    return html.unescape(response.content.decode())


def test_a_number_too_long_for_python_is_refused_at_its_path(personas):
    with pytest.raises(hyperpod.ImportRefused) as refused:
        hyperpod.parse(bundle_with_long_accelerators())
    [problem] = refused.value.problems
    assert problem.path == ACCELERATORS
    assert problem.message.startswith("a number of 5001 digits (999999999999999999999999...)")
    assert len(problem.message) < 120


def test_a_document_nested_too_deeply_is_refused(personas):
    with pytest.raises(hyperpod.ImportRefused) as refused:
        hyperpod.parse('{"ComputeQuotas": ' + DEEP + "}")
    assert "nested more than 64 levels deep" in str(refused.value)


@pytest.mark.parametrize("how", ["pasted", "uploaded"])
def test_the_import_page_shows_a_long_number_with_its_path_and_changes_nothing(client, personas, how):
    assert client.login(username=personas.cluster_admin.username, password=PASSWORD)
    text = bundle_with_long_accelerators()
    post = (
        {"document": text}
        if how == "pasted"
        else {"file": SimpleUploadedFile("long.json", text.encode(), content_type="application/json")}
    )
    response = client.post(reverse("allocations:import"), {**post, "action": "apply", "digest": "x"})
    assert response.status_code == 200
    assert f"{ACCELERATORS}: a number of 5001 digits (999999999999999999999999...)" in page_text(response)
    assert TeamQuota.objects.get(team=personas.team).quota == 8
    assert not AuditEntry.objects.exists()


def test_the_import_page_refuses_a_deeply_nested_document(client, personas):
    assert client.login(username=personas.cluster_admin.username, password=PASSWORD)
    response = client.post(reverse("allocations:import"), {"document": DEEP})
    assert response.status_code == 200
    assert "(document): is not valid JSON: nested more than 64 levels deep" in page_text(response)


@pytest.mark.parametrize(
    ("settings_text", "message"),
    [
        (DEEP, "Backend settings must be valid JSON: nested more than 64 levels deep"),
        ('{"speedup": ' + LONG + "}", "Backend settings must be valid JSON: a number of 5001 digits (9999"),
        ('{"speedup": NaN}', "Backend settings must be valid JSON: Out of range float values"),
    ],
    ids=["deep", "long-number", "nan"],
)
def test_backend_settings_that_break_the_parser_are_a_field_error(personas, settings_text, message):
    cluster = Cluster.objects.get()
    data = {"name": cluster.name, "backend_kind": cluster.backend_kind, "time_zone": "UTC"}
    form = ClusterForm({**data, "backend_settings": settings_text}, instance=cluster)
    assert not form.is_valid()
    [error] = form.errors["backend_settings"]
    assert error.startswith(message) and len(error) < 200


def test_a_quota_too_long_for_python_is_a_field_error_with_the_value_shortened(client, personas):
    """Django's IntegerField refuses it; the message shows its start, not 5,001 digits."""
    from tests.views.test_formset_counts import served_post

    assert client.login(username=personas.cluster_admin.username, password=PASSWORD)
    url = reverse("allocations:team_detail", kwargs={"name": "team-a"})
    response = client.post(url, served_post(client, url, **{"quota-0-quota": LONG}))
    assert response.status_code == 200
    page = page_text(response)
    assert re.search(r"Quota must be a whole number of GPUs; got '9{20,40}\.\.\. \(5001 characters\)\.", page)
    assert LONG not in page.replace(f'value="{LONG}"', "")
