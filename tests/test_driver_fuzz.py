"""The driver against hostile but authenticated peers, over real sockets on loopback.

A registered executor and a connected client, both holding the cluster secret, send
messages that are well framed but carry hostile values (rows of the wrong shape, ids and
attempts at the limits of msgpack's integers, states outside TaskState, run times that are
NaN, infinite or negative, unknown digests, duplicates), messages of every type with fields
of the wrong type, and frames that are not msgpack at all. After each burst the driver must
still be alive, must have logged no exception from a handler, and must still serve an
honest client end to end: every honest task gets its right result, and once the hostile
client leaves nothing of its work stays queued or running.

msgpack has no encoding for integers outside [-2**63, 2**64 - 1] (its packer raises on
2**64 and on -2**63 - 1), so those limits are the largest and smallest ids a peer can send;
the floats 2.0**64 and -2.0**63 stand for the integers beyond them.
"""
import dataclasses
import hashlib
import itertools
import json
import math
import os
import pickle
import re
import subprocess
import sys
import urllib.error
import urllib.request

import cloudpickle
import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import zsched
from conftest import BIN, FAKE_SSH, SHARED_PROCESSES, DriverProcess, wait_for
from zsched import protocol as p
from zsched.errors import exception_payload
from zsched.protocol import MsgType, TaskState
from zsched.credentials import parse_credential
from zsched.security import CurveKeys, load_keys, make_client

pytestmark = pytest.mark.timeout(120)

APP_ID = "fuzz-app"
U64_MAX = (1 << 64) - 1
I64_MIN = -(1 << 63)
EDGE_INTS = [0, 1, -1, 2, 4, 5, 6, 99, (1 << 31) - 1, 1 << 31, 1 << 32, (1 << 63) - 1, 1 << 63,
             U64_MAX, -(1 << 31), I64_MIN]
# no shrinking: each step of it would cost a round trip to the driver, or a timeout
FUZZ = settings(max_examples=50, deadline=None, database=None, phases=(Phase.explicit, Phase.generate),
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])
DRIVER_ERRORS = ("error handling", "Traceback", "ended by an error", "error taking")
WAIT = 20.0  # seconds any single exchange may take on a slow shared machine
STOPPED_BY_A_CLIENT = "killed by the driver (StopExecutors from a client)"


def square(x):
    return x * x


def fail(x):
    raise ValueError(f"fail {x}")


def blob_of(fn):
    return cloudpickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)


def digest_of(blob):
    return hashlib.blake2b(blob, digest_size=16).digest()


def shared_digests():
    """The digests of this module's functions (pickled by value once the tests are
    collected, so not before)."""
    return {digest_of(blob_of(square)), digest_of(blob_of(fail))}


