"""Where a job goes on the nodes of one instance type (POLICY.md section 2, "node placement").

Best fit: a job that fits on one node goes to the fullest ready node that still has room (ties by
node name); a job larger than one node takes whole free nodes (in name order). Only ready nodes
take new jobs; a node that is not ready keeps the jobs it has and is tracked so that preempting
one of them gives its GPUs back to the right node.

The ready nodes are kept in buckets by free GPUs, each bucket a lazily cleaned heap of node
indexes, so that finding the best node costs a scan of at most ``gpus_per_node`` buckets.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from .snapshot import Node

NodeShare = tuple[tuple[str, int], ...]


class Placement:
    """The nodes of one instance type and their free GPUs, for best-fit placement."""

    __slots__ = (
        "_count",
        "_empty",
        "_empty_heap",
        "_heaps",
        "_members",
        "empty_gpus",
        "free",
        "free_ready",
        "gpus",
        "gpus_per_node",
        "index",
        "max_gpus",
        "names",
        "ready",
    )

    def __init__(self, gpus_per_node: int, nodes: Sequence[Node], used: dict[str, int]) -> None:
        ordered = sorted(nodes, key=lambda n: n.name)
        self.gpus_per_node = gpus_per_node
        self.names = [n.name for n in ordered]
        self.gpus = [n.gpus for n in ordered]
        self.ready = [n.ready for n in ordered]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.free = [n.gpus - used.get(n.name, 0) for n in ordered]
        self.max_gpus = max((n.gpus for n in ordered if n.ready), default=0)
        self._count = [0] * (self.max_gpus + 1)
        self._members: list[set[int]] = [set() for _ in range(self.max_gpus + 1)]
        self._heaps: list[list[int]] = [[] for _ in range(self.max_gpus + 1)]
        self._empty: set[int] = set()
        self._empty_heap: list[int] = []
        self.empty_gpus = 0
        self.free_ready = 0
        for i, free in enumerate(self.free):
            if self.ready[i]:
                self._enter(i, free)

    # -- bucket bookkeeping -------------------------------------------------------------
    def _enter(self, i: int, free: int) -> None:
        if free > 0:
            self.free_ready += free
            self._count[free] += 1
            members = self._members[free]
            members.add(i)
            heap = self._heaps[free]
            heapq.heappush(heap, i)
            if len(heap) > 2 * len(members) + 64:
                heap[:] = sorted(members)  # drop the stale entries (a sorted list is a heap)
            if free == self.gpus[i]:
                self._empty.add(i)
                heapq.heappush(self._empty_heap, i)
                if len(self._empty_heap) > 2 * len(self._empty) + 64:
                    self._empty_heap[:] = sorted(self._empty)
                self.empty_gpus += free

    def _leave(self, i: int, free: int) -> None:
        if free > 0:
            self.free_ready -= free
            self._count[free] -= 1
            self._members[free].discard(i)
            if free == self.gpus[i]:
                self._empty.discard(i)
                self.empty_gpus -= free

    def _set_free(self, i: int, free: int) -> None:
        if self.ready[i]:
            self._leave(i, self.free[i])
            self._enter(i, free)
        self.free[i] = free

    def _peek(self, heap: list[int], members: set[int]) -> int:
        # Entries of nodes that left the bucket stay in the heap until they reach its top.
        while heap[0] not in members:
            heapq.heappop(heap)
        return heap[0]

    # -- queries ------------------------------------------------------------------------
    def can_place(self, gpus: int) -> bool:
        """Whether some placement of ``gpus`` exists on the ready nodes now."""
        if gpus <= self.gpus_per_node:
            count = self._count
            return any(count[f] for f in range(gpus, self.max_gpus + 1))
        return self.empty_gpus >= gpus

    def largest_free(self) -> int:
        """The most free GPUs on one ready node."""
        for f in range(self.max_gpus, 0, -1):
            if self._count[f]:
                return f
        return 0

    # -- changes ------------------------------------------------------------------------
    def place(self, gpus: int) -> NodeShare | None:
        """Take ``gpus`` by best fit and return the nodes used, or None when nothing has room."""
        if gpus <= self.gpus_per_node:
            for f in range(gpus, self.max_gpus + 1):
                if self._count[f]:
                    i = self._peek(self._heaps[f], self._members[f])
                    self._set_free(i, f - gpus)
                    return ((self.names[i], gpus),)
            return None
        if self.empty_gpus < gpus:
            return None
        taken: list[tuple[str, int]] = []
        left = gpus
        while left > 0:
            i = self._peek(self._empty_heap, self._empty)
            share = min(self.gpus[i], left)
            self._set_free(i, self.free[i] - share)
            taken.append((self.names[i], share))
            left -= share
        return tuple(taken)

    def take(self, nodes: Iterable[tuple[str, int]]) -> None:
        """Mark GPUs as used (a job put back on its nodes)."""
        for name, gpus in nodes:
            i = self.index[name]
            self._set_free(i, self.free[i] - gpus)

    def give(self, nodes: Iterable[tuple[str, int]]) -> None:
        """Free GPUs (a job leaving its nodes)."""
        for name, gpus in nodes:
            i = self.index[name]
            self._set_free(i, self.free[i] + gpus)
