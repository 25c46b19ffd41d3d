"""In a real browser: a cluster administrator downloads the HyperPod export, changes a quota,
pastes it into the import page, reviews the preview and applies it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from allocations.models import AuditEntry, TeamQuota
from tests.conftest import TIMEOUT_MS

pytestmark = [pytest.mark.e2e]


@pytest.fixture
def browser_page(live_server: Any, browser: Any) -> Iterator[Any]:
    """A page whose relative URLs go to the live server, and which accepts downloads."""
    context = browser.new_context(base_url=live_server.url, accept_downloads=True)
    context.set_default_timeout(TIMEOUT_MS)
    yield context.new_page()
    context.close()


def log_in(page: Any, live_server: Any, user: Any) -> None:
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    page.context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": live_server.url}])


def test_export_edit_import_preview_apply(
    personas: Any, live_server: Any, browser_page: Any, transactional_db: None
) -> None:
    page = browser_page
    log_in(page, live_server, personas.cluster_admin)

    # 1. The export page shows what HyperPod cannot express, and downloads the bundle.
    page.goto("/console/export/")
    assert "ClusterArn is the placeholder" in page.locator("#hyperpod-warnings").inner_text()
    with page.expect_download() as download_info:
        page.click("#download-hyperpod")
    download = download_info.value
    assert download.suggested_filename == "gpugov-hyperpod.json"
    bundle = json.loads(Path(download.path()).read_text())

    # 2. Team-a's quota goes from 8 to 16 GPUs; pasted into the import page and previewed.
    bundle["ComputeQuotas"][0]["ComputeQuotaConfig"]["ComputeQuotaResources"][0]["Accelerators"] = 16
    page.goto("/console/import/")
    page.fill("textarea[name=document]", json.dumps(bundle, indent=2))
    page.click("#preview")
    preview = page.locator("#import-preview")
    assert "1 change(s)" in preview.inner_text()
    row = preview.locator("tr.change-update")
    assert [cell.strip() for cell in row.locator("td").all_inner_texts()] == [
        "update",
        "team quota",
        "team-a / ml.p5.48xlarge",
        "quota",
        "8",
        "16",
    ]
    assert TeamQuota.objects.get(team=personas.team).quota == 8  # the preview wrote nothing

    # 3. Apply: the change is made and audited under the administrator's name.
    page.click("#apply")
    assert "Policy imported: 1 change(s) applied." in page.locator(".messages").inner_text()
    assert TeamQuota.objects.get(team=personas.team).quota == 16
    assert AuditEntry.objects.filter(actor=personas.cluster_admin, field="quota", new_value="16").exists()

    # 4. A bad value is refused with its path and nothing changes.
    bundle["ComputeQuotas"][0]["ComputeQuotaConfig"]["ResourceSharingConfig"]["Strategy"] = "Borrow"
    page.fill("textarea[name=document]", json.dumps(bundle))
    page.click("#preview")
    assert (
        "ComputeQuotas[0].ComputeQuotaConfig.ResourceSharingConfig.Strategy: 'Borrow' is not one of Lend, "
        "DontLend, LendAndBorrow" in page.locator("#import-problems").inner_text()
    )