def args_of(*args, **kwargs):
    return pickle.dumps((args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)


JUNK_BLOB = b"not a pickled function"
JUNK_DIGEST = digest_of(JUNK_BLOB)
UNKNOWN_DIGEST = b"\x00" * 15 + b"\x01"
BAD_STATES = [0, 6, 99, -1, 255, U64_MAX, I64_MIN]


# ---------------------------------------------------------------- peers speaking the protocol


class Peer:
    """A DEALER holding the cluster secret, connected to the driver."""

    def __init__(self, bus, keys=None):
        self.bus = bus
        self.sock = bus.context.socket(zmq.DEALER)
        self.sock.linger = 0
        make_client(self.sock, keys or bus.keys)
        self.sock.connect(bus.driver.url)

    def send(self, msg):
        self.sock.send(p.encode(msg))

    def send_frames(self, frames):
        self.sock.send_multipart(frames)

    def receive(self, timeout=0.0):
        """Handle what the driver sent, waiting up to ``timeout`` seconds for the first."""
        wait = int(timeout * 1000)
        while self.sock.poll(wait):
            wait = 0
            self.on(p.decode(self.sock.recv()))

    def receive_until(self, done, timeout=WAIT, what="an answer"):
        def step():
            self.bus.assert_driver_runs()
            self.receive(0.01)
            return done()
        wait_for(step, timeout=timeout, interval=0, message=what)

    def close(self):
        self.sock.close(linger=0)


class FakeExecutor(Peer):
    """A registered executor that lives in the test: it runs what it is launched (functions
    whose blob matches their digest), answers kills, returns and decommissions as an
    executor does, and can send anything at all."""

    def __init__(self, bus, executor_id, cores=1, hostname="fake-host", keys=None):
        super().__init__(bus, keys)
        self.executor_id = executor_id
        self.functions = {}   # digest -> blob
        self.held = {}        # task id -> (attempt, digest, args), in launch order
        self.launched = []    # (task id, attempt) of every launch
        self.kills = []       # (task id, attempt) of every KillTask
        self.results = []     # rows owed to the driver (kills, returns)
        self.stopped = None   # why the driver stopped it
        self.pings = itertools.count(1 << 40)  # apart from the ids a test picks
        self.pongs = set()    # request ids of the pings answered
        self.registered = None
        self.unexpected = []  # what the driver sends clients, not executors
        self.send(p.RegisterExecutor(executor_id, hostname, cores, APP_ID, os.getpid()))
        self.receive_until(lambda: self.registered is not None, what=f"registration of {executor_id}")
        assert self.registered is True, self.stopped
        self.incarnation = self.welcome.incarnation

    def on(self, msg):
        if isinstance(msg, p.RegisteredExecutor):
            self.registered, self.welcome = True, msg
        elif isinstance(msg, p.RegisterExecutorFailed):
            # the answer to a registration sent again on this connection (a fuzzed one)
            # refuses that one only: the driver keeps this executor, and it keeps serving
            if self.registered is not True:
                self.registered, self.stopped = False, msg.reason
        elif isinstance(msg, p.LaunchTasks):
            self.functions.update(msg.functions)
            for task_id, attempt, digest, args in msg.tasks:
                assert task_id not in self.held, f"task {task_id} launched twice here"
                self.held[task_id] = (attempt, digest, args)
                self.launched.append((task_id, attempt))
        elif isinstance(msg, p.KillTask):
            self.kills.append((msg.task_id, msg.attempt))
            if self.held.get(msg.task_id, (None,))[0] == msg.attempt:
                del self.held[msg.task_id]
                self.results.append([msg.task_id, msg.attempt, TaskState.KILLED, b"killed"])
        elif isinstance(msg, p.ReturnTasks):
            for task_id in list(self.held)[::-1][:msg.count]:
                attempt = self.held.pop(task_id)[0]
                self.results.append([task_id, attempt, TaskState.RETURNED, b""])
        elif isinstance(msg, p.DecommissionExecutor):
            for task_id, (attempt, _, _) in self.held.items():
                self.results.append([task_id, attempt, TaskState.RETURNED, b""])
            self.held.clear()
            self.report()
            self.send(p.RemoveExecutor(self.executor_id, "decommissioned", False))
            self.stopped = "decommissioned"
        elif isinstance(msg, (p.StopExecutor, p.Shutdown)):
            self.stopped = getattr(msg, "reason", "shutdown")
        elif isinstance(msg, p.AdminReply):  # to a ping of its own, or to one a test sent
            self.pongs.add(msg.request_id)
        elif isinstance(msg, p.ForgetFunctions):
            for digest in msg.digests:
                self.functions.pop(digest, None)
        elif not isinstance(msg, (p.HeartbeatAck, p.Probe)):
            # a Probe goes to every peer when any connection drops: an executor's due too
            self.unexpected.append(msg)

    def outcome(self, digest, args):
        """(state, payload) of running a task, as an executor reports it: a function or
        arguments that do not unpickle fail the task as its own exception would."""
        blob = self.functions.get(digest)
        if blob is None:
            return TaskState.ERROR, b"the driver did not send the task's function"
        try:
            if digest_of(blob) != digest:  # never unpickle what the tests did not make
                raise RuntimeError("a function whose blob does not match its digest")
            fn = cloudpickle.loads(blob)
            call_args, call_kwargs = pickle.loads(args)
            return TaskState.FINISHED, pickle.dumps(fn(*call_args, **call_kwargs))
        except Exception as exc:
            return TaskState.FAILED, exception_payload(exc)

    def result_rows(self):
        """Run every task held: their status update rows (the tasks are no longer held)."""
        rows = [[task_id, attempt, *self.outcome(digest, args)]
                for task_id, (attempt, digest, args) in self.held.items()]
        self.held.clear()
        return rows

    def report(self, busy=0.001, before=(), after=()):
        """Send the rows owed and the results of every task held, between ``before`` and
        ``after`` rows, with ``busy`` as the run time."""
        rows = self.results + self.result_rows()
        self.results = []
        if rows or before or after:
            self.send(p.StatusUpdates(self.incarnation, busy, [*before, *rows, *after]))

    def serve(self, timeout=0.01):
        self.receive(timeout)
        if self.stopped is None:
            self.report()

    def leave(self):
        """Say it leaves (as an executor that exits on its own does), and make sure the
        driver heard it before the connection closes."""
        if self.sock.closed:
            return
        self.send(p.RemoveExecutor(self.executor_id, "leaving", False))
        self.ping(what="the driver to let it go")
        self.close()

    def ping(self, what):
        """Returns once the driver has handled everything this executor sent before, and
        this executor every answer to it. The driver answers a ping on any connection (on
        one not a client's, with an error) under the request's id: unlike a HeartbeatAck,
        which does not say which heartbeat it answers, it cannot be owed to an earlier
        message."""
        request_id = next(self.pings)
        self.send(p.AdminPing(request_id))
        self.receive_until(lambda: request_id in self.pongs, what=what)
        self.pongs.discard(request_id)

    def sync(self):
        """Returns once the driver has handled everything this executor sent before, and
        has answered a heartbeat: ``stopped`` is set if the driver no longer holds it. (A
        heartbeat among what it sent before is answered too: waiting for any HeartbeatAck
        took that answer for this one, and kept a fake executor the driver had let go.)"""
        if self.stopped is not None:
            return
        self.send(p.Heartbeat(self.incarnation, self.executor_id, {"rss": 1, "cpu": 0.0, "running": 0}))
        self.ping(what=f"a heartbeat answer to {self.executor_id}")


class RawClient(Peer):
    """A client that lives in the test: it says hello, and can send anything at all."""

    def __init__(self, bus):
        super().__init__(bus, bus.client_keys)
        self.request_ids = itertools.count(1 << 40)  # apart from the ids a test picks
        self.replies = {}     # request id -> [AdminReply, ...]
        self.results = {}     # client task id -> [(state, payload), ...]
        self.stops = 0
        self.refusals = []    # why registrations it sent were refused
        self.hello()

    def hello(self):
        self.welcome = None
        self.results = {}
        self.send(p.ClientHello(os.getpid()))
        self.receive_until(lambda: self.welcome is not None, what="ClientWelcome")

    def on(self, msg):
        if isinstance(msg, p.ClientWelcome):
            self.welcome = msg
        elif isinstance(msg, p.TaskResults):
            for task_id, state, payload in msg.results:
                self.results.setdefault(task_id, []).append((state, payload))
        elif isinstance(msg, p.AdminReply):
            self.replies.setdefault(msg.request_id, []).append(msg)
        elif isinstance(msg, p.StopExecutor):
            self.stops += 1
        elif isinstance(msg, p.RegisterExecutorFailed):  # its connection is a client's
            self.refusals.append(msg.reason)

    def request(self, operation, *args, request_id=None):
        """Send admin ``operation`` (an ``AdminOp`` name in lower case) and return the reply."""
        request_id = next(self.request_ids) if request_id is None else request_id
        self.send(p.ADMIN_MESSAGES[p.AdminOp[operation.upper()]](request_id, *args))
        self.receive_until(lambda: request_id in self.replies, what=f"an answer to {operation}")
        return self.replies.pop(request_id)[0]

    def sync(self):
        """Returns once the driver has handled everything this client sent before."""
        self.request("ping")

    def status(self):
        reply = self.request("status")
        assert reply.ok, reply.value
        return reply.value


# ---------------------------------------------------------------- a driver with its peers


class Bus:
    """A secure driver with, on demand, a real executor, an honest ``zsched.Client``, a
    fake executor and a raw client.

    With ``own_keys`` the fake executor and the raw client hold the credentials of their
    roles: the raw client the client credential, the fake executor a key the driver gave
    executor "1", "2"... (the driver starts them on a host over "ssh": a stand-in keeps the
    key it hands over, and a fake executor registers with it). Else both hold the cluster
    secret, and take the role of their first message."""

    def __init__(self, directory, real_executor=True, fake_cores=1, dashboard=False, own_keys=False):
        self.directory = directory
        self.secret = os.path.join(directory, "secret")
        self.own_keys = own_keys
        args = ["--secret-file", self.secret, "--app-id", APP_ID]
        env = None
        if dashboard:
            args += ["--dashboard-port", "0"]
        if own_keys:
            args, env = self.keyed_driver(args)
        self.driver = DriverProcess(*args, env=env)
        self.dashboard_url = None
        if dashboard:
            self.dashboard_url = wait_for(lambda: re.search(
                r"zsched dashboard at (http://\S+/)\?token=(\w+)\n", self.driver.stdout_so_far()),
                timeout=WAIT, message="the dashboard's address")
        self.keys = load_keys(self.secret, use_environment=False)
        self.client_keys = self.keys
        if own_keys:
            self.client_keys = load_keys(os.path.join(directory, "client-credential"))
        self.context = zmq.Context()
        self.executors = []
        self.fake_ids = itertools.count(1)
        self.fake_cores = fake_cores
        self.checked_log_lines = 0
        self.client = zsched.Client(self.driver.url, secret_file=self.secret, timeout=WAIT)
        self.real = self.start_executor("real") if real_executor else None
        self.fake = self.new_fake()
        self.hostile = RawClient(self)

    def keyed_driver(self, args):
        """The driver's arguments and environment for ``own_keys``."""
        bin_dir, self.captured = (os.path.join(self.directory, name) for name in ("bin", "captured"))
        for directory in (bin_dir, self.captured):
            os.makedirs(directory)
        with open(os.path.join(bin_dir, "ssh"), "w") as f:
            f.write(FAKE_SSH)
        os.chmod(os.path.join(bin_dir, "ssh"), 0o755)
        hosts = os.path.join(self.directory, "hosts")
        with open(hosts, "w") as f:
            f.write("fake-host 1\n")
        self.taken = set()  # captured credentials a fake executor has used
        args = [*args, "--client-credential", os.path.join(self.directory, "client-credential"),
                "--host", "127.0.0.1", "--hosts", hosts, "--conf", "allocation_batch_delay=0.05"]
        return args, {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CAPTURE": self.captured}

    def new_fake(self):
        """A new fake executor: with ``own_keys``, registered with the next key the driver
        handed over."""
        if not self.own_keys:
            return FakeExecutor(self, f"fake-{next(self.fake_ids)}", cores=self.fake_cores)

        def fresh():
            """Keys handed over and not yet used, whose stand-in still runs (the driver
            stops the one of an executor it gave up on, and revokes its key)."""
            return sorted(name for name in os.listdir(self.captured)
                          if name.endswith(".credential") and name not in self.taken
                          and os.path.exists(f"/proc/{name.split('.')[0]}"))
        # one executor on the host: after a StopExecutors the target is 0 until asked again
        self.client.request_total_executors(1)
        name = wait_for(lambda: (fresh() or [None])[0], timeout=WAIT, message="a key for a fake executor")
        self.taken.add(name)
        SHARED_PROCESSES.add(int(name.split(".")[0]))  # the stand-in: the driver's, not the test's
        with open(os.path.join(self.captured, name), "rb") as f:
            credential = parse_credential(f.read())
        return FakeExecutor(self, credential.executor_id, cores=self.fake_cores, hostname="fake-host",
                            keys=CurveKeys.from_credential(credential))

    def start_executor(self, executor_id):
        """A real executor process (its output in files: it may log much under attack)."""
        log_path = os.path.join(self.directory, f"executor-{executor_id}-{len(self.executors) + 1}.log")
        out = open(log_path, "w")
        proc = subprocess.Popen(
            [sys.executable, os.path.join(BIN, "executor"), "--driver-url", self.driver.url,
             "--executor-id", executor_id, "--hostname", "127.0.0.1", "--cores", "1",
             "--app-id", APP_ID, "--secret-file", self.secret],
            stdout=out, stderr=subprocess.STDOUT)
        out.close()
        proc.log_path = log_path
        self.executors.append(proc)
        wait_for(lambda: executor_id in self.client.executor_ids(), timeout=WAIT,
                 message=f"executor {executor_id} to register")
        return proc

    def close(self):
        """Stop everything; the driver's exit status."""
        # no waiting on futures a failed test left pending: it would hang here, the driver
        # left running
        self.client.shutdown(wait=False, cancel_futures=True)
        if self.driver.proc.poll() is None:  # leave in order (not racing the driver's checks)
            self.hostile.send(p.ClientGoodbye())
            self.hostile.sync()
            self.fake.leave()
        for peer in (self.hostile, self.fake):
            peer.close()
        self.context.destroy(linger=0)
        code = self.driver.stop()
        for proc in self.executors:
            proc.wait(WAIT)
        return code

    # -- checks

    def driver_log(self):
        return self.driver.stderr_so_far()

    def assert_driver_runs(self):
        assert self.driver.proc.poll() is None, f"the driver died:\n{self.driver_log()[-3000:]}"

    def assert_alive_without_errors(self):
        self.assert_driver_runs()
        lines = self.driver_log().splitlines()
        new, self.checked_log_lines = lines[self.checked_log_lines:], len(lines)
        errors = [line for line in new if any(word in line for word in DRIVER_ERRORS)]
        assert not errors, "the driver logged errors:\n" + "\n".join(new[-60:])

    def serve_until(self, done, timeout=WAIT, what="condition"):
        """Wait for ``done()`` while the fake executor runs what it is launched."""
        def step():
            self.assert_driver_runs()
            self.fake.serve(0.005)
            return done()
        wait_for(step, timeout=timeout, interval=0, message=what)

    def honest_round(self, n=4):
        """The honest client runs ``n`` tasks end to end and gets every right result."""
        xs = list(range(n))
        futures = [self.client.submit(square, x) for x in xs]
        self.serve_until(lambda: all(f.done() for f in futures), what="the honest tasks")
        assert [f.result(0) for f in futures] == [x * x for x in xs]

    def recover(self):
        """Get a registered fake executor, a connected raw client and (on a bus that has
        one) the real executor back."""
        self.replace_stopped_real_executor()
        if self.fake.stopped is not None or self.fake.registered is not True:
            self.fake.leave()
            self.fake = self.new_fake()
        self.hostile.hello()

    def replace_stopped_real_executor(self):
        """A client may stop every executor (StopExecutors, as the hostile client of the
        any-frames fuzz test does now and then): the real executor, told to stop, exits 0,
        and a new one takes its place (else the tests after it would run with the fake
        executor alone). A real executor lost for any other reason, or that did not exit
        as told, fails the test."""
        if self.real is None:
            return
        status = self.client.status()
        if "real" in {e["id"] for e in status["executors"]}:
            return
        reason = [loss["reason"] for loss in status["losses"] if loss["id"] == "real"][-1:]
        try:
            code = self.real.wait(WAIT)
        except subprocess.TimeoutExpired:
            code = None
        with open(self.real.log_path) as log:
            text = log.read()
        assert reason == [STOPPED_BY_A_CLIENT] and code == 0, \
            f"the real executor was lost: {reason}, exit status {code}:\n{text[-3000:]}"
        self.real = self.start_executor("real")
        SHARED_PROCESSES.add(self.real.pid)  # the bus's, not the test's: close() stops it

    def reset(self):
        """Start an example afresh: what an earlier one (perhaps failed) left is dropped."""
        self.hostile.send(p.ClientGoodbye())
        self.hostile.sync()
        self.serve_until(self.idle, what="no task queued or running")
        self.recover()

    def idle(self):
        tasks = self.client.status()["tasks"]
        return tasks["queued"] == 0 and tasks["running"] == 0

    def assert_still_serving(self):
        """After a hostile burst: the driver handled it, lives, logged no handler error,
        serves an honest client, and once the hostile client left holds no task at all."""
        self.fake.receive(0)
        # the hostile client first: what it sent may stop the fake executor (StopExecutors,
        # RemoveExecutor), and the fake hears of it only in the answer to its own sync after
        # that; synced the other way round, recover() could keep a fake the driver already
        # dropped, and the honest round would wait for an executor that is not there
        self.hostile.sync()
        self.fake.sync()
        self.assert_alive_without_errors()
        self.recover()
        self.honest_round()
        self.hostile.send(p.ClientGoodbye())
        self.hostile.sync()  # answered as an unknown client: the goodbye was handled
        self.serve_until(self.idle, what="no task queued or running after the hostile client left")
        self.hostile.hello()
        self.honest_round(2)
        self.assert_alive_without_errors()


@pytest.fixture(scope="module", params=["cluster secret", "own keys"])
def bus(tmp_path_factory, request):
    """The bus most tests share, twice: its fake executor and raw client holding the
    cluster secret, then each holding its own role's credential."""
    bus = Bus(str(tmp_path_factory.mktemp("fuzz-bus")), own_keys=request.param == "own keys")
    yield bus
    assert bus.close() == 0, bus.driver.stderr[-3000:]


@pytest.fixture(scope="module")
def lonely_bus(tmp_path_factory):
    """The fake executor alone runs the tasks: every launch goes to it."""
    bus = Bus(str(tmp_path_factory.mktemp("fuzz-lonely")), real_executor=False, fake_cores=4)
    yield bus
    assert bus.close() == 0, bus.driver.stderr[-3000:]


@pytest.fixture
def fresh_bus(tmp_path):
    """A bus of its own, for a test that may leave the driver's state damaged (or the
    driver dead: the test checks it)."""
    buses = []

    def make(**kwargs):
        buses.append(Bus(str(tmp_path), **kwargs))
        return buses[-1]
    yield make
    for bus in buses:
        bus.close()


# ---------------------------------------------------------------- strategies

wire_ints = st.one_of(st.sampled_from(EDGE_INTS), st.integers(I64_MIN, U64_MAX))
hostile_floats = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, -0.0, -1.0, 1e308,
                                            5e-324, 2.0 ** 64, -2.0 ** 63]), st.floats())
