"""Finding the jobs a winner that does not fit may preempt (POLICY.md section 4).

Every search works on the live ``CycleState``: a candidate is taken off its nodes, the fit is
tested, and on failure everything is put back (Kueue's ``RemoveWorkload`` / ``restoreSnapshot``).
On success the victims stay removed and the minimal set is returned: candidates are taken in
order until the preemptor fits, then every victim that is not needed is given back, last to
first, skipping the one that made it fit (Kueue's ``fillBackWorkloads``).

Jobs started earlier in the same cycle are candidates too, in section 4's order (started now,
the later start first), so that every search sees that order; but none of them is preempted in
that cycle. A preemptor whose minimal set of victims would include one takes nobody and waits
for the next cycle (``find_victims``), which follows at the same instant (its cycle started
something) and sees that job running. That is Kueue's behaviour: its scheduler never preempts a
workload admitted in the same cycle, and skips a preemptor that "no longer fits after
processing another workload" until the next cycle. Taking such a job at once cannot be written
as a plan, whose preemptions are applied before its starts, to jobs running before it (the loop
skips a preemption of a job not running, and would start both). Taking an older job instead, as
the engine once did by not counting those jobs as candidates, went against section 4's order.
The back-off (POLICY.md 3.5) still rules out a ring: a job preempted at T preempts nobody at T.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any

from .ranking import ShareKey, share_key
from .snapshot import (
    PendingCode,
    PendingReason,
    PreemptionReason,
    PreemptTeamTasks,
    PreemptWhileBorrowing,
    Reclaim,
)
from .state import (
    CycleState,
    JobRecord,
    TeamState,
    TeamType,
    TypeState,
    VictimKey,
    effective_preempt_while_borrowing,
)

Victims = list[tuple[JobRecord, PreemptionReason]]
_priority = attrgetter("priority")
_NOBODY: tuple[ShareKey, int] = ((-1, 0), -1)  # below every share: no team


class Part:
    """A team's candidates on one instance type below a priority bound, and their GPUs in all,
    made at the team's ``cand_version`` there. (An object, not a tuple: compiled by mypyc, a
    tuple read from a list is unpacked and boxed anew when put in another.)"""

    __slots__ = ("cands", "gpus", "team", "version")

    def __init__(self, version: int, team: TeamState, cands: list[JobRecord], gpus: int) -> None:
        self.version = version
        self.team = team
        self.cands = cands
        self.gpus = gpus


# Other teams' parts on one instance type, in team order.
Others = list[Part]


def share_at_least(share: ShareKey, floor: ShareKey) -> bool:
    """``share >= floor``, compared item by item (compiled by mypyc, a comparison of the tuples
    boxes both)."""
    return share[0] > floor[0] or (share[0] == floor[0] and share[1] >= floor[1])


def _top(teams: Sequence[TeamState], indices: Iterable[int] | None, but: int) -> tuple[ShareKey, int]:
    """The highest (share, index) of the teams (those at ``indices`` when given) other than the
    one of index ``but``; ``_NOBODY`` when there is none."""
    best_share, best = _NOBODY
    chosen = teams if indices is None else map(teams.__getitem__, indices)
    for team in chosen:
        index = team.index
        if index == but:
            continue
        share = team.share
        if share[0] > best_share[0] or (
            share[0] == best_share[0]
            and (share[1] > best_share[1] or (share[1] == best_share[1] and index > best))
        ):
            best_share, best = share, index
    return best_share, best


def back_off_end(preemptions: int, last_preempted_at: float | None) -> float | None:
    """POLICY.md 3.5: preempted n times, last at T: it preempts nobody before T + 2**(n-1).
    None for a job never preempted."""
    if preemptions <= 0 or last_preempted_at is None:
        return None
    # Capped so that a job preempted a thousand times still gets a finite (huge) back-off.
    return last_preempted_at + 2.0 ** min(preemptions - 1, 1000)


def in_back_off(rec: JobRecord, now: float) -> bool:
    end = back_off_end(rec.preemptions, rec.last_preempted_at)
    return end is not None and now < end


def may_look(team: TeamState, tt: TeamType, gpus: int, fair_share: bool) -> bool:
    """POLICY.md 4: a job may only preempt if its size fits within its team's quota, or it may
    preempt while borrowing, or fair share is on and ``reclaim`` is not ``never``."""
    if gpus <= tt.quota:
        return True
    if effective_preempt_while_borrowing(team.team) != PreemptWhileBorrowing.NEVER:
        return True
    return fair_share and team.team.reclaim != Reclaim.NEVER


def may_look_for_victims(state: CycleState, rec: JobRecord) -> bool:
    """``may_look``, and not during its back-off (POLICY.md 3.5)."""
    return not in_back_off(rec, state.now) and may_look(rec.team, rec.tt, rec.gpus, state.fair_share)


class Search:
    """What a search for victims found (``find_victims``): the victims, removed from the live
    state, or None and why. ``share_bound``: a fair-share search that ended for want of another
    team with a share as high as the preemptor's (or, over its team's limit, with its own
    candidates unable to help). ``deferred``: victims were found, one of them started in this
    cycle, so the preemptor waits for the next cycle (module docstring)."""

    __slots__ = ("deferred", "share_bound", "victims")

    def __init__(self, victims: Victims | None, share_bound: bool = False, deferred: bool = False) -> None:
        self.victims = victims
        self.share_bound = share_bound
        self.deferred = deferred


NONE_FOUND = Search(None)
NONE_AT_SHARE_BOUND = Search(None, share_bound=True)
NONE_YET = Search(None, deferred=True)


def prefix(team: TeamState, tt: TeamType, bound: int) -> Part:
    """The team's candidates on the type of priority below ``bound`` (2**62: all), which are a
    prefix of them (they are in preemption order, lowest priority first), with their GPUs; kept
    until its candidates there change (``TeamType.cand_version``). Not to be changed."""
    part = tt.prefixes.get(bound)
    if part is None or part.version != tt.cand_version:
        cands = tt.candidates
        if bound < 2**62:
            cands = cands[: bisect_left(cands, bound, key=_priority)]
        gpus = sum(g for p, g in tt.cand_gpus.items() if p < bound)
        part = Part(tt.cand_version, team, cands, gpus)
        tt.prefixes[bound] = part
    return part


def own_candidates(rec: JobRecord) -> list[JobRecord]:
    """Same-team candidates allowed by ``preempt_team_tasks``, in preemption order."""
    mode = rec.team.team.preempt_team_tasks
    if mode == PreemptTeamTasks.NEVER:
        return []
    prio = rec.priority
    if mode == PreemptTeamTasks.LOWER_PRIORITY:
        return prefix(rec.team, rec.tt, prio).cands
    # lower-or-newer-equal-priority: also equal priority and submitted after the preemptor
    # (Kueue's LowerOrNewerEqualPriority compares creation time; ties go by id here).
    mine = (rec.job.submit_time, rec.job.seq, rec.job.id)
    return [
        c
        for c in rec.tt.candidates
        if c.priority < prio or (c.priority == prio and (c.job.submit_time, c.job.seq, c.job.id) > mine)
    ]


class Borrowers:
    """Other teams' candidates on one instance type under one priority bound: each team above
    its quota there with a candidate under the bound, as ``(team, its candidates, their GPUs)``
    in team order. Kept over changes: the teams whose candidates or borrowing there change are
    collected in ``changed`` (``TypeState.touch``) and only their parts are made again, when
    next asked (``borrowers``). What is read of the teams' usage and shares is kept until those
    move."""

    __slots__ = (
        "bound",
        "cand_version",
        "changed",
        "entries",
        "freeable_at",
        "parts",
        "share_at",
        "teams",
        "terms",
        "top",
        "total",
    )

    def __init__(self, state: CycleState, ts: TypeState, bound: int) -> None:
        self.bound = bound
        self.changed: set[int] = set()
        ts.watchers.append(self.changed)
        self.parts: dict[int, Part] = {}
        for index in ts.borrowers:
            self._part(state, ts, index)
        self._made(ts)

    def update(self, state: CycleState, ts: TypeState) -> None:
        """Make again the parts of the teams that changed."""
        changed = self.changed
        for index in changed:
            if index in ts.borrowers:
                self._part(state, ts, index)
            else:
                self.parts.pop(index, None)
        changed.clear()
        self._made(ts)

    def _part(self, state: CycleState, ts: TypeState, index: int) -> None:
        # Candidates are in preemption order, lowest priority first: those below the bound are
        # a prefix, and their GPUs are the team's sums by priority below it. Each team's part is
        # kept until its own candidates change (``TeamType.cand_version``).
        team = state.team_list[index]
        part = prefix(team, team.per_type[ts.name], self.bound)
        if part.cands:
            self.parts[index] = part
        else:
            self.parts.pop(index, None)

    def _made(self, ts: TypeState) -> None:
        parts = self.parts
        self.entries: Others = [parts[index] for index in sorted(parts)]
        self.teams = [entry.team for entry in self.entries]
        self.cand_version = ts.cand_version
        self.freeable_at = -1  # the type's ``version`` ``terms`` and ``total`` were made at
        self.terms: dict[int, int] = {}
        self.total = 0
        self.share_at = -1  # the state's ``share_version`` ``top`` was made at
        self.top: list[tuple[ShareKey, int]] = []

    def others(self, own: TeamState, min_share: ShareKey | None = None) -> Others:
        """The entries of teams other than ``own``; with ``min_share``, of those whose share is at
        least that."""
        if min_share is None:
            return [entry for entry in self.entries if entry.team is not own]
        return [
            entry
            for entry in self.entries
            if entry.team is not own and share_at_least(entry.team.share, min_share)
        ]

    def freeable(self, own: TeamState, ts: TypeState) -> int:
        """``_freeable`` of ``others(own)``, from sums kept while the type's accounting stands."""
        if self.freeable_at != ts.version:
            it = ts.name
            terms: dict[int, int] = {}
            for entry in self.entries:
                tt = entry.team.per_type[it]
                terms[entry.team.index] = min(entry.gpus, tt.usage - tt.quota + tt.cand_max - 1)
            self.terms, self.total, self.freeable_at = terms, sum(terms.values()), ts.version
        return self.total - self.terms.get(own.index, 0)

    def any_share_at_least(self, state: CycleState, own: TeamState, floor: ShareKey) -> bool:
        """Whether some team other than ``own`` has a share of at least ``floor``: the highest
        share, and the highest but the top team's when asked for, are kept while no team's
        share moves."""
        if self.share_at != state.share_version:
            self.top = [_top(self.teams, None, -1)]
            self.share_at = state.share_version
        return share_at_least(_highest_but(self.top, own.index, self.teams), floor)


