"""Checking a scenario's ``expect:`` block (SCENARIO.md) against a replay's result.

``simulate --check`` prints each expectation with whether it held, and fails when one did not:
the way a user checks that a scenario still ends as its file says after a policy change.
"""

from __future__ import annotations

from dataclasses import dataclass

from .result import Result
from .scenario import Expect


@dataclass(frozen=True, slots=True)
class Check:
    """One expectation of the block: what was expected, whether it held, what was seen."""

    expected: str
    held: bool
    seen: str


def _state(result: Result, job_id: str) -> str:
    job = result.jobs.get(job_id)
    if job is None:
        return "not submitted by the end" if job_id in result.not_submitted else "absent"
    if job.pending_reason is not None and job.state in {"pending", "rejected"}:
        return f"{job.state} ({job.pending_reason.code.value})"
    return job.state


def check_expectations(expect: Expect, result: Result) -> list[Check]:
    """Every expectation of ``expect`` against ``result``, in the block's order (SCENARIO.md:
    ``running`` exact, ``pending`` and ``rejected`` with their codes, ``preempted`` exhaustive
    with the reason and preemptor of each job's last preemption)."""
    checks: list[Check] = []
    if expect.running is not None:
        running = sorted(j for j, job in result.jobs.items() if job.state == "running")
        wanted = sorted(expect.running)
        checks.append(
            Check(
                f"running exactly: {', '.join(wanted) or 'none'}",
                running == wanted,
                f"running: {', '.join(running) or 'none'}",
            )
        )
    for job_id, code in expect.pending.items():
        seen = _state(result, job_id)
        checks.append(Check(f"{job_id} pending ({code})", seen == f"pending ({code})", seen))
    if expect.preempted is not None:
        preempted = {
            job_id: (job.preempted[-1].reason, job.preempted[-1].by)
            for job_id, job in result.jobs.items()
            if job.preempted
        }
        for job_id, (reason, by) in expect.preempted.items():
            got = preempted.get(job_id)
            seen = f"preempted ({got[0]} by {got[1]})" if got else "not preempted"
            checks.append(Check(f"{job_id} preempted ({reason} by {by})", got == (reason, by), seen))
        others = sorted(set(preempted) - set(expect.preempted))
        checks.append(
            Check(
                "no other job preempted",
                not others,
                f"also preempted: {', '.join(others)}" if others else "none other",
            )
        )
    for job_id, code in expect.rejected.items():
        seen = _state(result, job_id)
        checks.append(Check(f"{job_id} rejected ({code})", seen == f"rejected ({code})", seen))
    return checks


def describe(checks: list[Check], until: float | None) -> str:
    """The lines ``simulate --check`` prints: one per expectation, then the verdict."""
    at = f" at t={until:g}" if until is not None else ""
    lines = [f"expect{at}:"]
    for check in checks:
        mark = "held" if check.held else "DID NOT HOLD"
        detail = "" if check.held else f": {check.seen}"
        lines.append(f"  {mark:<12} {check.expected}{detail}")
    failed = sum(not c.held for c in checks)
    lines.append(
        f"{len(checks) - failed} of {len(checks)} expectations held"
        + (f"; {failed} did not" if failed else "")
    )
    return "\n".join(lines)
