"""Priorities, queue order and fair-share shares (POLICY.md sections 1, 3 and 4).

Shares are compared exactly: ``share(t) = 1000 * borrowed(t) / pool / weight(t)`` has the same
``1000 / pool`` factor for every team of a cycle, so teams are compared on ``borrowed / weight``,
held as the integer ``borrowed * (L // weight)`` (``weight``'s *unit*) with ``L`` the least
common multiple of the weights of the cycle's teams: exact, and as cheap to compare as any
integer. (The multiple of every weight 1..100 would do for any teams, but it is a 41-digit number,
and products of it are compared digit by digit; with shares also compared item by item, a settled
100k-job fair-share cycle went from 0.33 to 0.27 s, session 11.)
"""

from __future__ import annotations

from collections.abc import Iterable
from math import lcm

from .snapshot import ClusterPolicy, Job, TaskRanking

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


def share_units(weights: Iterable[int]) -> dict[int, int]:
    """Each weight's unit (``share_key``): ``L // weight`` with ``L`` the least common multiple
    of the positive ``weights``; 0 for a weight of 0 (or less)."""
    distinct = set(weights)
    scale = lcm(*(w for w in distinct if w > 0))  # lcm() of nothing is 1
    return {w: scale // w if w > 0 else 0 for w in distinct}


def share_key(borrowed: int, unit: int, pool_total: int, history: int = 0, scale: int = 1) -> ShareKey:
    """A comparable form of a team's share (POLICY.md 3.2): lower ranks first. ``unit``: the
    team's weight's unit (``share_units``), 0 for a weight of 0. ``history`` and ``scale``: the
    team's borrowing in the past and the weight of borrowing now (``history_terms``); the
    defaults, 0 and 1, are the share of this instant alone."""
    if pool_total <= 0:
        return ZERO_SHARE
    value = borrowed * scale + history if borrowed > 0 else history
    if value <= 0:
        return ZERO_SHARE
    if unit <= 0:
        return (1, value)
    return (0, value * unit)


# Borrowed GPUs in the past are counted in millionths of a GPU, exactly.
HISTORY_UNIT = 1_000_000


def history_terms(policy: ClusterPolicy, borrowed_history: float) -> tuple[int, int]:
    """``(history, scale)`` of ``share_key`` for a team whose decayed average of borrowed GPUs
    is ``borrowed_history`` (docs/fairness.md): the share counts ``(100 - p)`` parts of the
    GPUs borrowed now and ``p`` parts of that average, ``p`` the policy's
    ``fair_share_history_percent``, as one exact integer. At ``p = 100`` borrowing now still
    counts for one part in 10^8 per GPU, so that a share always grows with every GPU borrowed
    (the preemption tests and their bounds rely on it). Off (``(0, 1)``) while the half-life
    or the percentage is 0."""
    percent = policy.fair_share_history_percent
    if policy.fair_share_half_life_s <= 0 or percent <= 0:
        return 0, 1
    scale = (100 - percent) * HISTORY_UNIT if percent < 100 else 1
    return percent * round(borrowed_history * HISTORY_UNIT), scale