def borrowers(
    state: CycleState, ts: TypeState, allowed: int | None, max_priority: int | None = None
) -> Borrowers:
    """Other teams' candidates on ``ts`` from teams above their quota there; ``allowed``: only
    jobs of priority below it (None: any); ``max_priority``: and at most that."""
    key = (ts.name, allowed, max_priority)
    cached = state.other_lists.get(key)
    if cached is None:
        bound = min(
            allowed if allowed is not None else 2**62,
            max_priority + 1 if max_priority is not None else 2**62,
        )
        cached = state.other_lists[key] = Borrowers(state, ts, bound)
    elif cached.cand_version != ts.cand_version:
        cached.update(state, ts)
    return cached


def _top_share(state: CycleState, ts: TypeState, own: TeamState) -> ShareKey:
    """The highest share among the teams other than ``own`` borrowing on ``ts`` (below every
    share when there is none), from the two highest kept while no share and no borrower there
    moves."""
    kept = state.top_shares.get(ts.name)
    if kept is None or kept[0] != state.share_version or kept[1] != ts.cand_version:
        kept = (state.share_version, ts.cand_version, [_top(state.team_list, ts.borrowers, -1)])
        state.top_shares[ts.name] = kept
    return _highest_but(kept[2], own.index, state.team_list, ts.borrowers)