scalars = st.one_of(st.none(), st.booleans(), wire_ints, hostile_floats, st.text(max_size=6),
                    st.binary(max_size=6))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5),
    st.dictionaries(st.one_of(st.text(max_size=4), wire_ints, st.binary(max_size=4)), inner,
                    max_size=3)), max_leaves=10)
message_types = st.one_of(st.sampled_from(sorted(int(t) for t in MsgType)), st.integers(0, 255))


def frame(msg_type, body, version=p.VERSION):
    return bytes((version, msg_type)) + msgpack.packb(body, use_bin_type=True)


@st.composite
def hostile_frames(draw):
    """One message (a list of frames) that the driver must drop or answer."""
    kind = draw(st.sampled_from(["fields", "fields", "fields", "raw", "truncated", "trailing",
                                 "parts", "version"]))
    msg_type = draw(message_types)
    cls = p._BY_TYPE.get(msg_type)
    n_fields = len(cls.FIELDS) if cls else draw(st.integers(0, 4))
    body = draw(st.one_of(st.lists(values, min_size=n_fields, max_size=n_fields),
                          st.lists(values, max_size=n_fields + 2), values))
    if kind == "fields":
        return [frame(msg_type, body)]
    if kind == "raw":
        return [draw(st.binary(max_size=40))]
    if kind == "version":
        return [frame(msg_type, body, version=draw(st.integers(0, 255)))]
    whole = frame(msg_type, body)
    if kind == "truncated":
        return [whole[:draw(st.integers(0, max(0, len(whole) - 1)))]]
    if kind == "trailing":
        return [whole + draw(st.binary(min_size=1, max_size=8))]
    return [whole] + draw(st.lists(st.binary(max_size=8), min_size=1, max_size=3))


# ---------------------------------------------------------------- explicit cases: frames


def wrong_values_for(check):
    """Values of other types than a field's check accepts (each one it refuses)."""
    candidates = [None, True, False, 0, -1, U64_MAX, I64_MIN, 1.5, math.nan, "", "x", b"",
                  b"x", [], [1], [[1, 1, 1, b"x"]], {}, {"a": 1}, {b"k": b"v"}]
    return [value for value in candidates if not check(value)]


def wrongly_typed_frames():
    """For every message type, each field in turn given every wrong type, the others
    right; also each message with a field too few and a field too many."""
    good = {
        p.RegisterExecutor: ["x-wrong", "h", 1, APP_ID, 1],
        p.StatusUpdates: [1, 0.0, []],
        p.Heartbeat: [1, "x", {}],
        p.RemoveExecutor: ["nobody", "r", False],
        p.AttachRelief: [1, "nobody", 1, b"token"],
        p.ExecutorHello: [1],
        p.RegisteredExecutor: [1, {}, b"token"],
        p.RegisterExecutorFailed: ["r"],
        p.LaunchTasks: [{}, []],
        p.KillTask: [1, 1, "r"],
        p.StopExecutor: ["r"],
        p.Shutdown: [],
        p.HeartbeatAck: [1],
        p.DecommissionExecutor: ["r"],
        p.Probe: [],
        p.ReturnTasks: [1],
        p.ForgetFunctions: [[]],
        p.ClientHello: [1],
        p.SubmitTasks: [{}, []],
        p.TaskPlacement: [[]],
        p.CancelTasks: [[]],
        p.CancelQueuedTasks: [1],
        p.ResultsTaken: [1, 1],
        p.AdminPing: [1],
        p.AdminExecutorIds: [1],
        p.AdminTotalCores: [1],
        p.AdminStatus: [1],
        p.AdminIsExecutorActive: [1, "nobody"],
        p.AdminDecommissionExecutors: [1, ["nobody"]],
        p.AdminDecommissionExecutorsOnHost: [1, "no-such-host"],
        p.AdminRequestTotalExecutors: [1, 0, 0, None],
        p.AdminRequestExecutors: [1, 0],
        p.AdminKillExecutors: [1, ["nobody"], False, False],
        p.AdminKillExecutorsOnHost: [1, "no-such-host"],
        p.StopExecutors: [],
        p.ClientGoodbye: [],
        p.ClientWelcome: [1, "a", {}],
        p.TaskResults: [[]],
        p.AdminReply: [1, True, None],
        # data messages: their parts' sizes in place of the parts
        p.PutData: [b"k" * 16, 1, []],
        p.DataStored: [b"k" * 16, 1, ""],
        p.ForgetData: [[]],
        p.GetData: [[]],
        p.Data: [b"k" * 16, "", []],
        p.ResultData: [1, 1, b"k" * 16, 0, []],
        p.TaskData: [1, b"k" * 16, []],
    }
    assert set(good) == set(p._BY_TYPE.values()), "a message type without a case here"
    frames = []
    for cls, fields in good.items():
        for i, check in enumerate(cls.CHECKS):
            for wrong in wrong_values_for(check):
                frames.append(frame(cls.TYPE, fields[:i] + [wrong] + fields[i + 1:]))
        frames.append(frame(cls.TYPE, fields + [0]))
        if fields:
            frames.append(frame(cls.TYPE, fields[:-1]))
    return frames


