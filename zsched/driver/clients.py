"""The driver's clients: their sessions by routing id, and the function table.

A function's life here: a client sends it (``functions``, as a FunctionBlob); once no
connected client holds it, it leaves ``functions`` (a new task of it brings it again) but
the tasks of it still queued or running hold it (``Task.function_blob``), and the executors
keep their copy for them; once no task holds it, the executors are told to drop it. Without
this an executor would keep every function it was ever sent, with the data it captured,
for as long as it lives."""
import logging
import weakref

from .. import protocol as p
from ..protocol import TaskState
from .records import ClientData

log = logging.getLogger("zsched.driver")

# Rows per TaskResults frame: under the GC's first threshold, so a client frees a frame's
# rows before a collection can promote them (and then scan all its futures again and again).
_RESULT_ROWS = 512
_RESULTS_HEADER = p.frame_header(p.TaskResults)
_CANCELLED_AT_SHUTDOWN = b"cancelled by shutdown(cancel_futures=True)"


class ClientSessions:
    """Connected clients (``by_rid``: routing id -> ClientData) and the function table
    (``functions``: digest -> FunctionBlob), which it owns: the scheduler is given it to
    look up the functions of the tasks it queues. Only the driver's loop uses them."""

    def __init__(self):
        self.by_rid = {}
        self.functions = {}
        self._unowned = {}   # digest -> weakref to the FunctionBlob no client holds
        self._unused = []    # (digest, weakref) of those no task holds any more

    def get(self, rid):
        return self.by_rid.get(rid)

    def connect(self, rid, pid):
        """The session of client ``rid``, made at its first hello."""
        client = self.by_rid.get(rid)
        if client is None:
            client = self.by_rid[rid] = ClientData(rid, pid)
            log.info("client %s (pid %d) connected", rid.hex(), pid)
        return client

    def disconnect(self, rid):
        """Forget client ``rid``: its ClientData, or None. Its tasks are the scheduler's to
        drop, then its functions to ``release``."""
        return self.by_rid.pop(rid, None)

    def add_functions(self, client, functions):
        """Hold the functions ``client`` sent (digest -> cloudpickled blob) for it; the count
        of those refused, sent under a digest that is not theirs."""
        known = self.functions
        refused = 0
        for digest, blob in functions.items():
            if digest not in known:  # one held is kept: no client replaces another's
                if p.function_digest(blob) != digest:
                    refused += 1
                    continue
                known[digest] = p.FunctionBlob(blob)
                self._unowned.pop(digest, None)
            client.functions.add(digest)
        return refused

    def forget_functions(self, client, digests):
        """``client`` no longer needs these functions (it sends one again with the next task
        that does)."""
        released = [digest for digest in digests if digest in client.functions]
        client.functions.difference_update(released)
        self.release(released)

    def release(self, digests):
        """No connected client holds these functions (unless another client sent it too)."""
        clients = self.by_rid.values()
        for digest in list(digests):
            if any(digest in client.functions for client in clients):
                continue
            blob = self.functions.pop(digest, None)
            if blob is not None:
                self._unowned[digest] = weakref.ref(
                    blob, lambda ref, digest=digest: self._unused.append((digest, ref)))
            blob = None  # with no task holding it, the callback runs here

    def has_unused(self):
        return bool(self._unused)

    def take_unused(self):
        """The digests of the functions that neither a client nor a task holds any more (not
        those a client has sent again meanwhile), each once."""
        unused, self._unused = self._unused, []
        gone = set()
        for digest, ref in unused:
            if self._unowned.get(digest) is ref:
                del self._unowned[digest]
                gone.add(digest)
        return gone


