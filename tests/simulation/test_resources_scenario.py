"""The scenario format of docs/resources.md 8: node pools with vCPU, memory and partitions,
quotas per resource or in instances, borrow limits per resource, jobs asking memory or
partitions; and every bad value refused with its path."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import yaml

from allocations.engine.resources import max_use_resources, quota_resources
from allocations.engine.snapshot import ClusterPolicy, InstanceType, Quota, Team
from allocations.simulation import ScenarioError, parse_scenario
from allocations.simulation.cluster import read_team, team_scenario
from allocations.simulation.reading import Reader
from allocations.simulation.replay import replay

P4D = "ml.p4d.24xlarge"
EXAMPLE = f"""
cluster:
  node_pools:
    - {{instance_type: {P4D}, count: 2, gpus_per_node: 6, vcpus_per_node: 96,
       memory_gib_per_node: 1152, partitions_per_node: {{mig-1g.5gb: 14}}}}
teams:
  - {{name: research, quota: {{{P4D}: {{gpus: 4, vcpus: 64, mig-1g.5gb: 7}}}},
     borrow_limit: {{{P4D}: {{gpus: 2, memory_gib: 256}}}}}}
  - {{name: infra, quota: {{{P4D}: {{instances: 1}}}}}}
jobs:
  - {{id: j1, team: research, gpus: 2, memory_gib: 300}}
  - {{id: j2, team: research, partitions: {{mig-1g.5gb: 3}}, vcpus: 8}}
