"""The client's connection to its driver: the ZMTP heartbeats it takes from the driver,
a driver lost or stopped during a flood, a stopped driver found by the client's pings, and
a driver that stops reading while the client's output waits (zsched/client/transport.py,
socket_transport.py, channel_transport.py; the pipes' side is in test_pipe_link.py, what
the client says it took in test_client_results_taken.py)."""
import concurrent.futures
import os
import signal
import threading
import time

import pytest

import zsched
from zsched.client.socket_transport import SocketTransport
from zsched.config import Config
from zsched.driver import Driver, DriverOptions

from conftest import wait_for


FLOOD = 20_000


def identity(x):
    return x


class Flood:
    """A thread submitting to ``client`` until submit raises DriverConnectionError (or
    50 floods are in); ``started`` is set once 1,000 tasks are in."""

    def __init__(self, client):
        self.client = client
        self.submitted = []
        self.raised = []
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        self.started.wait(60)

    def _run(self):
        try:
            for i in range(50 * FLOOD):
                self.submitted.append(self.client.submit(identity, i))
                if i == 1_000:
                    self.started.set()
        except zsched.DriverConnectionError as exc:
            self.raised.append(exc)
        finally:
            self.started.set()

    def join(self):
        self.thread.join(120)
        assert self.raised, "the flood ended before the driver was gone: make it longer"
        concurrent.futures.wait(self.submitted, timeout=60)
        return {type(f.exception(0)) for f in self.submitted}


def test_a_driver_lost_during_a_flood_fails_every_future(driver_factory):
    driver = driver_factory("--insecure")  # no executors: every task waits in the driver
    client = zsched.Client(driver.url, insecure=True)
    flood = Flood(client)
    driver.proc.kill()
    driver.proc.wait()
    assert flood.join() == {zsched.DriverConnectionError}
    client.shutdown()


def test_a_driver_thread_stopped_during_a_flood_fails_every_future_of_its_client():
    """The driver in this process stops while a thread floods its client: every future
    fails (the driver's own error for the tasks it held, DriverConnectionError for the
    others) and submitting raises DriverConnectionError."""
    driver = Driver(DriverOptions(Config(), app_id="flood-test"))
    driver.start_thread()
    try:
        client = zsched.Client.in_process(driver.channel)
        flood = Flood(client)
        driver.request_stop()
        driver.join(60)
        errors = flood.join()
        assert errors <= {zsched.DriverConnectionError, zsched.TaskFailed}, errors
        with pytest.raises(zsched.DriverConnectionError):
            client.submit(identity, 1)
        with pytest.raises(zsched.DriverConnectionError):
            client.status()
        client.shutdown()
    finally:
        driver.request_stop()
        driver.join(60)


def test_the_client_uses_the_drivers_zmtp_heartbeat_settings(driver_factory):
    driver = driver_factory("--insecure", "--conf", "zmq_heartbeat_interval=300ms",
                            "--conf", "zmq_heartbeat_timeout=20s")
    client = zsched.Client(driver.url, insecure=True)
    try:
        assert client.socket.heartbeat_ivl == 300
        assert client.socket.heartbeat_timeout == 20_000
        assert client.socket.heartbeat_ttl == 20_000
        assert client.executor_ids() == []
    finally:
        client.shutdown()
    # a driver with the defaults: one connection, the default values
    driver = driver_factory("--insecure")
    client = zsched.Client(driver.url, insecure=True)
    try:
        assert client.socket.heartbeat_ivl == 1000 and client.socket.heartbeat_timeout == 10_000
        assert client.executor_ids() == []
    finally:
        client.shutdown()


def test_a_secured_cluster_with_its_own_zmtp_heartbeats_serves_its_client():
    # the client connects again with the driver's values, with its keys (CURVE)
    with zsched.LocalCluster(n_executors=1, zmq_heartbeat_interval="500ms",
                             zmq_heartbeat_timeout="5s") as cluster:
        # cluster.client() talks over pipes (tests/test_pipe_link.py): one through the socket
        client = zsched.Client(cluster.local_address, secret_file=cluster.secret_file)
        assert (client.socket.heartbeat_ivl, client.socket.heartbeat_timeout) == (500, 5_000)
        assert client.submit(identity, 7).result(30) == 7
        assert len(client.status()["executors"]) == 1
        client.shutdown()