class ClientEndpoint:
    """Spark's DriverEndpoint for clients: their messages (hello, tasks, cancels, admin
    requests, goodbye) and their results, in the driver loop's thread. It holds no state
    of its own.

    It is given the driver's ``app_id``, ``incarnation`` and ``config``; the client
    ``sessions`` and the ``scheduler`` it changes; the executor ``registry`` (to tell
    executors which functions to drop); ``peers``, to send and to forget a peer; the ``admin`` operations, which answer admin requests; the ``data`` store; the executor endpoint's
    ``send_control(executor, msg)``, for kills; the driver's ``warnings`` (a
    ``PeerWarnings``); and ``ask_for_offers()``, called when tasks arrive."""

    def __init__(self, *, app_id, incarnation, config, sessions, scheduler, registry, peers,
                 admin, data, send_control, warnings, ask_for_offers):
        self._app_id, self._incarnation, self._config = app_id, incarnation, config
        self._sessions, self._scheduler, self._registry = sessions, scheduler, registry
        self._peers = peers
        self._admin = admin
        self._data = data
        self._send_control = send_control
        self._warnings = warnings
        self._ask_for_offers = ask_for_offers

    def on_hello(self, rid, msg):
        self._sessions.connect(rid, msg.pid)
        self._peers.send(rid, p.ClientWelcome(self._incarnation, self._app_id, self._config.to_settings()))

    def client_for(self, rid):
        client = self._sessions.get(rid)
        if client is None:
            self._warnings.warn(rid, "message from a client that did not say hello")
        return client

    def on_submit_tasks(self, rid, msg):
        client = self.client_for(rid)
        if client is None:
            # most likely a client of an earlier driver on this port: fail its tasks, not hang
            self._peers.send(rid, p.TaskResults([[row[0], TaskState.ERROR, p.UNKNOWN_CLIENT.encode()]
                                             for row in msg.tasks]), quiet=True)
            return
        if msg.functions and self._sessions.add_functions(client, msg.functions):
            self._warnings.warn(rid, "a function sent under a digest that is not its "
                                     "BLAKE2b: refused (its tasks fail)")
        placement, client.placement = client.placement, None  # its TaskPlacement's, if any
        refused = self._scheduler.submit(client, msg.tasks, placement)  # tasks of a function not held fail
        if refused:
            self._warnings.warn(rid, f"{refused} task(s) under the id of a task of the client's "
                                     "in flight: refused")
        self._ask_for_offers()

    def on_task_placement(self, rid, msg):
        """The options of some tasks of the client's next SubmitTasks."""
        client = self.client_for(rid)
        if client is not None:
            client.placement = {client_task_id: (tuple(hosts), speculative)
                                for client_task_id, hosts, speculative in msg.tasks}

    def on_cancel_tasks(self, rid, msg):
        client = self.client_for(rid)
        if client is not None:
            self.kill(self._scheduler.cancel(client, msg.task_ids), "cancelled by the client")

    def on_cancel_queued_tasks(self, rid, msg):
        """Cancel the client's tasks that no executor holds: their KILLED results leave
        before the reply, so its futures are cancelled when the reply arrives."""
        client = self.client_for(rid)
        if client is None:
            self._peers.send(rid, p.AdminReply(msg.request_id, False, p.UNKNOWN_CLIENT), quiet=True)
            return
        cancelled = self._scheduler.cancel_queued(client)
        for client_task_id in cancelled:
            client.results.add(client_task_id, TaskState.KILLED, _CANCELLED_AT_SHUTDOWN)
        self.send_results()
        self._peers.send(rid, p.AdminReply(msg.request_id, True, len(cancelled)))

    def kill(self, to_kill, reason):
        for executor, task in to_kill:
            self._send_control(executor, p.KillTask(task.task_id, task.attempt, reason))

    def on_goodbye(self, rid, msg):
        client = self._sessions.disconnect(rid)
        if client is not None:
            self.drop_client(client, "its client left")
            log.info("client %s left", rid.hex())

    def on_forget_functions(self, rid, msg):
        """A client no longer needs these functions (it sends one again with the next
        task that does)."""
        client = self.client_for(rid)
        if client is not None:
            self._sessions.forget_functions(client, msg.digests)

    def drop_client(self, client, reason):
        """Forget a client that left: its tasks, the functions and the data it sent."""
        self.kill(self._scheduler.drop_client(client), reason)
        self._data.drop_client(client.routing_id)
        self._sessions.release(client.functions)

    def connection_lost(self, rid, problem):
        """Connection ``rid`` is gone or not reading for ``problem``: if it was a client's,
        the client is dropped with its tasks (True). Else False."""
        client = self._sessions.disconnect(rid)
        if client is None:
            return False
        self._peers.forget(rid, problem)
        log.warning("client %s is %s; dropping its %d task(s)", rid.hex(), problem, len(client.tasks))
        self.drop_client(client, "its client is gone")
        return True

    def fail_all(self, payload):
        """End every task of every client in an ERROR result with ``payload`` and send the
        results (the driver stops)."""
        for client in list(self._sessions.by_rid.values()):
            for client_task_id in list(client.tasks):
                client.results.add(client_task_id, TaskState.ERROR, payload)
            client.tasks.clear()
        self.send_results()

    def forget_unused_functions(self):
        """Tell the executors to drop the functions that neither a client nor a task holds
        any more (not those a client has sent again meanwhile)."""
        gone = self._sessions.take_unused()
        for executor in list(self._registry.by_id.values()):  # a send may find one gone: removed
            held = executor.functions & gone
            if held:
                executor.functions -= held  # a later launch that needs one sends it again
                self._peers.send(executor.routing_id, p.ForgetFunctions(sorted(held)))

    def on_stop_executors(self, rid, msg):
        if self.client_for(rid) is not None:
            self._admin.stop_all_executors()

    def on_admin(self, rid, msg):
        self._admin.handle(rid, msg, self.client_for(rid) is not None)

    def on_results_taken(self, rid, msg):
        """The client took results off its connection: more may go."""
        client = self.client_for(rid)
        if client is not None:
            client.in_flight_rows = max(0, client.in_flight_rows - msg.rows)
            client.in_flight_size = max(0, client.in_flight_size - msg.size)

    def send_results(self):
        """Send each client the results gathered for it since the last turn, within its
        window."""
        peers = self._peers
        for client in list(self._sessions.by_rid.values()):
            if not (client.results or client.unsent or client.held is not None):
                continue
            if peers.in_process(client.routing_id):  # no frame: one message, nothing held
                peers.send(client.routing_id, p.TaskResults(client.results.take_rows()))
            else:
                self._send_within_window(client)

    def _send_within_window(self, client):
        """Send ``client`` the frames its window takes: at most ``RESULTS_WINDOW_ROWS``
        rows and ``client_results_window`` bytes that it has not said it took (a larger
        frame goes alone). The rest waits here; past ``client_results_backlog`` bytes, its
        queued tasks wait too (``hold_client``), until it takes half of that."""
        config = self._config
        window = config.client_results_window
        unsent = client.unsent
        while client.in_flight_rows < p.RESULTS_WINDOW_ROWS and client.in_flight_size < window:
            if not unsent:
                if not client.results:
                    break
                frames = client.results.take_frames(_RESULTS_HEADER, config.max_message_size, _RESULT_ROWS)
                unsent.extend(frames)
                client.unsent_size += sum(map(len, frames))
            frame = unsent.popleft()
            client.unsent_size -= len(frame)
            client.in_flight_rows += rows_in(frame)
            client.in_flight_size += len(frame)
            if not self._peers.send(client.routing_id, p.Encoded(p.TaskResults, frame)):
                return  # gone: the client is dropped
        backlog = config.client_results_backlog
        # large results went ahead as TaskData: what the window did not take counts too
        behind = (client.unsent_size + client.results.payload_size()
                  + max(0, client.in_flight_size - window))
        if client.held is None:
            if behind > backlog:
                log.warning("client %s is behind on its results: its tasks wait until it "
                            "catches up", client.routing_id.hex())
                self._scheduler.hold_client(client)
        elif behind <= backlog // 2:
            log.info("client %s caught up on its results: its tasks go on", client.routing_id.hex())
            self._scheduler.release_client(client)
            self._ask_for_offers()


def rows_in(frame):
    """The rows of a TaskResults frame: after its header, the body ``[rows]`` opens with
    an array's header, which msgpack writes in one of three forms."""
    head = frame[len(_RESULTS_HEADER) + 1]
    if head & 0xf0 == 0x90:
        return head & 0x0f
    if head == 0xdc:
        return int.from_bytes(frame[len(_RESULTS_HEADER) + 2:len(_RESULTS_HEADER) + 4], "big")
    return int.from_bytes(frame[len(_RESULTS_HEADER) + 2:len(_RESULTS_HEADER) + 6], "big")
