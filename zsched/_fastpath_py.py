"""Pure-Python reference of the fast path; ``_fastpath.pyx`` must agree with it exactly.

``SlotTable`` holds the task slots of every executor (an executor of C cores has
C * tasks_per_core slots) and makes resource offers: queued tasks are dealt to executors
with free slots one at a time, round-robin, so a short queue spreads over executors and a
long one fills them all. Executors with free slots wait in a ring; each task costs O(1)
whatever the number of executors.
"""
from collections import deque


class SlotTable:
    def __init__(self):
        self._free = []       # free slots per executor index
        self._total = []      # slots per executor index
        self._active = []     # executor index in use
        self._in_ring = []    # executor index waiting in the ring
        self._ring = deque()  # executor indices that may have free slots, in offer order
        self._unused = []     # indices of removed executors, reused last-in first-out

    def add(self, slots):
        """Register an executor with ``slots`` free slots; returns its index."""
        if slots < 1:
            raise ValueError("an executor needs at least one slot")
        if self._unused:
            index = self._unused.pop()
            self._free[index] = slots
            self._total[index] = slots
            self._active[index] = True
        else:
            index = len(self._free)
            self._free.append(slots)
            self._total.append(slots)
            self._active.append(True)
            self._in_ring.append(False)
        if not self._in_ring[index]:
            self._in_ring[index] = True
            self._ring.append(index)
        return index

    def remove(self, index):
        """Forget an executor: its slots are offered no more."""
        self._check(index)
        self._active[index] = False
        self._free[index] = 0
        self._total[index] = 0
        self._unused.append(index)

    def release(self, index, n):
        """``n`` slots of the executor became free (tasks ended)."""
        self._check(index)
        free = self._free[index] + n
        if n < 0 or free > self._total[index]:
            raise ValueError("release of %d slots: executor %d would have %d of %d free"
                             % (n, index, free, self._total[index]))
        self._free[index] = free
        if free > 0 and not self._in_ring[index]:
            self._in_ring[index] = True
            self._ring.append(index)

    def resize(self, index, slots):
        """Give the executor ``slots`` slots in all. Tasks keep the slots they hold, so the
        free count goes below zero after a shrink until enough of them end."""
        self._check(index)
        if slots < 1:
            raise ValueError("an executor needs at least one slot")
        self._free[index] += slots - self._total[index]
        self._total[index] = slots
        if self._free[index] > 0 and not self._in_ring[index]:
            self._in_ring[index] = True
            self._ring.append(index)

    def free(self, index):
        self._check(index)
        return self._free[index]

    def total(self, index):
        self._check(index)
        return self._total[index]

    def total_free(self):
        return sum(free for free in self._free if free > 0)

    def offer(self, n_tasks):
        """Deal up to ``n_tasks`` tasks to free slots: ``[(executor index, count), ...]``
        in the order each executor first received a task."""
        assigned = {}
        ring = self._ring
        remaining = n_tasks
        while remaining > 0 and ring:
            index = ring.popleft()
            if not self._active[index] or self._free[index] <= 0:
                self._in_ring[index] = False
                continue
            assigned[index] = assigned.get(index, 0) + 1
            self._free[index] -= 1
            remaining -= 1
            if self._free[index] > 0:
                ring.append(index)
            else:
                self._in_ring[index] = False
        return list(assigned.items())

    def _check(self, index):
        if not (0 <= index < len(self._active)) or not self._active[index]:
            raise KeyError(index)
