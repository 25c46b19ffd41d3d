"""A draft's body: a full copy of the live policy, as plain JSON.

Layout (every key always present, so a body is complete on its own)::

    {"cluster_policy": {<CLUSTER_POLICY_FIELDS>},
     "priority_classes": [{"name", "weight", "description", <PRIORITY_CLASS_ENGINE_SETTINGS>}, ...],
     "teams": [{"name", <DRAFT_TEAM_SETTINGS>, "quotas": [{"instance_type", <QUOTA_FIELDS>}, ...]}, ...]}

A draft holds what the engine decides with: a team's settings and the limits the engine
enforces at each cycle (``ENGINE_TEAM_LIMITS``), not those checked at submission. A key added
after a draft was saved may be missing from its body: see ``ADDED_SETTINGS``.

The body is turned into what the rest of the product already understands: unsaved model rows
for the console's forms (so a draft is edited with the live policy's forms and rules), an
``interop.policy.ImportedPolicy`` for the diff and for applying it through the policy
services, and a scenario's ``policy``/``teams`` (SCENARIO.md) for the replay.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from allocations import policy_fields
from allocations.choices import BorrowLimitKind
from allocations.engine import InstanceType as EngineType
from allocations.interop import policy as interop
from allocations.models import ClusterPolicy, PriorityClass, Team
from allocations.simulation.cluster import team_scenario

TEAM_SETTINGS = policy_fields.TEAM_SETTINGS
ENGINE_TEAM_LIMITS = policy_fields.ENGINE_TEAM_LIMITS
CLASS_SETTINGS = policy_fields.PRIORITY_CLASS_ENGINE_SETTINGS
QUOTA_SETTINGS = policy_fields.QUOTA_FIELDS
# A draft saved before the resources beyond GPUs (docs/resources.md) has none of their fields:
# they are optional, and missing means their default (GPUs alone).
QUOTA_REQUIRED = tuple(f for f in QUOTA_SETTINGS if f not in policy_fields.QUOTA_RESOURCE_FIELDS)


def quota_settings(quota: Mapping[str, Any]) -> dict[str, Any]:
    """A draft quota's settings, a field it lacks at its default."""
    return {f: quota.get(f, policy_fields.QUOTA_DEFAULTS[f]) for f in QUOTA_SETTINGS}


CLUSTER_POLICY_SETTINGS = policy_fields.CLUSTER_POLICY_FIELDS
# Settings added after drafts were first saved, with the value a body without them means (the
# model's default, which is today's behaviour: docs/preemption.md section 7).
ADDED_SETTINGS: dict[str, Any] = {"min_runtime_s": 0, "preemption_grace_s": 0}
# A team's engine limits are the same kind of late key, but a body without them leaves the live
# team's as they are when applied (they are not in its import) and replays without them.


