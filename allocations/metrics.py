"""Prometheus metrics of the cluster, read from the database at each scrape.

A fresh ``CollectorRegistry`` per scrape holds one custom collector, so every figure is the
database's state at that moment (no process-local counters that differ between web workers).
The collector reads in a constant number of queries, whatever the number of teams or jobs:
the allocation loop's snapshot (``build_snapshot``) and its accounting (POLICY.md section 2),
plus one aggregate query each for preemptions, the last cycle and the backend's health.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from allocations.choices import JobEventKind
from allocations.engine.accounting import account_snapshot
from allocations.models import Cluster, CycleRun, JobEvent
from allocations.selectors.snapshot import build_snapshot

TEAM_LABELS = ["team", "instance_type"]
TEAM_GAUGES = (
    # (metric name, help, TeamUsage attribute)
    ("gpugov_team_quota_gpus", "Guaranteed GPUs of the team's quota", "quota"),
    ("gpugov_team_used_gpus", "GPUs of the team's running jobs", "used"),
    ("gpugov_team_borrowed_gpus", "GPUs the team uses above its quota", "borrowed"),
    ("gpugov_team_lent_gpus", "GPUs of the team's unused quota that other teams use", "lent"),
    ("gpugov_team_idle_quota_gpus", "GPUs of the team's quota that nobody uses", "idle_quota"),
    ("gpugov_team_pending_gpus", "GPUs asked for by the team's pending jobs", "pending_gpus"),
    ("gpugov_team_pending_jobs", "The team's pending jobs", "pending_jobs"),
)
TYPE_GAUGES = (
    ("gpugov_capacity_gpus", "Ready GPUs of the instance type", "capacity"),
    ("gpugov_allocated_gpus", "GPUs of running jobs on the instance type", "allocated"),
    ("gpugov_unallocated_gpus", "Ready GPUs in no team's quota", "unallocated"),
)


class ClusterCollector(Collector):
    """Every gpugov metric, computed from the database when Prometheus scrapes."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        # 1. Quota, usage, borrowing, lending and pending work from the loop's own snapshot.
        accounting = account_snapshot(build_snapshot(now))
        for name, help_text, attribute in TEAM_GAUGES:
            gauge = GaugeMetricFamily(name, help_text, labels=TEAM_LABELS)
            for row in accounting.teams:
                gauge.add_metric([row.team, row.instance_type], float(getattr(row, attribute)))
            yield gauge
        for name, help_text, attribute in TYPE_GAUGES:
            gauge = GaugeMetricFamily(name, help_text, labels=["instance_type"])
            for type_row in accounting.instance_types:
                gauge.add_metric([type_row.instance_type], float(getattr(type_row, attribute)))
            yield gauge

        # 2. Preemptions by reason (POLICY.md section 4), from the append-only job events.
        preemptions = CounterMetricFamily(
            "gpugov_preemptions", "Jobs preempted, by the reason recorded", labels=["reason"]
        )
        by_reason = (
            JobEvent.objects.filter(kind=JobEventKind.PREEMPTED)
            .values("reason")
            .annotate(n=Count("id"))
            .order_by("reason")
        )
        for row in by_reason:
            preemptions.add_metric([row["reason"] or "unknown"], float(row["n"]))
        yield preemptions

        # 3. The last finished allocation cycle.
        cycle = CycleRun.objects.filter(finished_at__isnull=False).order_by("-finished_at", "-id").first()
        duration = GaugeMetricFamily(
            "gpugov_last_cycle_duration_seconds", "Wall-clock seconds of the last finished allocation cycle"
        )
        finished = GaugeMetricFamily(
            "gpugov_last_cycle_finished_timestamp_seconds",
            "When the last allocation cycle finished (Unix time)",
        )
        ok = GaugeMetricFamily("gpugov_last_cycle_ok", "1 when the last allocation cycle succeeded")
        if cycle is not None and cycle.finished_at is not None:
            duration.add_metric([], (cycle.finished_at - cycle.started_at).total_seconds())
            finished.add_metric([], cycle.finished_at.timestamp())
            ok.add_metric([], 1.0 if cycle.ok else 0.0)
        yield duration
        yield finished
        yield ok

        # 4. The backend's health as the loop last saw it (no cluster yet: nothing to report).
        healthy = GaugeMetricFamily(
            "gpugov_backend_healthy", "1 when the cluster backend answers", labels=["backend"]
        )
        cluster = Cluster.objects.filter(pk=1).only("backend_kind", "backend_healthy").first()
        if cluster is not None:
            healthy.add_metric([cluster.backend_kind], 1.0 if cluster.backend_healthy else 0.0)
        yield healthy


def exposition() -> bytes:
    """The metrics in Prometheus's text format, from a registry built for this scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector())
    return generate_latest(registry)
