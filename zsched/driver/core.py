"""The driver: one ROUTER socket, one thread, all scheduling state.

Executors and clients connect as DEALERs. The loop (``loop.py``) polls the ROUTER (plus the
ZAP socket and wake-up pipes), handles each message in order, runs its timers (revive
offers, heartbeat check, executor exits) and sends launches and results in batches. Other
threads never touch its state: they connect as clients or write to a pipe. A client in this
process connects through ``channel`` (a ``zsched.channel.Channel``) and hands its messages
over in memory; executors that a local cluster manager starts on this host talk to it over
a pair of pipes each (``pipe_link``): the same frames, with fewer thread wake-ups. Every
peer is reached through ``peers.py``; each job has its part (``registry``, ``scheduler``,
``executors``, ``clients``, ``admin``), given what it uses when built; this class builds
and wires them together, makes the offers and decides what a lost peer means.
"""
import logging
import os
import secrets
import socket
import threading

import zmq

from .. import protocol as p
from ..channel import Channel
from ..credentials import ExecutorKeys
from ..errors import ProtocolError
from ..fastpath import IMPLEMENTATION as FASTPATH_IMPLEMENTATION
from ..protocol import AdminOp, MsgType
from ..liveness import HeartbeatMonitor
from ..wakeup import WakeupPipe
from .admin import Admin
from .allocation import ExecutorAllocator
from .client_pipes import ClientPipes
from .clients import ClientEndpoint, ClientSessions
from .data_store import DataStore
from .executors import ExecutorEndpoint
from .heartbeats import HeartbeatPace, driver_pings
from .loop import Loop
from .options import new_app_id
from .peer_warnings import PeerWarnings
from .peers import Peers, Role, open_router
from .registry import ExecutorRegistry
from .scheduler import TaskScheduler

log = logging.getLogger("zsched.driver")  # also when run as __main__

_RECV_BATCH = 1024          # messages handled per wake-up before timers and sends run
_HISTORY_INTERVAL = 0.5      # seconds between the dashboard's snapshots
_RECLAIM_INTERVAL = 0.1      # seconds between looks for tasks held behind long ones ...
_RECLAIM_SILENCE = 0.1       # ... on an executor silent this long while cores idle elsewhere
_LOCALITY_INTERVAL = 0.1     # seconds between offers while tasks wait for their hosts


