"""Any mutation of a valid bundle is either accepted or refused with paths: never a crash."""

from __future__ import annotations

import copy
import json

import pytest
from django.db import transaction
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from allocations.interop import hyperpod
from allocations.interop import policy as interop_policy
from allocations.interop import services as interop_services

pytestmark = pytest.mark.django_db

# Values of the right shape (often accepted) as well as junk (refused with a path).
PLAUSIBLE = st.one_of(
    st.integers(min_value=0, max_value=120),
    st.sampled_from(
        [
            *("Enabled", "Disabled", "Lend", "DontLend", "LendAndBorrow", "LowerPriority", "Never"),
            *("ml.p5.48xlarge", "ml.g5.12xlarge", "research", "serving", "new-team", "A display name"),
        ]
    ),
)
JUNK = st.one_of(
    PLAUSIBLE,
    PLAUSIBLE,
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False),
    st.text(max_size=80),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=10), st.integers(), max_size=3),
)


def _paths(value, prefix=()):
    """Every path into a JSON value (keys of objects, indexes of lists)."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, (*prefix, i))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_mutated_bundle_is_accepted_or_refused_with_paths(rich_policy, data):
    bundle = hyperpod.export_policy().bundle
    state = interop_policy.read_policy()
    mutated = copy.deepcopy(bundle)
    paths = [p for p in _paths(mutated) if p]
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        path = data.draw(st.sampled_from(paths))
        target = mutated
        try:
            for step in path[:-1]:
                target = target[step]
            target[path[-1]] = data.draw(JUNK)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation replaced a parent
    try:
        imported = hyperpod.parse(json.dumps(mutated), state)
    except hyperpod.ImportRefused as refused:
        event("refused")
        assert refused.problems
        for problem in refused.problems:
            assert problem.message
        return
    event("accepted")
    interop_policy.diff(imported, state)  # an accepted document always gives a preview
    # Applying it either works or is refused with messages; rolled back for the next example.
    try:
        with transaction.atomic():
            try:
                interop_services.policy_import_apply(actor=None, imported=imported)
            except interop_services.ApplyRefused as refused:
                assert refused.messages
            raise _RollBack
    except _RollBack:
        pass


class _RollBack(Exception):
    pass