def _highest_but(
    top: list[tuple[ShareKey, int]],
    own: int,
    teams: Sequence[TeamState],
    indices: Iterable[int] | None = None,
) -> ShareKey:
    """The highest share of a team other than ``own`` among ``teams`` (those at ``indices``
    when given), from ``top``: their highest (share, team index) and, once asked for, the
    highest but that team's, which is read from the teams only then and kept in ``top``."""
    if top[0][1] != own:
        return top[0][0]
    if len(top) == 1:
        top.append(_top(teams, indices, own))
    return top[1][0]


def _freeable(lists: Others, it: str) -> int:
    """At most what these other teams' candidates can free: a team gives jobs only while it
    stays above its quota, so no more than its borrowed GPUs plus one job less one GPU."""
    total = 0
    for entry in lists:
        tt = entry.team.per_type[it]
        total += min(entry.gpus, tt.usage - tt.quota + tt.cand_max - 1)
    return total


def _may_lose(state: CycleState, team: TeamState, mine: ShareKey) -> bool:
    """Whether a fair-share search whose team's share is ``mine`` once it runs may take a job of
    ``team`` (borrowing there, share at least ``mine``): by rule B if its share is above, by rule
    A if it stays at least ``mine`` with one borrowed GPU less."""
    return not share_at_least(mine, team.share) or share_at_least(
        share_key(team.borrowed - 1, team.unit, state.pool_total, team.history, team.scale), mine
    )


def _cannot_free_enough(state: CycleState, rec: JobRecord, own_gpus: int, others_freeable: int) -> bool:
    """Cheap necessary test before a search: every victim frees at most its GPUs of capacity
    and of pool, so if the shortfall of either exceeds what the candidates hold no set of
    victims works. The pool is no constraint when the job fits in its team's kept part, as it
    may once its own team's candidates are gone."""
    if not state.shortcuts:
        return False
    tt, ts, g = rec.tt, rec.ts, rec.gpus
    freeable = own_gpus + others_freeable
    if ts.running + g - ts.capacity > freeable:
        return True
    kept = tt.kept
    if tt.usage + g - own_gpus <= kept:
        return False
    above = max(0, tt.usage + g - kept) - max(0, tt.usage - kept)
    return above - state.pool_available(tt, ts) > freeable


def _reclaim_threshold(rec: JobRecord) -> int | None:
    """Other teams' jobs a within-quota preemptor may take, by its team's ``reclaim``:
    None = any, else only priorities below the returned value."""
    reclaim = rec.team.team.reclaim
    if reclaim == Reclaim.ANY:
        return None
    if reclaim == Reclaim.LOWER_PRIORITY:
        return rec.priority
    return -(2**62)  # never: no priority is below this


class Trial:
    """A dry run of removing candidates: the changes are kept beside the state, not in it.

    A search that fails, the common case in a full cluster, then costs a few dictionary
    updates per candidate instead of taking jobs off nodes and putting them back. ``fits``
    answers exactly what ``CycleState.fits`` would answer after those removals.
    """

    __slots__ = (
        "best_single",
        "borrowed",
        "emptied",
        "freed",
        "held_delta",
        "node_free",
        "pool_freed",
        "rec",
        "state",
        "usage",
    )

    def __init__(self, state: CycleState, rec: JobRecord) -> None:
        self.state = state
        self.rec = rec
        self.usage: dict[TeamType, int] = {}
        self.borrowed: dict[TeamState, int] = {}
        self.node_free: dict[int, int] = {}
        self.freed = 0  # GPUs taken off the instance type
        self.pool_freed = 0  # fall of pool_used
        self.held_delta = 0  # change of the capacity held for reclaiming teams
        self.emptied = 0  # GPUs of ready nodes that became whole and free
        self.best_single = 0  # most free GPUs on one ready node touched

    def usage_of(self, tt: TeamType) -> int:
        return self.usage.get(tt, tt.usage)

    def borrowed_of(self, team: TeamState) -> int:
        return self.borrowed.get(team, team.borrowed)

    def still_borrowing(self, cand: JobRecord) -> bool:
        return self.usage_of(cand.tt) > cand.tt.quota

    def take(self, cand: JobRecord) -> None:
        tt, team = cand.tt, cand.team
        old = self.usage_of(tt)
        new = old - cand.gpus
        self.usage[tt] = new
        kept, quota = tt.kept, tt.quota
        self.pool_freed += max(0, old - kept) - max(0, new - kept)
        if tt.holding:
            self.held_delta += _unused_lendable(tt, new) - _unused_lendable(tt, old)
        self.borrowed[team] = self.borrowed_of(team) + max(0, new - quota) - max(0, old - quota)
        self.freed += cand.gpus
        placement = cand.ts.placement
        index, free, ready, size = placement.index, placement.free, placement.ready, placement.gpus
        node_free = self.node_free
        for name, gpus in cand.nodes:
            i = index[name]
            after = node_free.get(i, free[i]) + gpus
            node_free[i] = after
            if ready[i]:
                self.best_single = max(self.best_single, after)
                if after == size[i]:
                    self.emptied += after

    def fits(self, within_quota: bool = False) -> bool:
        rec = self.rec
        tt, ts, g = rec.tt, rec.ts, rec.gpus
        usage = self.usage_of(tt)
        after = usage + g
        limit = tt.quota if within_quota else tt.max_use
        if limit is not None and after > limit:
            return False
        kept = tt.kept
        above = max(0, after - kept) - max(0, usage - kept)
        if above:
            own_held = _unused_lendable(tt, usage) if tt.holding else 0
            available = ts.pool - (ts.pool_used - self.pool_freed) - (ts.held + self.held_delta - own_held)
            if above > available:
                return False
        if ts.running - self.freed + g > ts.capacity:
            return False
        placement = ts.placement
        if g <= placement.gpus_per_node:
            return self.best_single >= g or placement.can_place(g)
        return placement.empty_gpus + self.emptied >= g

    def share(self, team: TeamState) -> ShareKey:
        return share_key(self.borrowed_of(team), team.unit, self.state.pool_total, team.history, team.scale)

    def commit(self, taken: Victims) -> None:
        """Take the set found off its nodes for real."""
        for cand, _ in taken:
            self.state.remove(cand)

    def undo(self) -> None:
        """A search that found nothing: the state was never changed."""

    def share_with(self) -> ShareKey:
        """The preemptor's team's share once it runs."""
        rec = self.rec
        tt = rec.tt
        usage = self.usage_of(tt)
        extra = max(0, usage + rec.gpus - tt.quota) - max(0, usage - tt.quota)
        team = rec.team
        return share_key(
            self.borrowed_of(team) + extra, team.unit, self.state.pool_total, team.history, team.scale
        )