"""


def _data(**changes: object) -> dict[str, object]:
    data = yaml.safe_load(EXAMPLE)
    data.update(changes)
    return data  # type: ignore[no-any-return]


def _errors(data: object) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    return info.value.errors


def test_s8_the_example_reads_into_the_engine_dataclasses() -> None:
    s = parse_scenario(_data())
    (it,) = s.instance_types
    assert it == InstanceType(P4D, 6, 96, 1152, (("mig-1g.5gb", 14),))
    research, infra = s.teams
    q = research.quotas[P4D]
    assert (q.quota, q.resources, q.borrow_limit, q.borrow_limits) == (
        4,
        (("mig-1g.5gb", 7), ("vcpus", 64)),
        2,
        (("memory_gib", 256),),
    )
    assert quota_resources(it, q) == {"gpus": 4, "vcpus": 64, "memory_gib": 768, "mig-1g.5gb": 7}
    assert infra.quotas[P4D] == Quota(quota=6, instances=1)
    j1, j2 = s.jobs
    assert (j1.gpus, j1.vcpus, j1.memory_gib, j1.partitions) == (2, None, 300, ())
    assert (j2.gpus, j2.vcpus, j2.memory_gib, j2.partitions) == (0, 8, None, (("mig-1g.5gb", 3),))


def test_s8_nodes_entries_take_resources_and_must_agree() -> None:
    cluster = {
        "nodes": [
            {"name": "a", "instance_type": "t", "gpus": 8, "vcpus": 192, "memory_gib": 2048},
            {"name": "b", "instance_type": "t", "gpus": 8, "vcpus": 96, "memory_gib": 2048},
        ]
    }
    errors = _errors(_data(cluster=cluster, teams=[{"name": "x"}], jobs=[]))
    assert errors == [
        "cluster.nodes[1]: every t node must have the same resources (8 GPUs, 192 vCPU, 2048 GiB), "
        "got 8 GPUs, 96 vCPU, 2048 GiB"
    ]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"jobs": [{"id": "j", "team": "research", "partitions": {"mig-2g.10gb": 1}}]},
            "jobs[0].partitions: unknown partition profile of ml.p4d.24xlarge (it has: mig-1g.5gb), got 'mig-2g.10gb'",
        ),
        (
            {"jobs": [{"id": "j", "team": "research", "gpus": 1, "memory_gib": 2000}]},
            "jobs[0].memory_gib: more than one ml.p4d.24xlarge node has (1,152 GiB memory), got 2000",
        ),
        (
            {"jobs": [{"id": "j", "team": "research", "gpus": 12, "vcpus": 200}]},
            "jobs[0].vcpus: more than 2 ml.p4d.24xlarge nodes has (192 vCPU), got 200",
        ),
        (
            {"jobs": [{"id": "j", "team": "research", "partitions": {"mig-1g.5gb": 15}}]},
            "jobs[0].partitions.mig-1g.5gb: more than one ml.p4d.24xlarge node has (14), got 15",
        ),
        (
            {"jobs": [{"id": "j", "team": "research", "gpus": 0}]},
            "jobs[0].gpus: must be a whole number >= 1, got 0",
        ),
        (
            {"jobs": [{"id": "j", "team": "research", "partitions": {}}]},
            "jobs[0].gpus: must be at least 1 when the job asks for no partitions, got 0",
        ),
        (
            {"teams": [{"name": "research", "quota": {P4D: {"instances": 1, "gpus": 2}}}], "jobs": []},
            "teams[0].quota.ml.p4d.24xlarge.instances: stands alone: N nodes' worth of every resource "
            "(also given: gpus)",
        ),
        (
            {"teams": [{"name": "research", "quota": {P4D: {"mig-7g.80gb": 1}}}], "jobs": []},
            "teams[0].quota.ml.p4d.24xlarge.mig-7g.80gb: unknown resource or partition profile of "
            "ml.p4d.24xlarge (its resources: gpus, vcpus, memory_gib, mig-1g.5gb), got 'mig-7g.80gb'",
        ),
        (
            {"teams": [{"name": "research", "borrow_limit": {P4D: {"memory_gib": -1}}}], "jobs": []},
            "teams[0].borrow_limit.ml.p4d.24xlarge.memory_gib: must be a whole number >= 0, got -1",
        ),
        (
            {
                "cluster": {
                    "node_pools": [
                        {
                            "instance_type": P4D,
                            "count": 1,
                            "gpus_per_node": 6,
                            "partitions_per_node": {"gpus": 2},
                        }
                    ]
                }
            },
            "cluster.node_pools[0].partitions_per_node.gpus: is no partition profile name (lower case "
            "letters, digits, '-' and '.', none of gpus, instances, memory_gib, vcpus), got 'gpus'",
        ),
    ],
)
def test_s8_bad_input_names_the_path_and_value(change: dict[str, object], expected: str) -> None:
    assert expected in _errors(_data(**change))


def test_s8_resources_a_type_does_not_declare() -> None:
    data = {
        "cluster": {"node_pools": [{"instance_type": "g", "count": 1, "gpus_per_node": 8}]},
        "teams": [{"name": "a", "quota": {"g": {"vcpus": 8}}}, {"name": "b"}],
        "jobs": [
            {"id": "j1", "team": "b", "gpus": 1, "memory_gib": 10},
            {"id": "j2", "team": "b", "partitions": {"mig-1g.5gb": 1}},
        ],
    }
    errors = _errors(data)
    assert (
        "teams[0].quota.g.vcpus: g declares no vcpus (add vcpus_per_node to its node pool), got 'vcpus'"
        in errors
    )
    assert (
        "jobs[0].memory_gib: g declares no memory_gib (add memory_gib_per_node to its node pool), got 10"
        in errors
    )
    assert 'jobs[1].partitions: g has no partitions, got {"mig-1g.5gb": 1}' in errors


def test_s8_update_team_reads_quotas_per_resource() -> None:
    events = [{"at": 10, "update_team": {"name": "infra", "quota": {P4D: {"memory_gib": 576}}}}]
    s = parse_scenario(_data(events=events))
    team = s.events[0].action.team  # type: ignore[attr-defined]
    assert quota_resources(s.instance_types[0], team.quotas[P4D]) == {
        "gpus": 0,
        "vcpus": 48,
        "memory_gib": 576,
        "mig-1g.5gb": 0,
    }


def test_s4_the_example_replays_with_every_resource_counted() -> None:
    """docs/resources.md 4 and 8: the engine decides the example's resources: j1 (2 GPUs, 300
    GiB) and j2 (3 partitions, 8 vCPU, no GPU) both run."""
    result = replay(parse_scenario(_data()))
    assert result.counts["running"] == 2


TYPES = {
    "t": InstanceType("t", 6, 96, 1152, (("mig-1g.5gb", 14), ("mig-2g.10gb", 4))),
    "g": InstanceType("g", 8),
}


def _random_quota(rng: random.Random, it: InstanceType) -> Quota:
    names = ["vcpus", "memory_gib", "mig-1g.5gb", "mig-2g.10gb"] if it.name == "t" else []
    form = rng.choice(["gpus", "resources", "instances"] if names else ["gpus"])
    percent = rng.choice([0, 50, 100])
    borrow_limits = tuple(
        sorted((n, rng.randrange(50)) for n in rng.sample(names, rng.randint(0, len(names))))
    )
    absolute = rng.choice([None, rng.randrange(20)])
    if form == "instances":
        n = rng.randint(0, 3)
        return Quota(
            quota=n * it.gpus_per_node, instances=n, borrow_limit_percent=percent, borrow_limits=borrow_limits
        )
    resources = tuple(sorted((n, rng.randrange(200)) for n in rng.sample(names, rng.randint(0, len(names)))))
    return Quota(
        quota=rng.randrange(20),
        resources=resources,
        borrow_limit_percent=percent,
        borrow_limit=absolute,
        borrow_limits=borrow_limits if absolute is not None or borrow_limits else (),
    )


def test_s8_team_scenario_writes_what_read_team_reads_back() -> None:
    """A team with quotas per resource or in instances, written as a scenario entry, reads back
    as the same quotas resolved (docs/resources.md 2)."""
    rng = random.Random(30)
    for _ in range(300):
        team = Team("a", {name: _random_quota(rng, it) for name, it in TYPES.items()})
        r = Reader()
        back = read_team(r, team_scenario(team, TYPES), "teams[0]", TYPES, ClusterPolicy(), None)
        assert r.errors == [] and back is not None
        for name, it in TYPES.items():
            assert quota_resources(it, back.quotas[name]) == quota_resources(it, team.quotas[name])
            assert max_use_resources(it, back.quotas[name]) == max_use_resources(it, team.quotas[name])


def test_s8_the_documented_example_reads() -> None:
    """docs/resources.md 8's example is a scenario the simulator reads as documented."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "resources.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"^```yaml\n(.*?)^```", text, re.S | re.M)
    s = parse_scenario(yaml.safe_load(block))
    assert s == parse_scenario(_data())
