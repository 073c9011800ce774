"""The Client as a concurrent.futures.Executor, against real local clusters: with the
driver in a process of its own (the client's socket and I/O thread), and in a thread of
this process (the client hands its tasks to the driver's thread, which completes them)."""
import concurrent.futures
import contextlib
import os
import subprocess
import sys
import threading
import time

import pytest

import zsched
from zsched.errors import MessageTooLarge, RemoteTraceback, TaskFailed
from zsched.client.future import FuturesCondition
from zsched.client.map_calls import TASKS_PER_CORE, auto_chunk_size

from conftest import wait_for
from test_client_map_calls import planned_sizes


# the cluster and client fixtures are conftest's, with this setting
CLUSTER_SETTINGS = {"max_message_size": "1MiB"}


def add(a, b=0):
    return a + b


class Unpicklable(Exception):
    def __init__(self, lock):
        super().__init__("has a lock")
        self.lock = lock

    def __reduce__(self):
        raise TypeError("cannot pickle me")


def raise_unpicklable():
    import threading
    raise Unpicklable(threading.Lock())


def test_submit_functions_lambdas_closures_kwargs(client):
    offset = 100
    assert client.submit(add, 1, b=2).result(10) == 3
    assert client.submit(lambda x: x * 2, 21).result(10) == 42
    assert client.submit(lambda: offset + 1).result(10) == 101
    assert client.submit(sorted, [3, 1, 2]).result(10) == [1, 2, 3]
    assert client.submit(os.getpid).result(10) != os.getpid()


def test_results_are_futures_for_wait_and_as_completed(client):
    futures = [client.submit(add, i, 1) for i in range(200)]
    assert all(isinstance(f, concurrent.futures.Future) for f in futures)
    done, not_done = concurrent.futures.wait(futures, timeout=30)
    assert not not_done
    assert sorted(f.result() for f in concurrent.futures.as_completed(futures)) == list(range(1, 201))


def test_the_futures_condition_behaves_as_a_condition():
    condition = FuturesCondition()
    with condition:
        with condition:  # re-entrant, as threading.Condition's default lock
            assert condition.wait(0.01) is False
    with pytest.raises(RuntimeError):
        condition.wait(0.01)  # not held
    ready, woken = [], []

    def waiter():
        with condition:
            woken.append(condition.wait_for(lambda: ready, 10))

    thread = threading.Thread(target=waiter)
    thread.start()
    # the waiter waits (threading.Condition keeps its waiters in _waiters)
    wait_for(lambda: condition._condition._waiters, message="the waiter to wait")
    with condition:
        ready.append(1)
        condition.notify_all()
    thread.join(10)
    assert woken == [[1]]


def make_list(i):
    return [i]


