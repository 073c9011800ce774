"""A histogram of scheduling latency: seconds from a task reaching the driver's queue (or
going back to it for another attempt) to its launch. Fixed buckets, counted in place, so
observing costs one bisect; read as Prometheus-style cumulative buckets."""
from bisect import bisect_left

BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)


class LatencyHistogram:
    def __init__(self, bounds=BUCKETS):
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound
        self.sum = 0.0
        self.count = 0

    def observe_many(self, now, started_at):
        """Count ``now - t`` for each ``t`` in ``started_at``."""
        bounds, counts = self.bounds, self.counts
        total = 0.0
        for t in started_at:
            seconds = now - t
            counts[bisect_left(bounds, seconds)] += 1
            total += seconds
        self.sum += total
        self.count += len(started_at)

    def snapshot(self):
        """``{"buckets": [[bound, cumulative count], ..., ["+Inf", count]], "sum", "count"}``."""
        buckets, running = [], 0
        for bound, n in zip(self.bounds + ("+Inf",), self.counts):
            running += n
            buckets.append([bound, running])
        return {"buckets": buckets, "sum": self.sum, "count": self.count}
