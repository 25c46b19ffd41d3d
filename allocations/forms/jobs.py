"""Forms of team self-service: submitting a job, adding and changing team members.

They check the shape of the input and give field errors; the rules (whole nodes, "could never
fit") are the service's, whose ValidationError the view puts back on the form's fields.
"""

from __future__ import annotations

from typing import Any

from django import forms

from allocations.choices import Role
from allocations.forms.policy import PartitionsField, WholeNumberField
from allocations.models import InstanceType, PriorityClass, Team
from allocations.services import memberships
from allocations.services.jobs import MAX_REQUESTED_DURATION, default_priority_class, team_default_class


class JobSubmitForm(forms.Form):
    name = forms.CharField(max_length=200)
    instance_type = forms.ModelChoiceField(
        queryset=InstanceType.objects.order_by("name"), to_field_name="name"
    )
    # docs/resources.md 3: 0 or empty when the job asks for partitions (the service's rule).
    gpus = WholeNumberField(
        label="GPUs", unit="GPUs", low=0, required=False, help_text="Whole GPUs; empty or 0 with partitions."
    )
    vcpus = WholeNumberField(
        label="vCPU",
        unit="vCPU",
        low=0,
        required=False,
        help_text="Where the instance type counts vCPU; empty: its GPUs' share of their node.",
    )
    memory_gib = WholeNumberField(
        label="Memory (GiB)",
        unit="GiB",
        low=0,
        required=False,
        help_text="Where the instance type counts memory; empty: its GPUs' share of their node.",
    )
    partitions = PartitionsField(
        label="GPU partitions",
        help_text='Where the instance type has them: one "profile=count" a line, e.g. mig-1g.10gb=2.',
    )
    priority_class = forms.ModelChoiceField(
        queryset=PriorityClass.objects.order_by("-weight", "name"),
        to_field_name="name",
        required=False,
        help_text="Only the classes the cluster policy defines; the lowest by default.",
    )
    command = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    image = forms.CharField(max_length=300, required=False, help_text="A container image, e.g. pytorch:2.5")
    requested_duration = forms.IntegerField(
        min_value=1,
        max_value=MAX_REQUESTED_DURATION,
        required=False,
        label="Requested duration (seconds)",
        help_text="Used to estimate when queued jobs start.",
    )
    # Its bounds are the service's rule (``services.jobs``), whose message names the value.
    checkpoint_interval_s = WholeNumberField(
        label="Checkpoint interval (seconds)",
        unit="seconds",
        low=1,
        high=MAX_REQUESTED_DURATION,
        required=False,
        help_text="How often the job saves its progress; preempted, it keeps its work up to its last "
        "checkpoint. Empty: it keeps none (docs/preemption.md section 2).",
    )

    def __init__(self, *args: Any, team: Team | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        default = team_default_class(team) if team is not None else default_priority_class()
        if default is not None and not self.is_bound:
            self.initial.setdefault("priority_class", default.name)
        if team is not None:
            # Every class stays in the list: one the team may not use is refused by the
            # service, whose message says which the team may use (docs/limits.md).
            allowed = ", ".join(team.allowed_priority_classes) or "all classes"
            fallback = default.name if default else "no class"
            field = self.fields["priority_class"]
            field.help_text = f"{team.name} may submit: {allowed}. Empty: {fallback}."

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not (data.get("command", "").strip() or data.get("image", "").strip()):
            self.add_error("command", "Give a command or an image to run.")
        return data


class MembershipAddForm(forms.Form):
    """A user, by name, among those ``actor`` may add (``memberships.addable_users``): a name
    they may not add is answered like a name nobody has."""

    username = forms.CharField(
        max_length=150, help_text="Their user name. Cluster administrators add staff accounts."
    )
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def __init__(self, *args: Any, actor: Any, **kwargs: Any) -> None:
        self.actor = actor
        super().__init__(*args, **kwargs)

    def clean_username(self) -> Any:
        username = self.cleaned_data["username"]
        user = memberships.addable_users(self.actor).filter(username=username).first()
        if user is None:
            raise forms.ValidationError(memberships.not_addable_message(username))
        return user


class MembershipRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
