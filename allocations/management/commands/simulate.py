"""``manage.py simulate FILE [--json OUT|-] [--until T] [--keep-unfit] [--strict] [--cycle-interval S] [--check]``.

Replays a scenario (../shared/spec/SCENARIO.md) through the allocation engine on a simulated
clock. It needs no database and no broker: the work is done by ``allocations.simulation``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from allocations.simulation import ScenarioError, SimulationError
from allocations.simulation.command_line import ExpectationsFailed, add_arguments, simulate


class _Plain:
    """A command's output stream written as is: no colour, no newline added (the progress bar
    redraws one line with carriage returns)."""

    def __init__(self, wrapper: OutputWrapper) -> None:
        self.wrapper = wrapper

    def write(self, text: str) -> int:
        self.wrapper.write(text, style_func=lambda s: s, ending="")
        return len(text)

    def flush(self) -> None:
        self.wrapper.flush()

    def isatty(self) -> bool:
        return self.wrapper.isatty()


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
                cycle_interval=options["cycle_interval"],
                progress=not options["no_progress"],
                check=options["check"],
                stdout=_Plain(self.stdout),  # type: ignore[arg-type]
                stderr=_Plain(self.stderr),  # type: ignore[arg-type]
            )
        except ScenarioError as exc:
            raise CommandError(f"{options['file']}: nothing simulated:\n{exc}") from exc
        except ExpectationsFailed as exc:
            raise CommandError(f"{options['file']}: {exc}") from exc
        except SimulationError as exc:
            raise CommandError(f"the simulation stopped: {exc}") from exc