def test_threads_asking_one_future_at_once_get_the_same_result_object(client):
    # Each result is unpickled by the first thread that asks; of threads asking at once,
    # all must return the one object that was kept (and waiting ones must all wake).
    futures = [client.submit(make_list, i) for i in range(300)]
    n_threads = 6
    barrier = threading.Barrier(n_threads)
    seen = [None] * n_threads

    def ask(k):
        barrier.wait()
        seen[k] = [f.result(30) for f in futures]

    threads = [threading.Thread(target=ask, args=(k,)) for k in range(n_threads)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the threads take turns within a call: they do race
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert not any(t.is_alive() for t in threads)
    for i, future in enumerate(futures):
        kept = future.result()
        assert kept == [i]
        assert all(results[i] is kept for results in seen)


def test_map_in_order_with_chunks(client):
    xs = list(range(5000))
    assert list(client.map(add, xs, xs)) == [2 * x for x in xs]
    assert list(client.map(add, xs, chunksize=64)) == xs
    assert list(client.map(add, [], chunksize=3)) == []
    with pytest.raises(ValueError):
        client.map(add, xs, chunksize=0)


def fail_on_7(x):
    if x % 1000 == 7:
        raise ValueError(f"no {x}")
    return x


def test_a_large_map_makes_chunks_itself_and_raises_each_calls_exception_at_its_place(client):
    status = client.status()
    before, cores = status["tasks"]["submitted"], sum(e["cores"] for e in status["executors"])
    xs = list(range(20_000))
    assert list(client.map(abs, xs)) == xs
    tasks = client.status()["tasks"]["submitted"] - before
    per_task = auto_chunk_size(20_000, cores)   # from the calls and the cores, as Pool.map
    assert 1 < per_task < 20_000 and tasks == len(planned_sizes(20_000, cores))
    results = client.map(fail_on_7, range(10_000))
    assert [next(results) for _ in range(7)] == list(range(7))
    with pytest.raises(ValueError, match="no 7") as raised:
        next(results)
    assert "fail_on_7" in str(raised.value.__cause__)  # the remote traceback
    small = client.status()["tasks"]["submitted"]
    few = 2 * TASKS_PER_CORE - 1
    assert list(client.map(abs, range(-few, 0))) == list(range(few, 0, -1))
    assert client.status()["tasks"]["submitted"] - small == few  # small maps: a task per call


def test_map_timeout(client):
    results = client.map(time.sleep, [5, 5], timeout=0.5)
    with pytest.raises(concurrent.futures.TimeoutError):
        list(results)


def test_task_exception_has_type_message_and_remote_traceback(client):
    def fails(x):
        raise KeyError(f"no key {x}")

    future = client.submit(fails, 7)
    with pytest.raises(KeyError, match="no key 7") as info:
        future.result(10)
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert "fails" in cause.text and "KeyError" in cause.text
    # the cluster keeps working after a failing task
    assert client.submit(add, 1, 1).result(10) == 2


def test_unpicklable_exception_becomes_a_readable_error(client):
    with pytest.raises(RuntimeError, match="Unpicklable: has a lock"):
        client.submit(raise_unpicklable).result(10)


def test_system_exit_fails_the_task_not_the_executor(client):
    before = client.executor_ids()
    with pytest.raises(SystemExit):
        client.submit(sys.exit, 3).result(10)
    assert client.executor_ids() == before
    assert client.submit(add, 2, 2).result(10) == 4


def test_executor_ids(client):
    assert client.executor_ids() == ["1", "2"]
    assert client.is_executor_active("1") and not client.is_executor_active("99")


def test_submit_after_shutdown_raises(cluster):
    client = cluster.client()
    client.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        client.submit(add, 1)
    with pytest.raises(RuntimeError):
        client.map(add, [1])
    client.shutdown()  # twice is fine


def test_shutdown_cancel_futures_and_cancel_of_queued_tasks(cluster):
    client = cluster.client()
    blockers = [client.submit(time.sleep, 1.0) for _ in range(2)]
    queued = [client.submit(add, i) for i in range(200)]
    assert queued[-1].cancel()
    client.shutdown(wait=True, cancel_futures=True)
    assert queued[-1].cancelled()
    assert all(f.done() for f in queued + blockers)
    # the cluster drops what was cancelled and keeps serving other clients
    other = cluster.client()
    assert other.submit(add, 5).result(10) == 5
    wait_for(lambda: other.status()["tasks"]["queued"] == 0, message="cancelled tasks dropped")
    other.shutdown()


def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return "not interrupted"


def test_cancel_of_a_running_task_kills_it():
    with zsched.LocalCluster(n_executors=1, tasks_per_core=1) as cluster:
        client = cluster.client()
        future = client.submit(spin, 60)
        wait_for(lambda: client.status()["tasks"]["running"] == 1, message="task running")
        assert future.cancel()
        # the slot frees only when the executor has interrupted the task
        assert client.submit(add, 1, 2).result(20) == 3
        status = client.status()
        assert status["executors"][0]["tasks_failed"] == 1
        client.shutdown()


def test_executor_runs_up_to_cores_tasks_at_once():
    with zsched.LocalCluster(n_executors=1, cores_per_executor=2, tasks_per_core=1) as cluster:
        client = cluster.client()

        def window():
            start = time.time()
            time.sleep(1.0)
            return os.getpid(), start, time.time()

        (pid1, s1, e1), (pid2, s2, e2) = [f.result(20) for f in
                                          [client.submit(window), client.submit(window)]]
        assert pid1 == pid2
        assert s2 < e1 and s1 < e2  # they overlapped
        client.shutdown()


def test_oversized_task_fails_its_future_and_cluster_keeps_working(client):
    future = client.submit(len, b"x" * (2 << 20))
    with pytest.raises(MessageTooLarge) as info:
        future.result(10)
    assert info.value.limit == 1 << 20 and info.value.size > 2 << 20
    assert "larger than the message limit" in str(info.value)
    assert client.submit(len, b"x" * 1000).result(10) == 1000


def test_oversized_result_fails_its_future_and_cluster_keeps_working(client):
    future = client.submit(bytes, 2 << 20)
    with pytest.raises(TaskFailed, match=r"is \d+ bytes, larger than the message limit of 1048576"):
        future.result(10)
    assert len(client.submit(bytes, 1000).result(10)) == 1000


def test_many_clients_share_a_cluster(cluster):
    clients = [cluster.client() for _ in range(3)]
    futures = [(i, c.submit(add, i, 1000)) for c in clients for i in range(300)]
    assert all(f.result(30) == i + 1000 for i, f in futures)
    for c in clients:
        c.shutdown()


def executor_driver_urls(driver_pid, app_id):
    """The --driver-url of each executor of application ``app_id`` under ``driver_pid``."""
    import psutil
    urls = []
    for child in psutil.Process(driver_pid).children(recursive=True):
        try:
            cmdline = child.cmdline()
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue  # another test's child, ended and not yet reaped (a driver thread's)
        if "--driver-url" in cmdline and cmdline[cmdline.index("--app-id") + 1] == app_id:
            urls.append(cmdline[cmdline.index("--driver-url") + 1])
    return urls


@pytest.mark.parametrize("in_process", [False, True], ids=["driver process", "driver thread"])
def test_executors_and_clients_on_this_host_use_a_private_unix_socket(in_process):
    with zsched.LocalCluster(n_executors=2, in_process=in_process) as cluster:
        assert cluster.address.startswith("tcp://")  # for other hosts, as before
        path = cluster.local_address[len("ipc://"):]
        assert cluster.local_address.startswith("ipc://") and os.path.exists(path)
        private = os.path.dirname(path)
        assert os.stat(private).st_mode & 0o077 == 0  # no one else may reach the socket
        driver_pid = cluster.driver_pid
        assert executor_driver_urls(driver_pid, cluster.app_id) == [cluster.local_address] * 2
        client = cluster.client()
        if not in_process:
            assert client.address == cluster.local_address
        assert list(client.map(add, range(100), range(100))) == list(range(0, 200, 2))
        with zsched.Client(cluster.address, secret_file=cluster.secret_file) as over_tcp:
            assert over_tcp.submit(add, 1, 2).result(30) == 3
    assert not os.path.exists(private)


def test_embedded_client_starts_and_stops_its_own_cluster():
    import threading
    before = set(threading.enumerate())
    with zsched.Client() as client:
        assert client.address.startswith("inproc://")  # its driver is a thread of this process
        # the driver's thread completes the futures: the client has no thread of its own
        assert not [t for t in threading.enumerate() if t.name.startswith("zsched-client")]
        ids = client.executor_ids()
        assert len(ids) == (os.cpu_count() or 1)
        assert client.submit(add, 3, 4).result(10) == 7
        assert list(client.map(add, range(1000), range(1000))) == list(range(0, 2000, 2))
        with pytest.raises(ZeroDivisionError):
            client.submit(divmod, 1, 0).result(10)
    wait_for(lambda: not {t for t in threading.enumerate() if t.is_alive()} - before,
             message="the driver's thread to end")


def test_lost_executor_tasks_are_rerun(tmp_path):
    marker = tmp_path / "first-attempt"

    def die_once(path):
        if not os.path.exists(path):
            open(path, "w").close()
            os._exit(1)
        return "second attempt"

    with zsched.LocalCluster(n_executors=2) as cluster:
        client = cluster.client()
        assert client.submit(die_once, str(marker)).result(30) == "second attempt"
        losses = client.status()["losses"]
        assert len(losses) == 1 and "exited with code 1" in losses[0]["reason"]
        client.shutdown()


REMOTE_SCRIPT = """
import sys, zsched
def square(x):
    return x * x
with zsched.Client(sys.argv[1], secret_file=sys.argv[2], timeout=20) as client:
    print(sum(client.map(square, range(100))))
"""


def test_cluster_serves_a_client_in_another_process_with_main_functions(cluster, tmp_path):
    script = tmp_path / "remote.py"
    script.write_text(REMOTE_SCRIPT)
    result = subprocess.run([sys.executable, str(script), cluster.address, cluster.secret_file],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(sum(x * x for x in range(100)))


def test_tasks_and_functions_near_the_limit_travel_in_separate_frames(client):
    """A 300 KiB function with 600 KiB arguments per task, under a 1 MiB limit: every frame
    must stay within the limit however the batches are cut."""
    ballast = b"b" * (300 << 10)

    def heavy(data):
        return len(data) + len(ballast)

    futures = [client.submit(heavy, bytes(600 << 10)) for _ in range(12)]
    assert [f.result(60) for f in futures] == [(600 << 10) + (300 << 10)] * 12


def make_lock():
    import threading
    return threading.Lock()


def test_unpicklable_result_fails_its_future_clearly(client):
    with pytest.raises(TaskFailed, match="could not be pickled"):
        client.submit(make_lock).result(10)
    assert client.submit(add, 1, 1).result(10) == 2


def test_unpicklable_arguments_raise_at_submit(client):
    import threading
    with pytest.raises(TypeError):
        client.submit(add, threading.Lock())
    assert client.submit(add, 2, 1).result(10) == 3


OWNER_SCRIPT = """
import time, zsched
cluster = zsched.LocalCluster(n_executors=2)
client = cluster.client()
pids = [cluster.driver_pid] + [e["pid"] for e in client.status()["executors"]]
print(" ".join(map(str, pids)), flush=True)
print(cluster.secret_file, flush=True)
time.sleep(120)
"""


LEFT_OPEN_SCRIPT = """
import os, time
import zsched
client = zsched.Client() if os.environ["CLIENT"] == "embedded" else zsched.LocalCluster(2).client()
futures = [client.submit(time.sleep, 30) for _ in range(4)]
while client.status()["tasks"]["running"] < 2:
    time.sleep(0.02)
print(" ".join(str(e["pid"]) for e in client.status()["executors"]), flush=True)
"""


@pytest.mark.parametrize("kind", ["embedded", "cluster"])
def test_a_client_left_open_with_running_tasks_ends_quietly_at_exit(tmp_path, kind):
    """The program ends with tasks running: its client is closed before its cluster, so
    no error about a lost driver is printed, and no executor is left."""
    script = tmp_path / "left_open.py"
    script.write_text(LEFT_OPEN_SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "CLIENT": kind})
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    pids = [int(pid) for pid in out.stdout.split()]
    assert pids
    wait_for(lambda: all(_gone(pid) for pid in pids), timeout=30, message="the executors to stop")


def _gone(pid):
    """Whether process ``pid`` has ended (a zombie has)."""
    import psutil
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_cluster_dies_with_its_owner(tmp_path):
    """A process that owns a LocalCluster is SIGKILLed: its driver and executors stop, and
    the cluster's private directory (its secret, its socket) goes with the driver."""
    script = tmp_path / "owner.py"
    script.write_text(OWNER_SCRIPT)
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(pid) for pid in owner.stdout.readline().split()]
        assert len(pids) == 3
        private = os.path.dirname(owner.stdout.readline().strip())
        assert os.path.isdir(private) and os.path.exists(os.path.join(private, "driver.sock"))
        owner.kill()
        owner.wait(10)
        wait_for(lambda: all(_gone(pid) for pid in pids), timeout=30,
                 message="the cluster's driver and executors to stop")
        assert not os.path.exists(private)
    finally:
        owner.kill()
        owner.wait()
        owner.stdout.close()


