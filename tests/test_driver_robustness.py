"""The driver under bad input and before it is ready: it logs, drops, and keeps serving."""
import os
import subprocess
import sys
import time

import msgpack
import psutil
import zmq

import zsched
from zsched.cluster_managers import ClusterManager
from zsched import protocol as p
from zsched.config import Config
from zsched.driver import Driver, DriverOptions

from conftest import start_executor, wait_for


def square(x):
    return x * x


def square_and_when(x):
    """x*x, and when it ran (``time.monotonic``)."""
    return x * x, time.monotonic()


JUNK = [
    [b""],
    [b"\x01"],
    [b"\xff\xff\xff\xff"],
    [bytes((p.VERSION, 250)) + msgpack.packb([])],                       # unknown type
    [bytes((7, p.MsgType.CLIENT_HELLO)) + msgpack.packb([1])],           # bad version
    [bytes((p.VERSION, p.MsgType.SUBMIT_TASKS)) + b"\xc1junk"],          # broken msgpack
    [bytes((p.VERSION, p.MsgType.REGISTER_EXECUTOR)) + msgpack.packb(["1", "h", "x", "a", 1])],
    [bytes((p.VERSION, p.MsgType.LAUNCH_TASKS)) + msgpack.packb([{}, []])],  # not for a driver
    [b"two", b"frames"],
    [b"three", b"", b"frames"],
    [p.encode(p.StatusUpdates(1, 0.0, [[1, 1, 1, b"x"]]))],              # not registered
    [p.encode(p.SubmitTasks({}, [[1, b"k", b"a", 0]]))],                    # no hello
    [p.encode(p.ForgetFunctions([b"k" * 16]))],                             # no hello
    [bytes((p.VERSION, p.MsgType.FORGET_FUNCTIONS)) + msgpack.packb([[1, 2]])],  # not digests
    [os.urandom(100_000)],
]


def test_junk_from_a_stranger_is_dropped_and_logged_once(driver_factory):
    driver = driver_factory("--insecure", "--local", "1", "--conf", "max_message_size=1MiB")
    client = zsched.Client(driver.url, insecure=True, timeout=20)
    context = zmq.Context()
    stranger = context.socket(zmq.DEALER)
    stranger.linger = 0
    stranger.connect(driver.url)
    for _ in range(3):
        for frames in JUNK:
            stranger.send_multipart(frames)
    # larger than the driver accepts at all: libzmq drops the connection
    big = context.socket(zmq.DEALER)
    big.linger = 0
    big.connect(driver.url)
    big.send(b"\x01\x15" + b"x" * (3 << 20))
    assert list(client.map(square, range(100))) == [x * x for x in range(100)]
    # a stranger posing as an executor is told to stop: its role is undecided (it said
    # no hello and registered nothing), and it is answered as a stranger
    assert stranger.poll(10_000)
    replies = []
    while stranger.poll(500):
        replies.append(p.decode(stranger.recv()))
    assert any(isinstance(m, p.StopExecutor) for m in replies)
    stranger.close()
    big.close()
    context.term()
    client.shutdown()
    assert driver.stop() == 0
    warnings = [line for line in driver.stderr.splitlines() if "dropped malformed input" in line]
    assert len(warnings) == 1, warnings


class ExternalExecutors(ClusterManager):
    """Executors started by someone else: the manager only says how many are expected."""



def _start_driver(config, expected):
    driver = Driver(DriverOptions(config, app_id="ready-test", cluster_manager=ExternalExecutors(),
                                  initial_executors=expected))
    driver.start_thread()
    return driver


def _executor(driver, executor_id):
    return start_executor("--driver-url", driver.url, "--executor-id", executor_id,
                          "--hostname", "127.0.0.1", "--cores", "1", "--app-id", "ready-test",
                          "--insecure")


def test_tasks_wait_for_min_registered_ratio():
    config = Config(min_registered_ratio=1.0, max_registered_waiting_time=120, revive_interval=0.5)
    driver = _start_driver(config, 2)
    executors = [_executor(driver, "1")]
    try:
        client = zsched.Client(driver.url, insecure=True)
        wait_for(lambda: client.executor_ids() == ["1"], message="executor 1")
        future = client.submit(square, 3)
        # a check that nothing happens: several revive rounds pass, with still 1 of the 2
        # expected cores, and the task does not start
        time.sleep(3 * config.revive_interval)
        assert not future.done()
        assert client.status()["ready"] is False
        executors.append(_executor(driver, "2"))
        assert future.result(30) == 9
        client.shutdown()
    finally:
        driver.request_stop()
        driver.join()
        for proc in executors:
            proc.wait(20)


def test_tasks_launch_after_max_registered_waiting_time():
    config = Config(min_registered_ratio=1.0, max_registered_waiting_time=2)
    driver = _start_driver(config, 2)
    executor = _executor(driver, "1")
    try:
        client = zsched.Client(driver.url, insecure=True)
        future = client.submit(square_and_when, 4)
        value, ran_at = future.result(30)
        assert value == 16
        # not before the waiting time (time.monotonic is the host's, in every process)
        assert ran_at - driver.started_at >= config.max_registered_waiting_time
        client.shutdown()
    finally:
        driver.request_stop()
        driver.join()
        executor.wait(20)


