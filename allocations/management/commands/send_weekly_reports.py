"""``manage.py send_weekly_reports [--week 2026-W47] [--dry-run] [--team NAME]``: send a week's
reports now (default: the last complete week in the cluster's time zone). Recipients who
already had that week's report are skipped, so running it twice sends once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from allocations.models import Team
from allocations.reports.figures import TREND_WEEKS
from allocations.reports.services import cluster_time_zone, weekly_reports_send
from allocations.reports.weeks import Week


class Command(BaseCommand):
    help = "Send the weekly utilization reports of a week (once per recipient)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--week", help="ISO week, e.g. 2026-W47 (default: the last complete week)")
        parser.add_argument("--dry-run", action="store_true", help="List who would get what; send nothing")
        parser.add_argument(
            "--team", action="append", help="Only this team's report (repeatable); no cluster report"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tz = cluster_time_zone()
        now = timezone.now()
        try:
            week = (
                Week.parse(options["week"], tz, field="--week", weeks_before=TREND_WEEKS - 1)
                if options["week"]
                else Week.last_complete(now, tz)
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if week.end > now:
            raise CommandError(f"--week: {week.label!r} has not ended yet")
        teams = options["team"]
        if teams:
            known = set(Team.objects.filter(name__in=teams).values_list("name", flat=True))
            for name in teams:
                if name not in known:
                    raise CommandError(f"--team: no team is named {name!r}")
        result = weekly_reports_send(
            week=week, teams=teams, cluster=not teams, dry_run=options["dry_run"], now=now
        )
        for line in result.planned:
            self.stdout.write(f"would send {line}")
        for line in result.sent:
            self.stdout.write(f"sent {line}")
        for line in result.already_sent:
            self.stdout.write(f"already sent {line}")
        for line in result.failed:
            self.stderr.write(f"FAILED {line}")
        self.stdout.write(
            str(result) + ("" if result.images or result.planned or not result.sent else " (no images)")
        )
        if result.failed:
            raise CommandError(f"{len(result.failed)} report(s) could not be sent")
