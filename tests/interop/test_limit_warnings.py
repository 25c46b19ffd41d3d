"""The HyperPod and Kueue exports say that a team's submission limits cannot be expressed
(docs/limits.md), and say nothing of a team without limits."""

from __future__ import annotations

from allocations.interop import hyperpod, kueue
from allocations.models import Team


def _limit_research(rich_policy):
    Team.objects.filter(pk=rich_policy.research.pk).update(
        allowed_priority_classes=["training"],
        default_priority_class=rich_policy.classes["training"],
        max_gpus_per_job=16,
        max_pending_jobs_per_member=5,
        max_pending_jobs=20,
    )


WORDS = (
    "allowed priority classes training; default priority class training; at most 16 GPUs per job; "
    "at most 5 pending jobs per member; at most 20 pending jobs cannot be expressed in {} "
    "(gpugov checks them at submission)."
)


def test_hyperpod_export_warns_of_each_teams_limits(rich_policy):
    assert not [w for w in hyperpod.export_policy().warnings if "submission" in w]
    _limit_research(rich_policy)
    export = hyperpod.export_policy()
    assert [w for w in export.warnings if "submission" in w] == ["research: " + WORDS.format("HyperPod")]
    assert export.problems == []
    assert export.bundle["Warnings"] == export.warnings


def test_kueue_export_warns_of_each_teams_limits(rich_policy):
    assert not [w for w in kueue.export_manifests().warnings if "submission" in w]
    _limit_research(rich_policy)
    export = kueue.export_manifests()
    assert [w for w in export.warnings if "submission" in w] == ["research: " + WORDS.format("Kueue")]
    assert export.problems == []


def test_exports_warn_that_the_engine_holds_a_member_back(rich_policy):
    """The limit per member is the engine's (docs/limits.md): its warning says so, apart."""
    Team.objects.filter(pk=rich_policy.research.pk).update(max_running_gpus_per_member=8)
    words = (
        "research: at most 8 GPUs running per member cannot be expressed in {} "
        "(gpugov's allocation engine holds a member's jobs back at each cycle)."
    )
    assert words.format("HyperPod") in hyperpod.export_policy().warnings
    assert words.format("Kueue") in kueue.export_manifests().warnings
    assert not [w for w in kueue.export_manifests().warnings if "submission" in w]
