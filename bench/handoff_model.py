"""What the thread hand-offs of a lone task cost: a bare pyzmq model of the embedded
client's round trip, against the same round trip with fewer hand-offs.

    python bench/handoff_model.py                 # 4 rounds x 1,000 round trips per design
    python bench/handoff_model.py --rounds 6 --samples 3000

A child process echoes 8-byte frames over ipc:// (it stands for the executor): it reads them
on one socket and answers on another, so that no socket here is used by two threads at
once. In this process a loop thread (the driver's thread of ``zsched.Client()``) polls the
sockets and a pipe; the caller is the main thread. Three designs of one round trip:

- ``caller > loop > echo > loop > caller``: as zsched's embedded client. The caller queues
  the frame and writes the pipe without releasing the GIL; the loop thread sends it,
  reads the reply and hands it back through a ``threading.Condition``.
- ``caller > loop > echo > caller``: the same, but the caller reads the reply itself (the
  loop thread leaves the socket alone meanwhile).
- ``caller > echo > caller``: the caller sends and reads itself.
- ``caller > loop > echo > loop > caller, over pipes``: the first design, with the echo
  reached over a pair of pipes instead of ZeroMQ sockets (as ``zsched.Client()``'s driver
  thread reaches the executors it started): a ZeroMQ message also wakes the I/O thread of
  each side, a pipe only its reader.

Each adds Python work of a few µs at most; what differs is the thread wake-ups. Designs
are interleaved round by round; p50 and p90 of the round trip in µs, medians over rounds.
Output: a table, then one line ``JSON {...}``.
"""
import argparse
import collections
import ctypes
import json
import multiprocessing
import os
import select
import statistics
import tempfile
import threading
import time

import zmq

DESIGNS = ("caller > loop > echo > loop > caller", "caller > loop > echo > caller",
           "caller > echo > caller", "caller > loop > echo > loop > caller, over pipes")


def echo_over_pipes(read_fd, write_fd):
    while True:
        frame = os.read(read_fd, 8)
        if frame in (b"stop", b""):
            break
        os.write(write_fd, frame)


class PipeEnds:
    """Frames of 8 bytes over a pair of pipes, with the socket methods the model uses."""

    def __init__(self, read_fd, write_fd):
        self.read_fd, self.write_fd = read_fd, write_fd

    def fileno(self):
        return self.read_fd

    def send(self, frame):
        os.write(self.write_fd, frame)

    def recv(self):
        return os.read(self.read_fd, 8)


def echo(url_in, url_out):
    context = zmq.Context()
    inbound, outbound = context.socket(zmq.DEALER), context.socket(zmq.DEALER)
    inbound.connect(url_in)
    outbound.connect(url_out)
    while True:
        frame = inbound.recv()
        if frame == b"stop":
            break
        outbound.send(frame)
    context.destroy(0)


class Model:
    """The caller's side and the loop thread: frames leave by ``tx`` and come back by
    ``rx``. A design gives each socket to one thread."""

    def __init__(self, tx, rx):
        self.tx, self.rx = tx, rx
        self.design = DESIGNS[0]
        self.outbox = collections.deque()
        self.condition = threading.Condition()
        self.reply = None
        self.stopping = False
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        write = ctypes.PyDLL(None).write  # as zsched's WakeupPipe(keep_gil=True)
        write.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t)
        self.write = write
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def wake(self):
        self.write(self.write_fd, b"x", 1)

    def loop(self):
        poller = zmq.Poller()
        poller.register(self.rx, zmq.POLLIN)
        poller.register(self.read_fd, zmq.POLLIN)
        # a Poller reports a socket as itself, any other object as its descriptor
        rx_key = self.rx.fileno() if isinstance(self.rx, PipeEnds) else self.rx
        while not self.stopping:
            reads_socket = self.design in (DESIGNS[0], DESIGNS[3])
            if reads_socket:
                ready = dict(poller.poll(1000))
            else:  # the caller reads the replies: this thread waits on the pipe alone
                ready = {self.read_fd: 1} if select.select([self.read_fd], [], [], 1.0)[0] else {}
            if self.read_fd in ready:
                try:
                    os.read(self.read_fd, 4096)
                except BlockingIOError:
                    pass
            while self.outbox:
                self.tx.send(self.outbox.popleft())
            if reads_socket and rx_key in ready:
                if isinstance(self.rx, PipeEnds):  # one frame at a time: one read
                    self.hand_back(self.rx.recv())
                    continue
                while self.rx.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                    self.hand_back(self.rx.recv())

    def hand_back(self, frame):
        with self.condition:
            self.reply = frame
            self.condition.notify_all()

    def round_trip(self, frame):
        if self.design == DESIGNS[2]:
            self.tx.send(frame)
            return self.rx.recv()
        self.outbox.append(frame)
        self.wake()
        if self.design == DESIGNS[1]:
            return self.rx.recv()
        with self.condition:
            while self.reply is None:
                self.condition.wait()
            reply, self.reply = self.reply, None
        return reply

    def stop(self):
        self.stopping = True
        self.wake()
        self.thread.join(5)


def measure(model, design, samples, warmup=100):
    model.design = design
    model.wake()  # the loop thread takes the new design at its next turn
    time.sleep(0.05)
    times = []
    for i in range(warmup + samples):
        frame = i.to_bytes(8, "little")
        start = time.perf_counter()
        if model.round_trip(frame) != frame:
            raise AssertionError("wrong reply")
        times.append(time.perf_counter() - start)
    times = sorted(times[warmup:])
    return times[len(times) // 2] * 1e6, times[len(times) * 9 // 10] * 1e6


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--samples", type=int, default=1000, help="round trips per design and round")
    args = parser.parse_args(argv)
    runs = {design: [] for design in DESIGNS}
    with tempfile.TemporaryDirectory() as directory:
        url_in, url_out = f"ipc://{directory}/in", f"ipc://{directory}/out"
        context = zmq.Context()
        tx, rx = context.socket(zmq.DEALER), context.socket(zmq.DEALER)
        tx.bind(url_in)
        rx.bind(url_out)
        child = multiprocessing.Process(target=echo, args=(url_in, url_out))
        child.start()
        model = Model(tx, rx)
        to_echo_read, to_echo_write = os.pipe()
        from_echo_read, from_echo_write = os.pipe()
        piped_child = multiprocessing.Process(target=echo_over_pipes,
                                              args=(to_echo_read, from_echo_write))
        piped_child.start()
        piped_model = Model(PipeEnds(None, to_echo_write), PipeEnds(from_echo_read, None))
        try:
            order = list(DESIGNS)
            for _ in range(args.rounds):
                for design in order:
                    chosen = piped_model if design == DESIGNS[3] else model
                    runs[design].append(measure(chosen, design, args.samples))
                order.reverse()
        finally:
            model.stop()
            piped_model.stop()
            tx.send(b"stop")
            os.write(to_echo_write, b"stop")
            child.join(10)
            piped_child.join(10)
            context.destroy(0)
    print(f"{'design':<50} {'p50 us':>7} {'p90 us':>7}   p50 of each round")
    medians = {}
    for design, values in runs.items():
        p50 = statistics.median(v[0] for v in values)
        p90 = statistics.median(v[1] for v in values)
        medians[design] = {"p50_us": p50, "p90_us": p90}
        print(f"{design:<50} {p50:>7.0f} {p90:>7.0f}   {', '.join(f'{v[0]:.0f}' for v in values)}")
    print("JSON " + json.dumps({"benchmark": "zsched-handoff-model", "params": vars(args),
                                "medians": medians, "rounds": runs}))


if __name__ == "__main__":
    main()