class ResTrial(Trial):
    """A ``Trial`` that also counts, per team, what it borrows of each resource other than GPUs,
    for the dominant share (docs/resources.md 5): used when some instance type counts them, so
    that a GPU-only cluster's searches pay nothing for it."""

    __slots__ = ("res_borrowed", "res_usage")

    def __init__(self, state: CycleState, rec: JobRecord) -> None:
        super().__init__(state, rec)
        self.res_usage: dict[TeamType, list[int]] = {}
        self.res_borrowed: dict[TeamState, list[int]] = {}

    def res_usage_of(self, tt: TeamType) -> list[int]:
        tr = tt.res
        return self.res_usage.get(tt, tr.usage) if tr is not None else []

    def res_borrowed_of(self, team: TeamState) -> list[int]:
        return self.res_borrowed.get(team, team.res_borrowed)

    def take(self, cand: JobRecord) -> None:
        super().take(cand)
        asked, tt = cand.res, cand.tt
        tr = tt.res
        if asked is None or tr is None:
            return
        usage = list(self.res_usage_of(tt))
        borrowed = list(self.res_borrowed_of(cand.team))
        for k, a in enumerate(asked):
            if a:
                old, quota = usage[k], tr.quota[k]
                borrowed[tr.dom[k]] += max(0, old - a - quota) - max(0, old - quota)
                usage[k] = old - a
        self.res_usage[tt] = usage
        self.res_borrowed[cand.team] = borrowed

    def share(self, team: TeamState) -> ShareKey:
        return self.state.dominant_share(team, self.borrowed_of(team), self.res_borrowed_of(team))

    def share_with(self) -> ShareKey:
        rec = self.rec
        tt, team = rec.tt, rec.team
        return self.state.share_adding(
            team,
            self.borrowed_of(team),
            self.res_borrowed_of(team),
            tt,
            self.usage_of(tt),
            self.res_usage_of(tt),
            rec.gpus,
            rec.res,
        )

    def share_taking(self, cand: JobRecord) -> ShareKey:
        """The share of ``cand``'s team once ``cand`` is taken too."""
        tt, team = cand.tt, cand.team
        less = None if cand.res is None else tuple(-a for a in cand.res)
        return self.state.share_adding(
            team,
            self.borrowed_of(team),
            self.res_borrowed_of(team),
            tt,
            self.usage_of(tt),
            self.res_usage_of(tt),
            -cand.gpus,
            less,
        )


class LiveTrial(ResTrial):
    """docs/resources.md 6: a search for a job on a type that counts other resources takes its
    candidates off their nodes in the state itself, and asks the state whether the job fits, in
    every resource and with a placement. ``lacking``: the resources the job lacks (``lacking``);
    a candidate counts while its team borrows one of them."""

    __slots__ = ("lacking", "removed")

    def __init__(self, state: CycleState, rec: JobRecord, lacking: list[int]) -> None:
        super().__init__(state, rec)
        self.lacking = lacking
        self.removed: list[JobRecord] = []

    def take(self, cand: JobRecord) -> None:
        self.state.remove(cand)
        self.removed.append(cand)

    def fits(self, within_quota: bool = False) -> bool:
        return self.state.fits(self.rec, within_quota)

    def still_borrowing(self, cand: JobRecord) -> bool:
        return borrows_any(cand.tt, self.lacking)

    def commit(self, taken: Victims) -> None:
        self.removed = []  # already off their nodes

    def undo(self) -> None:
        for cand in reversed(self.removed):
            self.state.restore(cand)
        self.removed = []


def lacking(state: CycleState, rec: JobRecord, within_quota: bool) -> list[int]:
    """docs/resources.md 6: the resources (-1: GPUs, else the index in ``TypeRes.names``) whose
    figures fail section 2's conditions for ``rec``; when only the placement fails, every
    resource the job asks."""
    asked = rec.res
    assert asked is not None
    out = [k for k, _ in state.res_failures(rec.tt, rec.ts, rec.gpus, asked, within_quota)]
    if not out:
        out = ([-1] if rec.gpus else []) + [k for k, a in enumerate(asked) if a]
    return out