def test_every_message_type_with_a_field_of_the_wrong_type_is_dropped(bus):
    frames = wrongly_typed_frames()
    assert len(frames) > 300
    for frame_ in frames:
        bus.fake.send_frames([frame_])
        bus.hostile.send_frames([frame_])
    bus.assert_still_serving()
    # the driver's stderr reaches the test through a reader thread, maybe after the sync
    wait_for(lambda: "dropped malformed input" in bus.driver_log(), 30, message="the warning in the log")


def test_rows_of_the_wrong_shape_or_types_drop_the_whole_message(lonely_bus):
    """A StatusUpdates or SubmitTasks with one bad row among good ones is dropped whole;
    the good rows count only when they come again in a good message."""
    bus = lonely_bus
    futures = [bus.client.submit(square, x) for x in range(3)]
    bus.fake.receive_until(lambda: len(bus.fake.held) == 3, what="three launches")
    good = bus.fake.result_rows()
    bad_rows = [[1, 1, 1], [1, 1, 1, b"x", 0], [], [1.0, 1, 1, b"x"], [1, True, 1, b"x"],
                [1, 1, "1", b"x"], [1, 1, 1, "x"], [1, 1, 1, None], [b"1", 1, 1, b"x"], 7, None]
    for bad in bad_rows:
        bus.fake.send_frames([frame(MsgType.STATUS_UPDATES, [bus.fake.incarnation, 0.1, good + [bad]])])
        bus.fake.send_frames([frame(MsgType.STATUS_UPDATES, [bus.fake.incarnation, 0.1, [bad] + good])])
        bus.hostile.send_frames([frame(MsgType.SUBMIT_TASKS, [{}, [[1, UNKNOWN_DIGEST, b"a", 0], bad]])])
    bus.fake.sync()
    bus.hostile.sync()
    assert not any(f.done() for f in futures), "a result came from a malformed message"
    assert bus.hostile.results == {}, "a row of a malformed SubmitTasks was answered"
    bus.fake.send(p.StatusUpdates(bus.fake.incarnation, 0.1, good))
    bus.serve_until(lambda: all(f.done() for f in futures), what="the results")
    assert [f.result(0) for f in futures] == [0, 1, 4]
    bus.assert_still_serving()


JUNK_FRAMES = [
    [b""], [b"\x01"], [b"\x01\x02"], [b"\xff" * 7],
    [bytes((p.VERSION, MsgType.STATUS_UPDATES)) + b"\xc1"],             # never used in msgpack
    [bytes((p.VERSION, MsgType.STATUS_UPDATES)) + b"\x93\x01"],         # truncated array
    [bytes((p.VERSION, MsgType.SUBMIT_TASKS)) + b"\x92\x80\xdd\xff\xff\xff\xff"],  # 4G items announced
    [bytes((p.VERSION, MsgType.SUBMIT_TASKS)) + b"\x92\x80\xc6\xff\xff\xff\xff"],  # 4 GB bin announced
    [bytes((p.VERSION, MsgType.HEARTBEAT)) + b"\x93\x01\xa1x\x81\xa1k\xd9\x05ab"],  # truncated str
    [bytes((p.VERSION, MsgType.HEARTBEAT)) + b"\x93\x01\xa2\xff\xfe\x80"],         # invalid utf-8
    [bytes((p.VERSION, MsgType.CLIENT_HELLO)) + msgpack.packb([1]) + b"\x00"],     # trailing byte
    [bytes((p.VERSION, MsgType.ADMIN_DECOMMISSION_EXECUTORS)) + b"\x92\x01\x91" + b"\x91" * 5000],  # deep
    [bytes((p.VERSION, MsgType.HEARTBEAT)) + b"\x93\x01\xa1x\x81\x90\xc0"],        # list as a key
    [bytes((p.VERSION, MsgType.ADMIN_DECOMMISSION_EXECUTORS)) + b"\x92\x01\x91\xd4\x05\x00"],  # ext type
    [bytes((p.VERSION, MsgType.ADMIN_DECOMMISSION_EXECUTORS)) + b"\x92\x01\x91\xd6\xff\x00\x00"],  # bad timestamp
    [bytes((p.VERSION, 0)) + msgpack.packb([])],
    [bytes((p.VERSION, 9)) + msgpack.packb([])],
    [bytes((p.VERSION, 255)) + msgpack.packb([1, 2, 3])],
    [bytes((0, MsgType.CLIENT_HELLO)) + msgpack.packb([1])],
    [bytes((255, MsgType.STATUS_UPDATES)) + msgpack.packb([1, 0.0, []])],
    [p.encode(p.ClientHello(1)), b""],
    [b"", p.encode(p.ClientHello(1))],
    [p.encode(p.Probe())] * 3,
    [os.urandom(64)],
]


def test_frames_that_are_not_msgpack_truncated_or_of_an_unknown_type_are_dropped(bus):
    for frames in JUNK_FRAMES:
        bus.fake.send_frames(frames)
        bus.hostile.send_frames(frames)
    bus.assert_still_serving()


def test_messages_meant_for_executors_or_clients_are_refused(bus):
    """What the driver sends (launches, kills, welcomes, results...) is never taken from a
    peer, and a client may not speak as an executor nor an executor as a client."""
    for msg in [p.RegisteredExecutor(1, {}, b"t"), p.RegisterExecutorFailed("x"),
                p.LaunchTasks({UNKNOWN_DIGEST: b"f"}, [[1, 1, UNKNOWN_DIGEST, b"a"]]),
                p.KillTask(1, 1, "x"), p.StopExecutor("x"), p.Shutdown(), p.HeartbeatAck(1),
                p.DecommissionExecutor("x"), p.Probe(), p.ReturnTasks(5),
                p.ClientWelcome(1, "a", {}), p.TaskResults([[1, 1, b"x"]]), p.AdminReply(1, True, 1)]:
        bus.fake.send(msg)
        bus.hostile.send(msg)
    # the fake executor speaks as a client, the client as an executor
    for msg in [p.ClientHello(1), p.SubmitTasks({}, [[1, UNKNOWN_DIGEST, b"a", 0]]),
                p.CancelTasks([1]), p.AdminStatus(99), p.StopExecutors(),
                p.ClientGoodbye()]:
        bus.fake.send(msg)
    bus.fake.sync()
    assert bus.fake.stopped is None, "a registered executor was stopped for a client's message"
    # refused for its role, before any handler: no welcome, results or admin reply
    assert bus.fake.unexpected == [] and 99 not in bus.fake.pongs
    executors = bus.client.executor_ids()
    for msg in [p.StatusUpdates(bus.fake.incarnation, 0.0, [[1, 1, 1, b"x"]]),
                p.Heartbeat(bus.fake.incarnation, bus.fake.executor_id, {}),
                p.RemoveExecutor(bus.fake.executor_id, "a client's word", True),
                p.RegisterExecutor(bus.fake.executor_id, "h", 1, APP_ID, 1),
                p.RegisterExecutor("from-a-client", "h", 1, APP_ID, 1)]:
        bus.hostile.send(msg)
    bus.hostile.sync()
    assert bus.client.executor_ids() == executors, "a client's message changed the executors"
    assert bus.hostile.stops == 0, "a client was answered as an executor"
    bus.assert_still_serving()


# ---------------------------------------------------------------- explicit cases: status updates


def test_updates_for_unknown_stale_duplicate_or_huge_task_ids_change_nothing(lonely_bus):
    bus = lonely_bus
    before = bus.hostile.status()["tasks"]
    futures = [bus.client.submit(square, x) for x in (5, 6)]
    bus.fake.receive_until(lambda: len(bus.fake.held) == 2, what="two launches")
    (t1, (a1, _, _)), (t2, (a2, _, _)) = bus.fake.held.items()
    rows = bus.fake.result_rows()
    junk = [[t, a, state, b"junk"]
            for t in (0, -1, t1 + 1000, U64_MAX, I64_MIN, (1 << 63) - 1, t1 + (1 << 32))
            for a in (a1, 0, -1, U64_MAX, I64_MIN)
            for state in (TaskState.FINISHED, TaskState.FAILED, TaskState.RETURNED)]
    stale = [[t1, a, TaskState.FINISHED, b"stale"] for a in (a1 + 1, a1 - 1, U64_MAX, I64_MIN,
                                                             a1 + (1 << 32), a1 - (1 << 32))]
    stale += [[t2, a, TaskState.RETURNED, b""] for a in (a2 + 1, 0, U64_MAX)]
    # the true rows, then the same tasks again: only the first report of an attempt counts
    bus.fake.send(p.StatusUpdates(bus.fake.incarnation, 0.01, junk + stale + rows + rows + [
        [t1, a1, TaskState.FAILED, b"late"], [t2, a2, TaskState.RETURNED, b""]]))
    bus.serve_until(lambda: all(f.done() for f in futures), what="the two results")
    assert [f.result(0) for f in futures] == [25, 36]
    bus.fake.send(p.StatusUpdates(bus.fake.incarnation, 0.01, rows + junk))  # all stale now
    bus.fake.sync()
    after = bus.hostile.status()["tasks"]
    assert after["finished"] - before["finished"] == 2
    assert after["failed"] == before["failed"] and after["retried"] == before["retried"]
    assert after["queued"] == after["running"] == 0
    assert bus.fake.held == {}, "a stale update made the driver launch again"
    bus.assert_still_serving()