def test_short_tasks_do_not_queue_behind_a_long_one_while_a_core_is_idle():
    with zsched.LocalCluster(n_executors=2) as cluster:
        client = cluster.client()
        long_task = client.submit(time.sleep, 20)
        shorts = [client.submit(add, i) for i in range(200)]
        assert [f.result(15) for f in shorts] == list(range(200))
        assert not long_task.done()
        long_task.cancel()  # interrupted: the shutdown does not wait for it
        client.shutdown(cancel_futures=True)


def test_cluster_started_beside_another_zsched_uses_its_own(tmp_path, monkeypatch):
    """Started from a directory holding some other `zsched` (a checkout that is not built,
    say), the driver and executors import the zsched that started them; the user's modules
    in that directory still import on the executors."""
    decoy = tmp_path / "zsched"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the decoy zsched was imported')\n")
    (tmp_path / "user_module_beside.py").write_text("VALUE = 42\n")
    monkeypatch.chdir(tmp_path)

    def read_user_module():
        import user_module_beside
        return user_module_beside.VALUE

    with zsched.LocalCluster(n_executors=1) as cluster:
        client = cluster.client()
        assert client.submit(read_user_module).result(30) == 42
        client.shutdown()


@pytest.mark.parametrize("cores", [0, 65537])
def test_a_local_cluster_of_impossible_cores_per_executor_is_refused_at_once(cores):
    with pytest.raises(ValueError, match="cores_per_executor must be from 1 to 65536"):
        zsched.LocalCluster(n_executors=1, cores_per_executor=cores)


