"""The run form's drafts, given ids no column holds (as tests/fuzz/test_hostile_inputs.py
sends): each is a field error that shows the id shortened, rather than a 4,000-digit id
reaching the query and overflowing SQLite's integers (a 500 on the embedded default)."""

from __future__ import annotations

import pytest

from allocations.whatif.forms import RunForm


@pytest.mark.parametrize("pk", ["9" * 4000, "9" * 5001, str(2**63), "x" * 300])
def test_a_draft_id_no_column_holds_is_a_field_error_shown_shortened(personas, pk):
    form = RunForm({"run-drafts": [pk], "run-range": "7"}, prefix="run")
    assert not form.is_valid()
    [error] = form.errors["drafts"]
    assert error.startswith(f"Draft must be a draft's id; got '{pk[:20]}... ({len(pk)} characters)'")
