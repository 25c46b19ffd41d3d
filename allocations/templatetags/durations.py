"""``{{ seconds|duration }}``: a number of seconds as people say it (``28 h 6 min``)."""

from __future__ import annotations

from django import template

from allocations.charts import human_duration

register = template.Library()


@register.filter
def duration(seconds: float | str | None) -> str:
    try:
        return human_duration(float(seconds or 0))
    except (TypeError, ValueError):
        return "—"