def identity(x):
    return x


def sleep_then_pid(seconds):
    time.sleep(seconds)
    return os.getpid()


@contextlib.contextmanager
def after_a_flood(**settings):
    """A client of 2 one-core executors that have just run 5,000 no-op tasks: their windows
    are as deep as no-op tasks make them."""
    with zsched.LocalCluster(n_executors=2, cores_per_executor=1, **settings) as cluster:
        client = cluster.client()
        flood = [client.submit(identity, i) for i in range(5000)]
        assert [f.result(timeout=60) for f in flood] == list(range(5000))
        yield client
        client.shutdown()


def test_long_tasks_after_an_idle_spell_are_not_hoarded_by_the_windows_short_tasks_opened():
    # A flood of no-op tasks opens each executor's window to hundreds of tasks. After a
    # spell with nothing to run they forget that: one long task and six short ones then go
    # out one per core, and the short ones all run beside the long one, none behind it
    # (with the flood's windows, half of them would queue behind it on its executor).
    with after_a_flood(revive_interval=0.1) as client:
        assert all(e["slots"] > 2 for e in client.status()["executors"])
        wait_for(lambda: all(e["task_seconds"] is None for e in client.status()["executors"]),
                 10, message="the executors to forget the no-op tasks' length")
        long_task = client.submit(sleep_then_pid, 1.5)
        short_tasks = [client.submit(sleep_then_pid, 0.1) for _ in range(6)]
        short_pids = {f.result(timeout=60) for f in short_tasks}
        assert long_task.result(timeout=60) not in short_pids