class BodyError(ValueError):
    """A body that is not a complete policy; ``errors`` start with the JSON path of the value."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


# --- From the live policy ------------------------------------------------------------------------
def live_body(state: interop.PolicyState | None = None) -> dict[str, Any]:
    """The live policy as a draft body (five queries, whatever its size)."""
    state = state or interop.read_policy()
    return {
        "cluster_policy": {name: getattr(state.policy, name) for name in CLUSTER_POLICY_SETTINGS},
        "priority_classes": [
            {
                "name": pc.name,
                "weight": pc.weight,
                "description": pc.description,
                **{name: getattr(pc, name) for name in CLASS_SETTINGS},
            }
            for pc in state.priority_classes
        ],
        "teams": [
            {
                "name": team.name,
                **{name: getattr(team, name) for name in (*TEAM_SETTINGS, *ENGINE_TEAM_LIMITS)},
                "quotas": [
                    {"instance_type": q.instance_type.name, **{n: getattr(q, n) for n in QUOTA_SETTINGS}}
                    for q in state.quotas(team)
                ],
            }
            for team in state.teams
        ],
    }


# --- Checking a body -----------------------------------------------------------------------------
def check_body(body: Any) -> None:
    """Refuse a body that is not a complete policy, naming the path and the value of each
    problem; the values themselves are checked by the policy services' rules when the draft
    is edited and again when it is applied."""
    errors: list[str] = []
    if not isinstance(body, Mapping):
        raise BodyError([f"body: must be an object, got {body!r}"])
    policy = body.get("cluster_policy")
    if not isinstance(policy, Mapping):
        errors.append(f"body.cluster_policy: must be an object, got {policy!r}")
    else:
        errors += [
            f"body.cluster_policy.{name}: is required"
            for name in CLUSTER_POLICY_SETTINGS
            if name not in policy and name not in ADDED_SETTINGS
        ]
    classes = body.get("priority_classes")
    if not isinstance(classes, list):
        errors.append(f"body.priority_classes: must be a list, got {classes!r}")
    else:
        for i, pc in enumerate(classes):
            if not isinstance(pc, Mapping) or not isinstance(pc.get("name"), str) or "weight" not in pc:
                errors.append(
                    f"body.priority_classes[{i}]: must be an object with name and weight, got {pc!r}"
                )
    teams = body.get("teams")
    if not isinstance(teams, list):
        errors.append(f"body.teams: must be a list, got {teams!r}")
    else:
        for i, team in enumerate(teams):
            path = f"body.teams[{i}]"
            if not isinstance(team, Mapping) or not isinstance(team.get("name"), str):
                errors.append(f"{path}: must be an object with a name, got {team!r}")
                continue
            errors += [f"{path}.{name}: is required" for name in TEAM_SETTINGS if name not in team]
            quotas = team.get("quotas")
            if not isinstance(quotas, list):
                errors.append(f"{path}.quotas: must be a list, got {quotas!r}")
                continue
            for j, quota in enumerate(quotas):
                if not isinstance(quota, Mapping) or not isinstance(quota.get("instance_type"), str):
                    errors.append(
                        f"{path}.quotas[{j}]: must be an object with an instance_type, got {quota!r}"
                    )
                    continue
                errors += [
                    f"{path}.quotas[{j}].{name}: is required" for name in QUOTA_REQUIRED if name not in quota
                ]
    if errors:
        raise BodyError(errors)


# --- Reading and changing a body -----------------------------------------------------------------
def cluster_policy_values(body: Mapping[str, Any]) -> dict[str, Any]:
    """The body's cluster policy, every setting present (a body saved before a setting existed
    means its default)."""
    given = body["cluster_policy"]
    return {name: given.get(name, ADDED_SETTINGS.get(name)) for name in CLUSTER_POLICY_SETTINGS}


def team_entry(body: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    return next((t for t in body["teams"] if t["name"] == name), None)


def with_cluster_policy(body: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    new = copy.deepcopy(dict(body))
    new["cluster_policy"] = {name: values[name] for name in CLUSTER_POLICY_SETTINGS}
    return new


_KEEP: Any = object()


def with_priority_class(
    body: Mapping[str, Any],
    name: str,
    weight: int | None,
    min_runtime_s: int | None = _KEEP,
    preemption_grace_s: int | None = _KEEP,
) -> dict[str, Any]:
    """The body with class ``name`` at ``weight`` (added when new), or without it (``None``);
    its minimum runtime and preemption grace set when given (None: the policy's), else kept."""
    new = copy.deepcopy(dict(body))
    classes = [pc for pc in new["priority_classes"] if pc["name"] != name]
    if weight is not None:
        old = next((pc for pc in new["priority_classes"] if pc["name"] == name), None)
        if min_runtime_s is _KEEP:
            min_runtime_s = old.get("min_runtime_s") if old else None
        if preemption_grace_s is _KEEP:
            preemption_grace_s = old.get("preemption_grace_s") if old else None
        classes.append(
            {
                "name": name,
                "weight": weight,
                "description": old["description"] if old else "",
                "min_runtime_s": min_runtime_s,
                "preemption_grace_s": preemption_grace_s,
            }
        )
    new["priority_classes"] = sorted(classes, key=lambda pc: (-pc["weight"], pc["name"]))
    return new


def with_team(
    body: Mapping[str, Any], name: str, settings: Mapping[str, Any], quotas: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The body with team ``name``'s settings and its quota of each instance type replaced.

    A quota with every default value is left out, as ``team_quota_set`` stores none."""
    new = copy.deepcopy(dict(body))
    entry = team_entry(new, name)
    if entry is None:
        raise KeyError(name)
    entry.update({field: settings[field] for field in TEAM_SETTINGS})
    entry.update({field: settings[field] for field in ENGINE_TEAM_LIMITS if field in settings})
    rows = []
    for type_name, values in sorted(quotas.items()):
        values = quota_settings(values)
        if values["borrow_limit_kind"] != BorrowLimitKind.ABSOLUTE:
            values["borrow_limit"] = None  # the service keeps a GPU cap only for absolute limits
        if values != policy_fields.QUOTA_DEFAULTS:
            rows.append({"instance_type": type_name, **values})
    entry["quotas"] = rows
    return new


# --- Unsaved rows for the console's forms --------------------------------------------------------
def cluster_policy_row(body: Mapping[str, Any]) -> ClusterPolicy:
    """An unsaved ClusterPolicy holding the draft's values (never saved)."""
    return ClusterPolicy(**cluster_policy_values(body))


def priority_class_row(body: Mapping[str, Any], name: str) -> PriorityClass | None:
    """An unsaved PriorityClass with the live row's pk, so the rules treat it as the row being
    edited (its own name is not "already taken")."""
    pc = next((pc for pc in body["priority_classes"] if pc["name"] == name), None)
    if pc is None:
        return None
    live = PriorityClass.objects.filter(name=name).values_list("pk", flat=True).first()
    row = PriorityClass(
        pk=live,
        name=pc["name"],
        weight=pc["weight"],
        description=pc.get("description", ""),
        min_runtime_s=pc.get("min_runtime_s"),
        preemption_grace_s=pc.get("preemption_grace_s"),
    )
    row._state.adding = live is None  # Django's unique checks then skip the row itself
    return row


def team_row(body: Mapping[str, Any], name: str) -> Team | None:
    """An unsaved Team with the draft's settings and the live team's pk (see above)."""
    entry = team_entry(body, name)
    if entry is None:
        return None
    live = Team.objects.filter(name=name).values_list("pk", flat=True).first()
    row = Team(
        pk=live,
        name=name,
        **{field: entry[field] for field in TEAM_SETTINGS},
        **{field: entry.get(field) for field in ENGINE_TEAM_LIMITS},
    )
    row._state.adding = live is None
    return row


def quota_initial(body: Mapping[str, Any], name: str, instance_types: Iterable[Any]) -> list[dict[str, Any]]:
    """The quota formset's rows for team ``name``: one per instance type, the draft's values or
    the defaults (the same rows ``forms.policy.quota_formset_initial`` gives a live team)."""
    entry = team_entry(body, name) or {"quotas": []}
    by_type = {q["instance_type"]: q for q in entry["quotas"]}
    rows = []
    for instance_type in instance_types:
        quota = by_type.get(instance_type.name)
        values = quota_settings(quota) if quota else dict(policy_fields.QUOTA_DEFAULTS)
        rows.append({"instance_type": instance_type, **values})
    return rows


# --- The diff and applying -----------------------------------------------------------------------
def as_import(body: Mapping[str, Any]) -> interop.ImportedPolicy:
    """The body as a complete import: every priority class, every team with all its quotas."""
    return interop.ImportedPolicy(
        cluster_policy=cluster_policy_values(body),
        priority_classes={pc["name"]: pc["weight"] for pc in body["priority_classes"]},
        class_settings={
            pc["name"]: {name: pc[name] for name in CLASS_SETTINGS if name in pc}
            for pc in body["priority_classes"]
        },
        teams=[
            interop.TeamSettings(
                name=team["name"],
                values={
                    field: team[field] for field in (*TEAM_SETTINGS, *ENGINE_TEAM_LIMITS) if field in team
                },
                quotas=[
                    interop.QuotaSettings(
                        instance_type=q["instance_type"],
                        values=quota_settings(q),
                        path=f"teams[{i}].quotas[{j}]",
                    )
                    for j, q in enumerate(team["quotas"])
                ],
                path=f"teams[{i}]",
            )
            for i, team in enumerate(body["teams"])
        ],
    )


def diff(body: Mapping[str, Any], state: interop.PolicyState | None = None) -> list[interop.Change]:
    """What applying the draft would change in the live policy (object, field, live -> draft)."""
    return interop.diff(as_import(body), state)


# --- The body as a scenario's policy and teams (SCENARIO.md) --------------------------------------
def scenario_policy(body: Mapping[str, Any]) -> dict[str, Any]:
    """The body's policy as a scenario's. A setting added later is written only when it is not
    its default: a default means today's behaviour, which a scenario without it has too."""
    policy = cluster_policy_values(body)
    return {
        **{
            name: value
            for name, value in policy.items()
            if name not in ADDED_SETTINGS or value != ADDED_SETTINGS[name]
        },
        "priority_classes": [
            {"name": pc["name"], "weight": pc["weight"]}
            | ({"min_runtime_s": pc["min_runtime_s"]} if pc.get("min_runtime_s") is not None else {})
            | (
                {"preemption_grace_s": pc["preemption_grace_s"]}
                if pc.get("preemption_grace_s") is not None
                else {}
            )
            for pc in body["priority_classes"]
        ],
    }


def scenario_teams(
    body: Mapping[str, Any],
    instance_types: Iterable[str] | Mapping[str, EngineType],
    live: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The teams of a scenario: the body's, then any team of ``live`` that the body lacks (a
    team created after the draft was copied keeps its live settings, as applying would).

    Each is read as the loop's snapshot reads a team's rows (``policy_fields.engine_team``) and
    written for the instance types ``instance_types`` (those with nodes): names, or the
    engine's types by name, which writes each resource's borrow cap where a team's quotas
    differ in their percentage (docs/resources.md 2; a draft without the resource fields
    means GPUs alone, ``policy_fields.engine_quota``)."""
    types: list[str] | Mapping[str, EngineType] = (
        instance_types if isinstance(instance_types, Mapping) else list(instance_types)
    )
    teams = list(body["teams"])
    names = {t["name"] for t in teams}
    teams += [t for t in (live or {}).get("teams", []) if t["name"] not in names]
    return [
        team_scenario(
            policy_fields.engine_team(team["name"], team, {q["instance_type"]: q for q in team["quotas"]}),
            types,
        )
        for team in teams
    ]
