"""What the driver holds of each client and each executor (``ClientData``,
``ExecutorData``), and the untracked containers of queued tasks."""
from collections import deque

from ..runtime import gc_untrack
from ..scheduling import ClientTasks, RunningTasks
from ..wire import ResultRows


def untracked(container):
    """``container`` (empty), taken out of the cyclic garbage collector: for the deques of
    queued Tasks, which may hold a million items (each full collection would otherwise
    visit every one). No cycle passes through them: nothing a Task refers to refers back to
    its queue."""
    gc_untrack(container)
    return container


class ClientData:
    """A connected client: its tasks in flight, the functions it has sent, and its results
    on their way (see ``ClientEndpoint.send_results``)."""

    __slots__ = ("routing_id", "pid", "functions", "tasks", "results", "unsent", "unsent_size",
                 "in_flight_rows", "in_flight_size", "held", "placement")

    def __init__(self, routing_id, pid):
        self.routing_id = routing_id
        self.pid = pid
        self.functions = set()  # digests of the functions it sent
        self.tasks = ClientTasks()  # client task id -> Task, in submission order
        self.results = ResultRows()  # [client task id, state, payload] waiting to be sent
        self.unsent = deque()   # TaskResults frames made, waiting for the client's window
        self.unsent_size = 0
        self.in_flight_rows = 0  # results sent that the client has not said it took
        self.in_flight_size = 0
        # task id -> Task of its queued tasks, none launched while it is behind on its
        # results (``hold_client``); None while it keeps up
        self.held = None
        # client task id -> (hosts, speculative) of tasks in its next SubmitTasks (TaskPlacement)
        self.placement = None


class ExecutorData:
    """A registered executor as the driver sees it."""

    __slots__ = ("executor_id", "routing_id", "hostname", "cores", "pid", "slot", "slots",
                 "task_seconds", "running", "suspect_losses", "decommissioning", "excluded", "functions",
                 "registered_at", "metrics", "tasks_done", "tasks_failed",
                 "ended_at_check", "last_report", "last_reclaim")

    def __init__(self, executor_id, routing_id, hostname, cores, pid, slot, slots, now):
        self.executor_id = executor_id
        self.routing_id = routing_id
        self.hostname = hostname
        self.cores = cores
        self.pid = pid
        self.slot = slot          # index in the SlotTable
        self.slots = slots        # tasks it may hold, running and queued
        self.task_seconds = None  # moving average of its tasks' run time
        self.running = RunningTasks()  # task id -> Task launched here and not yet reported, in launch order
        self.suspect_losses = {}  # loss id -> tasks running here that were lost together before
        self.decommissioning = False
        self.excluded = False     # offered nothing for its failures (exclude_on_failure)
        self.functions = set()    # function digests this executor already holds
        self.registered_at = now
        self.metrics = {}
        self.tasks_done = 0
        self.tasks_failed = 0
        self.ended_at_check = 0   # tasks_done + tasks_failed at the last idleness check
        self.last_report = now    # when its last StatusUpdates arrived
        self.last_reclaim = now   # when it was last asked to give unstarted tasks back

    @property
    def suspects(self):
        """Tasks among ``running`` that were on a lost executor before."""
        return sum(self.suspect_losses.values())