def borrows_any(tt: TeamType, resources: list[int]) -> bool:
    """Whether the team borrows on ``tt`` one of ``resources`` (as ``lacking`` gives them)."""
    tr = tt.res
    for k in resources:
        if k < 0:
            if tt.usage > tt.quota:
                return True
        elif tr is not None and tr.usage[k] > tr.quota[k]:
            return True
    return False


def res_others(
    state: CycleState, rec: JobRecord, allowed: int | None, max_priority: int | None, within_quota: bool
) -> Others:
    """docs/resources.md 6: other teams' candidates on the job's type, below the priority bounds
    of ``borrowers``, of the teams that borrow a resource the job lacks there, in team order."""
    bound = min(
        allowed if allowed is not None else 2**62,
        max_priority + 1 if max_priority is not None else 2**62,
    )
    short = lacking(state, rec, within_quota)
    out: Others = []
    for team in state.team_list:
        tt = team.per_type[rec.ts.name]
        if team is rec.team or not borrows_any(tt, short):
            continue
        part = prefix(team, tt, bound)
        if part.cands:
            out.append(part)
    return out


def _trial(state: CycleState, rec: JobRecord, within_quota: bool) -> Trial:
    if rec.res is not None:
        return LiveTrial(state, rec, lacking(state, rec, within_quota))
    return ResTrial(state, rec) if state.resources else Trial(state, rec)


def _unused_lendable(tt: TeamType, usage: int) -> int:
    return tt.lendable - min(tt.lendable, max(0, usage - tt.kept))


def _commit(state: CycleState, rec: JobRecord, taken: Victims, within_quota: bool, trial: Trial) -> Victims:
    """A dry run found a set: remove it for real, then give back what is not needed."""
    trial.commit(taken)
    return _fill_back(state, rec, taken, within_quota)


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
    others: Others,
    other_reason: PreemptionReason,
    own: list[JobRecord],
    within_quota: bool,
) -> Victims | None:
    """Kueue's ``minimalPreemptions`` under first-come-first-serve: other teams' candidates as
    one group in preemption order, then the own team's; take until the preemptor fits, then
    fill back. A team's jobs stop being candidates once it is no longer above its quota (it
    cannot rise above it again during the search), so its remaining jobs are not even visited.
    """
    trial = _trial(state, rec, within_quota)
    taken: Victims = []
    heap = [(entry.cands[0].victim_key, n) for n, entry in enumerate(others)]
    heapq.heapify(heap)
    cursor = [0] * len(others)
    while heap:
        n = heapq.heappop(heap)[1]
        cands = others[n].cands
        cand = cands[cursor[n]]
        if not trial.still_borrowing(cand):
            continue  # the whole team is done
        cursor[n] += 1
        if cursor[n] < len(cands):
            heapq.heappush(heap, (cands[cursor[n]].victim_key, n))
        trial.take(cand)
        taken.append((cand, other_reason))
        if trial.fits(within_quota):
            return _commit(state, rec, taken, within_quota, trial)
    for cand in own:
        trial.take(cand)
        taken.append((cand, PreemptionReason.IN_TEAM))
        if trial.fits(within_quota):
            return _commit(state, rec, taken, within_quota, trial)
    trial.undo()
    return None


def _no_candidates(rec: JobRecord) -> bool:
    """Cheap test before any search: no other team borrows on the instance type and the
    preemptor's own team has no job it may preempt, so no search can find a victim."""
    borrowers = rec.ts.borrowers
    if borrowers and (len(borrowers) > 1 or rec.team.index not in borrowers):
        return False
    mode = rec.team.team.preempt_team_tasks
    if mode == PreemptTeamTasks.NEVER:
        return True
    if mode == PreemptTeamTasks.LOWER_PRIORITY:
        return rec.tt.candidate_gpus_below(rec.priority) == 0
    return not rec.tt.candidates


def team_limit_hopeless(rec: JobRecord, own: list[JobRecord], within_quota: bool) -> bool:
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


def _placement_hopeless(state: CycleState, rec: JobRecord, own: list[JobRecord], others: Others) -> bool:
    """Cheap necessary test of node placement: even with every candidate that could go gone,
    no ready node would have room (or, for a multi-node job, too few nodes would be whole and
    free). Another team gives at most ``_freeable`` GPUs, which bounds its gain on any node.
    The gains only grow as candidates are added, so the test stops at the first node (or
    whole-node count) that would do: the common answer, "not hopeless", comes early."""
    placement = rec.ts.placement
    g = rec.gpus
    if not state.shortcuts or placement.can_place(g):
        return False
    it = rec.ts.name
    index, free, ready, size = placement.index, placement.free, placement.ready, placement.gpus
    single = g <= placement.gpus_per_node
    need_whole = g - placement.empty_gpus  # GPUs of nodes that must become whole and free
    if not single and need_whole <= 0:
        return False
    whole = 0
    gain: dict[int, int] = {}

    def grows(i: int, by: int) -> bool:
        """Node ``i`` may gain ``by`` more GPUs; True when that makes the job placeable."""
        nonlocal whole
        before = gain.get(i, 0)
        after = before + by
        gain[i] = after
        if not ready[i]:
            return False
        if single:
            return free[i] + after >= g
        if free[i] + before < size[i] <= free[i] + after and size[i] > free[i]:
            whole += size[i]
            return whole >= need_whole
        return False

    for cand in own:
        for name, gpus in cand.nodes:
            if grows(index[name], gpus):
                return False
    for entry in others:
        tt = entry.team.per_type[it]
        cap = min(entry.gpus, tt.usage - tt.quota + tt.cand_max - 1)
        mine: dict[int, int] = {}
        for cand in entry.cands:
            for name, gpus in cand.nodes:
                i = index[name]
                old = mine.get(i, 0)
                mine[i] = old + gpus
                by = min(old + gpus, cap) - min(old, cap)
                if by > 0 and grows(i, by):
                    return False
    return True


