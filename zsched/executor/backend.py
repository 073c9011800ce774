"""The executor backend: registers with the driver, runs its loop, obeys the driver.

The thread that calls ``run`` owns the connection to the driver (a DEALER socket, or the
pipe pair a driver on this host gave it: ``pipe_link``, the same frames with fewer
thread wake-ups per message) and runs the loop: each turn it sends a heartbeat when one
is due, waits for the driver, the task threads (``tasks``) or the worker watch, sends the
status rows of whatever finished meanwhile in batches, and handles the driver's messages.
A lone task reaching an idle one-core executor runs in this thread instead (``inline``),
while the relief thread covers for the loop over a connection of its own.
"""
import logging
import os
import sys
import time

import zmq

from .. import protocol as p
from ..config import Config
from ..errors import ConfigError
from ..heap import keep_freed_buffers
from ..liveness import DRIVER, HeartbeatMonitor
from ..pipe_link import PipeLink
from ..poller import Poller
from ..protocol import MsgType, TaskState
from ..wakeup import WakeupPipe
from ..broadcast import serve_values
from ..payload import REF_BYTE
from .connection import LOST, DriverConnection
from .data import ExecutorData
from .inline import InlinePath
from .metrics import ProcessMetrics
from .registration import Registration, RegistrationError
from .tasks import TaskRunner
from .worker import WorkerWatch

log = logging.getLogger("zsched.executor")  # also when run as __main__


