"""Many executors lost at once while the driver keeps answering: its loop never waits for
the cluster manager (an exit status, a kill).

The executors are started over "ssh" by a real ``bin/driver``: a stand-in for ssh on PATH
(conftest's FAKE_SSH) holds each session open and starts nothing, and an executor of that
id, simulated by this test with a DEALER of its own, registers. Their connections then
close together while the stand-ins still run, so that no exit status can say how they
ended: the driver waited for one, up to 0.2 s each, in its loop.
"""
import os
import threading
import time

import psutil
import zmq

import zsched
from conftest import FAKE_SSH, wait_for
from zsched import protocol as p

N = 200
APP_ID = "mass-loss"
STILL_RUNS = "disconnected (connection lost; the process still runs: stopped or cut off?)"


def start_driver(driver_factory, tmp_path, n):
    bin_dir, capture = tmp_path / "bin", tmp_path / "captured"
    bin_dir.mkdir()
    capture.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH)
    (bin_dir / "ssh").chmod(0o755)
    hosts = tmp_path / "hosts"
    hosts.write_text(f"fake-host {n}\n")
    driver = driver_factory("--insecure", "--host", "127.0.0.1", "--hosts", str(hosts), "--app-id", APP_ID,
                            "--conf", f"allocation_batch_size={n}", "--conf", "allocation_batch_delay=0.05",
                            env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CAPTURE": str(capture)})
    stand_ins = wait_for(lambda: (lambda found: found if len(found) == n else None)(
        [int(name.split(".")[0]) for name in os.listdir(capture) if name.endswith(".credential")]),
        timeout=120, message=f"{n} sessions held by the stand-in for ssh")
    return driver, stand_ins


def gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def register(context, url, executor_ids):
    """A connected, registered DEALER for each of ``executor_ids``."""
    sockets = []
    for executor_id in executor_ids:
        sock = context.socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(url)
        sock.send(p.encode(p.RegisterExecutor(executor_id, "fake-host", 1, APP_ID, os.getpid())))
        sockets.append(sock)
    for sock, executor_id in zip(sockets, executor_ids):
        assert sock.poll(60_000), f"no answer to the registration of executor {executor_id}"
        assert isinstance(p.decode(sock.recv()), p.RegisteredExecutor), executor_id
    return sockets


class Pinger(threading.Thread):
    """A client that pings the driver without pause: ``answered`` holds when each answer came."""

    def __init__(self, context, url):
        super().__init__(daemon=True)
        self.sock = context.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(url)
        self.sock.send(p.encode(p.ClientHello(os.getpid())))
        assert self.sock.poll(30_000) and isinstance(p.decode(self.sock.recv()), p.ClientWelcome)
        self.answered = []
        self.stopping = threading.Event()
        self.error = None

    def run(self):
        try:
            request_id = 0
            while not self.stopping.is_set():
                request_id += 1
                self.sock.send(p.encode(p.AdminPing(request_id)))
                while True:  # a probe may come first
                    if not self.sock.poll(60_000):
                        raise AssertionError(f"ping {request_id} not answered within 60 s")
                    msg = p.decode(self.sock.recv())
                    if isinstance(msg, p.AdminReply) and msg.request_id == request_id:
                        break
                self.answered.append(time.monotonic())
        except Exception as exc:
            self.error = exc

    def longest_gap_after(self, start):
        times = [t for t in self.answered if t >= start]
        return max(b - a for a, b in zip(times, times[1:]))


def test_executors_lost_together_leave_the_loop_answering(driver_factory, tmp_path):
    driver, stand_ins = start_driver(driver_factory, tmp_path, N)
    context = zmq.Context()
    client = zsched.Client(driver.url, insecure=True, timeout=60)
    pinger = None
    try:
        sockets = register(context, driver.url, [str(i) for i in range(1, N + 1)])
        assert len(client.executor_ids()) == N
        client.request_total_executors(0)  # none replaced: the allocator stays out of it
        pinger = Pinger(context, driver.url)
        pinger.start()
        wait_for(lambda: len(pinger.answered) >= 10, timeout=30, message="the driver answering")
        lost_at = time.monotonic()
        for sock in sockets:  # as if every executor was cut off at once
            sock.close(linger=0)
        wait_for(lambda: client.executor_ids() == [], timeout=120, message=f"{N} executors removed")
        time.sleep(0.5)  # pings past the removals
        pinger.stopping.set()
        pinger.join(60)
        assert pinger.error is None, pinger.error
        # a generous bound: one wait of 0.2 s for each executor's exit status took 40 s
        longest = pinger.longest_gap_after(lost_at - 0.1)
        assert longest < 1.0, f"the driver did not answer for {longest:.2f} s"
        status = client.status()
        assert status["counters"]["executors_lost"] == N
        assert {loss["reason"] for loss in status["losses"]} == {STILL_RUNS}
        # the stand-ins are killed (their sessions closed) off the loop, and gone
        wait_for(lambda: all(map(gone, stand_ins)), timeout=60, message="the stand-ins for ssh gone")
    finally:
        if pinger is not None:
            pinger.stopping.set()
            pinger.join(60)
        client.shutdown()
        context.destroy(linger=0)