class Driver:
    """Spark's DriverEndpoint with its backend: registration, offers, launches, results."""

    def __init__(self, options):
        """A driver listening as ``options`` (a ``DriverOptions``) say; ``run`` serves."""
        self.config = options.config
        self.host = options.host
        self.port = options.port
        self.app_id = options.app_id or new_app_id()
        self.keys = keys = options.keys
        # a key pair for each executor it starts, admitted until that executor is removed
        self.executor_keys = None if keys is None else ExecutorKeys(keys.server_public)
        self.secret_file = options.secret_file
        self.cluster_manager = cluster_manager = options.cluster_manager
        self.clock = clock = options.clock
        self.stop_on_eof_fd = options.stop_on_eof_fd  # the driver stops at its end of file
        # clients of the program that started this driver come through it (client_pipes.py)
        self.client_pipes = None if options.client_pipes is None else ClientPipes(options.client_pipes)
        self.incarnation = secrets.randbits(62)
        self.sessions = ClientSessions()  # the clients, and the function table
        self.scheduler = TaskScheduler(self.config, self.sessions.functions, clock)
        self.registry = ExecutorRegistry(HeartbeatMonitor(
            self.config.executor_heartbeat_interval, self.config.executor_heartbeat_timeout, clock=clock))
        self.url = None
        # inproc: the ROUTER also listens at ``inproc_url``, for sockets in this process that
        # share ``context`` (zsched's own clients here use ``channel`` instead)
        self.inproc = options.inproc
        self.inproc_url = None
        # a Unix socket is quicker than loopback TCP; its directory must be the user's
        # alone, as ZeroMQ creates the socket with the umask's mode
        self.ipc_path = options.ipc_path
        self.ipc_url = None
        self.context = zmq.Context()
        self.ready_event = threading.Event()
        self._wakeup = WakeupPipe()
        self.offers_needed = False
        self.warnings = PeerWarnings()
        self.started_at = clock()   # by the driver's clock; is_ready waits from it
        self._thread = None
        # what the dashboard and /metrics show: traffic, losses, scheduling latency, history
        self.counters = {"bytes_in": 0, "bytes_out": 0, "messages_in": 0, "messages_out": 0,
                         "executors_lost": 0}
        self.dashboard_port = options.dashboard_port  # None: no dashboard
        self.dashboard_host = options.dashboard_host
        self.dashboard = None
        self._probe_at = None         # when to probe the peers again after a disconnect
        self.allocator = None
        if cluster_manager is not None:
            # report: given the text of each allocation warning (bin/driver prints them)
            self.allocator = ExecutorAllocator(cluster_manager, self.config, clock,
                                               options.initial_executors, report=options.report)
        self.dynamic_allocation = options.dynamic_allocation  # a DynamicAllocationPolicy, or None
        self.pings = driver_pings(cluster_manager, options.initial_executors, self.dynamic_allocation)
        self._build()

    def _build(self):
        """The driver's socket, its loop and its parts, wired together."""
        self.bind()
        # clients in this process connect through it, without a socket
        self.channel = Channel(self.inproc_url or self.url)
        self.loop = Loop(self.clock, after_turn=self._after_turn)
        self.peers = Peers(self.router, self._router_state, self.counters, self.loop,
                           self.channel, p.frame_limit(self.config.max_message_size),
                           take=self._take, warn=self.warnings.warn,
                           lost=self._peer_unreachable, broke=self._link_broke)
        self._build_parts()
        self._handlers = message_handlers(self.executor_endpoint, self.client_endpoint,
                                          self.data_store)
        self._start_dashboard()
        self._watch()

    def _build_parts(self):
        """The executor and client endpoints and the admin operations, each given what it
        uses."""
        known = dict(app_id=self.app_id, incarnation=self.incarnation, config=self.config)
        shared = dict(scheduler=self.scheduler, registry=self.registry, sessions=self.sessions)
        self.executor_endpoint = executors = ExecutorEndpoint(
            **known, **shared, clock=self.clock, peers=self.peers,
            pace=HeartbeatPace(self.config, self.clock),
            cluster_manager=self.cluster_manager, allocator=self.allocator,
            executor_keys=self.executor_keys, counters=self.counters, warnings=self.warnings,
            ask_for_offers=self.ask_for_offers, data_push=self._data_push)
        self.data_store = DataStore(self.config.driver_data_limit, self.peers.send,
                                    self.sessions.by_rid, self.registry.by_rid, self.peers.in_process)
        self.admin = Admin(
            registry=self.registry, scheduler=self.scheduler, functions=self.sessions.functions,
            send=self.peers.send, clock=self.clock, counters=self.counters, app_id=self.app_id,
            url=self.url, is_ready=self.is_ready, allocator=self.allocator,
            cluster_manager=self.cluster_manager, dynamic_allocation=self.dynamic_allocation,
            remove_executor=executors.remove_executor, send_control=executors.send_control,
            longest_pause=self.loop.longest_pause, clients=self.sessions.by_rid,
            data=self.data_store)
        self.client_endpoint = ClientEndpoint(
            **known, **shared, peers=self.peers, admin=self.admin, data=self.data_store,
            send_control=executors.send_control, warnings=self.warnings,
            ask_for_offers=self.ask_for_offers)

    # ------------------------------------------------------------ set-up

    def bind(self):
        if self.inproc:
            self.inproc_url = f"inproc://zsched-driver-{self.incarnation:x}"
        if self.ipc_path is not None:
            self.ipc_url = f"ipc://{self.ipc_path}"
        extra_urls = [url for url in (self.inproc_url, self.ipc_url) if url is not None]
        self.router, self._router_state, self.zap, self.monitor, port = open_router(
            self.context, self.config, self.keys, self.executor_keys, self.host, self.port, extra_urls, self.pings)
        self.port = port
        advertised = self.host
        if advertised in ("0.0.0.0", "*", ""):
            advertised = socket.gethostname()
        self.url = f"tcp://{advertised}:{port}"

    def _start_dashboard(self):
        if self.dashboard_port is None:
            return
        from ..dashboard import DashboardServer, dashboard_token
        # with a secure bus the page needs a token, which whoever holds the secret can derive
        token = dashboard_token(self.keys.client_secret) if self.keys is not None else None
        self.dashboard = DashboardServer(self.dashboard_host, self.dashboard_port, self.admin.last_snapshot, token)
        self.dashboard.start()
        self.admin.dashboard_started(self.dashboard.public_url)

    # ------------------------------------------------------------ running

    def start_thread(self):
        """Run the loop in a background thread; returns when serving."""
        self._thread = threading.Thread(target=self.run, name="zsched-driver", daemon=True)
        self._thread.start()
        self.ready_event.wait()

    def request_stop(self):
        """Ask the loop to stop; safe from any thread and from signal handlers."""
        self.loop.stop()
        self._wakeup.wake_always()

    def is_running(self):
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout=None):
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self):
        log.info("driver %s (app %s) fast path: %s", self.url, self.app_id, FASTPATH_IMPLEMENTATION)
        self.channel.serve_in_this_thread()
        try:
            if self.cluster_manager is not None:
                url = self.url
                if self.ipc_url is not None and self.cluster_manager.on_this_host:
                    url = self.ipc_url
                self.cluster_manager.attach(url, self.app_id, self._executor_credential)
                if self.cluster_manager.on_this_host and self.config.local_executor_link == "pipe":
                    self.cluster_manager.adopt_link = self._adopt_executor_link
                self.allocator.round()
            self.ready_event.set()
            self.loop.run()
            log.info("driver loop ended: stop requested")
        except BaseException:
            log.exception("driver loop ended by an error")
            raise
        finally:
            self.ready_event.set()
            self._shutdown()

    def _watch(self):
        """What the loop polls, with the handler of each, and its timers."""
        loop = self.loop
        if self.zap is not None:
            loop.watch(self.zap.socket, self.zap.handle, only_when_ready=True)
        loop.watch(self._wakeup.fd, self._wakeup.clear)
        if self.stop_on_eof_fd is not None:
            loop.watch(self.stop_on_eof_fd, self._on_stdin)
        loop.watch(self.router, self._receive)
        if self.client_pipes is not None:
            self.client_pipes.watch(loop, self.peers, self._client_pipes_closed)
        loop.watch(self.channel.wakeup.fd, self._on_local_wakeup)
        loop.watch(self.monitor, self._on_disconnects, only_when_ready=True)
        loop.every(self.config.revive_interval, self._revive_offers)
        executors = self.executor_endpoint
        loop.every(min(1.0, self.config.executor_heartbeat_timeout / 4), executors.check_heartbeats)
        loop.every(0.2, executors.check_exits)
        loop.every(0.1, self._probe_again)
        loop.every(_RECLAIM_INTERVAL, lambda: executors.reclaim_hoarded_tasks(_RECLAIM_SILENCE))
        loop.every(_LOCALITY_INTERVAL, executors.placement_tick)
        if self.scheduler.speculation is not None:
            loop.every(self.config.speculation_interval, executors.speculate)
        if self.dynamic_allocation is not None and self.allocator is not None:
            loop.every(0.25, self.admin.allocate_dynamically)
        if self.dashboard is not None:
            loop.every(_HISTORY_INTERVAL, self.admin.publish_snapshot)

    def step(self, timeout=0.0, all_timers=False):
        """One turn of the loop in the caller's thread, for a driver whose loop does not
        run: handle the input ready within ``timeout`` seconds, run the timers due by the
        driver's clock (every timer with ``all_timers``), then make offers and send
        results."""
        self.loop.run_once(timeout, all_timers)

    def close(self):
        """Stop a driver whose loop does not run (``run`` does this when it ends): its
        executors are told to shut down, its sockets closed."""
        self._shutdown()

    def _on_stdin(self):
        if not os.read(self.stop_on_eof_fd, 4096):
            log.info("stopping: the process that started this driver is gone (stdin closed)")
            self.loop.stop()

    def _on_local_wakeup(self):
        # a client in this process queued something: it writes the pipe unless a wake-up
        # is pending, and one is until this clear, so none is missed
        self.channel.wakeup.clear()
        self.peers.receive_in_process()

    def _after_turn(self):
        scheduler = self.scheduler
        if scheduler.kills or (scheduler.exclusion is not None and scheduler.exclusion.newly):
            self.executor_endpoint.act_for_scheduler()
        if self.offers_needed:
            self._make_offers()
        if self.sessions.has_unused():
            self.client_endpoint.forget_unused_functions()
        self.client_endpoint.send_results()

    # ------------------------------------------------------------ receiving

    def _receive(self):
        """Handle up to ``_RECV_BATCH`` messages waiting at the ROUTER; True if more may wait."""
        return self.peers.receive_router(_RECV_BATCH)

    def _take(self, rid, frame):
        """Handle ``frame`` from peer ``rid``, whatever carried it: decoded, checked, then
        given to the handler of its type."""
        try:
            msg = p.decode(frame)
        except ProtocolError as exc:
            self.warnings.warn(rid, str(exc))
        else:
            self._handle(rid, msg)

    def _handle(self, rid, msg):
        """Handle a well-formed message from peer ``rid`` (of the ROUTER, or a client in this
        process), if a peer of its role may send it. A connection whose role is undecided
        (the cluster secret's) takes the role of its first hello or registration, for good.
        Until then its other messages reach their handlers only to be answered as a
        stranger's: with no session and no registration, which only a decided connection
        gets, the handler acts on nothing (a client of an earlier driver learns that its
        tasks are lost, an executor of one that it must exit)."""
        entry = self._handlers.get(msg.TYPE)
        if entry is None:
            self.warnings.warn(rid, f"{type(msg).__name__} is not a message for the driver")
            return
        role, handler = entry
        peer = self.peers.get(rid)
        if peer is None:  # forgotten while its last frames were read (a removed executor)
            return
        if peer.role is Role.UNDECIDED and type(msg) in FIRST_MESSAGES:
            peer.role = role
        if role is not None and peer.role is not role and peer.role is not Role.UNDECIDED:
            self._refuse(rid, msg, peer.role)
            return
        try:
            handler(rid, msg)
        except Exception:
            # a bug for one message must not stop the loop
            log.exception("error handling %s from peer %s", type(msg).__name__, rid.hex())

    def _refuse(self, rid, msg, role):
        """``msg`` is not for a connection of ``role``: warned about; a registration is
        answered, so that the executor says why it stops."""
        why = f"a connection whose credential is a{'n' if role is Role.EXECUTOR else ''} {role.value}'s"
        self.warnings.warn(rid, f"{type(msg).__name__} refused from {why}")
        if type(msg) in (p.RegisterExecutor, p.ExecutorHello):
            self.peers.send(rid, p.RegisterExecutorFailed(f"refused from {why}"), quiet=True)

    # -- executors the driver starts

    def _executor_credential(self, executor_id):
        """The credential (one line) for executor ``executor_id``, which the cluster manager
        is starting; None on an insecure bus."""
        if self.executor_keys is None:
            return None
        return self.executor_keys.issue(executor_id).line()

    def _adopt_executor_link(self, executor_id, read_fd, write_fd):
        """The cluster manager started executor ``executor_id`` with a pipe pair to this
        driver: its end is ``read_fd`` and ``write_fd``. Called in the loop's thread."""
        self.peers.adopt_link(f"executor {executor_id}", read_fd, write_fd, Role.EXECUTOR, executor_id)

    def _client_pipes_closed(self):
        self.client_pipes = None

    def _link_broke(self, rid, error):
        """Peer ``rid`` broke its link (this driver cut it off): that is why it goes."""
        if not self.executor_endpoint.link_broke(rid, error):  # a client's link
            self._peer_unreachable(rid, f"cut off (it broke its link: {error})", None)

    # ------------------------------------------------------------ offers and sending

    def is_ready(self):
        """Spark's isReady: enough of the expected cores registered, or waited long enough."""
        ratio = self.config.min_registered_ratio
        if ratio <= 0:
            return True
        expected = 0
        if self.cluster_manager is not None:
            expected = self.allocator.target * self.cluster_manager.cores_per_executor
        registered = self.registry.cores()
        if expected == 0 or registered >= ratio * expected:
            return True
        return self.clock() - self.started_at >= self.config.max_registered_waiting_time

    def _revive_offers(self):
        self.scheduler.forget_idle_task_lengths()
        self.offers_needed = True

    def ask_for_offers(self):
        """Make offers at the end of this turn of the loop: cores or tasks may be free."""
        self.offers_needed = True

    def _make_offers(self):
        self.offers_needed = False
        if self.scheduler.n_pending == 0 or not self.is_ready():
            return
        self.executor_endpoint.send_launches(self.scheduler.offer_frames(self._data_push()))

    def _data_push(self):
        """Tasks with data: it leaves just before their launch (None: the fused offer)."""
        return self.data_store.push_for_launch if self.data_store.task_entries else None

    def _peer_unreachable(self, rid, problem, msg):
        if (self.executor_endpoint.connection_lost(rid, problem)
                or self.client_endpoint.connection_lost(rid, problem)):
            return
        log.debug("could not send %s to peer %s: %s", p.message_name(msg) if msg else "a probe",
                  rid.hex(), problem)

    # ------------------------------------------------------------ timers

    def _on_disconnects(self):
        """A connection was lost: find whose by probing every peer now, and again shortly
        (the event can arrive before the ROUTER has dropped the connection)."""
        while True:
            try:
                self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
        self._probe_peers()
        self._probe_at = self.clock() + 0.3

    def _drain(self, rounds=8):
        """Read what waits before a peer is declared gone: the ROUTER still holds the last
        messages of a peer whose connection has closed (its results, why it left), though
        sends to it already fail. Reads are fair-queued, so a few rounds reach them."""
        for _ in range(rounds):
            if not self._receive():
                return

    def _probe_again(self):
        if self._probe_at is not None and self.clock() >= self._probe_at:
            self._probe_at = None
            self._probe_peers()

    def _probe_peers(self):
        self._drain()
        self.peers.probe()

    # ------------------------------------------------------------ stopping

    def _shutdown(self):
        if self.router.closed:  # closed already: a second close does nothing
            return
        self.executor_endpoint.shut_down_all()
        self.client_endpoint.fail_all(b"the driver stopped")
        self.peers.stop_in_process()
        if self.cluster_manager is not None:
            # executors still starting never heard Shutdown: stop them now
            self.cluster_manager.kill([executor_id for executor_id in self.cluster_manager.launched_ids()
                                       if executor_id not in self.registry.by_id])
            self.peers.flush_links(1.0, self.clock)
            self.cluster_manager.stop(self.config.shutdown_timeout)
        self.peers.close_links()
        if self.client_pipes is not None:
            self.client_pipes.close()
        if self.zap is not None:
            self.zap.close()
        if self.dashboard is not None:
            self.dashboard.close()
        self.router.disable_monitor()
        self.monitor.close(linger=0)
        self.router.close(linger=1000)
        self.context.term()
        if self.ipc_path is not None:  # ZeroMQ leaves the socket's file behind
            try:
                os.unlink(self.ipc_path)
            except FileNotFoundError:
                pass
        self._wakeup.close()
        log.info("driver stopped")


