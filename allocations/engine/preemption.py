"""Finding the jobs a winner that does not fit may preempt (POLICY.md section 4).

Every search works on the live ``CycleState``: a candidate is taken off its nodes, the fit is
tested, and on failure everything is put back (Kueue's ``RemoveWorkload`` / ``restoreSnapshot``).
On success the victims stay removed and the minimal set is returned: candidates are taken in
order until the preemptor fits, then every victim that is not needed is given back, last to
first, skipping the one that made it fit (Kueue's ``fillBackWorkloads``).

Only jobs that were running when the cycle began are candidates: a job started earlier in the
same cycle is not preempted in that cycle (Kueue likewise never preempts what it admitted in
the same scheduling cycle); the next cycle at the same instant can preempt it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

from .ranking import share_key
from .snapshot import (
    PreemptionReason,
    PreemptTeamTasks,
    PreemptWhileBorrowing,
    Reclaim,
)
from .state import CycleState, JobRecord, TeamState, effective_preempt_while_borrowing

Victims = list[tuple[JobRecord, PreemptionReason]]


def in_back_off(rec: JobRecord, now: float) -> bool:
    """POLICY.md 3.5: preempted n times, last at T: it preempts nobody before T + 2**(n-1)."""
    if rec.preemptions <= 0 or rec.last_preempted_at is None:
        return False
    # Capped so that a job preempted a thousand times still gets a finite (huge) back-off.
    return now < rec.last_preempted_at + 2.0 ** min(rec.preemptions - 1, 1000)


def may_look_for_victims(state: CycleState, rec: JobRecord) -> bool:
    """POLICY.md 4: a job may only preempt if its size fits within its team's quota, or it may
    preempt while borrowing, or fair share is on and ``reclaim`` is not ``never``; and not
    during its back-off (3.5)."""
    if in_back_off(rec, state.now):
        return False
    team = rec.team.team
    if rec.gpus <= rec.tt.quota:
        return True
    if effective_preempt_while_borrowing(team) != PreemptWhileBorrowing.NEVER:
        return True
    return state.fair_share and team.reclaim != Reclaim.NEVER


def own_candidates(rec: JobRecord) -> list[JobRecord]:
    """Same-team candidates allowed by ``preempt_team_tasks``, in preemption order."""
    mode = rec.team.team.preempt_team_tasks
    if mode == PreemptTeamTasks.NEVER:
        return []
    prio = rec.priority
    if mode == PreemptTeamTasks.LOWER_PRIORITY:
        return [c for c in rec.tt.candidates if c.priority < prio]
    # lower-or-newer-equal-priority: also equal priority and submitted after the preemptor
    # (Kueue's LowerOrNewerEqualPriority compares creation time; ties go by id here).
    mine = (rec.job.submit_time, rec.job.seq, rec.job.id)
    return [
        c
        for c in rec.tt.candidates
        if c.priority < prio or (c.priority == prio and (c.job.submit_time, c.job.seq, c.job.id) > mine)
    ]


def _other_lists(
    state: CycleState, rec: JobRecord, allowed: int | None
) -> list[tuple[TeamState, list[JobRecord]]]:
    """Other teams' candidates on the preemptor's instance type, from teams above their quota
    there; ``allowed``: only jobs of priority below it (None: any)."""
    it = rec.ts.name
    out: list[tuple[TeamState, list[JobRecord]]] = []
    for team in state.team_list:
        if team is rec.team:
            continue
        tt = team.per_type[it]
        if tt.usage <= tt.quota or not tt.candidates:
            continue
        cands = tt.candidates if allowed is None else [c for c in tt.candidates if c.priority < allowed]
        if cands:
            out.append((team, cands))
    return out


def _reclaim_threshold(rec: JobRecord) -> int | None:
    """Other teams' jobs a within-quota preemptor may take, by its team's ``reclaim``:
    None = any, else only priorities below the returned value."""
    reclaim = rec.team.team.reclaim
    if reclaim == Reclaim.ANY:
        return None
    if reclaim == Reclaim.LOWER_PRIORITY:
        return rec.priority
    return -(2**62)  # never: no priority is below this


def _still_borrowing(cand: JobRecord) -> bool:
    return cand.tt.usage > cand.tt.quota


def _fill_back(state: CycleState, rec: JobRecord, taken: Victims, within_quota: bool) -> Victims:
    """Give back, last to first, every victim not needed (skipping the one that made it fit)."""
    needed = [taken[-1]]
    for i in range(len(taken) - 2, -1, -1):
        cand = taken[i][0]
        state.restore(cand)
        if state.fits(rec, within_quota):
            continue
        state.remove(cand)
        needed.append(taken[i])
    needed.reverse()
    return needed


def _minimal(
    state: CycleState,
    rec: JobRecord,
    candidates: Iterable[tuple[JobRecord, PreemptionReason]],
    within_quota: bool,
) -> Victims | None:
    """Kueue's ``minimalPreemptions``: take in order until the preemptor fits, then fill back.
    Another team's job is skipped once that team is no longer above its quota."""
    taken: Victims = []
    for cand, reason in candidates:
        if cand.team is not rec.team and not _still_borrowing(cand):
            continue
        state.remove(cand)
        taken.append((cand, reason))
        if state.fits(rec, within_quota):
            return _fill_back(state, rec, taken, within_quota)
    for cand, _ in reversed(taken):
        state.restore(cand)
    return None


