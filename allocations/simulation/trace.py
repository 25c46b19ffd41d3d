"""``jobs_csv`` traces (SCENARIO.md): the usable rows of a CSV trace as jobs, and a report of
the unusable rows skipped by kind (or, with ``strict``, each of them as an error).

A trace has a hundred thousand rows and more, so a row that is plainly usable takes a short
way: its GPUs and its team are looked up by the text of their cells among those already seen
(each distinct value is judged once), and no dict is made per row. Any other row takes the long
way, ``judge_row``, which finds what is wrong with it and words it for the report: both ways
give the same jobs, and the long way alone decides what a skipped row is called.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from allocations.engine.cycle import gc_paused
from allocations.engine.snapshot import InstanceType, Node, Team

from .reading import Reader, ScenarioJob, default_type

# Unusable trace rows quoted per kind in the skip report.
SKIP_EXAMPLES = 3
TRACE_COLUMNS = (
    "id",
    "team",
    "gpus",
    "submit",
    "duration",
    "priority",
    "instance_type",
    "checkpoint_interval_s",
)
_NOT_IN_TEAM_NAMES = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True, slots=True)
class TraceReport:
    """What a ``jobs_csv`` trace gave: rows read, rows used, and the unusable rows skipped by
    kind, with the first few of each kind quoted (line number and value)."""

    path: str
    rows: int
    used: int
    skipped: Mapping[str, int]
    examples: Mapping[str, tuple[str, ...]]

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())

    def describe(self) -> str:
        if not self.skipped:
            return f"{self.path}: used all {self.rows} rows"
        parts = []
        for kind, count in self.skipped.items():
            parts.append(f"{count} {kind} ({'; '.join(self.examples.get(kind, ()))})")
        return f"{self.path}: used {self.used} of {self.rows} rows; skipped " + ", ".join(parts)


def team_name_from_trace(value: str) -> str:
    """A trace's team value made a team name the way a person would expect (SCENARIO.md):
    lowercased, every run of characters other than a-z, 0-9 and '-' replaced by '-'."""
    return _NOT_IN_TEAM_NAMES.sub("-", value.strip().lower()).strip("-")


def _checkpoint(text: str) -> float | bool | None:
    """A checkpoint interval cell (docs/preemption.md 2): None when empty or 0, the seconds, or
    False when it is not a number of seconds >= 0."""
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return False
    if not math.isfinite(value) or value < 0:
        return False
    return value or None


class _Rows:
    """The rows of one trace turned into jobs and skip counts."""

    def __init__(
        self,
        r: Reader,
        columns: Mapping[str, str],
        index: Mapping[str, int],
        first_seq: int,
        types: Mapping[str, InstanceType],
        nodes: Sequence[Node],
        teams: Mapping[str, Team],
        classes: set[str],
        priority_values: Mapping[object, object],
        strict: bool,
    ) -> None:
        self.r = r
        self.columns = columns
        self.index = index
        self.first_seq = first_seq
        self.types = types
        self.teams = teams
        self.classes = classes
        self.priority_values = priority_values
        self.strict = strict
        self.capacity: dict[str, int] = {}
        for node in nodes:
            self.capacity[node.instance_type] = self.capacity.get(node.instance_type, 0) + node.gpus
        self.default_type = default_type(types)
        self.rows = 0
        self.jobs: list[ScenarioJob] = []
        self.seen: set[str] = set()
        self.skipped: dict[str, int] = {}
        self.examples: dict[str, list[str]] = {}

    def skip(self, kind: str, line: int, column: str, value: str) -> None:
        self.skipped[kind] = self.skipped.get(kind, 0) + 1
        quoted = self.examples.setdefault(kind, [])
        if len(quoted) < SKIP_EXAMPLES:
            quoted.append(f"line {line}: {column}={value!r}")
        if self.strict:
            self.r.error(f"jobs_csv line {line}", f"{kind}: {column}={value!r}")

    def add(self, rows: Iterable[list[str]], first_line: int) -> None:
        """Every row of ``rows``, the first of them at line ``first_line`` of the file."""
        index = self.index
        gpus_at, submit_at, duration_at, team_at = (index[k] for k in ("gpus", "submit", "duration", "team"))
        id_at, priority_at, type_at = index.get("id"), index.get("priority"), index.get("instance_type")
        checkpoint_at = index.get("checkpoint_interval_s")
        width = max(index.values()) + 1
        # The distinct cell values judged so far: the GPUs (with the instance type) to the GPUs
        # of a usable row, else 0; the team values to a known team, else ""; the priority
        # values to a known class or None (a value not there: the long way).
        sizes: dict[tuple[str, str | None], int] = {}
        team_names: dict[str, str] = {}
        priorities: dict[str, str | None] = {}
        seen, teams, inf = self.seen, self.teams, math.inf
        line = first_line - 1
        for row in rows:
            line += 1
            self.rows += 1
            if len(row) < width:
                self.judge_row(line, row)
                continue
            instance_type = self.default_type
            if type_at is not None:
                instance_type = row[type_at].strip() or self.default_type
            shape = (row[gpus_at], instance_type)
            gpus = sizes.get(shape)
            if gpus is None:
                gpus = sizes[shape] = self._usable_gpus(row[gpus_at], instance_type)
            team = team_names.get(row[team_at])
            if team is None:
                name = team_name_from_trace(row[team_at])
                team = team_names[row[team_at]] = name if name in teams else ""
            try:
                submit = float(row[submit_at].strip())
                duration = float(row[duration_at].strip())
            except ValueError:
                self.judge_row(line, row)
                continue
            if not (gpus and team and -inf < submit < inf and 0 <= duration < inf):
                self.judge_row(line, row)
                continue
            job_id = (row[id_at].strip() if id_at is not None else "") or f"line-{line}"
            priority = None
            if priority_at is not None:
                raw_priority = row[priority_at].strip()
                if raw_priority not in priorities:
                    mapped = self._priority(raw_priority)
                    if mapped is not None and not self._known_class(mapped):
                        self.judge_row(line, row)
                        continue
                    priorities[raw_priority] = mapped if isinstance(mapped, str) else None
                priority = priorities[raw_priority]
            checkpoint = None
            if checkpoint_at is not None:
                checkpoint = _checkpoint(row[checkpoint_at])
                if checkpoint is False:
                    self.judge_row(line, row)
                    continue
            if job_id in seen:
                self.judge_row(line, row)
                continue
            assert instance_type is not None  # a usable row's type is known (``_usable_gpus``)
            self._take(
                line, job_id, team, instance_type, gpus, submit, duration, priority, checkpoint or None
            )

    def _usable_gpus(self, text: str, instance_type: str | None) -> int:
        """The GPUs of a row whose GPUs cell is ``text``, or 0 when that cell (or the instance
        type) makes the row unusable."""
        try:
            gpus = float(text.strip())
        except ValueError:
            return 0
        if not (math.isfinite(gpus) and gpus.is_integer() and gpus >= 1):
            return 0
        if (
            instance_type is None
            or instance_type not in self.types
            or gpus > self.capacity.get(instance_type, 0)
        ):
            return 0
        return int(gpus)

    def _priority(self, value: str) -> object:
        """The priority class a trace value stands for (None: no priority)."""
        priority = self.priority_values.get(value, value) if self.priority_values else value
        return priority or None

    def _known_class(self, priority: object) -> bool:
        return isinstance(priority, str) and priority in self.classes

    def judge_row(self, line: int, row: list[str]) -> None:
        """One row, judged field by field: a job, or the first thing that makes it unusable
        skipped (or refused), or nothing for a blank row."""
        if not any(c.strip() for c in row):
            return
        index, columns = self.index, self.columns
        values = {key: row[i].strip() if i < len(row) else "" for key, i in index.items()}
        try:
            gpus_f = float(values["gpus"])
            submit = float(values["submit"])
            duration: float | None = float(values["duration"])
        except ValueError:
            bad_key = next(k for k in ("gpus", "submit", "duration") if not _is_number(values[k]))
            self.skip("with a bad number", line, columns[bad_key], values[bad_key])
            return
        if not (math.isfinite(gpus_f) and math.isfinite(submit) and math.isfinite(duration or 0)):
            self.skip("with a bad number", line, columns["gpus"], values["gpus"])
            return
        if not gpus_f.is_integer():
            self.skip("with a bad number", line, columns["gpus"], values["gpus"])
            return
        gpus = int(gpus_f)
        team = team_name_from_trace(values["team"])
        instance_type = values.get("instance_type") or self.default_type
        if gpus < 1:
            self.skip("with 0 GPUs", line, columns["gpus"], values["gpus"])
        elif duration is not None and duration < 0:
            self.skip("with a negative duration", line, columns["duration"], values["duration"])
        elif team not in self.teams:
            self.skip("of an unknown team", line, columns["team"], values["team"])
        elif instance_type not in self.types:
            self.skip(
                "of an unknown instance type",
                line,
                columns.get("instance_type", "instance_type"),
                str(instance_type),
            )
        elif gpus > self.capacity.get(instance_type, 0):
            self.skip("with more GPUs than the cluster", line, columns["gpus"], values["gpus"])
        else:
            job_id = values.get("id") or f"line-{line}"
            if job_id in self.seen:
                self.skip("with a duplicate id", line, columns.get("id", "id"), job_id)
                return
            self.seen.add(job_id)
            priority = None
            if "priority" in values:
                priority = self._priority(values["priority"])
                if priority is not None and not self._known_class(priority):
                    self.skip("of an unknown priority class", line, columns["priority"], values["priority"])
                    return
            checkpoint = _checkpoint(values.get("checkpoint_interval_s", ""))
            if checkpoint is False:
                self.skip(
                    "with a bad checkpoint interval",
                    line,
                    columns["checkpoint_interval_s"],
                    values["checkpoint_interval_s"],
                )
                return
            self._take(
                line, job_id, team, instance_type, gpus, submit, duration, priority, checkpoint or None
            )  # type: ignore[arg-type]

    def _take(
        self,
        line: int,
        job_id: str,
        team: str,
        instance_type: str,
        gpus: int,
        submit: float,
        duration: float | None,
        priority: str | None,
        checkpoint: float | None = None,
    ) -> None:
        """The job of a usable row: both ways end here, so they give the same jobs."""
        self.seen.add(job_id)
        self.jobs.append(
            ScenarioJob(
                id=job_id,
                team=team,
                instance_type=instance_type,
                gpus=gpus,
                submit=submit,
                duration=duration,
                seq=self.first_seq + len(self.jobs),
                priority=priority,
                checkpoint_interval_s=checkpoint,
                path=f"jobs_csv line {line}",
            )
        )


def read_trace(
    r: Reader,
    raw: object,
    base_dir: Path,
    first_seq: int,
    types: Mapping[str, InstanceType],
    nodes: Sequence[Node],
    teams: Mapping[str, Team],
    classes: set[str],
    strict: bool,
) -> tuple[list[ScenarioJob], TraceReport | None]:
    """The usable rows of a ``jobs_csv`` trace as jobs, and what was skipped (or, with
    ``strict``, every unusable row as an error)."""
    spec = r.mapping(raw, "jobs_csv", ("path", "columns", "priority_values"), required=("path", "columns"))
    if spec is None or not {"path", "columns"} <= spec.keys():
        return [], None
    rel = r.text(spec["path"], "jobs_csv.path")
    columns = r.mapping(
        spec["columns"], "jobs_csv.columns", TRACE_COLUMNS, required=("team", "gpus", "submit", "duration")
    )
    priority_values = spec.get("priority_values", {})
    if not isinstance(priority_values, Mapping):
        r.bad(
            "jobs_csv.priority_values", "must be a mapping of trace value to priority class", priority_values
        )
        priority_values = {}
    for key, value in priority_values.items():
        if value is not None and (not isinstance(value, str) or value not in classes):
            r.bad(f"jobs_csv.priority_values.{key}", "unknown priority class", value)
    if rel is None or columns is None:
        return [], None
    file = (base_dir / rel).resolve()
    try:
        handle = file.open(newline="", encoding="utf-8")
    except OSError as exc:
        r.error("jobs_csv.path", f"cannot read {file}: {exc.strerror}")
        return [], None
    with handle:
        try:
            # The whole trace is decoded here, so a file that is not UTF-8 is refused before use.
            lines = handle.read().splitlines(keepends=True)
        except UnicodeDecodeError as exc:
            r.error("jobs_csv.path", f"{rel} is not UTF-8 text (byte {exc.start}); save the trace as UTF-8")
            return [], None
    reader = csv.reader(lines)
    header = next(reader, [])
    index: dict[str, int] = {}
    for key, column in columns.items():
        if column not in header:
            r.bad(
                f"jobs_csv.columns.{key}",
                f"no such column in {rel} (columns: {', '.join(header)})",
                column,
            )
        else:
            index[key] = header.index(column)
    if len(index) < len(columns):
        return [], None
    rows = _Rows(r, columns, index, first_seq, types, nodes, teams, classes, priority_values, strict)
    # A job and a row per line and nothing freed: a cyclic collection on the way would only
    # walk them (a third of the time of a 100,000-row trace).
    with gc_paused():
        rows.add(reader, first_line=2)  # the header is line 1
    report = TraceReport(
        path=str(rel),
        rows=rows.rows,
        used=len(rows.jobs),
        skipped=rows.skipped,
        examples={k: tuple(v) for k, v in rows.examples.items()},
    )
    return rows.jobs, report


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
