"""Pure-Python reference of the fast path; ``_fastpath.pyx`` must agree with it exactly.

``SlotTable`` holds, for every executor, its cores, its window (the tasks it may hold,
running and queued: ``slots``) and the tasks it holds, and makes resource offers. Queued
tasks are dealt one at a time, round-robin, first to executors with an idle core, and only
then to the queued part of the windows: a short task never waits behind a long one on a
busy executor while another executor has a core free. Executors that may take tasks wait
in two rings (idle cores, window room); each task costs O(1) whatever the number of
executors.
"""
from collections import deque


class SlotTable:
    def __init__(self):
        self._cores = []
        self._total = []       # window: tasks the executor may hold
        self._held = []        # tasks the executor holds (running and queued)
        self._active = []
        self._in_idle = []     # waiting in the idle-core ring
        self._in_ring = []     # waiting in the window ring
        self._idle = deque()   # executors that may have an idle core, in offer order
        self._ring = deque()   # executors that may have room in their window, in offer order
        self._unused = []      # indices of removed executors, reused last-in first-out

    def add(self, cores, slots):
        """Register an executor of ``cores`` cores holding up to ``slots`` tasks; its index."""
        if cores < 1 or slots < 1:
            raise ValueError("an executor needs at least one core and one slot")
        if self._unused:
            index = self._unused.pop()
            self._cores[index] = cores
            self._total[index] = slots
            self._held[index] = 0
            self._active[index] = True
        else:
            index = len(self._cores)
            self._cores.append(cores)
            self._total.append(slots)
            self._held.append(0)
            self._active.append(True)
            self._in_idle.append(False)
            self._in_ring.append(False)
        self._enqueue(index)
        return index

    def remove(self, index):
        """Forget an executor: it is offered no more tasks."""
        self._check(index)
        self._active[index] = False
        self._cores[index] = self._total[index] = self._held[index] = 0
        self._unused.append(index)

    def release(self, index, n):
        """``n`` tasks of the executor ended."""
        self._check(index)
        if n < 0 or n > self._held[index]:
            raise ValueError("release of %d tasks: executor %d holds %d"
                             % (n, index, self._held[index]))
        self._held[index] -= n
        self._enqueue(index)

    def resize(self, index, slots):
        """Give the executor a window of ``slots`` tasks. Tasks keep the slots they hold, so
        the free count goes below zero after a shrink until enough of them end. A window
        of 0 closes the executor to offers."""
        self._check(index)
        if slots < 0:
            raise ValueError("a window cannot be negative")
        self._total[index] = slots
        self._enqueue(index)

    def free(self, index):
        self._check(index)
        return self._total[index] - self._held[index]

    def total(self, index):
        self._check(index)
        return self._total[index]

    def total_free(self):
        return sum(max(0, total - held) for total, held in zip(self._total, self._held))

    def offer(self, n_tasks):
        """Deal up to ``n_tasks`` tasks: ``[(executor index, count), ...]`` in the order each
        executor first received a task."""
        assigned = {}
        remaining = self._deal(self._idle, self._in_idle, True, n_tasks, assigned)  # idle cores
        self._deal(self._ring, self._in_ring, False, remaining, assigned)  # then queue room
        return list(assigned.items())

    def _deal(self, ring, in_ring, up_to_cores, remaining, assigned):
        """Deal tasks one at a time round ``ring``, each executor up to its window (or up to
        its cores as well); the tasks still to deal."""
        held, total, cores, active = self._held, self._total, self._cores, self._active
        while remaining > 0 and ring:
            index = ring.popleft()
            limit = min(cores[index], total[index]) if up_to_cores else total[index]
            if not active[index] or held[index] >= limit:
                in_ring[index] = False
                continue
            assigned[index] = assigned.get(index, 0) + 1
            held[index] += 1
            remaining -= 1
            if held[index] < limit:
                ring.append(index)
            else:
                in_ring[index] = False
        return remaining

    def _enqueue(self, index):
        held = self._held[index]
        if held < self._cores[index] and held < self._total[index] and not self._in_idle[index]:
            self._in_idle[index] = True
            self._idle.append(index)
        if held < self._total[index] and not self._in_ring[index]:
            self._in_ring[index] = True
            self._ring.append(index)

    def _check(self, index):
        if not (0 <= index < len(self._active)) or not self._active[index]:
            raise KeyError(index)