@pytest.mark.parametrize("busy", [math.nan, math.inf, -math.inf, -1.0, -0.0, 0, 1e308, 5e-324,
                                  U64_MAX, I64_MIN, 2.0 ** 64])
def test_run_times_that_are_not_finite_durations_do_not_disturb_scheduling(lonely_bus, busy):
    """busy is what an executor says it spent: NaN, infinite, negative or absurd values
    must not poison its window (launches go on) nor the figures."""
    bus = lonely_bus
    for _ in range(3):
        futures = [bus.client.submit(square, x) for x in range(6)]

        def step():
            bus.fake.receive(0.005)
            bus.fake.report(busy=busy)
            return all(f.done() for f in futures)
        wait_for(step, timeout=WAIT, interval=0, message="the tasks reported with an odd run time")
        assert [f.result(0) for f in futures] == [x * x for x in range(6)]
    executors = bus.hostile.status()["executors"]
    seconds = [e["task_seconds"] for e in executors if e["id"] == bus.fake.executor_id]
    assert seconds and (seconds[0] is None or (math.isfinite(seconds[0]) and seconds[0] >= 0)), seconds
    bus.assert_still_serving()


def test_a_status_update_with_a_wrong_incarnation_is_ignored_and_the_executor_told_to_exit(lonely_bus):
    bus = lonely_bus
    future = bus.client.submit(square, 7)
    bus.fake.receive_until(lambda: len(bus.fake.held) == 1, what="a launch")
    rows = bus.fake.result_rows()
    for incarnation in (bus.fake.incarnation + 1, 0, -1, U64_MAX, I64_MIN):
        bus.fake.send(p.StatusUpdates(incarnation, 0.01, [[r[0], r[1], TaskState.FAILED, b"x"] for r in rows]))
    bus.fake.receive_until(lambda: bus.fake.stopped is not None, what="StopExecutor")
    assert not future.done()
    # told to exit, it is no longer the driver's: no task waits on it
    assert bus.fake.executor_id not in bus.client.executor_ids()
    bus.recover()  # obeying, it leaves: its task runs elsewhere (here on the next fake executor)
    bus.serve_until(future.done, what="the task on the next executor")
    assert future.result(0) == 49
    bus.assert_still_serving()


# ---------------------------------------------------------------- explicit cases: executors


def test_a_relief_connection_is_bound_to_its_executor_and_gets_copies_of_kills(fresh_bus):
    """AttachRelief binds a second connection to an executor of this driver, once, proven
    by the token the executor alone received; that connection gets a copy of each kill and
    its heartbeats are answered. Any other attach is refused (the public facts, incarnation,
    id and pid, prove nothing), and the executor keeps serving either way."""
    bus = fresh_bus(real_executor=False)
    fake = bus.fake
    token = fake.welcome.relief_token
    relief = Peer(bus)
    heard = []
    relief.on = heard.append
    for incarnation, executor_id, proof in [
            (fake.incarnation, fake.executor_id, b""),                   # what anyone knows
            (fake.incarnation, fake.executor_id, bytes(len(token))),     # a guess
            (fake.incarnation + 1, fake.executor_id, token),             # another driver's
            (fake.incarnation, "no-such-executor", token)]:
        relief.send(p.AttachRelief(incarnation, executor_id, os.getpid(), proof))
    # a client, even one holding the token, never becomes an executor's connection
    bus.hostile.send(p.AttachRelief(fake.incarnation, fake.executor_id, os.getpid(), token))
    bus.hostile.sync()
    assert [e["relief"] for e in bus.client.status()["executors"]] == [False]
    relief.send(p.AttachRelief(fake.incarnation, fake.executor_id, os.getpid(), token))
    wait_for(lambda: bus.client.status()["executors"][0]["relief"], timeout=WAIT,
             message="the relief connection attached")
    second = Peer(bus)
    second.on = heard.append
    second.send(p.AttachRelief(fake.incarnation, fake.executor_id, os.getpid(), token))
    future = bus.client.submit(square, 3)
    fake.receive_until(lambda: len(fake.held) == 1, what="a launch")
    [(task_id, (attempt, _, _))] = fake.held.items()
    assert future.cancel() or future.running()
    bus.client.submit(square, 1)  # the cancel leaves with the next message
    fake.receive_until(lambda: fake.kills, what="the kill")
    relief.receive_until(lambda: heard, what="a copy of the kill")
    assert heard == [p.KillTask(task_id, attempt, "cancelled by the client")]
    bus.serve_until(bus.idle, what="no task out")  # the fake executor reports what it holds
    # a heartbeat there says the relief covers for a long task: the driver sends it all
    relief.send(p.Heartbeat(fake.incarnation, fake.executor_id, {"rss": 1, "cpu": 0.0}))
    relief.receive_until(lambda: len(heard) == 2, what="the heartbeat's answer")
    assert heard[1] == p.HeartbeatAck(fake.incarnation)
    covered = bus.client.submit(square, 4)
    relief.receive_until(lambda: len(heard) == 3, what="a launch sent to the relief")
    assert isinstance(heard[2], p.LaunchTasks) and not fake.held
    [[task_id, attempt, _, _]] = heard[2].tasks
    kills = len(fake.kills)
    assert covered.cancel() or covered.running()
    bus.client.executor_ids()  # the cancel leaves with the next message
    relief.receive_until(lambda: len(heard) == 4, what="the kill sent to the relief")
    # ... and to the executor's own connection, after every launch sent there before
    fake.receive_until(lambda: len(fake.kills) > kills, what="the kill on its own connection")
    assert heard[3] == p.KillTask(task_id, attempt, "cancelled by the client")
    assert fake.kills[-1] == (task_id, attempt)
    fake.sync()  # its own connection speaks: the driver sends there again
    relief.send(p.StatusUpdates(fake.incarnation, 0.0, [[task_id, attempt, TaskState.KILLED, b""]]))
    after = bus.client.submit(square, 5)
    fake.receive_until(lambda: fake.held, what="a launch on its own connection again")
    fake.report()
    assert after.result(WAIT) == 25
    second.receive(0.2)
    assert len(heard) == 4, "a second relief connection was attached"
    assert fake.stopped is None and fake.executor_id in bus.client.executor_ids()
    second.close()
    relief.close()


# ids that isdigit() takes but int() does not, one too long to sort, and ones that would
# break a command line or a script
ODD_IDS = ("\u00b2", "\u2460", "9" * 5000, "a/b", "a\nb")


@pytest.mark.parametrize("fields", [
    dict(cores=0), dict(cores=-1), dict(cores=U64_MAX), dict(cores=I64_MIN), dict(cores=p.MAX_CORES + 1),
    dict(app_id="another-app"), dict(app_id=""), dict(executor_id=""), dict(executor_id="DUPLICATE"),
    dict(pid=U64_MAX), dict(pid=I64_MIN), dict(hostname=""), dict(hostname="\x00" * 1000),
    *[dict(executor_id=odd) for odd in ODD_IDS],
])
def test_hostile_registrations_are_refused_or_harmless(bus, fields):
    fields = {"executor_id": "odd-one", "hostname": "odd", "cores": 1, "app_id": APP_ID,
              "pid": 1, **fields}
    if fields["executor_id"] == "DUPLICATE":
        fields["executor_id"] = bus.fake.executor_id
    peer = Peer(bus)
    answers = []
    peer.on = answers.append
    peer.send(p.RegisterExecutor(**fields))
    peer.receive_until(lambda: answers, what="an answer to the registration")
    refused = (fields["cores"] < 1 or fields["cores"] > p.MAX_CORES or fields["app_id"] != APP_ID
               or fields["executor_id"] in ("", bus.fake.executor_id, *ODD_IDS))
    if refused:
        assert isinstance(answers[0], p.RegisterExecutorFailed), answers
    else:
        assert isinstance(answers[0], p.RegisteredExecutor), answers
        peer.send(p.RegisterExecutor("odd-two", "odd", 1, APP_ID, 1))  # again, same connection
        peer.receive_until(lambda: len(answers) > 1, what="an answer to a second registration")
        assert isinstance(answers[1], p.RegisterExecutorFailed), answers
        peer.send(p.RemoveExecutor(fields["executor_id"], "leaving", False))
        wait_for(lambda: fields["executor_id"] not in bus.client.executor_ids(), timeout=WAIT,
                 message="the odd executor to leave")
    peer.close()
    bus.assert_still_serving()
    assert bus.client.status()["executors"]  # the snapshot sorts the ids: still answered


def test_an_executor_that_removes_itself_holding_tasks_has_them_run_elsewhere(lonely_bus):
    bus = lonely_bus
    futures = [bus.client.submit(square, x) for x in range(4)]
    bus.fake.receive_until(lambda: len(bus.fake.held) == 4, what="four launches")
    bus.fake.send(p.RemoveExecutor("not-its-own-id", "", True))  # its own exit, whatever the id
    bus.fake.sync()
    assert bus.fake.stopped is not None, "a removed executor's heartbeat was answered"
    bus.fake.held.clear()
    bus.recover()
    bus.serve_until(lambda: all(f.done() for f in futures), what="the tasks run again")
    assert [f.result(0) for f in futures] == [0, 1, 4, 9]
    bus.assert_still_serving()


