"""The Prometheus exposition of a driver snapshot: ``render_metrics(snapshot)``.

Each call builds a private registry holding one collector that reads that snapshot, so
concurrent scrapes share nothing and nothing registers in prometheus_client's global
registry.
"""
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

TASK_COUNTER_STATES = ("submitted", "finished", "failed", "cancelled", "retried", "speculated",
                       "speculation_won")
TASK_GAUGE_STATES = ("queued", "running")
EXECUTOR_STATES = ("active", "late", "decommissioning", "excluded")
TRAFFIC_COUNTERS = (  # metric name, snapshot counter, help
    ("zsched_received_bytes", "bytes_in", "Bytes of the messages the driver received."),
    ("zsched_sent_bytes", "bytes_out", "Bytes of the messages the driver sent."),
    ("zsched_received_messages", "messages_in", "Messages the driver received."),
    ("zsched_sent_messages", "messages_out", "Messages the driver sent."),
)


def render_metrics(snapshot: dict) -> bytes:
    """The snapshot in Prometheus's text exposition format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot))
    return generate_latest(registry)


class SnapshotCollector:
    """A prometheus_client collector yielding the metric families of one snapshot."""

    def __init__(self, snapshot: dict):
        self.snapshot = snapshot

    def collect(self):
        tasks = self.snapshot.get("tasks") or {}
        counters = self.snapshot.get("counters") or {}
        executors = self.snapshot.get("executors") or []

        tasks_total = CounterMetricFamily("zsched_tasks", "Tasks by what happened to them, since the driver "
                                          "started.", labels=["state"])
        for state in TASK_COUNTER_STATES:
            tasks_total.add_metric([state], tasks.get(state, 0))
        yield tasks_total

        tasks_now = GaugeMetricFamily("zsched_tasks_active", "Tasks queued or running now.", labels=["state"])
        for state in TASK_GAUGE_STATES:
            tasks_now.add_metric([state], tasks.get(state, 0))
        yield tasks_now

        yield GaugeMetricFamily("zsched_queue_depth", "Tasks waiting for a free core.",
                                value=tasks.get("queued", 0))

        by_state = GaugeMetricFamily("zsched_executors", "Registered executors by state: active, late "
                                     "(heartbeat overdue), decommissioning or excluded.", labels=["state"])
        for state in EXECUTOR_STATES:
            by_state.add_metric([state], sum(1 for e in executors if e.get("state") == state))
        yield by_state

        yield GaugeMetricFamily("zsched_executor_cores", "Cores of all registered executors.",
                                value=sum(e.get("cores", 0) for e in executors))

        yield CounterMetricFamily("zsched_executors_lost", "Executors lost (killed, crashed, exited or "
                                  "unreachable) since the driver started.",
                                  value=counters.get("executors_lost", 0))

        allocation = self.snapshot.get("allocation") or {}
        yield CounterMetricFamily("zsched_executor_start_failures", "Executors that failed to start, "
                                  "or ended or timed out unregistered, since the driver started.",
                                  value=allocation.get("start_failures", 0))

        yield GaugeMetricFamily("zsched_driver_loop_longest_pause_seconds", "The longest time the "
                                "driver's loop went without reading its input, over the last minute.",
                                value=self.snapshot.get("loop_longest_pause", 0.0))

        latency = self.snapshot.get("scheduling_latency")
        if latency:
            yield scheduling_latency_family(latency)

        for name, key, help_text in TRAFFIC_COUNTERS:
            yield CounterMetricFamily(name, help_text, value=counters.get(key, 0))

        rss = GaugeMetricFamily("zsched_executor_rss_bytes", "Resident memory of each executor process, "
                                "from its last heartbeat.", labels=["executor", "host"])
        cpu = GaugeMetricFamily("zsched_executor_cpu_percent", "CPU use of each executor process in percent, "
                                "from its last heartbeat.", labels=["executor", "host"])
        for executor in executors:
            labels = [str(executor.get("id", "")), str(executor.get("host", ""))]
            if executor.get("rss") is not None:
                rss.add_metric(labels, executor["rss"])
            if executor.get("cpu") is not None:
                cpu.add_metric(labels, executor["cpu"])
        yield rss
        yield cpu


def scheduling_latency_family(latency: dict) -> HistogramMetricFamily:
    """The histogram of seconds from a task's submission reaching the driver to its launch,
    from the snapshot's cumulative buckets."""
    buckets = []
    for bound, count in latency.get("buckets", []):
        le = bound if isinstance(bound, str) else floatToGoString(bound)
        buckets.append((le, count))
    if not buckets or buckets[-1][0] != "+Inf":
        buckets.append(("+Inf", latency.get("count", 0)))
    return HistogramMetricFamily(
        "zsched_scheduling_latency_seconds",
        "Seconds from a task's submission reaching the driver to its launch on an executor.",
        buckets=buckets, sum_value=latency.get("sum", 0))