# the messages that decide the role of a connection holding the cluster secret
FIRST_MESSAGES = frozenset((p.ClientHello, p.ExecutorHello, p.RegisterExecutor, p.AttachRelief))


def message_handlers(executors, clients, data):
    """For each message type a peer may send the driver: the role that may send it (None:
    any role, a ping only says that the loop is alive) and its handler(rid, msg)."""
    by_executors, by_clients = Role.EXECUTOR, Role.CLIENT
    return {
        MsgType.EXECUTOR_HELLO: (by_executors, executors.on_hello),
        MsgType.REGISTER_EXECUTOR: (by_executors, executors.on_register),
        MsgType.STATUS_UPDATES: (by_executors, executors.on_status_updates),
        MsgType.HEARTBEAT: (by_executors, executors.on_heartbeat),
        MsgType.REMOVE_EXECUTOR: (by_executors, executors.on_remove),
        MsgType.ATTACH_RELIEF: (by_executors, executors.on_attach_relief),
        MsgType.CLIENT_HELLO: (by_clients, clients.on_hello),
        MsgType.SUBMIT_TASKS: (by_clients, clients.on_submit_tasks),
        MsgType.TASK_PLACEMENT: (by_clients, clients.on_task_placement),
        MsgType.CANCEL_TASKS: (by_clients, clients.on_cancel_tasks),
        MsgType.CANCEL_QUEUED_TASKS: (by_clients, clients.on_cancel_queued_tasks),
        **dict.fromkeys(map(MsgType, AdminOp), (by_clients, clients.on_admin)),
        MsgType.ADMIN_PING: (None, clients.on_admin),
        MsgType.STOP_EXECUTORS: (by_clients, clients.on_stop_executors),
        MsgType.CLIENT_GOODBYE: (by_clients, clients.on_goodbye),
        MsgType.FORGET_FUNCTIONS: (by_clients, clients.on_forget_functions),
        MsgType.RESULTS_TAKEN: (by_clients, clients.on_results_taken),
        MsgType.PUT_DATA: (by_clients, data.on_put),
        MsgType.FORGET_DATA: (by_clients, data.on_forget),
        MsgType.GET_DATA: (by_executors, data.on_get),
        MsgType.RESULT_DATA: (by_executors, data.on_result),
    }