def test_short_tasks_dealt_behind_a_long_one_are_given_back_to_an_idle_executor():
    # No idle spell this time: right after a flood of no-op tasks, one long task and six
    # short ones are dealt by the flood's deep windows, some short ones behind the long one.
    # Once the other executor runs out of work, those are asked back and run there.
    with after_a_flood() as client:
        long_task = client.submit(sleep_then_pid, 2.0)
        short_tasks = [client.submit(sleep_then_pid, 0.1) for _ in range(6)]
        short_pids = {f.result(timeout=60) for f in short_tasks}
        assert long_task.result(timeout=60) not in short_pids
        assert all(f.done() for f in short_tasks)


def test_long_tasks_beyond_a_window_that_shrank_are_given_back_to_an_idle_executor():
    # Right after a no-op flood, ten 0.1 s tasks then ten 10 ms tasks: the flood's windows
    # deal them in two runs, nearly all the long ones to one executor. That executor keeps
    # reporting (so it is not silent), but its window shrinks to two: once the other runs
    # out of work, the long tasks beyond that window are asked back and run there.
    with after_a_flood() as client:
        long_tasks = [client.submit(sleep_then_pid, 0.1) for _ in range(10)]
        short_tasks = [client.submit(sleep_then_pid, 0.01) for _ in range(10)]
        long_pids = [f.result(timeout=60) for f in long_tasks]
        assert all(f.result(timeout=60) for f in short_tasks)
        most = max(long_pids.count(pid) for pid in set(long_pids))
        assert most < 9, long_pids  # without giving back, all ten ran on one executor