class ExecutorBackend:
    """One executor process: registration, the loop, and the driver's messages.

    ``run`` returns the process's exit status. ``request_stop``, ``wake`` and
    ``stopping`` may be used from other threads and signal handlers."""

    def __init__(self, driver_url, executor_id, hostname, cores, app_id, *, keys=None,
                 worker_url=None, registration_timeout=30.0, clock=time.monotonic,
                 driver_fds=None, relief_fds=None):
        self.driver_url = driver_url
        self.executor_id = executor_id
        self.hostname = hostname
        self.cores = cores
        self.app_id = app_id
        self.keys = keys
        self.worker_url = worker_url
        self.registration_timeout = registration_timeout
        self.clock = clock
        self.config = Config()
        self.incarnation = None
        self.relief_token = None
        self.context = zmq.Context()
        # (read fd, write fd) inherited from the driver that started this executor: its link
        # to the driver instead of a socket (see pipe_link)
        self.link = None
        self.relief_fds = relief_fds         # the relief thread's own pipe pair, if piped
        self.driver = None                   # DriverConnection, once registered (the link's: at once)
        if driver_fds is not None:
            self.link = PipeLink(*driver_fds, p.frame_limit(self.config.max_message_size))
            self.driver = DriverConnection(link=self.link)
        self.wakeup = WakeupPipe()
        self.tasks = TaskRunner(self.wakeup, self.config.max_message_size)
        # large arguments and broadcast values, fetched from the driver (``data``)
        self.tasks.data = self.data = ExecutorData(self.wake, self.config.executor_heartbeat_timeout)
        serve_values(self.data.broadcast_value)
        self.inline = None                   # InlinePath of a one-core executor
        self.liveness = None                 # HeartbeatMonitor of the driver, once registered
        self._early_frames = []              # read from the link with the registration's answer
        self._outstanding = 0                # tasks launched here and not yet reported
        self._decommissioning = False
        self._worker = None                  # WorkerWatch of --worker-url
        self._poller = None
        self._stopping = None                # reason, once the loop must end
        self._exit_code = 0
        self._driver_gone = False            # nothing more to tell the driver
        self._charge_tasks = True            # the driver counts this exit against its tasks
        self._reaper_exit = False            # a task thread cannot be stopped: leave at once
        self._metrics = ProcessMetrics()     # this process's memory and CPU, for heartbeats

    @property
    def socket(self):
        """The DEALER connected to the driver once registered (None over pipes)."""
        return self.driver.socket if self.driver is not None else None

    @property
    def stopping(self):
        """Why the loop ends (or registration is abandoned); None while it runs."""
        return self._stopping

    # ------------------------------------------------------------ registration

    def register(self):
        """Fetch the driver's settings, then register; RegistrationError says why not."""
        request = p.RegisterExecutor(self.executor_id, self.hostname, self.cores, self.app_id,
                                     os.getpid())
        registration = Registration(self.driver_url, request,
                                    self.clock() + self.registration_timeout, clock=self.clock,
                                    wakeup_fd=self.wakeup.fd, abandoned=lambda: self._stopping)
        if self.link is not None:
            msg, self._early_frames = registration.over_link(self.link)
            how = " (over pipes)"
        else:
            socket, msg = registration.over_socket(self.context, self.keys)
            self.driver = DriverConnection(socket=socket)
            how = ""
        self.incarnation = msg.incarnation
        self.relief_token = msg.relief_token  # the proof its relief thread's connection gives
        self.config = Config.from_driver(msg.settings)
        self.tasks.max_result_size = self.config.max_message_size
        keep_freed_buffers(self.config.driver_memory_cache)  # large arguments' buffers
        if self.link is not None:
            self.link.max_frame = p.frame_limit(self.config.max_message_size)
        log.info("Successfully registered with driver %s%s as executor %s",
                 self.driver_url, how, self.executor_id)

    # ------------------------------------------------------------ loop

    def run(self):
        """Register, serve until stopped; returns the process exit code."""
        try:
            self.register()
        except (RegistrationError, ConfigError) as exc:  # ConfigError: another version's settings
            print(str(exc), file=sys.stderr, flush=True)
            self._close(linger=0)
            return 1
        self.tasks.start(self.cores)
        if self.cores == 1:
            self.inline = InlinePath.create(self)
            if self.inline is not None:
                self.inline.start()
        try:
            self._loop()
        finally:
            self._close(linger=0 if self._driver_gone else 2000)
        log.info("executor %s stopped: %s", self.executor_id, self._stopping)
        if self._reaper_exit:  # a thread stuck in a task would block the interpreter's exit
            logging.shutdown()
            os._exit(self._exit_code)
        return self._exit_code

    def _loop(self):
        self._poller = self._make_poller()
        config = self.config
        self.liveness = HeartbeatMonitor(config.executor_heartbeat_interval,
                                         config.executor_heartbeat_timeout, clock=self.clock)
        self.liveness.heard(DRIVER)
        run_pending = self.inline.run_pending if self.inline is not None else (lambda: None)
        if self.link is not None:  # what came with the registration's answer
            for frame in self._early_frames:
                self.handle_frame(frame)
            self._early_frames = []
            self._check_connection(None)
            run_pending()
        while self._stopping is None:
            self.turn()
            run_pending()
        self._leave()

    def _make_poller(self):
        """The loop's poller: the wake-up pipe, the driver and the worker watch."""
        poller = Poller()
        poller.register(self.wakeup.fd, zmq.POLLIN)
        self.driver.watch(poller)
        if self.worker_url:
            self._worker = WorkerWatch(self.context, self.worker_url, self.config,
                                       self.clock() + self.registration_timeout, self.clock)
            poller.register(self._worker.monitor, zmq.POLLIN)
        return poller

    def turn(self):
        """One turn of the loop: wait for something to do, then do it."""
        events = self._wait()
        # silence counts only when nothing is waiting: after this process itself was
        # stalled (a task holding the GIL), the driver's answers are already here
        if not self.driver.readable(events) and self.liveness.is_silent(DRIVER, self.clock()):
            self.driver_lost()
            return
        self._serve_tasks(events)
        if self._decommissioning and self._outstanding == 0:
            self._stop("decommissioned", 0, charge_tasks=False)
            return
        self._serve_driver(events)

    def _wait(self):
        """Send a heartbeat if one is due, then wait (not at all while status rows wait to
        be sent) for the driver, the task threads or the worker; the events."""
        now = self.clock()
        if self.liveness.due_to_send(now):
            self.send_heartbeat()
        # task threads write the wake-up pipe only while this thread sleeps in poll: while
        # it is awake they make no system call, and this turn takes their rows
        wakeup = self.wakeup
        wakeup.pending = False
        if self.tasks.results:  # after pending: a row added later wakes the poll
            events = dict(self._poller.poll(0))
        else:
            timeout = min(self.liveness.until_send(now), 1.0)
            events = dict(self._poller.poll(timeout * 1000))
        wakeup.pending = True
        return events

    def _serve_tasks(self, events):
        """The worker watch, finished tasks and kills that are overdue."""
        worker = self._worker
        if worker is not None:
            reason = (worker.event() if worker.monitor in events else None) or worker.check()
            if reason is not None:
                self.fail(reason)
        if self.wakeup.fd in events:
            self.wakeup.drain()
        self.send_status_updates()
        if self.data.to_ask:  # task threads want data: ask the driver for it
            self.ask_for_data(self.data.take_asked())
        if self.tasks.kill_deadlines:
            self.reap_killed_tasks()

    def _serve_driver(self, events):
        """Write what waits for the driver, read and handle what it sent; notice that it
        is gone."""
        driver = self.driver
        forwarded = self.inline.forwarded() if self.inline is not None else ()
        if forwarded:  # what came on the relief thread's connection
            self.liveness.heard(DRIVER, self.clock())
            for frame in forwarded:
                self.handle_frame(frame)
        if not driver.flush(events):
            self._stop(LOST, 1, driver_gone=True)
        if driver.readable(events):
            self.liveness.heard(DRIVER, self.clock())
            driver.read(self.handle_frame, lambda: self._stopping is not None)
        self._check_connection(events)

    def _check_connection(self, events):
        """Stop if the connection to the driver is gone (after what it sent before)."""
        lost = self.driver.lost(events)
        if lost is not None:
            self._stop(lost, 1, driver_gone=True)

    def handle_frame(self, frame):
        """Decode and obey one frame of the driver's."""
        try:
            msg = p.decode(frame)
        except p.ProtocolError as exc:
            log.warning("ignored a malformed message from the driver: %s", exc)
            return
        handler = self._handlers.get(msg.TYPE)
        if handler is None:
            log.warning("ignored %s: not a message for an executor", type(msg).__name__)
        else:
            handler(self, msg)

    def _leave(self, connection=None):
        if not self._driver_gone:
            # finished work and why this executor leaves reach the driver at once, rather
            # than leave it to notice the lost connection
            self.send_status_updates(connection)
            self._send(p.RemoveExecutor(self.executor_id, self._stopping, self._charge_tasks),
                       connection)

    def driver_lost(self, connection_lost=False):
        """End the loop: the connection to the driver is lost, or the driver is silent."""
        reason = LOST if connection_lost else (
            f"driver silent for {self.config.executor_heartbeat_timeout:g} s")
        self._stop(reason, 1, driver_gone=True)

    def fail(self, reason):
        """End the loop with exit status 1 for ``reason``, which the driver hears."""
        self._stop(reason, 1)

    def _stop(self, reason, exit_code, driver_gone=False, charge_tasks=True):
        """End the loop; unless the driver is gone or sent the stop, it hears why, and
        whether the tasks held here should count this as one of their failures."""
        if self._stopping is None:
            self._stopping = reason
            self._exit_code = exit_code
            self._driver_gone = driver_gone
            self._charge_tasks = charge_tasks

    def request_stop(self, reason):
        """Stop the loop (or registration); safe from signal handlers and other threads."""
        self._stop(reason, 0)
        self.wake()

    def wake(self):
        """Have the loop go round now, even if it sleeps; safe from any thread."""
        self.wakeup.wake_always()

    # ------------------------------------------------------------ the driver's messages

    def _on_launch_tasks(self, msg):
        tasks = msg.tasks
        if msg.functions and self.inline is not None:
            self.inline.note_functions(msg.functions, self.tasks.holds)
        self.tasks.bind_functions(msg.functions, tasks)
        idle = self._outstanding == 0
        self._outstanding += len(tasks)
        if self._decommissioning:  # launched before the driver knew: give them back
            self._give_back(tasks)
            return
        # tasks whose payload refers to data (``payload``): asked for now, while others run
        references = [task[3] for task in tasks if task[3][:1] == REF_BYTE]
        if references:
            self.ask_for_data(self.data.want(references))
        elif self.inline is not None:  # the loop's thread never waits for data
            tasks = self.inline.take(tasks, idle)
        if tasks:
            self.tasks.queue(tasks)

    def _give_back(self, tasks):
        """Report ``tasks`` (not started) as RETURNED, in their order; the next turn sends
        the rows."""
        self.tasks.results.extend([task[0], task[1], TaskState.RETURNED, b""] for task in tasks)
        self.data.discard([task[3] for task in tasks])

    def _on_decommission_executor(self, msg):
        """Take nothing new, give back what has not started, finish what runs, then exit 0."""
        if self._decommissioning:  # the relief thread's copy, or the loop's
            return
        log.info("executor %s decommissioned: %s", self.executor_id, msg.reason)
        self._decommissioning = True
        self.wake()  # the next turn does not sleep: it may be time to leave
        unstarted = self.inline.unstarted() if self.inline is not None else []
        self._give_back(unstarted + self.tasks.take_unstarted())

    def _on_return_tasks(self, msg):
        """Give back up to ``msg.count`` tasks not started yet, the newest first."""
        unstarted = self.inline.take_newest(msg.count) if self.inline is not None else []
        unstarted += self.tasks.take_unstarted(msg.count - len(unstarted))
        self._give_back(unstarted[::-1])

    def _on_kill_task(self, msg):
        if self._outstanding == 0:
            return  # reported already: nothing here to kill
        if self.tasks.kill(msg.task_id, msg.attempt):
            # a task blocked in C may not stop: then the task reaper ends this process
            self.tasks.kill_deadlines[msg.task_id, msg.attempt] = (
                self.clock() + self.config.task_kill_timeout)

    def reap_killed_tasks(self):
        """Spark's task reaper: a killed task still running after ``task_kill_timeout``
        takes its executor down (the driver replaces it); nothing else can stop it."""
        task_id = self.tasks.overdue_kill(self.clock())
        if task_id is not None:
            reason = (f"task {task_id} did not stop within task_kill_timeout "
                      f"({self.config.task_kill_timeout:g} s) of being killed")
            log.error("%s: exiting (task reaper)", reason)
            self._stop(reason, 1, charge_tasks=False)  # the driver's kill caused it
            self._reaper_exit = True

    def _on_stop_executor(self, msg):
        log.info("driver asked executor %s to stop: %s", self.executor_id, msg.reason)
        self._stop(f"stopped by the driver: {msg.reason}", 0, driver_gone=True)

    def _on_shutdown(self, msg):
        self._stop("driver shut down", 0, driver_gone=True)

    def _on_heartbeat_ack(self, msg):
        if msg.incarnation != self.incarnation:
            self._stop("driver restarted (new incarnation)", 1, driver_gone=True)
        self.liveness.send_in(msg.next_in, self.clock())  # the driver's pace, if it gives one

    def _on_forget_functions(self, msg):
        """The driver dropped these functions (no client needs them): so does this
        executor. A task launched here before keeps its own (``TaskRunner.bind_functions``)."""
        inline = self.inline
        self.tasks.forget_functions(msg.digests if inline is None else inline.to_forget(msg.digests))

    def ask_for_data(self, keys, connection=None):
        if keys:
            self._send(p.GetData(keys), connection)

    _handlers = {
        MsgType.LAUNCH_TASKS: _on_launch_tasks,
        MsgType.DATA: lambda self, msg: self.data.arrived(msg.key, msg.error, msg.parts),
        MsgType.FORGET_DATA: lambda self, msg: self.data.forget(msg.keys),
        MsgType.FORGET_FUNCTIONS: _on_forget_functions,
        MsgType.KILL_TASK: _on_kill_task,
        MsgType.STOP_EXECUTOR: _on_stop_executor,
        MsgType.SHUTDOWN: _on_shutdown,
        MsgType.HEARTBEAT_ACK: _on_heartbeat_ack,
        MsgType.DECOMMISSION_EXECUTOR: _on_decommission_executor,
        MsgType.RETURN_TASKS: _on_return_tasks,
        MsgType.PROBE: lambda self, msg: None,  # the send succeeding was its answer
    }

    # ------------------------------------------------------------ to the driver

    def _send(self, msg, connection=None):
        if not (connection or self.driver).send(msg):
            self._stop(LOST, 1, driver_gone=True)

    def send_heartbeat(self, connection=None):
        """Send the driver a Heartbeat with this process's memory, CPU and task figures."""
        metrics = {"rss": self._metrics.rss(), "cpu": self._metrics.cpu_percent(),
                   **self.tasks.metrics()}
        self._send(p.Heartbeat(self.incarnation, self.executor_id, metrics), connection)

    def send_status_updates(self, connection=None):
        """Send the status rows of the tasks that ended since the last call, in batches
        (over ``connection``: the relief thread's own)."""
        results = self.tasks.results
        if not results:
            return
        popleft = results.popleft  # task threads append meanwhile: take what is there now
        rows = [popleft() for _ in range(len(results))]
        data_out = self.tasks.data_out  # after the rows: each row's data was queued before it
        while data_out:
            self._send(data_out.popleft(), connection)
        self._outstanding -= len(rows)
        if self._outstanding == 0:
            self.tasks.all_reported()
        busy = self.tasks.take_busy()
        for batch in p.batch_rows(rows, 3, self.config.max_message_size):
            self._send(p.StatusUpdates(self.incarnation, busy * len(batch) / len(rows), batch),
                       connection)

    # ------------------------------------------------------------ closing

    def _close(self, linger=2000):
        self.tasks.stop()
        if self.inline is not None:
            self.inline.close()
        if self._worker is not None:
            self._worker.close()
        if self.driver is not None:
            self.driver.close(linger)
        self.context.term()
        self.wakeup.close()