def _merged(
    lists: list[tuple[TeamState, list[JobRecord]]], reason: PreemptionReason
) -> Iterator[tuple[JobRecord, PreemptionReason]]:
    """Other teams' candidates as one group, in preemption order (first-come-first-serve)."""
    for cand in heapq.merge(*(cands for _, cands in lists), key=lambda r: r.victim_key):
        yield cand, reason


def _team_limit_hopeless(rec: JobRecord, own: list[JobRecord], within_quota: bool) -> bool:
    """Cheap necessary test: even preempting every own-team candidate leaves the team over the
    limit (other teams' victims do not lower the preemptor's own usage)."""
    tt = rec.tt
    limit = tt.quota if within_quota else tt.max_use
    if limit is None:
        return False
    after = tt.usage + rec.gpus
    if after <= limit:
        return False
    return after - sum(c.gpus for c in own) > limit


def _first_come_first_serve(state: CycleState, rec: JobRecord) -> Victims | None:
    """POLICY.md 4, first-come-first-serve: attempt (a) ending within quota, then (b)."""
    tt = rec.tt
    team = rec.team.team
    within = tt.usage + rec.gpus <= tt.quota
    own = own_candidates(rec)
    own_pairs = [(c, PreemptionReason.IN_TEAM) for c in own]
    if not _team_limit_hopeless(rec, own, within_quota=True):
        others = _other_lists(state, rec, _reclaim_threshold(rec))
        victims = _minimal(
            state, rec, [*_merged(others, PreemptionReason.RECLAIM), *own_pairs], within_quota=True
        )
        if victims is not None:
            return victims
    if within:  # only attempt (a) applies
        return None
    if effective_preempt_while_borrowing(team) == PreemptWhileBorrowing.NEVER:
        return None
    if _team_limit_hopeless(rec, own, within_quota=False):
        return None
    max_priority = team.preempt_while_borrowing_max_priority
    others_b = []
    for other, cands in _other_lists(state, rec, rec.priority):
        kept = cands if max_priority is None else [c for c in cands if c.priority <= max_priority]
        if kept:
            others_b.append((other, kept))
    return _minimal(
        state,
        rec,
        [*_merged(others_b, PreemptionReason.RECLAIM_WHILE_BORROWING), *own_pairs],
        within_quota=False,
    )


