"""build_snapshot: the database as the engine's frozen input (POLICY.md section 1)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from allocations import engine
from allocations.models import ClusterPolicy, Node, TeamQuota
from allocations.selectors.snapshot import build_snapshot, job_id, job_pk
from tests import factories as f
from tests.conftest import Personas

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_quota_borrow_limit_kinds_map_to_the_engines_fields(personas: Personas) -> None:
    TeamQuota.objects.filter(team=personas.team).update(
        borrow_limit_kind="absolute", borrow_limit=3, lend_limit=5
    )
    TeamQuota.objects.filter(team=personas.other_team).update(borrow_limit_kind="unlimited")
    teams = {team.name: team for team in build_snapshot(NOW).teams}
    assert teams["team-a"].quotas["ml.p5.48xlarge"] == engine.Quota(
        quota=8, lend_limit=5, borrow_limit_percent=50, borrow_limit=3, borrow_unlimited=False
    )
    assert teams["team-b"].quotas["ml.p5.48xlarge"] == engine.Quota(quota=8, borrow_unlimited=True)
    TeamQuota.objects.filter(team=personas.team).update(borrow_limit_kind="percent", borrow_limit_percent=200)
    quota = {t.name: t for t in build_snapshot(NOW).teams}["team-a"].quotas["ml.p5.48xlarge"]
    assert (quota.borrow_limit_percent, quota.borrow_limit, quota.borrow_unlimited) == (200, None, False)


def test_team_settings_inactive_teams_and_the_policy_default(personas: Personas) -> None:
    f.make_team(
        "team-c",
        active=False,
        sharing="lend",
        fair_share_weight=0,
        reclaim="lower-priority",
        preempt_while_borrowing="never",
    )
    ClusterPolicy.objects.update(idle_allocation="first-come-first-serve", queueing="strict-fifo")
    snapshot = build_snapshot(NOW)
    teams = {team.name: team for team in snapshot.teams}
    assert teams["team-a"].preempt_while_borrowing is None  # '' = POLICY.md's default
    c = teams["team-c"]
    assert (c.active, c.sharing, c.fair_share_weight, c.reclaim, c.preempt_while_borrowing) == (
        False,
        engine.Sharing.LEND,
        0,
        engine.Reclaim.LOWER_PRIORITY,
        engine.PreemptWhileBorrowing.NEVER,
    )
    assert c.quotas == {}
    assert snapshot.policy.idle_allocation == engine.IdleAllocation.FIRST_COME_FIRST_SERVE
    assert snapshot.policy.queueing == engine.Queueing.STRICT_FIFO
    assert {(p.name, p.weight) for p in snapshot.policy.priority_classes} == {
        ("inference", 100),
        ("training", 70),
        ("fine-tuning", 50),
        ("experimentation", 10),
    }


def test_only_ready_nodes_are_ready(personas: Personas) -> None:
    draining, down = personas.nodes[0], personas.nodes[1]
    Node.objects.filter(pk=draining.pk).update(state="draining")
    extra = f.make_nodes(personas.instance_type, 1)[0]
    Node.objects.filter(pk=down.pk).update(state="down")
    nodes = {node.name: node.ready for node in build_snapshot(NOW).nodes}
    assert nodes == {draining.name: False, down.name: False, extra.name: True}


def test_running_and_pending_jobs_with_ids_seq_and_unix_times(personas: Personas) -> None:
    submitted = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
    started = datetime(2026, 11, 29, 11, 30, tzinfo=UTC)
    pending = f.make_job(personas.team, personas.instance_type, 4, submitted_at=submitted)
    running = f.make_job(
        personas.other_team,
        personas.instance_type,
        8,
        submitted_at=submitted,
        priority_class=personas.priority_classes["inference"],
        state="running",
        nodes=[[personas.nodes[0].name, 8]],
        started_at=started,
        start_seq=42,
        preemption_count=2,
        last_preempted_at=submitted,
    )
    f.make_job(personas.team, personas.instance_type, 1, state="finished")
    jobs = {job.id: job for job in build_snapshot(NOW).jobs}
    assert set(jobs) == {job_id(pending.pk), job_id(running.pk)}
    assert job_pk(job_id(running.pk)) == running.pk
    assert jobs[job_id(pending.pk)] == engine.Job(
        id=str(pending.pk),
        team="team-a",
        instance_type="ml.p5.48xlarge",
        gpus=4,
        submit_time=submitted.timestamp(),
        seq=pending.pk,
    )
    assert jobs[job_id(running.pk)] == engine.Job(
        id=str(running.pk),
        team="team-b",
        instance_type="ml.p5.48xlarge",
        gpus=8,
        submit_time=submitted.timestamp(),
        seq=running.pk,
        priority_class="inference",
        nodes=((personas.nodes[0].name, 8),),
        started_at=started.timestamp(),
        start_seq=42,
        preemptions=2,
        last_preempted_at=submitted.timestamp(),
    )


def test_minimum_runtimes_and_checkpoints_map_to_the_engines_fields(personas: Personas) -> None:
    """docs/preemption.md section 7: the policy's and each class's minimum runtime (none: the
    policy's), and each job's checkpoint interval and the progress it kept."""
    ClusterPolicy.objects.update(min_runtime_s=600)
    personas.priority_classes["inference"].min_runtime_s = 60
    personas.priority_classes["inference"].save()
    with_checkpoints = f.make_job(
        personas.team, personas.instance_type, 1, checkpoint_interval_s=1800, progress_kept_s=900.0
    )
    without = f.make_job(personas.team, personas.instance_type, 1)

    snapshot = build_snapshot(NOW)

    assert snapshot.policy.min_runtime_s == 600
    classes = {pc.name: pc.min_runtime_s for pc in snapshot.policy.priority_classes}
    assert classes["inference"] == 60 and classes["training"] is None
    jobs = {job.id: job for job in snapshot.jobs}
    assert (
        jobs[job_id(with_checkpoints.pk)].checkpoint_interval_s,
        jobs[job_id(with_checkpoints.pk)].progress_kept_s,
    ) == (
        1800,
        900,
    )
    assert (jobs[job_id(without.pk)].checkpoint_interval_s, jobs[job_id(without.pk)].progress_kept_s) == (
        None,
        0,
    )


def test_with_every_new_setting_at_its_default_the_snapshot_is_todays(personas: Personas) -> None:
    f.make_job(personas.team, personas.instance_type, 1)
    snapshot = build_snapshot(NOW)
    assert snapshot.policy.min_runtime_s == engine.ClusterPolicy().min_runtime_s
    assert all(pc.min_runtime_s is None for pc in snapshot.policy.priority_classes)
    assert all((job.checkpoint_interval_s, job.progress_kept_s) == (None, 0) for job in snapshot.jobs)
