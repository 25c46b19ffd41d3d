"""Prints the engine build that ran and a digest of the plans it gave: on random busy clusters
(``allocate``) and on random replays (a ``Session`` cycle after cycle, through the simulator);
then a second digest, of busy clusters whose teams limit the GPUs running per member (kept
apart so that the first stays what it was before that limit existed).

    GPUGOV_ENGINE=compiled .venv/bin/python -m tests.engine.plans_digest [COUNT]

``test_compiled.py`` runs it under both builds; the digests must be equal."""

from __future__ import annotations

import hashlib
import random
import sys
from collections.abc import Callable

from allocations.engine import BUILD, ClusterPolicy, IdleAllocation, Plan, Queueing, Snapshot, allocate
from allocations.engine.session import Session
from allocations.simulation import parse_scenario, replay
from tests.engine.test_session import random_scenario
from tests.engine.test_shortcuts import busy_cluster


class Recorder:
    """An ``allocate`` (the engine's, or a session's) that adds every plan to one digest."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.cycles = 0
        self.engine: Callable[[Snapshot, float], Plan] = allocate

    def __call__(self, snapshot: Snapshot, now: float) -> Plan:
        plan = self.engine(snapshot, now)
        self.digest.update(repr((now, plan.starts, plan.preemptions, sorted(plan.pending.items()))).encode())
        self.cycles += 1
        return plan


def main(count: int) -> None:
    record = Recorder()
    for seed in range(count):
        rng = random.Random(seed)
        policy = ClusterPolicy(
            idle_allocation=rng.choice(list(IdleAllocation)),
            queueing=rng.choice(list(Queueing)),
            share_unallocated=rng.random() < 0.5,
        )
        record(busy_cluster(rng, policy), 0.0)
    for seed in range(count // 4):
        record.engine = Session()
        replay(parse_scenario(random_scenario(random.Random(seed)), name="random"), allocate=record)
    members = Recorder()
    for seed in range(count // 2):
        rng = random.Random(seed)
        policy = ClusterPolicy(
            idle_allocation=rng.choice(list(IdleAllocation)), queueing=rng.choice(list(Queueing))
        )
        members(busy_cluster(rng, policy, members=True), 0.0)
    print(BUILD, record.cycles, record.digest.hexdigest(), members.digest.hexdigest())


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
