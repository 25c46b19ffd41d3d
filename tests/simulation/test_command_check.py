"""``simulate --check``: each line of the file's ``expect:`` block is reported as held or not,
and the exit status is non-zero when one did not hold (SCENARIO.md, expect semantics)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from tests.conftest import REPO

EXAMPLE = REPO / "docs" / "examples" / "borrow-and-reclaim.yaml"


def _with_expect(tmp_path: Path, expect: str) -> Path:
    text = EXAMPLE.read_text(encoding="utf-8").split("expect:")[0] + expect
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_check_says_each_expectation_held_and_runs_until_the_blocks_time() -> None:
    out = io.StringIO()
    call_command("simulate", str(EXAMPLE), "--check", "--no-progress", stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    assert "simulated 0 .. 5 s" in text  # expect.until: 5
    assert "held         running exactly: a1, b1" in text
    assert "held         b2 pending (no-idle-capacity)" in text
    assert "held         b2 preempted (reclaim by a1)" in text
    assert "4 of 4 expectations held" in text


def test_check_names_what_did_not_hold_and_fails(tmp_path: Path) -> None:
    path = _with_expect(
        tmp_path,
        "expect:\n  until: 5\n  running: [b1, b2]\n  pending: {a1: no-idle-capacity}\n  preempted: {}\n",
    )
    out = io.StringIO()
    with pytest.raises(CommandError, match="3 of 3 expectations did not hold"):
        call_command("simulate", str(path), "--check", "--no-progress", stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    assert "DID NOT HOLD running exactly: b1, b2: running: a1, b1" in text
    assert "DID NOT HOLD a1 pending (no-idle-capacity): running" in text
    assert "DID NOT HOLD no other job preempted: also preempted: b2" in text


def test_check_exits_non_zero_from_the_shell_when_an_expectation_fails(tmp_path: Path) -> None:
    path = _with_expect(tmp_path, "expect:\n  until: 5\n  running: [b1]\n")
    done = subprocess.run(
        [sys.executable, "manage.py", "simulate", str(path), "--check", "--no-progress"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "DID NOT HOLD running exactly: b1" in done.stdout
    assert "1 of 1 expectations did not hold" in done.stderr


def test_check_without_an_expect_block_is_refused_saying_why(tmp_path: Path) -> None:
    path = _with_expect(tmp_path, "")
    with pytest.raises(CommandError, match="--check needs an expect: block"):
        call_command("simulate", str(path), "--check", stdout=io.StringIO(), stderr=io.StringIO())


def test_without_check_the_expect_block_is_only_read() -> None:
    out = io.StringIO()
    call_command("simulate", str(EXAMPLE), "--no-progress", stdout=out, stderr=io.StringIO())
    assert "expectations held" not in out.getvalue()
