"""HyperPod and Kueue have no minimum runtime and choose victims without regard to
checkpoints (docs/preemption.md sections 1 to 3): an export of a policy that sets one warns,
like every other setting the formats cannot express, and exports nothing for it."""

from __future__ import annotations

import json

import pytest

from allocations.interop import hyperpod, kueue
from allocations.models import ClusterPolicy, PriorityClass


def _hyperpod_warnings() -> list[str]:
    export = hyperpod.export_policy()
    assert export.bundle["Warnings"] == export.warnings
    return export.warnings


def _kueue_warnings() -> list[str]:
    return kueue.export_manifests().warnings


EXPORTS = [("HyperPod", _hyperpod_warnings), ("Kueue", _kueue_warnings)]


@pytest.mark.parametrize(("target", "warnings_of"), EXPORTS, ids=["hyperpod", "kueue"])
def test_no_minimum_runtime_no_warning_about_it(rich_policy, target, warnings_of):
    assert not [w for w in warnings_of() if "minimum runtime" in w or "checkpoint" in w]


@pytest.mark.parametrize(("target", "warnings_of"), EXPORTS, ids=["hyperpod", "kueue"])
def test_a_minimum_runtime_is_not_exported_and_the_export_says_so(rich_policy, target, warnings_of):
    ClusterPolicy.objects.update(min_runtime_s=600)
    PriorityClass.objects.filter(name="training").update(min_runtime_s=1800)

    warnings = warnings_of()

    assert any(w.startswith("min_runtime_s is 600: ") and target in w for w in warnings), warnings
    assert any("training (1800 s)" in w and target in w for w in warnings), warnings
    assert any("checkpoint_interval_s is not exported" in w for w in warnings), warnings


def test_the_exported_objects_carry_no_minimum_runtime(rich_policy):
    ClusterPolicy.objects.update(min_runtime_s=600)
    PriorityClass.objects.filter(name="training").update(min_runtime_s=1800)
    bundle = hyperpod.export_policy()
    assert bundle.problems == []
    manifests = kueue.export_manifests()
    assert manifests.problems == []
    text = json.dumps(bundle.bundle["ClusterSchedulerConfig"]) + manifests.yaml()
    assert "600" not in text and "1800" not in text