def _first_come_first_serve(state: CycleState, rec: JobRecord) -> Victims | None:
    """POLICY.md 4, first-come-first-serve: attempt (a) ending within quota, then (b)."""
    tt = rec.tt
    team = rec.team.team
    within = tt.usage + rec.gpus <= tt.quota
    own = own_candidates(rec)
    own_gpus = sum(c.gpus for c in own)
    if not team_limit_hopeless(rec, own, within_quota=True):
        found = borrowers(state, rec.ts, _reclaim_threshold(rec))
        if not _cannot_free_enough(state, rec, own_gpus, found.freeable(rec.team, rec.ts)):
            others = (
                found.others(rec.team)
                if rec.res is None
                else res_others(state, rec, _reclaim_threshold(rec), None, True)
            )
            if not _placement_hopeless(state, rec, own, others):
                victims = _minimal(state, rec, others, PreemptionReason.RECLAIM, own, within_quota=True)
                if victims is not None:
                    return victims
    if within:  # only attempt (a) applies
        return None
    if effective_preempt_while_borrowing(team) == PreemptWhileBorrowing.NEVER:
        return None
    if team_limit_hopeless(rec, own, within_quota=False):
        return None
    found_b = borrowers(state, rec.ts, rec.priority, team.preempt_while_borrowing_max_priority)
    if _cannot_free_enough(state, rec, own_gpus, found_b.freeable(rec.team, rec.ts)):
        return None
    others_b = (
        found_b.others(rec.team)
        if rec.res is None
        else res_others(state, rec, rec.priority, team.preempt_while_borrowing_max_priority, False)
    )
    if _placement_hopeless(state, rec, own, others_b):
        return None
    return _minimal(state, rec, others_b, PreemptionReason.RECLAIM_WHILE_BORROWING, own, within_quota=False)


def _rule_a_keeps(
    trial: ResTrial, cand: JobRecord, mine: ShareKey, seen: dict[tuple[int, tuple[int, ...] | None], bool]
) -> bool:
    """Rule A with dominant shares (docs/resources.md 5): ``cand``'s team's share once it is
    taken is still at least ``mine``; ``seen``: the answers so far, by what a victim frees."""
    key = (cand.gpus, cand.res)
    kept = seen.get(key)
    if kept is None:
        kept = seen[key] = share_at_least(trial.share_taking(cand), mine)
    return kept


def _rule_a_room(state: CycleState, borrowed: int, team: TeamState, mine: ShareKey) -> int:
    """The most GPUs ``team`` (now borrowing ``borrowed``) can lose with ``mine`` still at most
    its share afterwards (rule A); -1 when even losing nothing leaves it below ``mine``. Shares
    fall as borrowed GPUs fall, so a binary search finds it."""
    if not share_at_least(share_key(borrowed, team.unit, state.pool_total, team.history, team.scale), mine):
        return -1
    lo, hi = 0, borrowed  # share after losing lo is >= mine
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if share_at_least(
            share_key(borrowed - mid, team.unit, state.pool_total, team.history, team.scale), mine
        ):
            lo = mid
        else:
            hi = mid - 1
    return lo