def test_a_client_decommissioning_an_executor_with_odd_ids_gets_its_tasks_back_and_run(lonely_bus):
    """Duplicated, unknown and empty ids are skipped; the executor gives back the tasks
    it holds (RETURNED), they run on the next one, and it is not counted as a failure."""
    bus = lonely_bus
    failed = bus.hostile.status()["tasks"]["failed"]
    futures = [bus.client.submit(square, x) for x in range(4)]
    bus.fake.receive_until(lambda: len(bus.fake.held) == 4, what="four launches")
    held = dict(bus.fake.held)
    gone = bus.fake.executor_id
    reply = bus.hostile.request("decommission_executors", [gone, gone, "nobody", "", "x" * 10_000])
    assert reply.ok and reply.value == [gone], reply
    bus.fake.receive_until(lambda: bus.fake.stopped is not None, what="DecommissionExecutor")
    assert held and not bus.fake.held
    bus.recover()
    bus.serve_until(lambda: all(f.done() for f in futures), what="the returned tasks")
    assert [f.result(0) for f in futures] == [0, 1, 4, 9]
    assert gone not in bus.client.executor_ids()
    assert bus.hostile.status()["tasks"]["failed"] == failed
    bus.assert_still_serving()


@pytest.mark.parametrize("metrics", [
    {"rss": math.nan, "cpu": math.inf, "running": -1},
    {"rss": "lots", "cpu": None, "running": U64_MAX, "id": "spoofed", "state": "gone"},
    {"": I64_MIN, "x" * 10000: True},
])
def test_heartbeats_with_odd_metrics_do_not_disturb_status(bus, metrics):
    """Metrics are the executor's to say, but only the known ones as numbers >= 0: not its
    id, state or task counts, nor values a dashboard cannot serve."""
    marker = 1000 + id(metrics) % 1000000  # a valid figure: shows the heartbeat was taken
    bus.fake.send(p.Heartbeat(bus.fake.incarnation, "someone-else", {**metrics, "functions": marker}))

    def mine():
        return [e for e in bus.client.status()["executors"] if e.get("functions") == marker]
    wait_for(mine, timeout=WAIT, message="the driver to take the heartbeat")
    (entry,) = mine()
    assert (entry["id"], entry["state"], entry["running"]) == (bus.fake.executor_id, "active", 0), entry
    for name in p.HEARTBEAT_METRICS:  # each kept figure is a finite number >= 0
        if name in entry:
            assert type(entry[name]) in (int, float) and 0 <= entry[name] < math.inf, entry
    assert not (set(metrics) - set(p.HEARTBEAT_METRICS) - {"id", "state", "running"}) & set(entry), entry
    status = bus.client.status()
    assert sorted(e["id"] for e in status["executors"]) == bus.client.executor_ids()
    bus.assert_still_serving()


# ---------------------------------------------------------------- explicit cases: clients


def wait_results(bus, ids):
    """Wait for the raw client to hold a result for each of ``ids``."""
    try:
        bus.serve_until(lambda: (bus.hostile.receive(0), set(ids) <= set(bus.hostile.results))[1],
                        what="results")
    except AssertionError:
        missing = sorted(set(ids) - set(bus.hostile.results))
        raise AssertionError(f"no result for tasks {missing}; results: {bus.hostile.results}; "
                             f"driver: {bus.hostile.status()['tasks']}") from None


def test_submissions_with_unknown_digests_huge_ids_or_odd_retries_are_answered(bus):
    bus.hostile.send(p.SubmitTasks({digest_of(blob_of(square)): blob_of(square),
                                    digest_of(blob_of(fail)): blob_of(fail),
                                    JUNK_DIGEST: JUNK_BLOB}, []))
    sq, fl = digest_of(blob_of(square)), digest_of(blob_of(fail))
    rows = [
        [U64_MAX, UNKNOWN_DIGEST, args_of(1), 0],   # unknown function
        [I64_MIN, b"", args_of(1), 0],              # empty digest
        [(1 << 63) - 1, sq, args_of(3), U64_MAX],   # huge retries, succeeds
        [0, sq, args_of(4), I64_MIN],               # negative retries, succeeds
        [-1, fl, args_of(1), I64_MIN],              # negative retries: fails once, at once
        [-2, fl, args_of(2), -1],
        [2, fl, args_of(3), 2],                     # two retries: three runs
        [3, sq, b"not pickled arguments", 5],       # arguments that do not unpickle
        [4, sq, b"", 1],
        [5, JUNK_DIGEST, args_of(1), 3],            # a function that does not unpickle
        [6, sq, args_of("a", "b"), 0],              # wrong arity: the task raises
    ]
    bus.hostile.send(p.SubmitTasks({}, rows))
    wait_results(bus, [row[0] for row in rows])
    states = {task_id: [state for state, _ in results] for task_id, results in bus.hostile.results.items()}
    assert all(len(s) == 1 for s in states.values()), f"a task answered more than once: {states}"
    got = {task_id: s[0] for task_id, s in states.items()}
    assert got == {U64_MAX: TaskState.ERROR, I64_MIN: TaskState.ERROR,
                   (1 << 63) - 1: TaskState.FINISHED, 0: TaskState.FINISHED,
                   -1: TaskState.FAILED, -2: TaskState.FAILED, 2: TaskState.FAILED,
                   3: TaskState.FAILED, 4: TaskState.FAILED, 5: TaskState.FAILED, 6: TaskState.FAILED}
    assert pickle.loads(bus.hostile.results[(1 << 63) - 1][0][1]) == 9
    bus.assert_still_serving()


def test_a_task_retried_for_ever_stops_when_cancelled(bus):
    fl = digest_of(blob_of(fail))
    bus.hostile.send(p.SubmitTasks({fl: blob_of(fail)}, [[U64_MAX, fl, args_of(0), U64_MAX]]))
    bus.serve_until(lambda: bus.hostile.status()["tasks"]["retried"] >= 3, what="retries")
    bus.honest_round()  # the looping task does not starve the others
    bus.hostile.send(p.CancelTasks([U64_MAX, U64_MAX, I64_MIN, 0]))
    bus.serve_until(lambda: (lambda t: t["queued"] == t["running"] == 0)(bus.hostile.status()["tasks"]),
                    what="the cancelled task to stop")
    assert U64_MAX not in bus.hostile.results or bus.hostile.results[U64_MAX][0][0] != TaskState.FINISHED
    bus.assert_still_serving()


ODD_ADMIN_ARGS = [[], [1], ["x", 2], [U64_MAX], [I64_MIN], [-1], [[1]], [{"a": 1}], [{1: 2}], [None],
                  [True], [1.5], [math.nan], [b"\xff"], [["nobody"], 1, 2, 3, 4], [[1, 2, 3]],
                  [[None]], [{}], [["nobody"], {"x": 1}, [1]], [0, -1, {"h": "x"}], ["nobody"],
                  [["nobody", ""]], ["no-such-host"], [-1, 0, None], [0, U64_MAX, {"h": I64_MIN}],
                  [["nobody"], False, True], [["nobody"], 1, 0]]


def test_admin_requests_with_odd_arguments_are_each_answered_once(bus):
    """Every admin request of a well-formed message gets exactly one answer with its own
    id: a result, or an error saying what is wrong (no request may go unanswered: its
    client would wait for ever). One with arguments of the wrong types, or of a message
    type no operation has, is malformed: dropped, never answered, and the driver serves on."""
    sent, malformed = {}, set()
    request_ids = itertools.chain([U64_MAX, I64_MIN, 0, -1], itertools.count(10))
    types = [int(op) for op in p.AdminOp] + [51, 63]  # and two types no message has
    for msg_type in types:
        for args in ODD_ADMIN_ARGS:
            request_id = next(request_ids)
            frame_ = frame(msg_type, [request_id, *args])
            try:
                p.decode(frame_)
            except p.ProtocolError:
                malformed.add(request_id)
            else:
                sent[request_id] = (p.AdminOp(msg_type), args)
            bus.hostile.send_frames([frame_])
    assert len(sent) > len(p.AdminOp), "too few well-formed requests"
    assert {op for op, _ in sent.values()} == set(p.AdminOp)
    bus.hostile.receive_until(lambda: set(sent) <= set(bus.hostile.replies),
                              what="an answer to every admin request")
    bus.hostile.sync()
    replies = {request_id: bus.hostile.replies.pop(request_id) for request_id in sent}
    assert all(len(r) == 1 for r in replies.values()), "a request answered twice"
    assert not malformed & set(bus.hostile.replies), "a malformed request was answered"
    for request_id, (op, args) in sent.items():
        reply = replies[request_id][0]
        if not reply.ok:
            assert isinstance(reply.value, str) and reply.value, (op, args, reply)
    assert "dropped malformed input" in bus.driver_log()
    assert sorted(bus.client.executor_ids()) == sorted(["real", bus.fake.executor_id])
    bus.assert_still_serving()


# ---------------------------------------------------------------- hypothesis: any frame


@FUZZ
@given(burst=st.lists(st.tuples(st.sampled_from(["executor", "client"]), hostile_frames()),
                      min_size=1, max_size=12))
