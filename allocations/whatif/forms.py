"""Forms of the what-if lab: a draft's name, and a run's drafts and past window. The draft's
policy itself is edited with the console's own forms (``forms.policy``)."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone

from allocations.forms.policy import check_day_order, day_field
from allocations.models import PolicyDraft

TIME_STEPS = [("0", "Exact times"), ("60", "1 minute"), ("300", "5 minutes"), ("900", "15 minutes")]
RANGES = [("7", "Last 7 days"), ("30", "Last 30 days"), ("90", "Last 90 days"), ("dates", "Dates")]


class DraftNameForm(forms.Form):
    name = forms.CharField(
        label="Draft name",
        max_length=100,
        error_messages={
            "required": "Draft name is required.",
            "max_length": "Draft name must be at most %(limit_value)d characters; got %(show_value)d.",
        },
    )


class DraftsField(forms.ModelMultipleChoiceField):
    """Drafts by id. Django checks that each id is a number, not that a column can hold it: an
    id past 64 bits reached the query and overflowed SQLite's integers (500). Such an id, or a
    long text, is refused here, shortened in the message."""

    def _check_values(self, value: Any) -> Any:
        for pk in value if isinstance(value, list | tuple) else ():
            text = str(pk)
            try:
                fits = len(text) <= 20 and -(2**63) <= int(text) < 2**63
            except ValueError:
                fits = len(text) <= 20  # not a number: Django's own check refuses it
            if not fits:
                raise ValidationError(
                    self.error_messages["invalid_pk_value"],
                    code="invalid_pk_value",
                    params={"pk": f"{text[:20]}... ({len(text)} characters)"},
                )
        return super()._check_values(value)


class RunForm(forms.Form):
    """Which drafts to compare with the live policy, over which past window (UTC days)."""

    drafts = DraftsField(
        queryset=PolicyDraft.objects.order_by("name"),
        widget=forms.CheckboxSelectMultiple,
        error_messages={
            "required": "Choose at least one draft to compare with the live policy.",
            "invalid_choice": "Draft %(value)s does not exist.",
            "invalid_pk_value": "Draft must be a draft's id; got %(pk)r.",
        },
    )
    range = forms.ChoiceField(
        label="Window",
        choices=RANGES,
        initial="7",
        error_messages={"invalid_choice": "Window must be 7, 30, 90 or dates; got %(value)r."},
    )
    since = day_field("From")
    until = day_field("To (inclusive)", called="To")

    time_step = forms.TypedChoiceField(
        label="Time resolution",
        choices=TIME_STEPS,
        coerce=int,
        required=False,
        empty_value=60,
        initial="60",
        help_text="Submits, run times and node changes are put on this grid, and the replay's cycles run "
        "on it, as the loop's every few seconds: coarser replays faster; waits move by less than one step.",
        error_messages={
            "invalid_choice": "Time resolution must be 0, 60, 300 or 900 seconds; got %(value)r."
        },
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        choice = cleaned.get("range")
        now = timezone.now().replace(microsecond=0)
        if choice in ("7", "30", "90"):
            cleaned["window_start"] = now - timedelta(days=int(choice))
            cleaned["window_end"] = now
        elif choice == "dates":
            since, until = cleaned.get("since"), cleaned.get("until")
            if since is None:
                self.add_error("since", "From is required when the window is given by dates.")
            if until is None:
                self.add_error("until", "To is required when the window is given by dates.")
            if since and until:
                check_day_order(self, since, until)
                start = datetime.combine(since, time.min, tzinfo=UTC)
                end = min(now, datetime.combine(until + timedelta(days=1), time.min, tzinfo=UTC))
                if start >= now:
                    self.add_error("since", f"From must be a past day; got {since}.")
                cleaned["window_start"], cleaned["window_end"] = start, end
        return cleaned
