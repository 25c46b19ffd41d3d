"""Export and import pages: cluster administrators only; preview, apply, refusals change nothing."""

from __future__ import annotations

import json

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from allocations.interop import hyperpod
from allocations.models import AuditEntry, ClusterPolicy, PriorityClass, Team, TeamQuota
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def login(client, user):
    assert client.login(username=user.username, password=PASSWORD)
    return client


@pytest.mark.parametrize("persona", ["team_admin", "member", "viewer", "other_member", "outsider"])
@pytest.mark.parametrize("page", ["allocations:export", "allocations:import"])
def test_pages_are_refused_to_everyone_but_cluster_admins(client, personas, persona, page):
    login(client, getattr(personas, persona))
    assert client.get(reverse(page)).status_code == 403
    assert client.get(reverse("allocations:export"), {"download": "hyperpod"}).status_code == 403
    text = hyperpod.export_policy().json().replace('"FairShare": "Enabled"', '"FairShare": "Disabled"')
    before = AuditEntry.objects.count()
    response = client.post(reverse("allocations:import"), {"document": text, "action": "apply"})
    assert response.status_code == 403
    assert ClusterPolicy.objects.get().idle_allocation == "fair-share"
    assert AuditEntry.objects.count() == before


def test_anonymous_users_are_sent_to_log_in(client, personas):
    for page in ("allocations:export", "allocations:import"):
        response = client.get(reverse(page))
        assert response.status_code == 302 and "/login/" in response["Location"]


def test_export_page_shows_warnings_and_offers_each_download(client, personas):
    TeamQuota.objects.filter(team=personas.team).update(lend_limit=4)
    login(client, personas.cluster_admin)
    page = client.get(reverse("allocations:export")).content.decode()
    assert "team-a / ml.p5.48xlarge: lend limit 4 GPUs cannot be expressed" in page
    assert "ClusterArn is the placeholder" in page
    assert 'id="hyperpod-problems"' not in page

    response = client.get(reverse("allocations:export"), {"download": "hyperpod"})
    assert response["Content-Disposition"] == 'attachment; filename="gpugov-hyperpod.json"'
    bundle = json.loads(response.content)
    assert [q["ComputeQuotaTarget"]["TeamName"] for q in bundle["ComputeQuotas"]] == ["team-a", "team-b"]

    response = client.get(reverse("allocations:export"), {"download": "kueue-yaml"})
    kinds = [m["kind"] for m in yaml.safe_load_all(response.content)]
    assert kinds.count("ClusterQueue") == 2 and kinds.count("WorkloadPriorityClass") == 4
    response = client.get(reverse("allocations:export"), {"download": "kueue-json"})
    assert json.loads(response.content)["kind"] == "List"


def test_an_unknown_download_is_a_400_naming_the_value(client, personas):
    login(client, personas.cluster_admin)
    response = client.get(reverse("allocations:export"), {"download": "slurm"})
    assert response.status_code == 400
    assert "download: 'slurm' is not one of hyperpod, kueue-yaml, kueue-json" in response.content.decode()


def _changed_bundle() -> str:
    bundle = hyperpod.export_policy().bundle
    bundle["ComputeQuotas"][0]["ComputeQuotaConfig"]["ComputeQuotaResources"][0]["Accelerators"] = 12
    bundle["ClusterSchedulerConfig"]["SchedulerConfig"]["PriorityClasses"].append(
        {"Name": "batch", "Weight": 1}
    )
    return json.dumps(bundle)


def test_import_previews_then_applies_and_audits(client, personas):
    login(client, personas.cluster_admin)
    text = _changed_bundle()
    response = client.post(reverse("allocations:import"), {"document": text, "action": "preview"})
    page = response.content.decode()
    assert response.status_code == 200
    assert "team-a / ml.p5.48xlarge" in page and 'class="change-update"' in page
    assert 'class="change-create"' in page and "batch" in page
    # Nothing is written by the preview.
    assert TeamQuota.objects.get(team=personas.team).quota == 8
    assert not PriorityClass.objects.filter(name="batch").exists()

    digest = response.context["digest"]
    response = client.post(
        reverse("allocations:import"), {"document": text, "action": "apply", "digest": digest}
    )
    assert response.status_code == 302
    assert TeamQuota.objects.get(team=personas.team).quota == 12
    assert PriorityClass.objects.filter(name="batch", weight=1).exists()
    entry = AuditEntry.objects.get(field="quota", new_value="12")
    assert (entry.actor, entry.old_value) == (personas.cluster_admin, "8")
    page = client.get(response["Location"]).content.decode()
    assert "Policy imported: 2 change(s) applied." in page


def test_an_uploaded_file_is_previewed_like_pasted_text(client, personas):
    login(client, personas.cluster_admin)
    upload = SimpleUploadedFile("policy.json", _changed_bundle().encode(), content_type="application/json")
    response = client.post(reverse("allocations:import"), {"file": upload, "action": "preview"})
    assert len(response.context["changes"]) == 2


def test_apply_with_a_stale_preview_shows_the_new_preview_and_changes_nothing(client, personas):
    login(client, personas.cluster_admin)
    text = _changed_bundle()
    digest = client.post(reverse("allocations:import"), {"document": text}).context["digest"]
    Team.objects.filter(pk=personas.team.pk).update(fair_share_weight=9)  # someone else's change
    response = client.post(
        reverse("allocations:import"), {"document": text, "action": "apply", "digest": digest}
    )
    assert response.status_code == 200 and response.context["stale"]
    assert TeamQuota.objects.get(team=personas.team).quota == 8


@pytest.mark.parametrize(
    ("post", "message"),
    [
        (
            {"document": "{not json"},
            "(document): is not valid JSON: Expecting property name enclosed in double quotes at line 1, column 2",
        ),
        (
            {"document": json.dumps({"ComputeQuotas": [{"ComputeQuotaTarget": {"TeamName": "team-a"}}]})},
            "ComputeQuotas[0].Name: is required",
        ),
        ({"document": "   "}, "Paste the exported JSON or choose a file to upload."),
        ({"file": SimpleUploadedFile("p.json", b"\xff\xfe{")}, "p.json is not UTF-8 text (byte 0)."),
    ],
    ids=["not-json", "missing-member", "empty", "not-utf8"],
)
def test_bad_input_is_shown_with_its_path_and_changes_nothing(client, personas, post, message):
    login(client, personas.cluster_admin)
    before = AuditEntry.objects.count()
    response = client.post(reverse("allocations:import"), {**post, "action": "apply", "digest": "x"})
    assert response.status_code == 200
    assert message in response.content.decode().replace("&#x27;", "'").replace("&quot;", '"')
    assert AuditEntry.objects.count() == before
    assert TeamQuota.objects.get(team=personas.team).quota == 8


def test_the_import_page_starts_with_the_form_only(client, personas):
    login(client, personas.cluster_admin)
    page = client.get(reverse("allocations:import")).content.decode()
    assert 'id="import-form"' in page
    assert 'id="import-preview"' not in page and 'id="import-problems"' not in page