def test_fuzz_any_frames_from_an_executor_and_a_client(bus, burst):
    bus.reset()
    for sender, frames in burst:
        (bus.fake if sender == "executor" else bus.hostile).send_frames(frames)
    bus.assert_still_serving()


# ---------------------------------------------------------------- hypothesis: typed messages

task_states = st.one_of(st.sampled_from([int(s) for s in TaskState]), wire_ints)
busy_values = st.one_of(hostile_floats, wire_ints)
long_text = st.one_of(st.text(max_size=8), st.sampled_from(["", "\x00", "é" * 3, "x" * 70_000]))
metrics = st.dictionaries(long_text, st.one_of(st.none(), st.booleans(), wire_ints, hostile_floats,
                                               long_text), max_size=4)
digests = st.one_of(st.sampled_from([UNKNOWN_DIGEST, JUNK_DIGEST, b""]), st.binary(max_size=20))


@FUZZ
@given(junk=st.lists(st.tuples(wire_ints, wire_ints, task_states, st.binary(max_size=8)), max_size=20),
       repeats=st.lists(st.tuples(st.integers(0, 3), task_states, st.binary(max_size=8)), max_size=6),
       busy=busy_values, together=st.booleans())
def test_fuzz_status_updates_around_the_true_ones(lonely_bus, junk, repeats, busy, together):
    """Rows for tasks the executor does not hold at that attempt, and second reports of
    tasks already reported, whatever their state, change nothing: the honest results
    arrive right, each counted once, and no task is launched again."""
    bus = lonely_bus
    bus.reset()
    before = bus.hostile.status()["tasks"]
    futures = [bus.client.submit(square, x) for x in range(4)]
    bus.fake.receive_until(lambda: len(bus.fake.held) == 4, what="four launches")
    held = {(task_id, attempt) for task_id, (attempt, _, _) in bus.fake.held.items()}
    rows = bus.fake.result_rows()
    junk = [list(row) for row in junk if (row[0], row[1]) not in held]
    again = [[rows[i][0], rows[i][1], state, payload] for i, state, payload in repeats]
    if together:
        bus.fake.send(p.StatusUpdates(bus.fake.incarnation, busy, junk + rows + again))
    else:
        bus.fake.send(p.StatusUpdates(bus.fake.incarnation, busy, junk))
        bus.fake.send(p.StatusUpdates(bus.fake.incarnation, busy, rows))
        bus.fake.send(p.StatusUpdates(bus.fake.incarnation, busy, again + junk))
    bus.serve_until(lambda: all(f.done() for f in futures), what="the honest results")
    assert [f.result(0) for f in futures] == [0, 1, 4, 9]
    bus.fake.sync()
    after = bus.hostile.status()["tasks"]
    assert after["finished"] - before["finished"] == 4
    assert (after["failed"], after["retried"]) == (before["failed"], before["retried"])
    assert after["queued"] == after["running"] == 0
    assert bus.fake.held == {}, "a stale update sent a task out again"
    bus.assert_alive_without_errors()
    bus.honest_round()


def expected_state(row, functions):
    """The one TaskState a submitted row must end in, or None when it may be retried for
    ever (a task that fails, with many retries). ``functions`` are those the client sent;
    the driver also holds square, which the honest client sent. A function or arguments
    that do not unpickle fail the task as its own exception does."""
    _, digest, args, retries = row
    known = {digest_of(blob_of(square)): blob_of(square), **functions}
    if digest not in known:
        return TaskState.ERROR
    if known[digest] == blob_of(square) and args in (args_of(3), args_of(x=1)):
        return TaskState.FINISHED
    return TaskState.FAILED if retries <= 3 else None


GOOD_ARGS = {args_of(3), args_of("a", "b"), args_of(x=1)}
ARGS = list(GOOD_ARGS) + [b"", b"junk", b"\x80\x05."]


@st.composite
def submissions(draw):
    """SubmitTasks rows with hostile ids (distinct in one example), digests, arguments and
    retries; and the functions sent with them."""
    sq, fl = digest_of(blob_of(square)), digest_of(blob_of(fail))
    functions = draw(st.dictionaries(st.sampled_from([sq, fl, JUNK_DIGEST, b"\x01" * 16]),
                                     st.sampled_from([None]), max_size=4))
    functions = {d: {sq: blob_of(square), fl: blob_of(fail)}.get(d, JUNK_BLOB) for d in functions}
    ids = draw(st.lists(wire_ints, unique=True, max_size=10))
    rows = [[task_id, draw(st.one_of(st.sampled_from([sq, fl]), digests)), draw(st.sampled_from(ARGS)),
             draw(st.one_of(st.integers(-2, 3), wire_ints))] for task_id in ids]
    split = draw(st.integers(0, len(rows)))
    return functions, rows[:split], rows[split:]


@FUZZ
@given(submission=submissions(),
       cancels=st.lists(wire_ints, max_size=6), forgets=st.lists(digests, max_size=4),
       pid=wire_ints, cancel_some=st.booleans())
def test_fuzz_submissions_cancels_and_forgets_from_a_client(bus, submission, cancels, forgets,
                                                            pid, cancel_some):
    """Every task submitted ends in exactly one result, the state its row calls for
    (unknown functions and arguments that do not unpickle: ERROR; a task that raises:
    FAILED once its retries are spent; else FINISHED), unless cancelled first."""
    functions, first, second = submission
    bus.reset()
    bus.hostile.send(p.ClientHello(pid))  # again, with any pid: the same client
    bus.hostile.send(p.SubmitTasks(functions, first))
    bus.hostile.send(p.SubmitTasks({}, second))  # the functions came with the first
    cancelled = set(cancels)
    if cancel_some:
        cancelled |= {row[0] for row in first[::2]}
    bus.hostile.send(p.CancelTasks(sorted(cancelled)))
    bus.hostile.send(p.ForgetFunctions(forgets))
    expected = {row[0]: expected_state(row, functions) for row in first + second}
    known = set(functions) | {digest_of(blob_of(square))}
    refused = {row[0] for row in first + second if row[1] not in known}  # answered at once
    must_answer = {task_id for task_id, state in expected.items()
                   if state is not None and task_id not in cancelled} | refused
    wait_results(bus, must_answer)
    bus.hostile.sync()
    bus.hostile.receive(0)
    for task_id, results in bus.hostile.results.items():
        assert task_id in expected, f"a result for task {task_id}, never submitted"
        assert len(results) == 1, f"task {task_id} answered {len(results)} times: {results}"
        state = results[0][0]
        if task_id in cancelled and state == TaskState.KILLED:
            continue
        assert state == expected[task_id] or (expected[task_id] is None and state == TaskState.FAILED), \
            (task_id, state, expected[task_id])
        if state == TaskState.FINISHED:
            args = next(row[2] for row in first + second if row[0] == task_id)
            assert pickle.loads(results[0][1]) == (1 if args == args_of(x=1) else 9)
    bus.assert_still_serving()


OWN_ID = "\x00the fake executor's own id"  # stand-ins, for values known only when sending
OWN_INCARNATION = 0x5EED


def own(msg, executor_id, incarnation):
    """``msg`` with the stand-ins replaced by the fake executor's id and the driver's
    incarnation."""
    changes = {}
    if getattr(msg, "executor_id", None) == OWN_ID:
        changes["executor_id"] = executor_id
    if type(getattr(msg, "incarnation", None)) is int and msg.incarnation == OWN_INCARNATION:
        changes["incarnation"] = incarnation
    return dataclasses.replace(msg, **changes)


def typed_messages():
    """Messages of every type a peer may send, each field of its type but of a hostile
    value (ids at the limits, huge strings, NaN, unknown names)."""
    ids = st.one_of(long_text, st.just(OWN_ID))
    incarnations = st.one_of(wire_ints, st.just(OWN_INCARNATION))
    return st.one_of(
        st.builds(p.RegisterExecutor, ids, long_text, wire_ints, st.one_of(long_text, st.just(APP_ID)), wire_ints),
        st.builds(p.StatusUpdates, incarnations, busy_values,
                  st.lists(st.lists(st.one_of(wire_ints), min_size=3, max_size=3).map(
                      lambda r: r[:2] + [r[2] & 7] + [b"x"]), max_size=5)),
        st.builds(p.Heartbeat, incarnations, ids, metrics),
        st.builds(p.RemoveExecutor, ids.filter(lambda i: i != "real"), long_text, st.booleans()),
        st.builds(p.ClientHello, wire_ints),
        st.builds(p.SubmitTasks, st.dictionaries(digests.filter(lambda d: d not in shared_digests()),
                                                 st.binary(max_size=8), max_size=2),
                  st.lists(st.tuples(wire_ints, digests, st.binary(max_size=8), wire_ints).map(list),
                           max_size=4, unique_by=lambda r: r[0])),
        st.builds(p.CancelTasks, st.lists(wire_ints, max_size=5)),
        st.builds(p.TaskPlacement, st.lists(st.tuples(wire_ints, st.lists(long_text.filter(bool), max_size=3),
                                                      st.booleans()).map(list), max_size=4)),
        st.builds(p.AdminPing, wire_ints), st.builds(p.AdminStatus, wire_ints),
        st.builds(p.AdminExecutorIds, wire_ints), st.builds(p.AdminIsExecutorActive, wire_ints, long_text),
        st.builds(p.ClientGoodbye),
        st.builds(p.ForgetFunctions, st.lists(digests, max_size=4)),
        st.builds(p.Probe), st.builds(p.HeartbeatAck, wire_ints), st.builds(p.ReturnTasks, wire_ints),
        st.builds(p.KillTask, wire_ints, wire_ints, long_text),
        st.builds(p.TaskResults, st.lists(st.tuples(wire_ints, wire_ints, st.binary(max_size=4)).map(list),
                                          max_size=3)),
    )


