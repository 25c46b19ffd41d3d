"""The command line shared by ``manage.py simulate`` and ``python -m allocations.simulation``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from .expect import check_expectations, describe
from .replay import Progress, replay
from .result import Result, summary, write_json
from .scenario import ScenarioError, load_scenario, read_cycle_interval


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="scenario file (YAML or JSON, SCENARIO.md)")
    parser.add_argument(
        "--json", dest="json_out", metavar="OUT", help="write the result as JSON to OUT ('-' for stdout)"
    )
    parser.add_argument("--until", type=float, metavar="T", help="stop at time T (seconds)")
    parser.add_argument(
        "--keep-unfit", action="store_true", help="keep jobs that can never fit; they end rejected"
    )
    parser.add_argument(
        "--strict", action="store_true", help="refuse a trace with unusable rows instead of skipping them"
    )
    parser.add_argument(
        "--cycle-interval",
        type=int,
        metavar="S",
        help="run cycles only every S seconds, as the loop does (0: at every happening; "
        "default: the file's options.cycle_interval, else 0)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument(
        "--check",
        action="store_true",
        help="check the file's expect: block (run until its 'until' unless --until is given), "
        "say which expectations held and exit 1 when one did not",
    )


def progress_bar(stream: TextIO) -> Progress:
    """A one-line progress bar (simulated time when the end is known, else jobs done)."""

    def show(now: float, end: float | None, done: int, total: int) -> None:
        fraction = now / end if end else (done / total if total else 1.0)
        fraction = min(1.0, max(0.0, fraction))
        filled = int(30 * fraction)
        stream.write(
            f"\r[{'#' * filled}{'.' * (30 - filled)}] {100 * fraction:5.1f}%  t={now:,.0f}s  jobs done {done:,}/{total:,}"
        )
        if fraction >= 1.0 and (end is None or now >= end):
            stream.write("\n")
        stream.flush()

    return show


def simulate(
    file: str | Path,
    *,
    json_out: str | None = None,
    until: float | None = None,
    keep_unfit: bool = False,
    strict: bool = False,
    cycle_interval: int | None = None,
    progress: bool = True,
    check: bool = False,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> Result:
    """Load, replay, print the summary (and the JSON). Raises ScenarioError for a bad file
    (nothing simulated) and SimulationError for an engine plan that cannot be applied. With
    ``check``, also prints which of the file's ``expect:`` lines held and raises
    ExpectationsFailed when one did not."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    if until is not None and until < 0:
        raise ScenarioError([f"--until: must be a number of seconds >= 0, got {until:g}"])
    if cycle_interval is not None:
        _, problem = read_cycle_interval(cycle_interval)
        if problem:
            raise ScenarioError([f"--cycle-interval: {problem}, got {cycle_interval}"])
    scenario = load_scenario(file, keep_unfit=keep_unfit, strict=strict, cycle_interval=cycle_interval)
    if scenario.trace is not None and scenario.trace.skipped:
        stderr.write(f"warning: {scenario.trace.describe()}\n")
    if check and scenario.expect is None:
        raise ScenarioError(["expect: --check needs an expect: block in the file, and it has none"])
    if check and until is None and scenario.expect is not None:
        until = scenario.expect.until
    show = progress_bar(stderr) if progress and stderr.isatty() else None
    result = replay(scenario, until=until, progress=show)
    if json_out == "-":
        write_json(result, stdout)
        stderr.write(summary(result) + "\n")
    else:
        stdout.write(summary(result) + "\n")
        if json_out:
            with Path(json_out).open("w", encoding="utf-8") as out:
                write_json(result, out)
    if check and scenario.expect is not None:
        checks = check_expectations(scenario.expect, result)
        (stderr if json_out == "-" else stdout).write(describe(checks, until) + "\n")
        failed = [c for c in checks if not c.held]
        if failed:
            raise ExpectationsFailed(len(failed), len(checks))
    return result


class ExpectationsFailed(Exception):
    """``--check``: at least one line of the file's ``expect:`` block did not hold."""

    def __init__(self, failed: int, total: int) -> None:
        super().__init__(f"{failed} of {total} expectations did not hold")
        self.failed = failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m allocations.simulation", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    from .replay import SimulationError

    try:
        simulate(
            args.file,
            json_out=args.json_out,
            until=args.until,
            keep_unfit=args.keep_unfit,
            strict=args.strict,
            cycle_interval=args.cycle_interval,
            progress=not args.no_progress,
            check=args.check,
        )
    except ExpectationsFailed as exc:
        sys.stderr.write(f"{args.file}: {exc}\n")
        return 1
    except (ScenarioError, SimulationError) as exc:
        sys.stderr.write(f"{args.file}: {exc}\n" if isinstance(exc, ScenarioError) else f"error: {exc}\n")
        return 1
    return 0
