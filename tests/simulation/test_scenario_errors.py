"""Scenario files that cannot be simulated are refused with the path of every bad value."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from allocations.simulation import ScenarioError, load_scenario, parse_scenario

BASE = """
cluster:
  node_pools: [{instance_type: ml.p5.48xlarge, count: 2, gpus_per_node: 8}]
teams:
  - {name: team-a, quota: {ml.p5.48xlarge: 8}}
  - {name: team-b, quota: {ml.p5.48xlarge: 4}}
jobs:
  - {id: j1, team: team-a, gpus: 2, submit: 0, duration: 60}
"""


def scenario(extra: str = "", **replace_sections: str) -> str:
    """BASE with top-level sections replaced or added (given as YAML text)."""
    data = yaml.safe_load(BASE)
    for key, text in replace_sections.items():
        data[key] = yaml.safe_load(textwrap.dedent(text))
    if extra:
        data.update(yaml.safe_load(textwrap.dedent(extra)))
    return yaml.safe_dump(data, sort_keys=False)


def errors_of(text: str, **kwargs: object) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(yaml.safe_load(text), **kwargs)  # type: ignore[arg-type]
    return info.value.errors


CORPUS = [
    (
        "negative-gpus",
        scenario(
            jobs="[{id: j1, team: team-a, gpus: 2}, {id: j2, team: team-a, gpus: 2}, "
            "{id: j3, team: team-a, gpus: 1}, {id: j4, team: team-a, gpus: -2}]"
        ),
        "jobs[3].gpus: must be a whole number >= 1, got -2",
    ),
    (
        "fractional-gpus",
        scenario(jobs="[{id: j1, team: team-a, gpus: 1.5}]"),
        "jobs[0].gpus: must be a whole number >= 1, got 1.5",
    ),
    (
        "bool-gpus",
        scenario(jobs="[{id: j1, team: team-a, gpus: true}]"),
        "jobs[0].gpus: must be a whole number >= 1, got true",
    ),
    (
        "unknown-quota-type",
        scenario(teams="[{name: team-a, quota: {ml.p5.48xlarge: 8}}, {name: team-b, quota: {ml.p5: 4}}]"),
        "teams[1].quota.ml.p5: unknown instance type 'ml.p5' (the cluster has: ml.p5.48xlarge)",
    ),
    (
        "negative-quota",
        scenario(teams="[{name: team-a, quota: {ml.p5.48xlarge: -1}}]"),
        "teams[0].quota.ml.p5.48xlarge: must be a whole number >= 0, got -1",
    ),
    ("unknown-top-key", scenario("{jobz: []}"), "jobz: unknown key"),
    (
        "unknown-job-key",
        scenario(jobs="[{id: j1, team: team-a, gpus: 1, gpu: 2}]"),
        "jobs[0].gpu: unknown key",
    ),
    ("unknown-team-key", scenario(teams="[{name: team-a, quotas: {}}]"), "teams[0].quotas: unknown key"),
    (
        "unknown-team",
        scenario(jobs="[{id: j1, team: nobody, gpus: 1}]"),
        "jobs[0].team: unknown team (teams: team-a, team-b), got 'nobody'",
    ),
    (
        "duplicate-id",
        scenario(jobs="[{id: j1, team: team-a, gpus: 1}, {id: j1, team: team-b, gpus: 1}]"),
        "jobs[1].id: duplicate id (first at jobs[0]), got 'j1'",
    ),
    (
        "duplicate-team",
        scenario(teams="[{name: team-a}, {name: team-a}]", jobs="[]"),
        "teams[1].name: duplicate team 'team-a'",
    ),
    ("bad-team-name", scenario(teams="[{name: Team_A}]", jobs="[]"), "teams[0].name: must be a DNS label"),
    (
        "bad-sharing",
        scenario(teams="[{name: team-a, sharing: share}]", jobs="[]"),
        "teams[0].sharing: must be one of lend-and-borrow, lend, dont-lend, got 'share'",
    ),
    (
        "bad-borrow-pct",
        scenario(teams="[{name: team-a, borrow_limit_percent: 20000}]", jobs="[]"),
        "teams[0].borrow_limit_percent: must be a whole number from 0 to 10000, got 20000",
    ),
    (
        "bad-borrow-limit",
        scenario(teams="[{name: team-a, borrow_limit: lots}]", jobs="[]"),
        "teams[0].borrow_limit: must be 'unlimited' or a mapping",
    ),
    (
        "bad-weight",
        scenario(teams="[{name: team-a, fair_share_weight: 101}]", jobs="[]"),
        "teams[0].fair_share_weight: must be a whole number from 0 to 100, got 101",
    ),
    (
        "lend-limit-above-quota",
        scenario(
            teams="[{name: team-a, quota: {ml.p5.48xlarge: 4}, lend_limit: {ml.p5.48xlarge: 6}}]", jobs="[]"
        ),
        "teams[0].lend_limit.ml.p5.48xlarge: must be at most the quota (4), got 6",
    ),
    (
        "pwb-with-reclaim-never",
        scenario(
            teams="[{name: team-a, reclaim: never, preempt_while_borrowing: {policy: lower-priority, max_priority: 50}}]",
            jobs="[]",
        ),
        "teams[0].preempt_while_borrowing: 'lower-priority' is refused together with reclaim: never",
    ),
    (
        "bad-pwb-key",
        scenario(teams="[{name: team-a, preempt_while_borrowing: {policy: never, max: 5}}]", jobs="[]"),
        "teams[0].preempt_while_borrowing.max: unknown key",
    ),
    (
        "bad-policy",
        scenario(policy="{idle_allocation: round-robin}"),
        "policy.idle_allocation: must be one of fair-share, first-come-first-serve, got 'round-robin'",
    ),
    ("bad-policy-key", scenario(policy="{fairness: 1}"), "policy.fairness: unknown key"),
    (
        "bad-class-weight",
        scenario(policy="{priority_classes: [{name: hi, weight: 500}]}"),
        "policy.priority_classes[0].weight: must be a whole number from 0 to 100, got 500",
    ),
    (
        "unknown-priority",
        scenario(jobs="[{id: j1, team: team-a, gpus: 1, priority: urgent}]"),
        "jobs[0].priority: unknown priority class (classes: none), got 'urgent'",
    ),
    (
        "bad-submit",
        scenario(jobs="[{id: j1, team: team-a, gpus: 1, submit: soon}]"),
        "jobs[0].submit: must be a number, got 'soon'",
    ),
    (
        "negative-duration",
        scenario(jobs="[{id: j1, team: team-a, gpus: 1, duration: -5}]"),
        "jobs[0].duration: must be a number of seconds >= 0, got -5",
    ),
    (
        "running-since-future",
        scenario(jobs="[{id: j1, team: team-a, gpus: 1, running_since: 10}]"),
        "jobs[0].running_since: must be <= 0",
    ),
    (
        "ended-before-start",
        scenario(jobs="[{id: j1, team: team-a, gpus: 1, running_since: -100, duration: 50}]"),
        "jobs[0].duration: must be more than 100",
    ),
    (
        "not-whole-nodes",
        scenario(jobs="[{id: j1, team: team-a, gpus: 12}]"),
        "jobs[0].gpus: a job larger than one node must ask for whole nodes (multiples of 8 on ml.p5.48xlarge), got 12",
    ),
    (
        "list-as-team",
        scenario(jobs="[{id: j1, team: [team-a], gpus: 1}]"),
        'jobs[0].team: unknown team (teams: team-a, team-b), got ["team-a"]',
    ),
    (
        "mapping-as-priority",
        scenario(jobs="[{id: j1, team: team-a, gpus: 1, priority: {x: 1}}]"),
        'jobs[0].priority: unknown priority class (classes: none), got {"x": 1}',
    ),
    (
        "absurd-gpus",
        scenario(jobs="[{id: j1, team: team-a, gpus: 2000000}]"),
        "jobs[0].gpus: must be at most 1,000,000, got 2000000",
    ),
    ("no-cluster", "teams: []\n", "cluster: is required"),
    ("empty-cluster", scenario(cluster="{}"), "cluster: needs node_pools or nodes"),
    (
        "bad-pool",
        scenario(
            cluster="{node_pools: [{instance_type: x, count: 1, gpus_per_node: 0}]}", teams="[]", jobs="[]"
        ),
        "cluster.node_pools[0].gpus_per_node: must be a whole number >= 1, got 0",
    ),
    (
        "mixed-node-sizes",
        scenario(
            cluster="{nodes: [{name: a, instance_type: x, gpus: 8}, {name: b, instance_type: x, gpus: 4}]}",
            teams="[]",
            jobs="[]",
        ),
        "cluster.nodes[1]: every x node must have the same GPUs (8), got 4",
    ),
    (
        "event-two-kinds",
        scenario(events="[{at: 5, cancel: j1, node_up: {count: 1}}]"),
        "events[0]: must have exactly one of",
    ),
    (
        "event-negative-at",
        scenario(events="[{at: -5, cancel: j1}]"),
        "events[0].at: must be a number of seconds >= 0, got -5",
    ),
    ("cancel-unknown", scenario(events="[{at: 5, cancel: j9}]"), "events[0].cancel: unknown job, got 'j9'"),
    (
        "node-down-too-many",
        scenario(events="[{at: 5, node_down: {count: 3}}]"),
        "events[0].node_down.count: only 2 ml.p5.48xlarge nodes are up at 5, got 3",
    ),
    (
        "node-up-none-down",
        scenario(events="[{at: 5, node_up: {count: 1}}]"),
        "events[0].node_up.count: only 0 ml.p5.48xlarge nodes are down at 5, got 1",
    ),
    (
        "update-unknown-team",
        scenario(events="[{at: 5, update_team: {name: team-x, quota: {ml.p5.48xlarge: 2}}}]"),
        "events[0].update_team.name: unknown team",
    ),
    (
        "update-team-bad-quota",
        scenario(events="[{at: 5, update_team: {name: team-a, quota: {ml.p5.48xlarge: -3}}}]"),
        "events[0].update_team.quota.ml.p5.48xlarge: must be a whole number >= 0, got -3",
    ),
    (
        "update-policy-bad",
        scenario(events="[{at: 5, update_policy: {queueing: lifo}}]"),
        "events[0].update_policy.queueing: must be one of best-effort-fifo, strict-fifo, got 'lifo'",
    ),
    (
        "bad-option",
        scenario(options="{keep_unfit: maybe}"),
        "options.keep_unfit: must be true or false, got 'maybe'",
    ),
    (
        "negative-cycle-interval",
        scenario(options="{cycle_interval: -5}"),
        "options.cycle_interval: must be a whole number of seconds >= 0 (0: a cycle at every happening), got -5",
    ),
    (
        "fractional-cycle-interval",
        scenario(options="{cycle_interval: 2.5}"),
        "options.cycle_interval: must be a whole number of seconds >= 0 (0: a cycle at every happening), got 2.5",
    ),
    (
        "text-cycle-interval",
        scenario(options="{cycle_interval: '60'}"),
        "options.cycle_interval: must be a whole number of seconds >= 0 (0: a cycle at every happening), got '60'",
    ),
    ("bad-horizon", scenario(horizon="-1"), "horizon: must be a number of seconds >= 0, got -1"),
    (
        "zero-member-limit",
        scenario(teams="[{name: team-a, quota: {ml.p5.48xlarge: 8}, max_running_gpus_per_member: 0}]"),
        "teams[0].max_running_gpus_per_member: must be a whole number >= 1, got 0",
    ),
    (
        "text-member-limit",
        scenario(teams="[{name: team-a, quota: {ml.p5.48xlarge: 8}, max_running_gpus_per_member: lots}]"),
        "teams[0].max_running_gpus_per_member: must be a whole number >= 1, got 'lots'",
    ),
    (
        "number-submitter",
        scenario(jobs="[{id: j1, team: team-a, gpus: 1, submitter: 7}]"),
        "jobs[0].submitter: must be a non-empty string, got 7",
    ),
    (
        "empty-submitter",
        scenario(jobs="[{id: j1, team: team-a, gpus: 1, submitter: ''}]"),
        "jobs[0].submitter: must be a non-empty string, got ''",
    ),
    ("expect-unknown-job", scenario(expect="{running: [j7]}"), "expect.running[0]: unknown job, got 'j7'"),
    ("expect-bad-code", scenario(expect="{pending: {j1: stuck}}"), "expect.pending.j1: must be one of"),
    # docs/preemption.md 7: the settings of preemption cost.
    (
        "negative-min-runtime",
        scenario(policy="{min_runtime_s: -5}"),
        "policy.min_runtime_s: must be a number of seconds >= 0, got -5",
    ),
    (
        "text-min-runtime",
        scenario(policy="{min_runtime_s: 10min}"),
        "policy.min_runtime_s: must be a number of seconds >= 0, got '10min'",
    ),
    (
        "min-runtime-over-a-day",
        scenario(policy="{min_runtime_s: 100000}"),
        "policy.min_runtime_s: must be at most 86,400 seconds (a day), got 100000",
    ),
    (
        "grace-over-a-day",
        scenario(policy="{preemption_grace_s: 100000}"),
        "policy.preemption_grace_s: must be at most 86,400 seconds (a day), got 100000",
    ),
    (
        "class-negative-grace",
        scenario(policy="{priority_classes: [{name: high, weight: 10, preemption_grace_s: -5}]}"),
        "policy.priority_classes[0].preemption_grace_s: must be a number of seconds >= 0, got -5",
    ),
    (
        "class-negative-min-runtime",
        scenario(policy="{priority_classes: [{name: high, weight: 10, min_runtime_s: -1}]}"),
        "policy.priority_classes[0].min_runtime_s: must be a number of seconds >= 0, got -1",
    ),
    (
        "negative-checkpoint-interval",
        scenario(jobs="[{id: j1, team: team-a, gpus: 2, checkpoint_interval_s: -60}]"),
        "jobs[0].checkpoint_interval_s: must be a number of seconds >= 0, got -60",
    ),
    (
        "update-policy-grace",
        scenario(events="[{at: 10, update_policy: {preemption_grace_s: -1}}]"),
        "events[0].update_policy.preemption_grace_s: must be a number of seconds >= 0, got -1",
    ),
]


def test_the_settings_of_preemption_cost_are_read() -> None:
    """docs/preemption.md 7: a policy's and a class's minimum runtime, grace 0, a job's
    checkpoint interval (0: none)."""
    parsed = parse_scenario(
        yaml.safe_load(
            scenario(
                policy="{min_runtime_s: 600, preemption_grace_s: 0, priority_classes: "
                "[{name: high, weight: 10, min_runtime_s: 0}, {name: low, weight: 1}]}",
                jobs="[{id: j1, team: team-a, gpus: 2, checkpoint_interval_s: 1800}, "
                "{id: j2, team: team-a, gpus: 2, checkpoint_interval_s: 0}]",
            )
        )
    )
    assert parsed.policy.min_runtime_s == 600
    assert [(c.name, c.min_runtime_s) for c in parsed.policy.priority_classes] == [("high", 0), ("low", None)]
    assert [j.checkpoint_interval_s for j in parsed.jobs] == [1800, None]


@pytest.mark.parametrize(("text", "message"), [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS])
def test_a_broken_file_is_refused_with_the_path_of_the_bad_value(text: str, message: str) -> None:
    errors = errors_of(text)
    assert any(e.startswith(message) for e in errors), errors


def test_every_problem_of_a_file_is_reported_at_once() -> None:
    text = scenario(jobs="[{id: j1, team: nobody, gpus: 0}, {id: j2, team: team-a, gpus: 1, colour: red}]")
    errors = errors_of(text)
    assert "jobs[0].team: unknown team (teams: team-a, team-b), got 'nobody'" in errors
    assert "jobs[0].gpus: must be a whole number >= 1, got 0" in errors
    assert any(e.startswith("jobs[1].colour: unknown key") for e in errors)
    assert len(errors) == 3


def test_a_job_that_can_never_fit_is_an_error_judged_with_the_events_before_its_submit() -> None:
    # team-b may use 4 + 50% = 6 GPUs at first; the quota raised at 100 lets an 8-GPU job fit.
    text = scenario(
        jobs="[{id: early, team: team-b, gpus: 8, submit: 50}, {id: late, team: team-b, gpus: 8, submit: 100}]",
        events="[{at: 100, update_team: {name: team-b, quota: {ml.p5.48xlarge: 8}}}]",
    )
    errors = errors_of(text)
    assert len(errors) == 1, errors
    assert errors[0].startswith("jobs[0].gpus: job 'early' can never fit (submitted at 50): ")
    assert "--keep-unfit" in errors[0]


def test_keep_unfit_keeps_a_job_that_can_never_fit_as_rejected() -> None:
    text = scenario(jobs="[{id: huge, team: team-b, gpus: 16}]")
    loaded = parse_scenario(yaml.safe_load(text), keep_unfit=True)
    assert loaded.rejected["huge"].code == "exceeds-max"
    flagged = parse_scenario(
        yaml.safe_load(scenario(jobs="[{id: huge, team: team-b, gpus: 16}]", options="{keep_unfit: true}"))
    )
    assert set(flagged.rejected) == {"huge"}


def test_keep_unfit_does_not_excuse_a_job_that_is_not_whole_nodes() -> None:
    errors = errors_of(scenario(jobs="[{id: j1, team: team-a, gpus: 12}]"), keep_unfit=True)
    assert errors[0].startswith("jobs[0].gpus: a job larger than one node must ask for whole nodes")


def test_an_update_team_changes_only_the_keys_it_gives() -> None:
    text = scenario(
        teams="[{name: team-a, quota: {ml.p5.48xlarge: 8}, fair_share_weight: 7, sharing: lend}]",
        events="[{at: 10, update_team: {name: team-a, quota: {ml.p5.48xlarge: 12}}}]",
    )
    loaded = parse_scenario(yaml.safe_load(text))
    updated = loaded.events[0].action.team  # type: ignore[union-attr]
    assert updated.quotas["ml.p5.48xlarge"].quota == 12
    assert (updated.fair_share_weight, updated.sharing) == (7, "lend")


def test_invalid_yaml_and_json_are_refused_with_the_file_name(tmp_path: Path) -> None:
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("cluster: [unclosed\n")
    with pytest.raises(ScenarioError, match=r"bad\.yaml: not valid YAML"):
        load_scenario(bad_yaml)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"cluster": }')
    with pytest.raises(ScenarioError, match=r"bad\.json: not valid JSON"):
        load_scenario(bad_json)
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")


def test_a_json_scenario_loads_like_yaml(tmp_path: Path) -> None:
    file = tmp_path / "s.json"
    file.write_text(
        '{"cluster": {"nodes": [{"name": "n1", "instance_type": "x", "gpus": 4}]},'
        ' "teams": [{"name": "a", "quota": {"x": 4}}],'
        ' "jobs": [{"id": 1, "team": "a", "gpus": 4}]}'
    )
    loaded = load_scenario(file)
    assert loaded.name == "s"
    assert [(j.id, j.instance_type, j.gpus, j.submit) for j in loaded.jobs] == [("1", "x", 4, 0)]


def test_the_jobs_of_a_refused_team_are_not_reported_again_as_unknown_team() -> None:
    errors = errors_of(scenario(teams="[{name: team-a, quota: 5}]"))
    assert errors == ["teams[0].quota: must be a mapping of instance type to GPUs, got 5"]


def test_a_file_that_is_not_a_mapping_is_refused() -> None:
    assert errors_of("- just\n- a list\n") == ['(file): must be a mapping, got ["just", "a list"]']


def test_a_cycle_interval_given_by_the_caller_is_checked_too() -> None:
    errors = errors_of(BASE, cycle_interval=-1)
    assert errors == [
        "cycle_interval: must be a whole number of seconds >= 0 (0: a cycle at every happening), got -1"
    ]
