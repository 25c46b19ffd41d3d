"""Priorities, queue order and fair-share shares (POLICY.md sections 1, 3 and 4).

Shares are compared exactly: ``share(t) = 1000 * borrowed(t) / pool / weight(t)`` has the same
``1000 / pool`` factor for every team of a cycle, so teams are compared on ``borrowed / weight``,
held as the integer ``borrowed * (L // weight)`` with ``L`` the least common multiple of every
weight 1..100: exact, and as cheap to compare as any integer.
"""

from __future__ import annotations

from math import lcm

from .snapshot import ClusterPolicy, Job, TaskRanking

SHARE_SCALE = lcm(*range(1, 101))

# (tier, value): tier 1 = a team of weight 0 that borrows, ranked after every other team
# (POLICY.md 3.2); between two of those the value is the unweighted ``borrowed``.
ShareKey = tuple[int, int]
ZERO_SHARE: ShareKey = (0, 0)


def priority_weights(policy: ClusterPolicy) -> dict[str, int]:
    """The weight of each priority class by name (empty under first-come-first-serve ranking)."""
    if policy.task_ranking == TaskRanking.FIRST_COME_FIRST_SERVE:
        return {}
    return {pc.name: pc.weight for pc in policy.priority_classes}


def job_priority(policy: ClusterPolicy, job: Job) -> int:
    """A job's effective priority under ``policy`` (POLICY.md section 1).

    The weight of its priority class; 0 with no class or a class the policy does not have; 0 for
    every job when ``task_ranking`` is ``first-come-first-serve``.
    """
    if job.priority_class is None:
        return 0
    return priority_weights(policy).get(job.priority_class, 0)


def share_key(borrowed: int, weight: int, pool_total: int) -> ShareKey:
    """A comparable form of a team's share (POLICY.md 3.2): lower ranks first."""
    if borrowed <= 0 or pool_total <= 0:
        return ZERO_SHARE
    if weight <= 0:
        return (1, borrowed)
    return (0, borrowed * (SHARE_SCALE // weight))
