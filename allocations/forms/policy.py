"""Forms of the admin console. They check the shape of the input (a number, a known choice) and
then run the service's own rules (``services.policy.validate_*``), so a person sees the same
message, naming the field and the value, whether a change comes from the console or elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import date, timedelta
from typing import Any, ClassVar

from django import forms
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.forms.formsets import INITIAL_FORM_COUNT, TOTAL_FORM_COUNT

from allocations import bounded_json, choices, policy_fields
from allocations.choices import JobState
from allocations.models import (
    Cluster,
    ClusterPolicy,
    InstanceType,
    Membership,
    Node,
    PriorityClass,
    Team,
    TeamQuota,
)
from allocations.services import memberships
from allocations.services import policy as rules


def apply_errors(
    form: forms.BaseForm, exc: ValidationError, renamed: Mapping[str, str] | None = None
) -> None:
    """Put a service's ValidationError on the form: a field's message on that field (``renamed``:
    the service's name of a field -> the form's), anything about fields the form does not show
    at the top of the form."""
    if not hasattr(exc, "error_dict"):
        form.add_error(None, exc)
        return
    for field, errors in exc.error_dict.items():
        field = (renamed or {}).get(field, field)
        form.add_error(field if field in form.fields else None, errors)


def shown_value(value: Any, limit: int = 40) -> str:
    """``value`` for a message: its repr, cut short (a pasted 5,000-digit number, say)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(str(value))} characters)"


class WholeNumberField(forms.IntegerField):
    """A whole number whose "not a number" message names the field and the value.

    Bounds are the service's to check (with its message), so only the HTML input gets them.
    """

    def __init__(
        self, *, unit: str = "", low: int | None = None, high: int | None = None, **kwargs: Any
    ) -> None:
        self.unit = unit
        super().__init__(**kwargs)
        if low is not None:
            self.widget.attrs["min"] = low
        if high is not None:
            self.widget.attrs["max"] = high

    def to_python(self, value: Any) -> int | None:
        try:
            return super().to_python(value)
        except ValidationError as exc:
            unit = f" of {self.unit}" if self.unit else ""
            raise ValidationError(
                f"{self.label} must be a whole number{unit}; got {shown_value(value)}.", code="invalid"
            ) from exc