@FUZZ
@given(data=st.data())
def test_fuzz_typed_messages_of_every_kind_from_an_executor_and_a_client(bus, data):
    bus.reset()
    burst = data.draw(st.lists(st.tuples(st.sampled_from(["executor", "client"]), typed_messages()),
                               min_size=1, max_size=10))
    burst = [(sender, own(msg, bus.fake.executor_id, bus.fake.incarnation)) for sender, msg in burst]
    used = set()  # client task ids distinct over the burst (see the duplicate ids test)
    for _, msg in burst:
        if isinstance(msg, p.SubmitTasks):
            msg.tasks[:] = [row for row in msg.tasks if row[0] not in used]
            used.update(row[0] for row in msg.tasks)
    for sender, msg in burst:
        (bus.fake if sender == "executor" else bus.hostile).send(msg)
    bus.assert_still_serving()


# ---------------------------------------------------------------- inputs that once broke the driver


def test_a_client_that_leaves_leaves_no_task_behind_even_with_duplicate_ids(fresh_bus):
    bus = fresh_bus(real_executor=False)
    fl = digest_of(blob_of(fail))
    bus.hostile.send(p.SubmitTasks({fl: blob_of(fail)}, [[7, fl, args_of(1), U64_MAX],
                                                         [7, fl, args_of(2), U64_MAX]]))
    bus.serve_until(lambda: bus.hostile.status()["tasks"]["retried"] >= 2, what="the tasks to run")
    bus.hostile.send(p.ClientGoodbye())
    bus.hostile.sync()

    def nothing_left():
        tasks = bus.client.status()["tasks"]
        return tasks["queued"] == tasks["running"] == 0
    bus.serve_until(nothing_left, timeout=3, what="no task of the client that left")


def test_a_connection_keeps_its_role_after_a_goodbye_or_a_removal(bus):
    """A client that left cannot register as an executor on its connection, nor can an
    executor that removed itself say hello as a client on its own."""
    bus.reset()
    bus.hostile.send(p.ClientGoodbye())
    bus.hostile.send(p.RegisterExecutor("phantom", "h", 1, APP_ID, 1))
    bus.hostile.receive_until(lambda: bus.hostile.refusals, what="the registration refused")
    assert "a client's" in bus.hostile.refusals[0]
    assert "phantom" not in bus.client.executor_ids()
    fake = bus.fake
    fake.send(p.RemoveExecutor(fake.executor_id, "leaving", False))
    wait_for(lambda: fake.executor_id not in bus.client.executor_ids(), timeout=WAIT,
             message="the fake executor to leave")
    fake.send(p.ClientHello(os.getpid()))
    fake.send(p.AdminStatus(99))
    fake.receive(0.5)
    assert fake.unexpected == [] and 99 not in fake.pongs  # no welcome, no admin reply
    bus.recover()
    bus.assert_still_serving()


def test_an_executor_that_heartbeats_then_leaves_in_one_burst_is_replaced(fresh_bus):
    """Found by the typed-messages fuzz test: the answer to the burst's heartbeat, read
    late, was taken for the answer to the harness' own, and the fake executor the driver
    had let go was kept; with no other executor the honest tasks waited for ever."""
    bus = fresh_bus(real_executor=False)
    bus.reset()
    bus.fake.send(p.Heartbeat(bus.fake.incarnation, bus.fake.executor_id, {}))
    bus.fake.send(p.RemoveExecutor(bus.fake.executor_id, "leaving", False))
    gone = bus.fake.executor_id
    bus.assert_still_serving()
    assert bus.fake.executor_id != gone


def test_executors_a_client_stopped_are_replaced(bus):
    """A client may stop every executor (StopExecutors; the any-frames fuzz test sends it
    now and then): the bus gets a real executor and a fake one back."""
    bus.reset()
    bus.hostile.send(p.StopExecutors())
    bus.assert_still_serving()
    assert sorted(bus.client.executor_ids()) == sorted(["real", bus.fake.executor_id])


@pytest.mark.parametrize("state", BAD_STATES)
def test_a_state_outside_task_state_never_reaches_a_client(fresh_bus, state):
    bus = fresh_bus(real_executor=False)
    sq = digest_of(blob_of(square))
    bus.hostile.send(p.SubmitTasks({sq: blob_of(square)}, [[1, sq, args_of(3), 0]]))
    bus.fake.receive_until(lambda: len(bus.fake.held) == 1, what="the launch")
    rows = bus.fake.result_rows()
    bus.fake.send(p.StatusUpdates(bus.fake.incarnation, 0.01, [[*rows[0][:2], state, b"bogus"]]))
    bus.fake.sync()
    bus.fake.send(p.StatusUpdates(bus.fake.incarnation, 0.01, rows))
    wait_results(bus, [1])
    (got, payload), = bus.hostile.results[1]
    assert got in (TaskState.FINISHED, TaskState.FAILED, TaskState.KILLED, TaskState.ERROR), got
    bus.assert_still_serving()


def test_a_client_cannot_replace_a_function_another_client_sent(fresh_bus):
    bus = fresh_bus(real_executor=False)
    future = bus.client.submit(square, 2)
    bus.fake.receive_until(lambda: len(bus.fake.held) == 1, what="the launch")
    (digest,) = {d for _, d, _ in bus.fake.held.values()}  # as the honest client names square
    bus.serve_until(future.done, what="the first result")
    assert future.result(0) == 4
    bus.hostile.send(p.SubmitTasks({digest: JUNK_BLOB}, []))
    bus.hostile.sync()
    bus.fake.leave()
    bus.start_executor("second")  # holds no function yet
    assert bus.client.submit(square, 3).result(WAIT) == 9


@pytest.mark.parametrize("figures", [{"cpu": math.nan}, {"rss": "lots"}, {"cpu": math.inf}])
def test_odd_heartbeat_metrics_do_not_take_the_dashboard_down(fresh_bus, figures):
    bus = fresh_bus(dashboard=True)
    base, token = bus.dashboard_url.groups()

    def fetch(path):
        """(HTTP status, body) of the dashboard's ``path``."""
        request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=WAIT) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, b""
    wait_for(lambda: fetch("api/status")[0] == 200 and fetch("metrics")[0] == 200, timeout=WAIT,
             message="the dashboard's figures")
    marker = 4321  # a valid figure: shows the heartbeat was taken
    bus.fake.send(p.Heartbeat(bus.fake.incarnation, bus.fake.executor_id, {**figures, "functions": marker}))
    (name, value), = figures.items()

    def shown(executors):
        return [e for e in executors if e["id"] == bus.fake.executor_id and e.get("functions") == marker]
    wait_for(lambda: shown(bus.client.status()["executors"]), timeout=WAIT,
             message="the driver to take the heartbeat")
    assert name not in shown(bus.client.status()["executors"])[0]  # the odd figure is not kept

    def published():
        code, body = fetch("api/status")
        return code == 200 and shown(json.loads(body)["executors"])
    wait_for(published, timeout=WAIT, message="the dashboard to publish the heartbeat's figures")
    assert fetch("metrics")[0] == 200


def test_an_executor_gone_when_told_to_forget_a_function_does_not_kill_the_driver(fresh_bus):
    """An executor holding a function drops its connection while a client that sent the
    function leaves: the driver finds it gone as it tells it to forget the function. Large
    submissions ahead of the goodbye keep the driver busy so that it finds the connection
    gone before it has handled the disconnect event: the connection closes once the driver
    has answered a ping sent between two of them."""
    bus = fresh_bus(real_executor=False)
    fl = digest_of(blob_of(fail))
    bus.hostile.send(p.SubmitTasks({fl: blob_of(fail)}, [[1, fl, args_of(1), 0]]))
    wait_results(bus, [1])  # the fake executor holds the function now
    big = p.encode(p.SubmitTasks({}, [[i, UNKNOWN_DIGEST, b"", 0] for i in range(2, 300_000)]))
    bus.hostile.send_frames([big])
    bus.hostile.send(p.AdminPing(0))
    bus.hostile.send_frames([big])
    bus.hostile.send(p.ClientGoodbye())
    bus.hostile.receive_until(lambda: 0 in bus.hostile.replies, what="the driver between the submissions")
    bus.fake.close()
    for request_id in (1, 2):  # the second one is read after the goodbye's turn of the loop
        bus.hostile.send(p.AdminPing(request_id))
        bus.hostile.receive_until(lambda: request_id in bus.hostile.replies, what="a ping's answer")
    bus.fake = FakeExecutor(bus, "after")
    bus.hostile.hello()
    bus.honest_round()
    bus.assert_alive_without_errors()