# Long: one greedy search (rules A then B over one heap of teams) after the bounds that rule it
# out; the bounds and the search share their locals, and split up they would pass a dozen around.
def _fair_share(state: CycleState, rec: JobRecord) -> Search:
    """POLICY.md 4, fair share (Kueue ``fairPreemptions`` with the strategies
    LessThanOrEqualToFinalShare (rule A) then LessThanInitialShare (rule B))."""
    tt = rec.tt
    it = rec.ts.name
    own_team = rec.team
    within = tt.usage + rec.gpus <= tt.quota
    own = own_candidates(rec)
    if team_limit_hopeless(rec, own, within_quota=False):
        # Its own team's limit, usage and candidates decide this, and the memory of failed
        # searches holds the team's borrowed GPUs and usage: nothing another team does
        # changes it, so it is remembered as long as a failure at the share bound.
        return NONE_AT_SHARE_BOUND
    if (
        not own
        and not within
        and state.shortcuts
        and not share_at_least(_top_share(state, rec.ts, own_team), state.share_with(rec))
    ):
        # Rules A and B both need a victim team with a share at least the preemptor's after
        # admission; no team borrowing here has one (a bound on the candidates' teams below).
        return NONE_AT_SHARE_BOUND
    own_gpus = sum(c.gpus for c in own)
    floor: ShareKey | None = None
    if not within and state.shortcuts:
        # Rules A and B both need the victim team's share at least the preemptor's (after
        # admission); own-team victims can lower the preemptor's share at most to ``floor``.
        usage_min = tt.usage - own_gpus
        extra = max(0, usage_min + rec.gpus - tt.quota) - max(0, tt.usage - tt.quota)
        floor = share_key(
            own_team.borrowed + extra, own_team.unit, state.pool_total, own_team.history, own_team.scale
        )
    found = borrowers(state, rec.ts, _reclaim_threshold(rec))
    if not own and floor is not None and not found.any_share_at_least(state, own_team, floor):
        return NONE_AT_SHARE_BOUND  # no team with a share that high: no victim anywhere
    others = (
        found.others(own_team, floor)
        if rec.res is None
        else res_others(state, rec, _reclaim_threshold(rec), None, False)
    )
    if not own and not others:
        return NONE_FOUND
    if not own and floor is not None and not any(_may_lose(state, entry.team, floor) for entry in others):
        # Every other team's share is the preemptor's (``floor``, its share once it runs, when
        # it takes nothing of its own) and falls below it with one GPU less: rule A takes none
        # of their jobs, and rule B needs a share above the preemptor's.
        return NONE_FOUND
    if _cannot_free_enough(state, rec, own_gpus, _freeable(others, it)):
        return NONE_FOUND
    if _placement_hopeless(state, rec, own, others):
        return NONE_FOUND
    lists: dict[int, tuple[TeamState, list[JobRecord]]] = {
        entry.team.index: (entry.team, entry.cands) for entry in others
    }
    if own:
        lists[own_team.index] = (own_team, own)
    cursor = dict.fromkeys(lists, 0)
    # docs/resources.md 5: with other resources, shares are dominant ones and rule A tests each
    # victim's team's share after it directly (no room in GPUs).
    trial = _trial(state, rec, False)
    res_trial = trial if isinstance(trial, ResTrial) else None

    def entry(team: TeamState) -> tuple[int, int, int, VictimKey, int]:
        # Highest share first; on equal shares another team before the preemptor's own; then
        # the team whose next candidate comes first in the preemption order.
        is_own = team is own_team
        share = trial.share_with() if is_own else trial.share(team)
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
            trial.take(cand)
            taken.append((cand, PreemptionReason.IN_TEAM))
            if trial.fits():
                fits = True
                break
            if cursor[idx] < len(cands):
                heapq.heappush(heap, entry(team))
            continue
        # Rule A: after the preemption, the preemptor's team's share is at most the victim
        # team's share; a victim of g GPUs lowers its team's borrowed GPUs by min(g, borrowed
        # here), so the acceptable victims are those lowering it by at most ``room``.
        ctt = team.per_type[it]
        if res_trial is None:
            room = (
                (1 << 62)
                if within
                else _rule_a_room(state, trial.borrowed_of(team), team, trial.share_with())
            )
        else:
            room = 1 << 62
            mine_now = res_trial.share_with()
            # Rule A per victim, kept by what the victim frees: nothing changes while they are
            # rejected.
            seen: dict[tuple[int, tuple[int, ...] | None], bool] = {}
        borrowed_here = trial.usage_of(ctt) - ctt.quota
        first_rejected: JobRecord | None = None
        # With dominant shares, a team already below ``mine`` rejects them all (shares only fall).
        if res_trial is not None and not within and not share_at_least(res_trial.share(team), mine_now):
            first_rejected = cands[cursor[idx]]
            cursor[idx] = len(cands)
        while cursor[idx] < len(cands):
            cand = cands[cursor[idx]]
            cursor[idx] += 1
            if min(cand.gpus, borrowed_here) > room or (
                res_trial is not None and not within and not _rule_a_keeps(res_trial, cand, mine_now, seen)
            ):
                if first_rejected is None:
                    first_rejected = cand
                continue
            trial.take(cand)
            taken.append((cand, PreemptionReason.RECLAIM if within else PreemptionReason.FAIR_SHARE))
            if trial.fits():
                fits = True
            elif cursor[idx] < len(cands) and trial.still_borrowing(cand):
                heapq.heappush(heap, entry(team))
            break
        if first_rejected is not None and idx not in retry:
            retry[idx] = (team, first_rejected)
    if not fits and not within and retry:
        # Rule B: the preemptor's team's share after admission is below the victim team's share
        # before it; at most one candidate per team (its first rejected), highest share first.
        mine = trial.share_with()
        order = sorted(
            retry.values(),
            key=lambda tc: (tuple(-x for x in trial.share(tc[0])), tc[1].victim_key, tc[0].index),
        )
        for team, cand in order:
            if not trial.still_borrowing(cand):
                continue
            if not share_at_least(mine, trial.share(team)):
                trial.take(cand)
                taken.append((cand, PreemptionReason.FAIR_SHARE))
                if trial.fits():
                    fits = True
                    break
    if not fits:
        trial.undo()
        return NONE_FOUND
    return Search(_commit(state, rec, taken, False, trial))


def find_victims(state: CycleState, rec: JobRecord) -> Search:
    """The minimal set of victims that lets ``rec`` start, removed from the live state; or no
    victims (state unchanged) and why. The caller has checked ``may_look_for_victims``.

    No victims also when that set includes a job started in this cycle: nobody is preempted
    (``Search.deferred``); the preemptor waits for the next cycle (module docstring), as a
    head that found no victim does, holding its team's quota if its ``reclaim`` is not ``any``
    (POLICY.md 3.3: it may take none now, and no other team should borrow that quota
    meanwhile). Only then: a set of jobs all running before the cycle is taken at once, so a
    job within its team's quota still starts in its cycle (6.4) unless section 4's order itself
    would take a job started in it."""
    if rec.res is not None or state.resources:
        # The bounds before a search count GPUs, and a job of partitions alone has none: on a
        # type that counts other resources every search is made in full, and so is every
        # search of a cluster with such a type (its shares are dominant ones, section 5).
        shortcuts = state.shortcuts
        state.shortcuts = False
        try:
            return _find_victims(state, rec)
        finally:
            state.shortcuts = shortcuts
    return _find_victims(state, rec)


def _find_victims(state: CycleState, rec: JobRecord) -> Search:
    if state.shortcuts and _no_candidates(rec):
        return NONE_FOUND
    search = _fair_share(state, rec) if state.fair_share else Search(_first_come_first_serve(state, rec))
    victims = search.victims
    if victims is not None and rec.res is not None and not state.fits(rec):
        # docs/resources.md 6: the search asked the state whether the job fits in every
        # resource (``LiveTrial``); a set after which it still lacks one is no set at all.
        for victim, _ in victims:
            state.restore(victim)
        return NONE_FOUND
    if victims is not None and any(victim.started_in_cycle for victim, _ in victims):
        for victim, _ in victims:
            state.restore(victim)
        return NONE_YET
    return search


