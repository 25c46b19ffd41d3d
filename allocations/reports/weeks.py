"""ISO weeks in the cluster's time zone: a report covers Monday 00:00 to Monday 00:00 local."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

WEEK_RE = re.compile(r"^(\d{4})-W(\d{2})$")


def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; ValueError names the field and the value."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"time_zone: unknown time zone {name!r}") from exc


def local_midnight(day: date, tz: ZoneInfo) -> datetime:
    """``day`` 00:00 in ``tz``, as a UTC instant."""
    return datetime.combine(day, time(0), tzinfo=tz).astimezone(UTC)


class WeekOutOfRange(ValueError):
    """A well-formed ISO week whose instants Python's datetimes cannot hold (they end at the
    years 1 and 9999), such as 9999-W52 or 0001-W01 east of UTC: no report can cover it."""


@dataclass(frozen=True, slots=True)
class Week:
    """One ISO week of the cluster's calendar."""

    monday: date
    time_zone: str

    @classmethod
    def parse(cls, text: str, time_zone: str, *, field: str = "week", weeks_before: int = 0) -> Week:
        """``2026-W47`` -> the week; ValueError names ``field`` and the value.

        The week, and the ``weeks_before`` it that a report also reads, must have a start and
        an end in ``time_zone``; else WeekOutOfRange (a ValueError), where the arithmetic
        would otherwise raise OverflowError in whatever reads the week next."""
        match = WEEK_RE.match(text.strip()) if isinstance(text, str) else None
        if not match:
            raise ValueError(f"{field}: {text!r} is not an ISO week like 2026-W47")
        try:
            monday = date.fromisocalendar(int(match[1]), int(match[2]), 1)
        except ValueError as exc:
            raise ValueError(f"{field}: {text!r} is not a week of that year ({exc})") from exc
        week = cls(monday, time_zone)
        try:
            week.shifted(-weeks_before).start  # noqa: B018 (computed for its OverflowError)
            week.end  # noqa: B018
        except OverflowError as exc:
            before = f" or the {weeks_before} weeks before it" if weeks_before else ""
            raise WeekOutOfRange(
                f"{field}: {text!r} is out of range: the week{before} would start or end outside "
                f"the years 1 to 9999 in {time_zone}"
            ) from exc
        return week

    @classmethod
    def containing(cls, moment: datetime, time_zone: str) -> Week:
        """The week that the instant ``moment`` falls in, in ``time_zone``."""
        local = moment.astimezone(zone(time_zone)).date()
        return cls(local - timedelta(days=local.weekday()), time_zone)

    @classmethod
    def last_complete(cls, now: datetime, time_zone: str) -> Week:
        """The newest week that has ended at ``now``: the one before the current week."""
        return cls.containing(now, time_zone).shifted(-1)

    def shifted(self, weeks: int) -> Week:
        return Week(self.monday + timedelta(weeks=weeks), self.time_zone)

    @property
    def label(self) -> str:
        year, number, _ = self.monday.isocalendar()
        return f"{year:04d}-W{number:02d}"  # as parse reads it, also for the years before 1000

    @property
    def start(self) -> datetime:
        return local_midnight(self.monday, zone(self.time_zone))

    @property
    def end(self) -> datetime:
        return local_midnight(self.monday + timedelta(days=7), zone(self.time_zone))

    def days(self) -> list[date]:
        return [self.monday + timedelta(days=i) for i in range(7)]

    def day_bounds(self) -> list[datetime]:
        """The eight local midnights from this Monday to the next, as UTC instants (a day
        around a daylight-saving change is 23 or 25 hours long)."""
        tz = zone(self.time_zone)
        return [local_midnight(self.monday + timedelta(days=i), tz) for i in range(8)]

    def __str__(self) -> str:
        return self.label
