"""Migration 0023_resources keeps every existing row meaning what it meant: instance types,
quotas and jobs written before it count GPUs alone (docs/resources.md 1 and 9)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from allocations import engine
from allocations.selectors.snapshot import build_snapshot

BEFORE = [("allocations", "0022_sagemaker_api")]


@pytest.mark.django_db(transaction=True)
def test_rows_written_before_the_migration_count_gpus_alone():
    executor = MigrationExecutor(connection)
    after = executor.loader.graph.leaf_nodes("allocations")
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    it = old.get_model("allocations", "InstanceType").objects.create(name="ml.p5.48xlarge", gpus_per_node=8)
    team = old.get_model("allocations", "Team").objects.create(name="vision")
    old.get_model("allocations", "TeamQuota").objects.create(team=team, instance_type=it, quota=8)
    old.get_model("allocations", "Job").objects.create(
        team=team, instance_type=it, gpus=2, name="train", submitted_at=timezone.now(), state="pending"
    )
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(after)

    snapshot = build_snapshot(timezone.now())
    assert snapshot.instance_types == (engine.InstanceType("ml.p5.48xlarge", 8),)
    (vision,) = snapshot.teams
    assert vision.quotas["ml.p5.48xlarge"] == engine.Quota(quota=8)
    (job,) = snapshot.jobs
    assert (job.gpus, job.vcpus, job.memory_gib, job.partitions) == (2, None, None, ())