def _victim_key(rec: JobRecord) -> VictimKey:
    return rec.victim_key


def _in_time(seconds: float) -> str:
    """A time left as the pending reason says it: whole minutes rounded up, seconds below one."""
    if seconds < 60:
        return f"{max(1, math.ceil(seconds))} s"
    return f"{math.ceil(seconds / 60)} min"


def min_runtime_reason(state: CycleState, rec: JobRecord) -> PendingReason | None:
    """docs/preemption.md 4: the reason ``min-runtime`` for a job whose search found no victim,
    when the same search with the jobs protected by their minimum runtime counted as candidates
    (on its instance type: ``TypeState.protected``) finds a set that takes some of them; None
    otherwise. The message names the protected victims and the time until the last of them may
    be taken ("reclaims 8 GPUs from speech's job 4121 in 6 min: minimum runtime").

    The state is left as it was: the protected jobs are candidates only during this search, and
    its victims are given back. The bounds before a search read kept figures, which are made
    again for the candidates of this search and after it: the lists of other teams' candidates
    (``TypeState.touch``), what they could free (the type's ``version``) and the highest shares
    among them (``share_version``)."""
    ts = rec.ts
    if not ts.protected:
        return None
    # Each team's protected jobs there, grouped and sorted once while they stand; its list of
    # candidates with them is kept while neither moves. Only teams that could lose a job to it
    # take part: its own (the search applies ``preempt_team_tasks``), and other teams while they
    # borrow there (a team not above its quota gives no job, and a search only lowers usage).
    groups = _protected_groups(ts)
    own = rec.team
    saved: list[tuple[TeamType, list[JobRecord], dict[int, int], int, int]] = []
    for index, group in groups.items():
        tt: TeamType = group[0]
        if index != own.index and tt.usage <= tt.quota:
            continue
        if own.team.preempt_team_tasks == PreemptTeamTasks.NEVER and index == own.index:
            continue
        saved.append((tt, tt.candidates, tt.cand_gpus, tt.cand_max, index))
        if group[4] != tt.cand_version or group[5] is None:
            merged = dict(tt.cand_gpus)
            for priority, gpus in group[2].items():
                merged[priority] = merged.get(priority, 0) + gpus
            group[4], group[5], group[6] = (
                tt.cand_version,
                sorted(tt.candidates + group[1], key=_victim_key),
                merged,
            )
        tt.candidates, tt.cand_gpus = group[5], group[6]
        tt.cand_max = max(tt.cand_max, group[3])
        tt.cand_version += 1
        ts.touch(index)
    if not saved:
        return None
    ts.version += 1
    state.share_version += 1
    shortcuts = state.shortcuts
    if rec.res is not None or state.resources:
        state.shortcuts = False  # as in ``find_victims``
    try:
        victims = _fair_share(state, rec).victims if state.fair_share else _first_come_first_serve(state, rec)
        if victims is not None:
            # As in ``find_victims``: victims after which it still lacks a resource are none.
            lacking = rec.res is not None and not state.fits(rec)
            for victim, _ in victims:
                state.restore(victim)
            if lacking:
                victims = None
    finally:
        state.shortcuts = shortcuts
        for tt, candidates, cand_gpus, cand_max, team_index in saved:
            tt.candidates, tt.cand_gpus, tt.cand_max = candidates, cand_gpus, cand_max
            tt.cand_version += 1
            ts.touch(team_index)
            # The merged list stays good while the team's candidates are as they were.
            groups[team_index][4] = tt.cand_version
        ts.version += 1
        state.share_version += 1
    if victims is None:
        return None
    return _min_runtime_message(state, rec, victims)


def _protected_groups(ts: TypeState) -> dict[int, Any]:
    """The type's protected jobs by team index, as [its TeamType, its protected jobs sorted in
    victim order, their GPUs by priority, their largest GPUs, and the team's candidates merged
    with them: the ``cand_version`` they were merged at, the list, its GPUs by priority]; made
    again when the protected jobs change (``TypeState.protected_version``)."""
    made, groups = ts.protected_groups
    if made != ts.protected_version:
        groups = {}
        for p in ts.protected:
            groups.setdefault(p.team.index, [p.tt, []])[1].append(p)
        for group in groups.values():
            extra = group[1]
            extra.sort(key=_victim_key)
            by_priority: dict[int, int] = {}
            for p in extra:
                by_priority[p.priority] = by_priority.get(p.priority, 0) + p.gpus
            group += [by_priority, max(p.gpus for p in extra), -1, None, None]
        ts.protected_groups = (ts.protected_version, groups)
    return groups


def _min_runtime_message(state: CycleState, rec: JobRecord, victims: Victims) -> PendingReason | None:
    """The ``min-runtime`` reason for the victims a search with the protected jobs found, or
    None when none of them is protected."""
    now = state.now
    held = [v for v, _ in victims if v.protected_until > now]
    if not held:
        return None
    # The victim protected longest first: the job starts when its protection ends.
    held.sort(key=lambda v: (-v.protected_until, v.victim_key))
    first = held[0]
    gpus = sum(v.gpus for v in held)
    gpus_text = f"{gpus} GPU" if gpus == 1 else f"{gpus} GPUs"
    verb = "preempts" if first.team is rec.team else "reclaims"
    whose = f"{first.team.team.name}'s job {first.job.id}"
    if len(held) > 1:
        whose += f" and {len(held) - 1} more"
    return PendingReason(
        PendingCode.MIN_RUNTIME,
        f"{verb} {gpus_text} from {whose} in {_in_time(first.protected_until - now)}: minimum runtime",
    )
