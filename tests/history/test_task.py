"""The beat task that records the capacity history every minute."""

from __future__ import annotations

from django.utils import timezone

from allocations.models import CapacityMinute, CapacityRollup
from allocations.tasks import record_history


def test_record_history_samples_the_minute_and_rolls_it_up_once_however_often_it_runs(personas) -> None:  # type: ignore[no-untyped-def]
    first = record_history.apply().get()
    second = record_history.apply().get()
    minutes = list(CapacityMinute.objects.values_list("minute", flat=True))
    assert len(minutes) in (1, 2)  # two runs straddling a minute boundary sample two minutes
    assert first == minutes[0].isoformat() and second == minutes[-1].isoformat()
    assert minutes[-1] <= timezone.now()
    hours = CapacityRollup.objects.filter(period="hour")
    assert sum(h.minutes for h in hours) == len(minutes)
    assert sum(h.capacity_gpu_minutes for h in hours) == 16 * len(minutes)
