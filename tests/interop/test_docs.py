"""docs/metrics.md and docs/interop.md: their JSON and YAML blocks parse, and the metric names
they mention are the ones /metrics serves."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from django.urls import reverse

from tests.conftest import REPO

BLOCK = re.compile(r"```(json|yaml)\n(.*?)```", re.S)


def blocks(name):
    return BLOCK.findall((REPO / "docs" / name).read_text())


@pytest.mark.parametrize("name", ["metrics.md", "interop.md"])
def test_every_json_and_yaml_block_parses(name):
    found = blocks(name)
    assert found
    for kind, text in found:
        if kind == "json":
            json.loads(text)
        else:
            yaml.safe_load(text)


def test_the_grafana_panel_and_scrape_config_use_served_metrics(client, personas, settings):
    settings.METRICS_TOKEN = "doc-token"
    served = client.get(
        reverse("allocations:metrics"), HTTP_AUTHORIZATION="Bearer doc-token"
    ).content.decode()
    served_names = set(re.findall(r"^# TYPE (\w+) ", served, re.M))
    served_names |= {f"{n}_total" for n in served_names}
    documented = set(re.findall(r"\bgpugov_[a-z_]+\b", (REPO / "docs" / "metrics.md").read_text()))
    documented.discard("gpugov_team")  # a prefix in prose
    assert documented <= served_names | {
        "gpugov_last_cycle_duration_seconds",
        "gpugov_last_cycle_ok",
        "gpugov_last_cycle_finished_timestamp_seconds",
    }
    panel = next(json.loads(text) for kind, text in blocks("metrics.md") if kind == "json")
    assert "gpugov_team_borrowed_gpus" in panel["targets"][0]["expr"]
    (scrape,) = next(yaml.safe_load(t) for k, t in blocks("metrics.md") if k == "yaml")["scrape_configs"]
    assert scrape["metrics_path"] == reverse("allocations:metrics")
    assert scrape["authorization"]["type"] == "Bearer"