def _fair_share(state: CycleState, rec: JobRecord) -> Victims | None:
    """POLICY.md 4, fair share (Kueue ``fairPreemptions`` with the strategies
    LessThanOrEqualToFinalShare (rule A) then LessThanInitialShare (rule B))."""
    tt = rec.tt
    own_team = rec.team
    within = tt.usage + rec.gpus <= tt.quota
    own = own_candidates(rec)
    if _team_limit_hopeless(rec, own, within_quota=False):
        return None
    lists: dict[int, tuple[TeamState, list[JobRecord]]] = {}
    if own:
        lists[own_team.index] = (own_team, own)
    for other, cands in _other_lists(state, rec, _reclaim_threshold(rec)):
        lists[other.index] = (other, cands)
    if not lists:
        return None
    cursor = dict.fromkeys(lists, 0)

    def entry(team: TeamState) -> tuple[int, int, int, tuple[int, float, int, int, str], int]:
        # Highest share first; on equal shares another team before the preemptor's own; then
        # the team whose next candidate comes first in the preemption order.
        is_own = team is own_team
        share = state.share_with(rec) if is_own else state.share(team)
        nxt = lists[team.index][1][cursor[team.index]]
        return (-share[0], -share[1], 1 if is_own else 0, nxt.victim_key, team.index)

    heap = [entry(team) for team, _ in lists.values()]
    heapq.heapify(heap)
    taken: Victims = []
    retry: dict[int, tuple[TeamState, JobRecord]] = {}
    fits = False
    while heap and not fits:
        idx = heapq.heappop(heap)[-1]
        team, cands = lists[idx]
        if team is own_team:
            cand = cands[cursor[idx]]
            cursor[idx] += 1
            state.remove(cand)
            taken.append((cand, PreemptionReason.IN_TEAM))
            if state.fits(rec):
                fits = True
                break
            if cursor[idx] < len(cands):
                heapq.heappush(heap, entry(team))
            continue
        mine = state.share_with(rec)
        first_rejected: JobRecord | None = None
        while cursor[idx] < len(cands):
            cand = cands[cursor[idx]]
            cursor[idx] += 1
            ctt = cand.tt
            if within:
                accept = True
            else:
                # Rule A: after the preemption, the preemptor's team's share is at most the
                # victim team's share.
                less = max(0, ctt.usage - ctt.quota) - max(0, ctt.usage - cand.gpus - ctt.quota)
                accept = mine <= share_key(team.borrowed - less, team.weight, state.pool_total)
            if not accept:
                if first_rejected is None:
                    first_rejected = cand
                continue
            state.remove(cand)
            taken.append((cand, PreemptionReason.RECLAIM if within else PreemptionReason.FAIR_SHARE))
            if state.fits(rec):
                fits = True
            elif cursor[idx] < len(cands) and _still_borrowing(cand):
                heapq.heappush(heap, entry(team))
            break
        if first_rejected is not None and idx not in retry:
            retry[idx] = (team, first_rejected)
    if not fits and not within and retry:
        # Rule B: the preemptor's team's share after admission is below the victim team's share
        # before it; at most one candidate per team (its first rejected), highest share first.
        mine = state.share_with(rec)
        order = sorted(
            retry.values(),
            key=lambda tc: (tuple(-x for x in state.share(tc[0])), tc[1].victim_key, tc[0].index),
        )
        for team, cand in order:
            if not _still_borrowing(cand):
                continue
            if mine < state.share(team):
                state.remove(cand)
                taken.append((cand, PreemptionReason.FAIR_SHARE))
                if state.fits(rec):
                    fits = True
                    break
    if not fits:
        for cand, _ in reversed(taken):
            state.restore(cand)
        return None
    return _fill_back(state, rec, taken, within_quota=False)


def find_victims(state: CycleState, rec: JobRecord) -> Victims | None:
    """The minimal set of victims that lets ``rec`` start, removed from the live state; or None
    (state unchanged). The caller has checked ``may_look_for_victims``."""
    if state.fair_share:
        return _fair_share(state, rec)
    return _first_come_first_serve(state, rec)