def test_driver_side_modules_never_unpickle():
    """Task functions, arguments and results are opaque bytes to the driver."""
    import ast
    import zsched.driver, zsched.driver.scheduler, zsched.protocol, zsched.fastpath  # noqa: E401
    for module in (zsched.driver, zsched.driver.scheduler, zsched.protocol, zsched.fastpath):
        tree = ast.parse(open(module.__file__).read())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, (ast.Import, ast.ImportFrom))
                    for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module}
        assert not imported & {"pickle", "cloudpickle", "dill", "marshal", "client"}, module.__name__
        calls = {node.func.attr for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
        assert "loads" not in calls, module.__name__


def _raw_client(url):
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(url)
    sock.send(p.encode(p.ClientHello(os.getpid())))
    assert sock.poll(20_000)
    assert isinstance(p.decode(sock.recv()), p.ClientWelcome)
    return context, sock


def test_a_clients_remove_executor_is_refused_and_stop_executors_obeyed(driver_factory):
    driver = driver_factory("--insecure", "--local", "3")
    client = zsched.Client(driver.url, insecure=True, timeout=20)
    wait_for(lambda: client.executor_ids() == ["1", "2", "3"], message="3 executors")
    pids = {e["id"]: e["pid"] for e in client.status()["executors"]}
    context, sock = _raw_client(driver.url)
    # RemoveExecutor is an executor's word for its own exit: a client's is refused
    sock.send(p.encode(p.RemoveExecutor("2", "removed by the test", True)))
    sock.send(p.encode(p.AdminPing(7)))
    assert p.decode(sock.recv()) == p.AdminReply(7, True, True)
    assert client.executor_ids() == ["1", "2", "3"]
    assert client.kill_executors(["2"]) == ["2"]
    wait_for(lambda: client.executor_ids() == ["1", "3"], message="executor 2 removed")
    losses = client.status()["losses"]
    assert [loss["id"] for loss in losses] == ["2"]
    wait_for(lambda: not psutil.pid_exists(pids["2"]) or
             psutil.Process(pids["2"]).status() == psutil.STATUS_ZOMBIE, message="executor 2 exits")
    assert list(client.map(square, range(50))) == [x * x for x in range(50)]
    sock.send(p.encode(p.StopExecutors()))
    wait_for(lambda: client.executor_ids() == [], message="all executors stopped")
    sock.close()
    context.term()
    client.shutdown()
    assert driver.stop() == 0


CLIENT_SCRIPT = """
import sys, time, zsched
client = zsched.Client(sys.argv[1], secret_file=sys.argv[2], timeout=20)
futures = [client.submit(time.sleep, 0.01) for _ in range(3000)]
futures[0].result(30)
print("running", flush=True)
time.sleep(60)
"""


def test_a_killed_clients_queued_tasks_are_dropped(tmp_path):
    with zsched.LocalCluster(n_executors=2) as cluster:
        script = tmp_path / "client.py"
        script.write_text(CLIENT_SCRIPT)
        doomed = subprocess.Popen([sys.executable, str(script), cluster.address, cluster.secret_file],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert doomed.stdout.readline().strip() == "running"
            client = cluster.client()
            assert client.status()["tasks"]["queued"] > 1000
            doomed.kill()
            doomed.wait(10)
            # its next result cannot be delivered: the driver drops the rest of its work
            wait_for(lambda: client.status()["tasks"]["queued"] == 0, timeout=20,
                     message="the killed client's tasks to be dropped")
            assert client.submit(square, 6).result(20) == 36
            client.shutdown()
        finally:
            doomed.kill()
            doomed.wait()
            doomed.stdout.close()


def test_an_executor_claiming_absurd_cores_is_refused_with_a_reason(driver_factory):
    """Cores come from the executor: more than the driver can count is refused (as fewer
    than one is), with the reason, and the driver serves on."""
    driver = driver_factory("--insecure", "--local", "1", "--app-id", "cores-app")
    client = zsched.Client(driver.url, insecure=True, timeout=20)
    context = zmq.Context()
    try:
        for cores in (0, (1 << 64) - 1, 1 << 62):  # msgpack's largest int, and over a C long's quarter
            executor = context.socket(zmq.DEALER)
            executor.linger = 0
            executor.connect(driver.url)
            executor.send(p.encode(p.RegisterExecutor("x%d" % cores.bit_length(), "host", cores,
                                                      "cores-app", os.getpid())))
            assert executor.poll(10_000), f"no answer to a registration with {cores} cores"
            reply = p.decode(executor.recv())
            assert isinstance(reply, p.RegisterExecutorFailed), reply
            assert "core" in reply.reason and str(cores) in reply.reason, reply.reason
            executor.close()
        wait_for(lambda: client.executor_ids() == ["1"], message="the local executor alone")
        assert list(client.map(square, range(20))) == [x * x for x in range(20)]
    finally:
        context.destroy(linger=0)
        client.shutdown()
    assert driver.stop() == 0


def test_closing_a_driver_twice_is_harmless():
    driver = Driver(DriverOptions.create(Config(), insecure=True))
    driver.close()
    driver.close()