def test_a_driver_silent_longer_than_the_default_but_within_its_own_timeout_keeps_its_client(
        driver_factory):
    # with the default zmq_heartbeat_timeout (10 s) the client would drop the connection
    # (and fail its futures) while the driver is stopped longer than that
    default_timeout = Config().zmq_heartbeat_timeout
    driver = driver_factory("--insecure", "--conf", "zmq_heartbeat_interval=1s",
                            "--conf", f"zmq_heartbeat_timeout={4 * default_timeout:g}s")
    client = zsched.Client(driver.url, insecure=True)
    try:
        assert client.executor_ids() == []
        os.kill(driver.proc.pid, signal.SIGSTOP)
        try:
            # a check that nothing happens: silent past the default timeout, within its own
            time.sleep(1.2 * default_timeout)
        finally:
            os.kill(driver.proc.pid, signal.SIGCONT)
        assert client.executor_ids() == []
        assert client.connection_error is None
    finally:
        client.shutdown()


@pytest.mark.parametrize("address", ["bogus", "http://host:1", "tcp://127.0.0.1",
                                     "tcp://127.0.0.1:99999"])
def test_a_malformed_address_is_refused_before_any_connection(address):
    with pytest.raises(zsched.ConfigError, match="address must be tcp://HOST:PORT"):
        zsched.Client(address, timeout=1)


# The client's pings find a stopped driver after 3 s; ZMTP heartbeats would only after 10
# minutes, so the pings are what finds it.
STOPPABLE = {"executor_heartbeat_interval": 0.5, "executor_heartbeat_timeout": 3.0,
             "zmq_heartbeat_timeout": 600}
SILENT = r"answered nothing for 3 s \(executor_heartbeat_timeout\)"


def a_client_of(cluster, transport):
    if transport == "pipes":
        client = cluster.client()
    else:
        client = zsched.Client(cluster.local_address, secret_file=cluster.secret_file)
    assert client.transport == transport
    return client


def test_a_socket_client_fails_its_futures_when_its_driver_is_stopped():
    """A stopped driver's libzmq answers no heartbeat, but the ZMTP timeout is long: the
    client's pings find it silent after executor_heartbeat_timeout, and say so."""
    timeout = STOPPABLE["executor_heartbeat_timeout"]
    with zsched.LocalCluster(1, **STOPPABLE) as cluster:
        client = a_client_of(cluster, "socket")
        future = client.submit(time.sleep, 3600)
        wait_for(lambda: client.status()["tasks"]["running"] == 1, timeout=30,
                 message="the task running")
        started = time.monotonic()
        os.kill(cluster.driver_pid, signal.SIGSTOP)
        try:
            with pytest.raises(zsched.DriverConnectionError, match=SILENT):
                future.result(STOPPABLE["zmq_heartbeat_timeout"] / 10)
            waited = time.monotonic() - started
        finally:
            os.kill(cluster.driver_pid, signal.SIGCONT)
        assert waited >= timeout, waited  # not before the timeout
        with pytest.raises(zsched.DriverConnectionError, match=SILENT):
            client.submit(abs, 1)
        client.shutdown()
        # the driver, running again, answers another client
        assert isinstance(cluster.client().status()["executors"], list)


@pytest.mark.parametrize("transport", ["socket", "pipes"])
def test_a_driver_that_stops_reading_is_found_while_the_clients_output_waits(
        transport, monkeypatch):
    """The driver stops (SIGSTOP) and the client floods it until what it sends waits in the
    client (the socket's send queue full, or the pipe): the I/O thread, which never waits
    in a send, still finds the driver silent, fails every future, and ends."""
    monkeypatch.setattr(SocketTransport, "send_hwm", 10)  # full after a few frames
    payload = b"x" * (256 << 10)
    with zsched.LocalCluster(1, **STOPPABLE) as cluster:
        client = a_client_of(cluster, transport)
        io = client._transport
        futures = []
        os.kill(cluster.driver_pid, signal.SIGSTOP)
        try:
            while not io._output_waits() and len(futures) < 2_000:
                futures.append(client.submit(len, payload))
                # each task in a frame of its own: the I/O thread takes it, whatever waits
                wait_for(lambda: not client._outbox.waiting(), timeout=60,
                         message="the I/O thread taking the task")
            assert io._output_waits(), "the driver read every frame: flood it more"
            futures += [client.submit(len, payload) for _ in range(10)]
            done, pending = concurrent.futures.wait(futures, timeout=60)
            assert not pending
            assert {type(f.exception()) for f in futures} == {zsched.DriverConnectionError}
            assert all("answered nothing" in str(f.exception()) for f in futures)
            wait_for(lambda: not io._thread.is_alive(), timeout=30, message="the I/O thread ended")
            client.shutdown()  # returns: nothing left to wait for
        finally:
            os.kill(cluster.driver_pid, signal.SIGCONT)
