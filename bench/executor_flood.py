"""CPU per task of one executor process alone: this script plays its driver.

    python bench/executor_flood.py                   # 200k no-op tasks, window 64, 5 rounds
    python bench/executor_flood.py --cores 2 --window 128

An executor process (``python -m zsched.executor``, no secret) registers with a ROUTER
owned by this script, which keeps ``--window`` tasks launched on it: every StatusUpdates
is answered by a LaunchTasks of as many new tasks, as the driver does under a flood. The
executor's CPU time (every thread, user + system) per task is the figure; its voluntary
and involuntary context switches per task come with it. With no client and no driver
process beside it, this is steadier than bench/executor_cpu.py on a shared machine.
"""
import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import time

if __name__ == "__main__" and not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cloudpickle  # noqa: E402
import psutil  # noqa: E402
import zmq  # noqa: E402

from zsched import protocol as p  # noqa: E402
from zsched.cluster.local import child_environment, executor_command  # noqa: E402
from zsched.config import Config  # noqa: E402

INCARNATION = 7
APP = "bench-app"
DIGEST = b"noop-digest-0001"


def noop(x):
    return x


def spin(seconds):
    """A task that holds the GIL for ``seconds``, as pure-Python work does."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    return seconds


class Driver:
    def __init__(self, cores, function=noop, argument=None):
        self.function, self.argument = function, argument
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.linger = 0
        port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.settings = Config().to_settings()
        command = executor_command(f"tcp://127.0.0.1:{port}", "x1", "127.0.0.1", cores, APP,
                                   log_level="WARNING")
        self.process = subprocess.Popen(command, env=child_environment())
        self.rid = None
        msg = self.recv()
        assert isinstance(msg, p.ClientHello), msg
        self.send(p.ClientWelcome(INCARNATION, APP, self.settings))
        msg = self.recv()
        if isinstance(msg, p.ClientGoodbye):
            msg = self.recv()
        assert isinstance(msg, p.RegisterExecutor), msg
        self.send(p.RegisteredExecutor(INCARNATION, self.settings))
        self.next_id = 1
        self.sent_function = False
        self.updates = 0  # StatusUpdates messages received

    def send(self, msg):
        self.router.send_multipart([self.rid, p.encode(msg)])

    def recv(self, timeout=30_000):
        if not self.router.poll(timeout):
            raise RuntimeError("nothing from the executor")
        self.rid, frame = self.router.recv_multipart()
        return p.decode(frame)

    def launch(self, n):
        tasks = []
        for _ in range(n):
            argument = self.next_id if self.argument is None else self.argument
            tasks.append([self.next_id, 1, DIGEST, pickle.dumps(((argument,), {}))])
            self.next_id += 1
        functions = {} if self.sent_function else {DIGEST: cloudpickle.dumps(self.function)}
        self.sent_function = True
        self.send(p.LaunchTasks(functions, tasks))

    def flood(self, n, window):
        """Run ``n`` tasks, ``window`` at most launched and not reported."""
        launched = min(n, window)
        self.launch(launched)
        done = 0
        while done < n:
            msg = self.recv()
            if isinstance(msg, p.Heartbeat):
                self.send(p.HeartbeatAck(INCARNATION))
                continue
            if not isinstance(msg, p.StatusUpdates):
                continue
            k = len(msg.updates)
            self.updates += 1
            if any(u[2] != p.TaskState.FINISHED for u in msg.updates):
                raise AssertionError(f"a task did not finish: {msg.updates[:3]}")
            done += k
            more = min(k, n - launched)
            if more:
                self.launch(more)
                launched += more

    def close(self):
        try:
            self.send(p.StopExecutor("bench over"))
            self.process.wait(10)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self.router.close()
            self.context.term()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cores", type=int, default=1)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--spin", type=float, default=None, metavar="SECONDS",
                        help="tasks hold the GIL this long instead of returning at once; "
                             "then the figure of interest is efficiency: tasks x SECONDS / "
                             "(cores x elapsed)")
    args = parser.parse_args(argv)
    driver = Driver(args.cores, *((spin, args.spin) if args.spin else ()))
    figures = {"cpu_us": [], "user_us": [], "sys_us": [], "voluntary_cs": [],
               "involuntary_cs": [], "tasks_per_s": [], "tasks_per_update": []}
    try:
        executor = psutil.Process(driver.process.pid)
        driver.flood(min(5000, args.tasks), args.window)  # warm-up
        for _ in range(args.rounds):
            t0, c0, s0 = time.perf_counter(), executor.cpu_times(), executor.num_ctx_switches()
            u0 = driver.updates
            driver.flood(args.tasks, args.window)
            t1, c1, s1 = time.perf_counter(), executor.cpu_times(), executor.num_ctx_switches()
            user, system = (c1.user - c0.user) / args.tasks, (c1.system - c0.system) / args.tasks
            figures["user_us"].append(user * 1e6)
            figures["sys_us"].append(system * 1e6)
            figures["cpu_us"].append((user + system) * 1e6)
            figures["voluntary_cs"].append((s1.voluntary - s0.voluntary) / args.tasks)
            figures["involuntary_cs"].append((s1.involuntary - s0.involuntary) / args.tasks)
            figures["tasks_per_s"].append(args.tasks / (t1 - t0))
            figures["tasks_per_update"].append(args.tasks / (driver.updates - u0))
    finally:
        driver.close()
    if args.spin:
        figures["efficiency"] = [r * args.spin / args.cores for r in figures["tasks_per_s"]]
    medians = {k: statistics.median(v) for k, v in figures.items()}
    import zsched
    print(f"executor of {os.path.dirname(zsched.__file__)}: {args.cores} core(s), window "
          f"{args.window}, median of {args.rounds} x {args.tasks} no-op tasks")
    print(f"  CPU per task {medians['cpu_us']:.2f} us (user {medians['user_us']:.2f}, system "
          f"{medians['sys_us']:.2f}); context switches per task {medians['voluntary_cs']:.3f} "
          f"voluntary, {medians['involuntary_cs']:.3f} involuntary; {medians['tasks_per_s']:,.0f} tasks/s; "
          f"{medians['tasks_per_update']:.1f} tasks per StatusUpdates"
          + (f"; efficiency {medians['efficiency']:.3f}" if args.spin else ""))
    print("JSON " + json.dumps({"median": medians, "rounds": figures}))


if __name__ == "__main__":
    main()
