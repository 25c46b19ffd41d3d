"""``manage.py simulate FILE [--json OUT|-] [--until T] [--keep-unfit] [--strict]``.

Replays a scenario (../shared/spec/SCENARIO.md) through the allocation engine on a simulated
clock. It needs no database and no broker: the work is done by ``allocations.simulation``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from allocations.simulation import ScenarioError, SimulationError
from allocations.simulation.command_line import add_arguments, simulate


class Command(BaseCommand):
    help = "Replay a scenario file through the allocation engine and report per team and cluster."
    requires_system_checks: list[str] = []  # no database, nothing to check
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            simulate(
                options["file"],
                json_out=options["json_out"],
                until=options["until"],
                keep_unfit=options["keep_unfit"],
                strict=options["strict"],
                progress=not options["no_progress"],
                stdout=self.stdout,  # type: ignore[arg-type]
                stderr=self.stderr,  # type: ignore[arg-type]
            )
        except ScenarioError as exc:
            raise CommandError(f"{options['file']}: nothing simulated:\n{exc}") from exc
        except SimulationError as exc:
            raise CommandError(f"the simulation stopped: {exc}") from exc
