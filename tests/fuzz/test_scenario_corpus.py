"""A corpus of broken scenario and trace files (``tests/fuzz/corpus/``), each given to
``manage.py simulate --strict``: each is refused with a CommandError that names the path of
the bad value and the value itself; none crashes. (tests/simulation/ has the simulator
engineer's own cases; these add truncated and binary files, huge and non-finite numbers, wrong
types at each level and broken CSV traces.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

CORPUS = Path(__file__).parent / "corpus"

# file -> what the refusal must say (every string in the message)
EXPECTED: dict[str, list[str]] = {
    # The shapes of tests/fuzz/test_hostile_inputs.py as files: nesting is bounded before the
    # parser recurses, and an integer too long for int() is named at its path.
    "deep-nesting.yaml": ["deep-nesting.yaml: not valid YAML", "nested more than 64 levels deep"],
    "deep-nesting.json": ["deep-nesting.json: not valid JSON", "nested more than 64 levels deep"],
    "long-number.yaml": ["cluster.node_pools[0].count", "a number of 5001 digits"],
    "long-number.json": ["cluster.node_pools[0].count", "a number of 5001 digits"],
    "truncated.yaml": ["truncated.yaml: not valid YAML", "line 6, column 51"],
    "trailing-comma.json": ["trailing-comma.json: not valid JSON", "line 1 column 115"],
    "empty.yaml": ["(file): must be a mapping, got null"],
    "top-level-list.yaml": ['(file): must be a mapping, got ["just", "a list"]'],
    "cluster-not-mapping.yaml": ["cluster: must be a mapping, got 42"],
    "pool-count-text.yaml": ["cluster.node_pools[0].count: must be a whole number >= 0, got 'two'"],
    "teams-not-list.yaml": ["teams: must be a list, got 'team-a'"],
    "team-not-mapping.yaml": ["teams[0]: must be a mapping, got 42"],
    "team-name-invalid.yaml": ["teams[0].name: must be a DNS label", "got 'Team A!'"],
    "quota-list.yaml": ["teams[0].quota: must be a mapping of instance type to GPUs, got [8]"],
    "job-not-mapping.yaml": ['jobs[0]: must be a mapping, got ["j1", "team-a", 1]'],
    "huge-gpus.yaml": ["jobs[0].gpus: must be at most 1,000,000, got 1e+26"],
    "infinite-duration.yaml": ["jobs[0].duration: must be a number of seconds >= 0, got '1e400'"],
    "nan-submit.yaml": ["jobs[0].submit: must be a number, got nan"],
    "submit-text.yaml": ["jobs[0].submit: must be a number, got 'yesterday'"],
    "duration-negative.yaml": ["jobs[0].duration: must be a number of seconds >= 0, got -5"],
    "priority-list.yaml": ["jobs[0].priority: unknown priority class", "got [1]"],
    "policy-unknown-value.yaml": ["policy.idle_allocation: must be one of", "got 'whoever-asks'"],
    "trace-missing-columns.yaml": [
        "jobs_csv.columns.gpus: no such column in missing-columns.csv (columns: job_id, user, submit_time), got 'num_gpu'",
        "jobs_csv.columns.duration: no such column",
    ],
    "trace-bad-rows.yaml": [
        "jobs_csv line 2: with a bad number: num_gpu='two'",
        "jobs_csv line 3: with a bad number: submit_time='soon'",
        "jobs_csv line 4: with a bad number: duration=''",
        "jobs_csv line 6: with 0 GPUs: num_gpu='-3'",
    ],
    "trace-empty.yaml": ["jobs_csv.columns.team: no such column in empty.csv", "got 'user'"],
    "trace-nul-byte.yaml": ["jobs_csv line 2: with a bad number: num_gpu='1\\x00'"],
    "trace-path-escape.yaml": ["jobs_csv.path: cannot read", "shadow"],
}
# Files that are not UTF-8: each is refused naming the file and the encoding, rather than
# crashing on the decode.
UNDECODABLE = {
    "binary-garbage.yaml": "not UTF-8 at all (refused by load_scenario)",
    "trace-latin1.yaml": "a Latin-1 trace (refused by the jobs_csv reader)",
}
UNDECODABLE_EXPECTED = {
    "binary-garbage.yaml": ["binary-garbage.yaml", "UTF-8"],
    "trace-latin1.yaml": ["latin1.csv", "UTF-8"],
}


def refusal(name: str) -> str:
    with pytest.raises(CommandError) as info:
        call_command("simulate", str(CORPUS / name), "--no-progress", "--strict")
    return str(info.value)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_broken_file_is_refused_with_path_and_value(name):
    message = refusal(name)
    for expected in EXPECTED[name]:
        assert expected in message, f"{name}: {expected!r} not in:\n{message}"


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, id=n) for n in UNDECODABLE],
)
def test_undecodable_files_are_refused_not_crashed(name):
    message = refusal(name)
    for expected in UNDECODABLE_EXPECTED[name]:
        assert expected in message


def test_every_corpus_file_has_a_case():
    scenarios = {p.name for p in CORPUS.iterdir() if p.suffix in (".yaml", ".json")}
    assert scenarios == set(EXPECTED) | set(UNDECODABLE)
