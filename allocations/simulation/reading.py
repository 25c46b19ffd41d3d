"""What the readers of a scenario share (``scenario.py``, ``cluster.py``, ``trace.py`` and
``events.py``): :class:`ScenarioError`, the :class:`Reader` that checks raw values and collects
every problem with the path of the bad value, and :class:`ScenarioJob`, the job that both
``jobs:`` and a ``jobs_csv`` trace give.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from allocations.bounded_json import LongNumber
from allocations.engine.snapshot import InstanceType

# Shown in one ScenarioError message; the full list stays on ``ScenarioError.errors``.
MAX_ERRORS_SHOWN = 20


class ScenarioError(Exception):
    """A scenario file that cannot be simulated; ``errors`` lists every problem found, each
    starting with the path of the bad value."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        shown = self.errors[:MAX_ERRORS_SHOWN]
        more = len(self.errors) - len(shown)
        text = "\n".join(shown) + (f"\n... and {more} more" if more > 0 else "")
        super().__init__(text)


@dataclass(frozen=True, slots=True)
class ScenarioJob:
    """One job of the file (or one usable row of its trace). ``seq`` is its position in the
    file, which the engine uses where POLICY.md says "then id"."""

    id: str
    team: str
    instance_type: str
    gpus: int
    submit: float
    duration: float | None  # None: runs until cancelled or the end
    seq: int
    priority: str | None = None
    running_since: float | None = None
    path: str = ""  # where it came from, for messages: "jobs[3]" or "jobs_csv line 17"
    submitter: str | None = None  # who submitted it (the team's limit per member)
    # docs/preemption.md 2: a checkpoint every so many seconds of a run (None: none).
    checkpoint_interval_s: float | None = None
    # docs/resources.md 3: vCPU and memory asked (None: the ratio), and partitions asked.
    vcpus: int | None = None
    memory_gib: int | None = None
    partitions: tuple[tuple[str, int], ...] = ()


def job_field(job: ScenarioJob, name: str) -> str:
    """The path of one field of a job: ``jobs[3].gpus``, or ``jobs_csv line 17 (gpus)``."""
    return f"{job.path}.{name}" if job.path.startswith("jobs[") else f"{job.path} ({name})"


def default_type(types: Mapping[str, InstanceType]) -> str | None:
    """The instance type a job may leave out: the cluster's only one."""
    return next(iter(types)) if len(types) == 1 else None


def show(value: object) -> str:
    """A value as the user wrote it, for an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, LongNumber):
        return f"a number of {len(value.lstrip('-'))} digits ({value[:20]}...)"
    if isinstance(value, str):
        return repr(value) if len(value) <= 200 else repr(value[:200]) + "..."
    if isinstance(value, Mapping | list | tuple):
        text = json.dumps(value, default=str)
        return text if len(text) <= 60 else text[:57] + "..."
    text = str(value)
    return text if len(text) <= 20 or not isinstance(value, int | float) else f"{value:.6g}"


def key_path(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


class Reader:
    """Collects errors while reading the raw (parsed YAML/JSON) scenario."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        # Teams refused for a bad setting: their jobs are not also reported as "unknown team".
        self.refused_teams: set[str] = set()

    def error(self, path: str, message: str) -> None:
        self.errors.append(f"{path}: {message}")

    def bad(self, path: str, expected: str, value: object) -> None:
        self.errors.append(f"{path}: {expected}, got {show(value)}")

    def mapping(
        self, value: object, path: str, allowed: Iterable[str], required: Iterable[str] = ()
    ) -> dict[str, Any] | None:
        """``value`` as a mapping with only ``allowed`` keys (unknown keys are errors)."""
        if not isinstance(value, Mapping):
            self.bad(path or "(file)", "must be a mapping", value)
            return None
        allowed = set(allowed)
        for key in value:
            if not isinstance(key, str) or key not in allowed:
                where = key_path(path, key)
                self.error(where, f"unknown key (expected one of: {', '.join(sorted(allowed))})")
        for key in required:
            if key not in value:
                self.error(key_path(path, key), "is required")
        return {k: v for k, v in value.items() if isinstance(k, str) and k in allowed}

    def sequence(self, value: object, path: str) -> list[Any] | None:
        if not isinstance(value, list):
            self.bad(path, "must be a list", value)
            return None
        return value

    def whole(self, value: object, path: str, minimum: int = 0, maximum: int | None = None) -> int | None:
        """A whole number in [minimum, maximum]; 2.0 is accepted as 2, booleans are not numbers."""
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and isinstance(value, float):
            ok = math.isfinite(value) and value.is_integer()
        number = int(value) if ok else None  # type: ignore[arg-type]
        if number is None or number < minimum or (maximum is not None and number > maximum):
            bounds = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
            self.bad(path, f"must be a whole number {bounds}", value)
            return None
        return number

    def number(
        self, value: object, path: str, minimum: float | None = None, what: str = "a number"
    ) -> float | None:
        """A finite number (seconds), at least ``minimum`` when given."""
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or (minimum is not None and value < minimum):  # type: ignore[operator]
            bounds = "" if minimum is None else f" >= {minimum:g}"
            self.bad(path, f"must be {what}{bounds}", value)
            return None
        return value  # type: ignore[return-value]

    def choice(self, value: object, path: str, enum: type[Any]) -> Any:
        names = [member.value for member in enum]
        if value not in names:
            self.bad(path, f"must be one of {', '.join(names)}", value)
            return None
        return enum(value)

    def boolean(self, value: object, path: str) -> bool | None:
        if not isinstance(value, bool):
            self.bad(path, "must be true or false", value)
            return None
        return value

    def text(self, value: object, path: str) -> str | None:
        if not isinstance(value, str) or not value:
            self.bad(path, "must be a non-empty string", value)
            return None
        return value