class PolicyForm(forms.ModelForm):
    """A ModelForm that checks the service's rules once every field has the right shape.

    ``rule`` is one of ``services.policy.validate_*``; the form passes its values (and the row
    being edited) so that, e.g., a duplicate name is reported on the name field.
    """

    rule: ClassVar[Callable[..., None] | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Django's generic messages ("This field is required.") do not say which field; these do.
        for field in self.fields.values():
            label = str(field.label or "This field")
            field.error_messages["required"] = f"{label} is required."
            if isinstance(field, forms.CharField) and field.max_length:
                field.error_messages["max_length"] = (
                    f"{label} must be at most %(limit_value)d characters; got %(show_value)d."
                )

    def service_values(self) -> dict[str, Any]:
        """The values the service receives (the form's fields, cleaned)."""
        return {name: self.cleaned_data.get(name) for name in self._meta.fields or ()}

    def _post_clean(self) -> None:
        """The model's own validation (fields, constraints), once the form has no other error.

        It repeats the service's rules, which say which field and value are wrong; while any
        field has an error the rules have not run, and a database constraint would be reported
        in its own words ("Constraint team_max_priority_0_100 is violated.", naming no field),
        so the rules get their turn first (tests/fuzz/test_form_regressions.py keeps the case).
        A form with errors is never saved, so its instance need not be built."""
        if not self.errors:
            super()._post_clean()

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.rule is not None and not self.errors:
            current = self.instance if self.instance.pk else None
            try:
                type(self).rule(self.service_values(), current)  # type: ignore[misc]
            except ValidationError as exc:
                apply_errors(self, exc)
        return cleaned


class InstanceTypeForm(PolicyForm):
    rule = staticmethod(rules.validate_instance_type)  # type: ignore[assignment]
    gpus_per_node = WholeNumberField(label="GPUs per node", unit="GPUs", low=1)
    price_per_gpu_hour = forms.DecimalField(
        label="Price per GPU-hour ($)",
        decimal_places=4,
        max_digits=10,
        required=False,
        error_messages={"invalid": "Price per GPU-hour must be a number of dollars, e.g. 4.10."},
    )

    class Meta:
        model = InstanceType
        fields = ["name", "gpus_per_node", "price_per_gpu_hour", "description"]

    def service_values(self) -> dict[str, Any]:
        values = super().service_values()
        if values["price_per_gpu_hour"] is None:
            values["price_per_gpu_hour"] = 0
        return values


class NodeForm(PolicyForm):
    rule = staticmethod(rules.validate_node)  # type: ignore[assignment]
    gpus = WholeNumberField(
        label="GPUs", unit="GPUs", low=1, required=False, help_text="Empty: the instance type's GPUs per node"
    )

    class Meta:
        model = Node
        fields = ["name", "instance_type", "gpus", "state", "reason"]

    def service_values(self) -> dict[str, Any]:
        values = super().service_values()
        if values["gpus"] is None and values["instance_type"] is not None:
            values["gpus"] = values["instance_type"].gpus_per_node
        return values


class NodeStateForm(forms.Form):
    """Change a node's state from the nodes list: ready, draining or down, with a reason."""

    state = forms.ChoiceField(choices=choices.NodeState.choices)
    reason = forms.CharField(max_length=200, required=False)


def min_runtime_field(*, required: bool, help_text: str) -> WholeNumberField:
    return WholeNumberField(
        label="Minimum runtime (seconds)", unit="seconds", low=0, required=required, help_text=help_text
    )


def preemption_grace_field(*, help_text: str) -> WholeNumberField:
    return WholeNumberField(
        label="Preemption grace (seconds)",
        unit="seconds",
        low=0,
        high=rules.MAX_PREEMPTION_GRACE_S,
        required=False,
        help_text=help_text,
    )


class PriorityClassForm(PolicyForm):
    rule = staticmethod(rules.validate_priority_class)  # type: ignore[assignment]
    weight = WholeNumberField(label="Weight", low=0, high=100, help_text="0 to 100; higher runs first")
    min_runtime_s = min_runtime_field(
        required=False,
        help_text="A job of this class is no preemption candidate until it has run this long since its "
        "last start; empty: the cluster policy's (docs/preemption.md section 1)",
    )
    preemption_grace_s = preemption_grace_field(
        help_text="A preempted job of this class is signalled (SIGTERM) and keeps its GPUs this long "
        "to stop before it is killed; empty: the cluster policy's (docs/preemption.md section 5)",
    )

    class Meta:
        model = PriorityClass
        fields = list(policy_fields.PRIORITY_CLASS_FIELDS)


class TeamForm(PolicyForm):
    rule = staticmethod(rules.validate_team)  # type: ignore[assignment]
    fair_share_weight = WholeNumberField(
        label="Fair-share weight", low=0, high=100, help_text="Claim on idle capacity; 0 = always last"
    )
    preempt_while_borrowing_max_priority = WholeNumberField(
        label="Preempt while borrowing: maximum priority",
        low=0,
        high=100,
        required=False,
        help_text="Only victims of at most this priority (empty: any lower priority)",
    )

    # What the team may ask for (docs/limits.md).
    allowed_priority_classes = forms.MultipleChoiceField(
        label="Allowed priority classes",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="The classes its members may submit; none ticked = all",
    )
    default_priority_class = forms.ModelChoiceField(
        label="Default priority class",
        queryset=PriorityClass.objects.order_by("-weight", "name"),
        to_field_name="name",
        required=False,
        empty_label="The lowest allowed class",
        help_text="The class of a job submitted without one",
    )
    max_gpus_per_job = WholeNumberField(
        label="Most GPUs per job", unit="GPUs", low=1, required=False, help_text="Empty: no limit"
    )
    max_pending_jobs_per_member = WholeNumberField(
        label="Most pending jobs per member", low=1, required=False, help_text="Empty: no limit"
    )
    max_pending_jobs = WholeNumberField(
        label="Most pending jobs of the team", low=1, required=False, help_text="Empty: no limit"
    )
    max_running_gpus_per_member = WholeNumberField(
        label="Most GPUs running per member",
        unit="GPUs",
        low=1,
        required=False,
        help_text="Over every instance type; a member's job past it waits, a colleague's may start. Empty: no limit",
    )

    class Meta:
        model = Team
        fields = list(policy_fields.TEAM_FIELDS)
        labels = {"name": "Name (a DNS label)", "preempt_while_borrowing": "Preempt while borrowing"}
        help_texts = {
            "name": "Lowercase letters, digits and '-', at most 40 characters",
            "sharing": (
                "Lend and borrow: its unused quota goes to the pool and it may use more than its quota. "
                "Lend only: lends, never borrows. Don't lend: its quota is kept for it alone, and it never borrows."
            ),
            "preempt_team_tasks": (
                "Which of the team's own running jobs a job of the team may stop to start: lower priority, "
                "lower or newer of equal priority, or never."
            ),
            "reclaim": (
                "When the team needs its lent quota back, which of the other teams' jobs borrowing it "
                "may be stopped: any, only lower-priority ones, or never (it waits until they end)."
            ),
            "preempt_while_borrowing": (
                "Whether a job of the team that will itself borrow may stop other teams' lower-priority "
                "borrowed jobs. Default: lower-priority, or never when reclaim is never."
            ),
        }

    def __init__(self, *args: Any, limits: bool = True, **kwargs: Any) -> None:
        """``limits=False``: without the limits checked at submission (a what-if draft holds
        only the settings the engine decides with, the engine's limits among them)."""
        super().__init__(*args, **kwargs)
        # Say what the default is, not where it is written (a document the user may not have).
        self.fields["preempt_while_borrowing"].choices = [
            ("", "Default (lower-priority; never when reclaim is never)"),
            *choices.PREEMPT_WHILE_BORROWING_CHOICES,
        ]
        self.limits = limits
        if not limits:
            for name in policy_fields.TEAM_LIMITS:
                if name not in policy_fields.ENGINE_TEAM_LIMITS:
                    del self.fields[name]
            return
        allowed = self.fields["allowed_priority_classes"]
        assert isinstance(allowed, forms.MultipleChoiceField)
        allowed.choices = [(pc.name, str(pc)) for pc in PriorityClass.objects.order_by("-weight", "name")]
        if self.instance.default_priority_class_id is not None and not self.is_bound:
            # The field names classes by name; the instance's value is the row's id.
            self.initial["default_priority_class"] = self.instance.default_priority_class.name
        allowed.error_messages["invalid_choice"] = "Allowed priority classes: no class is called %(value)r."
        self.fields["default_priority_class"].error_messages["invalid_choice"] = (
            "Default priority class: no class is called %(value)r."
        )

    def setting_fields(self) -> list[forms.BoundField]:
        """The visible fields but the limits: the settings card of the team page (a draft's
        form shows the engine's limits there: it has no limits card)."""
        if not self.limits:
            return list(self.visible_fields())
        return [f for f in self.visible_fields() if f.name not in policy_fields.TEAM_LIMITS]

    def limit_fields(self) -> list[forms.BoundField]:
        """The limits' fields (none on a draft's form): their own card of the team page."""
        if not self.limits:
            return []
        return [f for f in self.visible_fields() if f.name in policy_fields.TEAM_LIMITS]

    def service_values(self) -> dict[str, Any]:
        """The values of the fields the form shows (a draft's form has no limits)."""
        values = {
            name: self.cleaned_data.get(name) for name in self._meta.fields or () if name in self.fields
        }
        if "allowed_priority_classes" in values:
            values["allowed_priority_classes"] = list(values["allowed_priority_classes"] or [])
        return values


class TeamQuotaForm(PolicyForm):
    """One row of a team's quotas: one instance type's quota with its borrow and lend limits."""

    instance_type = forms.ModelChoiceField(queryset=InstanceType.objects.all(), widget=forms.HiddenInput)
    quota = WholeNumberField(label="Quota", unit="GPUs", low=0)
    borrow_limit_percent = WholeNumberField(label="Borrow limit percent", low=0, high=10000, required=False)
    borrow_limit = WholeNumberField(label="Borrow limit", unit="GPUs", low=0, required=False)
    lend_limit = WholeNumberField(label="Lend limit", unit="GPUs", low=0, required=False)

    class Meta:
        model = TeamQuota
        fields = ["instance_type", *policy_fields.QUOTA_FIELDS]

    def quota_settings(self) -> dict[str, Any]:
        """The settings ``team_quota_set`` takes (an empty percent means the default 50)."""
        values = {name: self.cleaned_data.get(name) for name in policy_fields.QUOTA_FIELDS}
        if values["borrow_limit_percent"] is None:
            values["borrow_limit_percent"] = 50
        return values

    def clean(self) -> dict[str, Any]:
        cleaned = forms.ModelForm.clean(self)
        if not self.errors:
            try:
                rules.validate_quota(self.quota_settings())
            except ValidationError as exc:
                apply_errors(self, exc)
        return cleaned


class ServedRowsFormSet(forms.BaseFormSet):
    """A formset whose rows are exactly the ones the page served (its ``initial``), each one
    required.

    Django takes the number of rows, and how many of them are initial, from the management
    form the client posts. Told ``INITIAL_FORMS=0`` (or -1) it makes every row an optional
    extra: an unchanged row validates with empty ``cleaned_data`` (a KeyError in the view)
    and a row left out is dropped, which would delete a what-if draft's other quotas. So the
    served rows are the rows, and posted counts that disagree are an error naming both."""

    def total_form_count(self) -> int:
        return len(self.initial or ())

    def initial_form_count(self) -> int:
        return len(self.initial or ())

    def clean(self) -> None:
        if not self.management_form.is_valid():
            return  # Django's own error names the missing or malformed count
        rows = len(self.initial or ())
        for name in (TOTAL_FORM_COUNT, INITIAL_FORM_COUNT):
            key = self.add_prefix(name)
            if self.management_form.cleaned_data[name] != rows:
                posted = self.data.get(key)
                raise ValidationError(
                    f"{key} must be {rows}, the number of rows of this form; got {shown_value(posted)}. "
                    "Reload the page and make the changes again."
                )


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class BaseTeamQuotaFormSet(ServedRowsFormSet):
    def rows(self, instance_types: Iterable[InstanceType]) -> list[tuple[TeamQuotaForm, InstanceType | None]]:
        """Each quota form with its instance type, for the table's first column: the posted
        type when the page is drawn again with errors, else the initial one."""
        types = {t.pk: t for t in instance_types}
        rows = []
        for form in self.forms:
            value = form["instance_type"].value()
            rows.append((form, value if isinstance(value, InstanceType) else types.get(_int_or_none(value))))
        return rows

    def clean(self) -> None:
        super().clean()
        seen: set[int] = set()
        for form in self.forms:
            instance_type = form.cleaned_data.get("instance_type") if hasattr(form, "cleaned_data") else None
            if instance_type is None:
                continue
            if instance_type.pk in seen:
                raise ValidationError(
                    f"{instance_type.name} appears twice; give one quota per instance type."
                )
            seen.add(instance_type.pk)


TeamQuotaFormSet = forms.formset_factory(TeamQuotaForm, formset=BaseTeamQuotaFormSet, extra=0)


def quota_formset_initial(team: Team | None) -> list[dict[str, Any]]:
    """One row per instance type: the team's current settings, or the defaults (quota 0)."""
    current: Mapping[int, TeamQuota] = (
        {q.instance_type_id: q for q in team.quotas.all()} if team is not None and team.pk else {}
    )
    rows = []
    for instance_type in InstanceType.objects.all():
        quota = current.get(instance_type.pk)
        values = (
            {name: getattr(quota, name) for name in policy_fields.QUOTA_FIELDS}
            if quota is not None
            else dict(policy_fields.QUOTA_DEFAULTS)
        )
        rows.append({"instance_type": instance_type, **values})
    return rows


class ClusterForm(PolicyForm):
    rule = staticmethod(lambda values, current: rules.validate_cluster(values))  # type: ignore[assignment]
    backend_settings = forms.CharField(
        label="Backend settings (JSON)",
        widget=forms.Textarea(attrs={"rows": 4, "class": "mono"}),
        required=False,
        help_text='e.g. {"speedup": 60, "demo_workload": true}',
    )

    class Meta:
        model = Cluster
        fields = list(policy_fields.CLUSTER_FIELDS)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.is_bound:
            self.initial["backend_settings"] = json.dumps(self.instance.backend_settings or {}, indent=2)

    def clean_backend_settings(self) -> dict[str, Any]:
        text = self.cleaned_data.get("backend_settings") or "{}"
        try:
            value = bounded_json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationError(
                f"Backend settings must be valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}."
            ) from exc
        except ValueError as exc:  # nested too deeply, a number too long, NaN or Infinity
            raise ValidationError(f"Backend settings must be valid JSON: {exc}.") from exc
        if not isinstance(value, dict):
            raise ValidationError(f"Backend settings must be a JSON object ({{...}}); got {text.strip()!r}.")
        return value


class ClusterPolicyForm(PolicyForm):
    rule = staticmethod(lambda values, current: rules.validate_cluster_policy(values))  # type: ignore[assignment]
    fair_share_half_life_s = WholeNumberField(
        label="Fair-share half-life",
        unit="seconds",
        low=0,
        required=False,
        help_text=(
            "Fairness over time (docs/fairness.md): borrowing this many seconds ago counts half as "
            "much as borrowing now. 0: only borrowing now counts."
        ),
    )
    fair_share_history_percent = WholeNumberField(
        label="Fair-share history percent",
        low=0,
        high=100,
        required=False,
        help_text="0 to 100: how much of a team's share is its borrowing lately; the rest is borrowing now.",
    )

    # Both optional: empty is 0, today's behaviour, so a form posted without them (an older
    # page, a script) changes nothing about preemption.
    min_runtime_s = min_runtime_field(
        required=False,
        help_text="A running job is no preemption candidate until it has run this long since its last "
        "start; 0 or empty: no minimum. A priority class may set its own (docs/preemption.md section 1)",
    )
    preemption_grace_s = preemption_grace_field(
        help_text="A preempted job is signalled (SIGTERM) and keeps its GPUs this long to stop before "
        "it is killed; its preemptor waits for them. 0 or empty: stopped at once. A priority class "
        "may set its own; at most a day (docs/preemption.md section 5)",
    )

    # Empty is off, as a form posted before these fields existed means.
    def clean_fair_share_half_life_s(self) -> int:
        return self.cleaned_data.get("fair_share_half_life_s") or 0

    def clean_fair_share_history_percent(self) -> int:
        return self.cleaned_data.get("fair_share_history_percent") or 0

    class Meta:
        model = ClusterPolicy
        fields = list(policy_fields.CLUSTER_POLICY_FIELDS)
        help_texts = {
            "idle_allocation": (
                "How teams compete for idle GPUs. Fair share: among teams that would borrow, the one "
                "with the smallest share of the pool for its fair-share weight goes first, and may "
                "preempt borrowed jobs of a team above its share. First come, first serve: a job within "
                "its quota first, then priority, then submit time."
            ),
            "task_ranking": (
                "How a team's own jobs are ordered. Priority: by priority class, then submit time. "
                "First come, first serve: by submit time alone."
            ),
            "queueing": (
                "When a team's first job cannot start. Best-effort FIFO: its next job gets a turn. "
                "Strict FIFO: it blocks the jobs behind it (they wait with blocked-by-fifo)."
            ),
        }

    def clean(self) -> dict[str, Any]:
        for name in ("min_runtime_s", "preemption_grace_s"):
            if name in self.cleaned_data and self.cleaned_data[name] is None:
                self.cleaned_data[name] = 0
        return super().clean()


class MembershipForm(PolicyForm):
    """Add a user (by user name) to a team with a role."""

    username = forms.CharField(label="User name", max_length=150)

    class Meta:
        model = Membership
        fields = ["role", "weekly_report"]

    def __init__(self, *args: Any, team: Team, **kwargs: Any) -> None:
        self.team = team
        super().__init__(*args, **kwargs)
        self.order_fields(["username", "role", "weekly_report"])

    def clean_username(self) -> Any:
        username = self.cleaned_data["username"].strip()
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise ValidationError(f"There is no user named {username!r}.")
        return user

    def service_values(self) -> dict[str, Any]:
        """``membership_add``'s values: the role and report setting, and the user named."""
        return {**super().service_values(), "user": self.cleaned_data["username"]}

    def clean(self) -> dict[str, Any]:
        cleaned = forms.ModelForm.clean(self)
        if not self.errors:
            try:
                memberships.validate_membership({**self.service_values(), "team": self.team})
            except ValidationError as exc:
                apply_errors(self, exc)
        return cleaned


class MembershipRoleForm(PolicyForm):
    rule = staticmethod(memberships.validate_membership)  # type: ignore[assignment]

    class Meta:
        model = Membership
        fields = list(memberships.MEMBERSHIP_FIELDS)


# --- Filters of the console's lists (GET forms) -------------------------------------------------
# The days a filter accepts: one day inside Python's calendar at each end, since a range of
# days is read as midnights from its first day to the day after its last, in some time zone.
FIRST_DAY, LAST_DAY = date.min + timedelta(days=1), date.max - timedelta(days=1)


def day_field(label: str, called: str = "") -> forms.DateField:
    """An optional day from the browser's date picker; a value that is not a date, or a day at
    the very ends of the calendar (whose next day or midnight elsewhere no ``datetime`` holds),
    is refused with a message that names the field as ``called`` (default: its label)."""
    name = called or label

    def within_the_calendar(day: date) -> None:
        if not FIRST_DAY <= day <= LAST_DAY:
            raise ValidationError(
                f"{name} must be a day from {FIRST_DAY.isoformat()} to {LAST_DAY.isoformat()}; "
                f"got {day.isoformat()}.",
                code="out_of_range",
            )

    return forms.DateField(
        required=False,
        label=label,
        widget=forms.DateInput(attrs={"type": "date"}),
        validators=[within_the_calendar],
        error_messages={"invalid": f"{name} must be a date like 2026-01-31."},
    )


def check_day_order(form: forms.Form, since: Any, until: Any) -> None:
    """A range of days that ends before it starts is an error on its ``until`` field."""
    if since and until and since > until:
        form.add_error("until", f"To ({until}) must not be before From ({since}).")


# The job list's sorts: the value of ``?sort=`` (a leading "-": descending) and its label.
JOB_SORTS = {
    "submitted": "Submitted",
    "id": "Id",
    "name": "Name",
    "submitter": "Submitter",
    "team": "Team",
    "state": "State",
    "priority": "Priority",
    "gpus": "GPUs",
    "instance_type": "Instance type",
}
JOB_SORT_CHOICES = [
    (f"{sign}{key}", f"{label} {'(descending)' if sign else '(ascending)'}")
    for key, label in JOB_SORTS.items()
    for sign in ("-", "")
]


def _bad_choice(parameter: str, what: str) -> dict[str, str]:
    """A refused choice names the URL parameter and the value given (not only the label)."""
    return {"invalid_choice": f"{parameter}=%(value)s: {what}"}


class JobFilterForm(forms.Form):
    """The job list's search, filters and sort, read from the query string."""

    q = forms.CharField(required=False, max_length=200, label="Search")
    team = forms.ModelChoiceField(
        queryset=Team.objects.all(),
        to_field_name="name",
        required=False,
        empty_label="All teams",
        error_messages=_bad_choice("team", "no such team."),
    )
    submitter = forms.CharField(required=False, max_length=150, label="Submitter")
    instance_type = forms.ModelChoiceField(
        queryset=InstanceType.objects.all(),
        to_field_name="name",
        required=False,
        empty_label="All instance types",
        label="Instance type",
        error_messages=_bad_choice("instance_type", "no such instance type."),
    )
    priority_class = forms.ModelChoiceField(
        queryset=PriorityClass.objects.order_by("-weight"),
        to_field_name="name",
        required=False,
        empty_label="All priority classes",
        label="Priority class",
        error_messages=_bad_choice("priority_class", "no such priority class."),
    )
    state = forms.ChoiceField(
        choices=[("", "All states"), *JobState.choices],
        required=False,
        error_messages=_bad_choice("state", "no such state; use one of " + ", ".join(JobState.values) + "."),
    )
    sort = forms.ChoiceField(
        choices=JOB_SORT_CHOICES,
        required=False,
        error_messages=_bad_choice(
            "sort",
            "not a column this list sorts by; use one of "
            + ", ".join(JOB_SORTS)
            + " (a leading - reverses).",
        ),
    )


class AuditFilterForm(forms.Form):
    object_type = forms.ChoiceField(required=False, label="Object type")
    object = forms.CharField(required=False, label="Object", max_length=200)
    actor = forms.ChoiceField(required=False, label="Actor")
    since = day_field("From")
    until = day_field("To")

    def __init__(self, *args: Any, object_types: list[str], actors: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["object_type"].choices = [("", "All types"), *((t, t) for t in object_types)]
        self.fields["actor"].choices = [("", "Everyone"), *((a, a) for a in actors)]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        check_day_order(self, cleaned.get("since"), cleaned.get("until"))
        return cleaned
