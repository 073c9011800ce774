"""Executors that a driver starts on its own host talk to it over a pair of pipes
(``zsched/pipe_link.py``): the link itself, and both of its ends in real processes."""
import array
import logging
import os
import pickle
import random
import select
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zsched
from conftest import BIN, wait_for
from zsched import protocol as p
from zsched.cluster_managers import LocalClusterManager
from zsched.config import Config
from zsched import fastpath
from zsched._pipe_link_py import BUFFER_SIZE, LARGE_FRAME, WRITABLE_TYPES
from zsched._pipe_link_py import PipeLink as PipeLinkReference
from zsched.pipe_link import HEADER_SIZE, PipeLink, pipe_pair

pytestmark = pytest.mark.timeout(120)

# The compiled link and the reference pass the same tests, and each reads what the other
# writes. Without the compiled module (ZSCHED_PUREPYTHON=1) PipeLink is the reference.
IMPLEMENTATIONS = {"reference": PipeLinkReference}
if fastpath.COMPILED:
    from zsched._pipe_link import PipeLink as CompiledPipeLink
    IMPLEMENTATIONS["compiled"] = CompiledPipeLink
PAIRS = [(a, b) for a in IMPLEMENTATIONS for b in IMPLEMENTATIONS]


def test_the_link_in_use_is_the_compiled_one_unless_the_reference_is_asked_for():
    assert PipeLink is (IMPLEMENTATIONS["compiled"] if fastpath.COMPILED else PipeLinkReference)


@pytest.fixture(params=PAIRS, ids=["-".join(pair) for pair in PAIRS])
def link_pair(request):
    """Two ends of one link, ``(ours, theirs)``, of the implementations in the test's id."""
    first, second = (IMPLEMENTATIONS[name] for name in request.param)
    ours, theirs = pipe_pair()
    a, b = first(*ours, 1 << 30), second(*theirs, 1 << 30)
    yield a, b
    a.close()
    b.close()


def exchange(sender, receiver, frames):
    """Send ``frames`` (a list of parts: with ``send_parts``) while reading, as two loops
    would; what arrived."""
    received = []
    pending = list(frames)
    while pending or sender.wants_write or len(received) < len(frames):
        if pending:
            send_item(sender, pending.pop(0))
        sender.flush()
        received += receiver.receive()
    return received


def send_item(link, item):
    """``link.send(item)``, or ``link.send_parts(item)`` for a list of parts."""
    if isinstance(item, list):
        link.send_parts(item)
    else:
        link.send(item)


def joined(item):
    """The frame that ``send_item(item)`` sends."""
    return b"".join(memoryview(part).tobytes() for part in item) if isinstance(item, list) else item


# ---------------------------------------------------------------- the link alone

def test_frames_of_every_size_arrive_whole_and_in_order(link_pair):
    a, b = link_pair
    rng = random.Random(7)
    sizes = [0, 1, 3, 4, 5, 4092, 4096, 4097, 65532, 65536, 70000, 300000, 2_000_000]
    frames = [rng.randbytes(rng.choice(sizes)) for _ in range(200)]
    assert exchange(a, b, frames) == frames
    assert exchange(b, a, frames[:50]) == frames[:50]  # both ways
    assert a.queued_frames == b.queued_frames == 0


def test_a_peer_that_does_not_read_never_blocks_the_sender(link_pair):
    a, b = link_pair
    frames = [bytes([i]) * 100_000 for i in range(60)]  # 6 MB: more than the pipe holds
    for frame in frames:
        a.send(frame)  # a blocking send would never return: nobody reads yet
    assert a.wants_write and 0 < a.queued_frames < len(frames)
    received = []
    while len(received) < len(frames):
        a.flush()
        received += b.receive()
    assert received == frames and not a.wants_write and a.queued_frames == 0


def test_the_read_buffer_keeps_its_size_through_a_large_frame(link_pair):
    a, b = link_pair
    assert exchange(a, b, [b"x" * 3_000_000, b"small"]) == [b"x" * 3_000_000, b"small"]
    assert b.buffer_size == 1 << 16


def test_end_of_file_comes_after_what_the_peer_sent(link_pair):
    a, b = link_pair
    b.send(b"last words")
    b.close()
    assert a.receive() == [b"last words"]
    # a poll reports the end of the file as input (POLLHUP): the next call reads it
    assert select.select([a.read_fd], [], [], 5)[0]
    assert a.receive() == [] and a.closed_by_peer
    with pytest.raises(BrokenPipeError):
        a.send(b"anyone there?")


def test_a_length_header_takes_any_frame_size_and_a_huge_one_breaks_the_link(link_pair):
    a, b = link_pair
    # a frame of more than 4 GiB (not made here: its header alone) is just over the limit
    os.write(a.write_fd, (5 << 30).to_bytes(HEADER_SIZE, "little"))
    assert b.receive() == [] and b.error == f"a frame of {5 << 30} bytes (at most {1 << 30})"
    a.max_frame = 1 << 40  # and under a limit above it, a frame that has not arrived yet
    os.write(b.write_fd, (5 << 30).to_bytes(HEADER_SIZE, "little") + b"start")
    assert a.receive() == [] and a.error is None


def test_a_frame_over_the_limit_breaks_the_link_after_the_frames_before_it(link_pair):
    a, b = link_pair
    b.max_frame = 1000
    a.send(b"fine")
    a.send(b"y" * 1001)
    a.send(b"after")
    assert b.receive() == [b"fine"]
    assert b.error == "a frame of 1001 bytes (at most 1000)"
    assert b.receive() == []  # nothing more is read from a broken link
    # a header too large at the end of a full buffer: no buffer is made for its frame
    ours, theirs = pipe_pair()
    c, d = type(b)(*ours, 100_000), type(a)(*theirs, 1 << 30)
    try:
        first = b"z" * (65536 - 2 * HEADER_SIZE)  # with its header, the buffer less a header
        d.send(first)
        os.write(d.write_fd, (10**9).to_bytes(HEADER_SIZE, "little") + b"more")
        assert c.receive() == [first]
        assert c.error == "a frame of 1000000000 bytes (at most 100000)"
        assert c.buffer_size == 1 << 16
    finally:
        c.close()
        d.close()


# ---------------------------------------------------------------- frames of parts, large frames

MiB = 1 << 20
PART_KINDS = ["bytes", "bytearray", "memoryview", "doubles", "matrix", "picklebuffer"]
PART_SIZES = [0, 1, 4095, 4096, 64 << 10, MiB, 8 * MiB, 64 * MiB]
_RANDOM_BYTES = []


def random_bytes(size, offset=0):
    """``size`` random bytes (at most 64 MiB, made once), from ``offset`` on."""
    if not _RANDOM_BYTES:
        _RANDOM_BYTES.append(random.Random(42).randbytes(64 * MiB + 4096))
    return _RANDOM_BYTES[0][offset:offset + size]


def make_part(kind, size, offset=0):
    """A part of ``size`` bytes of the buffer ``kind`` (doubles and matrix rows are whole:
    their size is rounded down to 16 bytes)."""
    data = random_bytes(size, offset)
    if kind == "bytes":
        return data
    if kind == "bytearray":
        return bytearray(data)
    if kind == "memoryview":  # a view inside a larger object
        return memoryview(b"<" + data + b">")[1:-1]
    if kind == "doubles":
        return memoryview(array.array("d", data[:size - size % 16]))
    if kind == "matrix":  # two dimensions, of 16 bytes a row
        rows = size // 16
        view = memoryview(bytearray(data[:rows * 16]))
        return view.cast("B", (rows, 16)) if rows else view  # no shape holds a zero
    return pickle.PickleBuffer(bytearray(data))


def frames_of_every_part():
    """Frames of parts (lists) of every kind and size, among frames sent whole."""
    items = []
    for i, size in enumerate(PART_SIZES):
        # the largest sizes in one kind each, so that the test holds little memory
        kinds = PART_KINDS if size <= MiB else [PART_KINDS[i % len(PART_KINDS)]]
        for j, kind in enumerate(kinds):
            other = PART_KINDS[(j + 1) % len(PART_KINDS)]
            items.append([make_part(kind, size, i + j), make_part(other, 33, j)])
            items.append(random_bytes((i * 7919 + j * 104729) % 200_000, j))
    return items


def through_a_thread(sender, receiver, items):
    """Send ``items`` while another thread reads, flushing as a loop would; what it read."""
    received = []

    def read():
        deadline = time.monotonic() + 90
        while len(received) < len(items) and time.monotonic() < deadline:
            select.select([receiver.read_fd], [], [], 1)
            received.extend(receiver.receive())
            assert receiver.error is None and not receiver.closed_by_peer

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for item in items:
            send_item(sender, item)
            sender.flush()  # what the pipe takes now: the rest waits in the outbox
        while not sender.flush():
            select.select([], [sender.write_fd], [], 1)
    finally:
        reader.join(120)
    assert not reader.is_alive()
    return received


def test_frames_of_parts_of_every_kind_and_size_arrive_as_one_frame_each_in_order(link_pair):
    a, b = link_pair
    items = frames_of_every_part()
    received = through_a_thread(a, b, items)
    assert len(received) == len(items)
    for frame, item in zip(received, items):
        assert frame == joined(item)
    assert a.queued_frames == 0 and b.buffer_size == BUFFER_SIZE


def test_a_large_frame_of_a_data_type_arrives_writable_and_others_as_bytes(link_pair):
    a, b = link_pair
    body = random_bytes(300_000)
    frames = [bytes([1, kind]) + body for kind in sorted(WRITABLE_TYPES)]
    frames += [b"\x01\x0c" + body, b"\x01\x08small", b"\x01\x08" + body[:LARGE_FRAME - 2],
               b"\x01\x08" + body[:LARGE_FRAME - 1], [b"\x01", b"\x08", memoryview(body)]]
    received = exchange(a, b, frames)
    assert received == [joined(frame) for frame in frames]
    # a frame that fits in the read buffer with its header is bytes, whatever its type
    assert [type(frame) for frame in received] == \
        [bytearray] * len(WRITABLE_TYPES) + [bytes, bytes, bytes, bytearray, bytearray]
    assert b.buffer_size == BUFFER_SIZE


# the frame before it ends where the large frame's header begins: early on, or so that its
# header and its first byte end the read buffer (its type byte comes with the next read)
@pytest.mark.parametrize("before", [8, BUFFER_SIZE - 2 * HEADER_SIZE - 1])
def test_a_large_frame_arrives_in_pieces_over_as_many_calls(link_pair, before):
    a, b = link_pair
    first, large = random_bytes(before, 1), b"\x01\x21" + random_bytes(300_000)
    wire = b"".join(len(frame).to_bytes(HEADER_SIZE, "little") + frame
                    for frame in (first, large, b"after"))
    begins = HEADER_SIZE + before  # the large frame's header
    ends = begins + HEADER_SIZE + len(large)
    cuts = sorted({3, begins - 1, begins + 3, begins + HEADER_SIZE, begins + HEADER_SIZE + 1,
                   begins + HEADER_SIZE + 2, BUFFER_SIZE, BUFFER_SIZE + 9, 200_000, ends - 1,
                   ends, len(wire) - 1, len(wire)})
    received = []
    for begin, end in zip([0] + cuts, cuts):
        os.write(a.write_fd, wire[begin:end])
        received += b.receive()
        expected = [first] * (end >= begins) + [large] * (end >= ends)
        expected += [b"after"] * (end == len(wire))
        assert received == expected, (begin, end)
    assert type(received[1]) is bytearray and b.buffer_size == BUFFER_SIZE


def test_a_frame_of_parts_written_in_part_keeps_its_place_and_holds_its_parts(link_pair):
    a, b = link_pair
    big = bytearray(random_bytes(3 * MiB))
    a.send(b"first")
    a.send_parts([b"\x01\x02", big, memoryview(b"tail")])
    assert a.wants_write and a.queued_frames == 1  # the pipe took a part of it
    with pytest.raises(BufferError):  # held, not copied: it cannot be resized meanwhile
        big.append(0)
    a.send(b"after")
    a.send_parts([b"x", b"", bytearray(b"y")])
    a.send_parts([])
    assert a.queued_frames == 4
    received = []
    while len(received) < 5:
        a.flush()
        received += b.receive()
    assert received == [b"first", b"\x01\x02" + big + b"tail", b"after", b"xy", b""]
    assert not a.wants_write and a.queued_frames == 0
    big.append(0)  # written: let go


def test_send_parts_refuses_too_many_parts_and_parts_that_are_no_contiguous_buffer(link_pair):
    a, b = link_pair
    with pytest.raises(ValueError, match=r"a frame of 65 parts \(at most 64\)"):
        a.send_parts([b"x"] * 65)
    with pytest.raises(BufferError):
        a.send_parts([b"fine", memoryview(b"abcdef")[::2]])
    with pytest.raises(TypeError):
        a.send_parts([b"fine", 5])
    assert not a.wants_write and a.queued_frames == 0
    a.send_parts((b"x",) * 64)  # a tuple will do
    assert exchange(a, b, [[b"y"], []]) == [b"x" * 64, b"y", b""]


def test_send_parts_to_a_peer_that_closed_raises_broken_pipe(link_pair):
    a, b = link_pair
    b.close()
    with pytest.raises(BrokenPipeError):
        a.send_parts([b"\x01\x08", bytearray(100_000)])


def test_a_large_frame_over_the_limit_breaks_the_link_and_one_at_the_limit_does_not(link_pair):
    a, b = link_pair
    b.max_frame = 200_000
    a.send_parts([b"\x01\x08", bytes(200_000 - 2)])
    a.send(b"fine")
    a.send_parts([b"\x01\x08", bytes(200_000 - 1)])
    a.send(b"never")
    received = []
    while b.error is None:
        a.flush()
        received += b.receive()
    assert received == [b"\x01\x08" + bytes(200_000 - 2), b"fine"]
    assert b.error == "a frame of 200001 bytes (at most 200000)"
    assert b.receive() == []


@pytest.mark.parametrize("size", [1000, 300_000])
def test_a_peer_that_closes_mid_frame_leaves_the_frames_before_it(link_pair, size):
    a, b = link_pair
    a.send(b"whole")
    os.write(a.write_fd, size.to_bytes(HEADER_SIZE, "little") + b"\x01\x08" + bytes(size // 2))
    a.close()
    received = []
    while not b.closed_by_peer:
        select.select([b.read_fd], [], [], 5)
        received += b.receive()
    assert received == [b"whole"] and b.error is None
    assert b.receive() == []


PART_SIZE = st.one_of(
    st.sampled_from([0, 1, 2, 4095, 4096, LARGE_FRAME - 3, LARGE_FRAME - 2, LARGE_FRAME - 1,
                     LARGE_FRAME, BUFFER_SIZE, 2 * BUFFER_SIZE]),
    st.integers(0, 400_000))
PARTS = st.lists(st.tuples(st.sampled_from(PART_KINDS), PART_SIZE), max_size=5)
# (message type, a frame's size for send, or its parts for send_parts)
ITEM = st.one_of(st.tuples(st.sampled_from([8, 12]), PART_SIZE),
                 st.tuples(st.sampled_from([8, 33, 12]), PARTS))


@pytest.mark.parametrize("pair", PAIRS, ids=["-".join(pair) for pair in PAIRS])
@settings(max_examples=20, deadline=None)
@given(items=st.lists(ITEM, min_size=1, max_size=10))
def test_any_sequence_of_frames_and_frames_of_parts_arrives_whole_and_in_order(pair, items):
    frames = []
    for i, (kind, what) in enumerate(items):
        head = bytes([1, kind])
        if isinstance(what, int):
            frames.append(head + random_bytes(what, i))
        else:
            frames.append([head] + [make_part(part, size, i) for part, size in what])
    ours, theirs = pipe_pair()
    first, second = (IMPLEMENTATIONS[name] for name in pair)
    a, b = first(*ours, 1 << 30), second(*theirs, 1 << 30)
    try:
        received = exchange(a, b, frames)
        assert received == [joined(frame) for frame in frames]
        assert [type(frame) for frame in received] == [
            bytearray if len(frame) > LARGE_FRAME and frame[1] in WRITABLE_TYPES else bytes
            for frame in received]
    finally:
        a.close()
        b.close()


# ---------------------------------------------------------------- the driver's side

def executor_processes():
    return [proc for proc in psutil.Process().children(recursive=True)
            if "zsched.executor" in " ".join(proc.cmdline())]


@pytest.mark.parametrize("in_process", [True, False], ids=["embedded-driver", "driver-process"])
def test_a_local_cluster_s_executors_talk_to_its_driver_over_pipes(in_process):
    with zsched.LocalCluster(2, in_process=in_process) as cluster:
        client = cluster.client()
        assert sum(client.map(abs, range(-1000, 1000))) == 1_000_000
        commands = [proc.cmdline() for proc in executor_processes()]
        assert len(commands) == 2
        for command in commands:
            assert "--driver-fds" in command and "--secret-file" not in command
            assert "--relief-fds" in command  # one core: a relief thread, pipes of its own
        wait_for(lambda: [e["relief"] for e in client.status()["executors"]] == [True, True],
                 timeout=30, message="both relief threads' pipes attached")
        client.shutdown()


def test_with_local_executor_link_socket_they_use_the_driver_s_socket():
    with zsched.LocalCluster(2, local_executor_link="socket") as cluster:
        client = cluster.client()
        assert client.submit(pow, 2, 10).result(30) == 1024
        for proc in executor_processes():
            command = proc.cmdline()
            # a key of its own, read from a pipe: never the cluster secret
            assert "--driver-fds" not in command and "--credential-fd" in command
            assert "--secret-file" not in command
        client.shutdown()


def test_an_executor_killed_is_found_at_once_and_its_task_runs_elsewhere(tmp_path):
    marker = tmp_path / "started"

    def note_and_sleep(path, seconds):
        import os
        import time
        with open(path, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(seconds)
        return os.getpid()

    # heartbeats are too slow to matter here: only the pipe's end of file tells the driver
    with zsched.LocalCluster(2, executor_heartbeat_interval=600,
                             executor_heartbeat_timeout=3600) as cluster:
        client = cluster.client()
        future = client.submit(note_and_sleep, str(marker), 3)
        wait_for(lambda: marker.exists() and marker.read_text().strip(), timeout=30,
                 message="the task started")
        victim = int(marker.read_text().split()[0])
        os.kill(victim, signal.SIGKILL)
        losses = wait_for(lambda: client.status()["losses"], timeout=30,
                          message="the killed executor removed")
        assert "killed by signal SIGKILL" in losses[0]["reason"], losses
        assert future.result(60) != victim  # ran again, on another executor
        client.shutdown()


class JunkExecutors(LocalClusterManager):
    """Starts, instead of executors, a script that registers over the pipes, sends what
    ``script`` says, then waits for the end of its input."""

    script = ""

    def _start_one(self):
        ours, theirs = pipe_pair()
        command = [sys.executable, "-c", self.script, str(theirs[0]), str(theirs[1]), self.app_id]
        executor_id = f"junk-{next(self._ids)}"  # the pipes are that executor's alone
        self._launch(executor_id, command, theirs)
        self.adopt_link(executor_id, *ours)


REGISTER_THEN = """
import os, sys, time
from zsched import protocol as p
from zsched.pipe_link import PipeLink
link = PipeLink(int(sys.argv[1]), int(sys.argv[2]), 1 << 20)
link.send(p.encode(p.RegisterExecutor("junk-1", "localhost", 1, sys.argv[3], os.getpid())))
{then}
while not link.closed_by_peer:  # until the driver closes its end or says to stop
    link.flush()
    for frame in link.receive():
        if p.decode(frame).TYPE in (p.MsgType.SHUTDOWN, p.MsgType.STOP_EXECUTOR):
            sys.exit(0)
    time.sleep(0.01)
"""


def run_driver_with(script, caplog):
    from zsched.driver import Driver, DriverOptions
    manager = JunkExecutors()
    manager.script = script
    driver = Driver(DriverOptions(Config(), cluster_manager=manager, initial_executors=1))
    with caplog.at_level(logging.INFO, logger="zsched.driver"):
        driver.start_thread()
        return driver


def test_junk_over_a_pipe_is_dropped_and_the_driver_serves_on(caplog):
    driver = run_driver_with(REGISTER_THEN.format(then="""
link.send(b"\\x00\\x01 not a message")
"""), caplog)
    try:
        wait_for(lambda: "dropped malformed input from peer" in caplog.text, timeout=30,
                 message="the junk warned of")
        assert "junk-1" in driver.registry.by_id  # registered before, and kept
        assert driver.is_running()
    finally:
        driver.request_stop()
        driver.join(60)
    assert not driver.is_running()


def test_a_frame_over_the_limit_over_a_pipe_drops_that_executor(caplog):
    driver = run_driver_with(REGISTER_THEN.format(then="""
os.write(link.write_fd, (1 << 30).to_bytes(8, "little"))
"""), caplog)
    try:
        wait_for(lambda: "broke its link: a frame of 1073741824 bytes" in caplog.text,
                 timeout=30, message="the executor dropped")
        assert "junk-1" not in driver.registry.by_id
        assert "Removed executor junk-1 on localhost: broke its link: a frame of 1073741824 bytes" \
            in caplog.text
        assert driver.is_running()
    finally:
        driver.request_stop()
        driver.join(60)


# ---------------------------------------------------------------- the executor's side

class FakeDriver:
    """The test as a driver: an executor process started with ``--driver-fds``."""

    def __init__(self, tmp_path, cores=1, relief=False):
        ours, theirs = pipe_pair()
        self.link = PipeLink(*ours, 1 << 30)
        command = [sys.executable, os.path.join(BIN, "executor"), "--driver-url", "pipe:test",
                   "--executor-id", "7", "--hostname", "localhost", "--cores", str(cores),
                   "--app-id", "app", "--driver-fds", "%d,%d" % theirs]
        passed = list(theirs)
        self.relief = None  # the relief thread's link, with ``relief``
        self.relief_pipes = set()  # its two pipes (inode numbers)
        if relief:
            relief_ours, relief_theirs = pipe_pair()
            self.relief = PipeLink(*relief_ours, 1 << 30)
            self.relief_pipes = {os.fstat(fd).st_ino for fd in relief_ours}
            command += ["--relief-fds", "%d,%d" % relief_theirs]
            passed += relief_theirs
        self.proc = subprocess.Popen(command, pass_fds=passed, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        for fd in passed:
            os.close(fd)

    def receive(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            frames = self.link.receive()
            if frames:
                return [p.decode(frame) for frame in frames]
            if self.link.closed_by_peer:
                return []
            select.select([self.link.read_fd], [], [], 0.5)
        raise AssertionError("nothing from the executor")

    def pipes_held(self):
        """The pipes (inode numbers) the executor process has open."""
        held = set()
        for fd in os.listdir(f"/proc/{self.proc.pid}/fd"):
            try:
                target = os.readlink(f"/proc/{self.proc.pid}/fd/{fd}")
            except OSError:  # closed meanwhile
                continue
            if target.startswith("pipe:["):
                held.add(int(target[len("pipe:["):-1]))
        return held

    def register(self):
        (msg,) = self.receive()
        assert isinstance(msg, p.RegisterExecutor) and msg.executor_id == "7"
        self.link.send(p.encode(p.RegisteredExecutor(99, Config().to_settings(), b"token")))

    def finish(self, timeout=30):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise AssertionError("the executor did not exit") from None
        self.link.close()
        if self.relief is not None:
            self.relief.close()
        return self.proc.returncode, err


def test_a_piped_executor_runs_tasks_and_exits_when_its_driver_s_end_closes(tmp_path):
    import cloudpickle
    import pickle
    driver = FakeDriver(tmp_path)
    driver.register()
    blob = cloudpickle.dumps(pow)
    driver.link.send(p.encode(p.LaunchTasks({b"d": blob}, [[1, 1, b"d", pickle.dumps(((2, 5), {}))]])))
    messages = []
    while not any(isinstance(m, p.StatusUpdates) for m in messages):
        messages += driver.receive()
    (update,) = [m for m in messages if isinstance(m, p.StatusUpdates)][0].updates
    assert update[:3] == [1, 1, p.TaskState.FINISHED] and pickle.loads(update[3]) == 32
    driver.link.close()  # the driver is gone
    status, err = driver.finish()
    assert status == 1 and "lost the connection to the driver" in err, err


def sleep_in_steps(seconds):
    for _ in range(int(seconds * 100)):
        time.sleep(0.01)


def test_a_piped_executor_whose_relief_link_closed_leaves_once_a_long_task_begins(tmp_path):
    """The relief's pipes closed (the driver is gone) while no task ran: when a lone task
    runs long, the relief cannot cover for the loop, and the executor leaves at once
    rather than run the task with nobody listening for the driver."""
    import cloudpickle
    import pickle
    driver = FakeDriver(tmp_path, relief=True)
    driver.register()
    deadline = time.monotonic() + 30
    while not (frames := driver.relief.receive()):
        assert time.monotonic() < deadline, "no AttachRelief"
        select.select([driver.relief.read_fd], [], [], 0.5)
    assert isinstance(p.decode(frames[0]), p.AttachRelief)
    driver.relief.close()
    # the relief thread reads the end of its pipes, and closes its own ends of them
    wait_for(lambda: not driver.relief_pipes & driver.pipes_held(), timeout=30,
             message="the executor to close the relief's pipes")
    blob = cloudpickle.dumps(sleep_in_steps)
    driver.link.send(p.encode(p.LaunchTasks({b"d": blob}, [[1, 1, b"d", pickle.dumps(((60,), {}))]])))
    status, err = driver.finish(timeout=30)
    assert status == 1 and "lost the connection to the driver (a task was still running)" in err, err


def test_a_piped_executor_ignores_junk_and_stops_on_an_oversized_frame(tmp_path):
    driver = FakeDriver(tmp_path)
    driver.register()  # and at once, what follows: read with the answer, or after it
    driver.link.send(b"\x00junk")
    driver.link.send(p.encode(p.HeartbeatAck(99)))
    os.write(driver.link.write_fd, (1 << 31).to_bytes(HEADER_SIZE, "little"))
    status, err = driver.finish()
    assert "ignored a malformed message from the driver" in err, err
    assert status == 1 and "the driver broke the link" in err, err


def test_a_piped_executor_whose_driver_closes_before_answering_does_not_register(tmp_path):
    driver = FakeDriver(tmp_path)
    (msg,) = driver.receive()
    assert isinstance(msg, p.RegisterExecutor)
    driver.link.close()
    status, err = driver.finish()
    assert status == 1 and "Cannot register with driver pipe:test: it closed its pipe" in err, err


@pytest.mark.parametrize("option", ["--driver-fds", "--relief-fds"])
@pytest.mark.parametrize("value", ["", "3", "a,b", "1,2,3", "900,901"])
def test_bad_driver_or_relief_fds_print_usage_and_exit_1(option, value):
    others = ["--driver-fds", "0,1"] if option == "--relief-fds" else []
    proc = subprocess.run(
        [sys.executable, os.path.join(BIN, "executor"), "--driver-url", "pipe:x", "--executor-id",
         "1", "--hostname", "h", "--cores", "1", "--app-id", "a", *others, option, value],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc
    assert f"{option} must be two open file descriptors" in proc.stderr, proc.stderr
    assert "Usage" in proc.stderr


def test_relief_fds_without_driver_fds_print_usage_and_exit_1():
    proc = subprocess.run(
        [sys.executable, os.path.join(BIN, "executor"), "--driver-url", "tcp://127.0.0.1:1",
         "--executor-id", "1", "--hostname", "h", "--cores", "1", "--app-id", "a",
         "--relief-fds", "0,1"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc
    assert "--relief-fds goes with --driver-fds" in proc.stderr and "Usage" in proc.stderr


# ---------------------------------------------------------------- the cluster's own client

def test_a_local_cluster_s_clients_talk_to_its_driver_over_pipes_of_their_own():
    # a killed sleep ends with its executor, after task_kill_timeout (a sleep takes no
    # exception until it returns)
    with zsched.LocalCluster(2, tasks_per_core=1, task_kill_timeout="1s") as cluster:
        first = cluster.client()
        second = cluster.client()
        for client in (first, second):
            assert client.transport == "pipes"
        assert first.link.read_fd != second.link.read_fd
        assert first.submit(abs, -3).result(30) == 3
        assert list(first.map(abs, range(-3000, 0))) == list(range(3000, 0, -1))
        assert second.submit(abs, -4).result(30) == 4
        # a closed client is dropped by the driver: its running task is killed and the
        # executor serves the other client
        long = [first.submit(time.sleep, 60) for _ in range(2)]
        wait_for(lambda: second.status()["tasks"]["running"] == 2, timeout=30,
                 message="both executors busy")
        first.close()
        assert all(future.cancelled() for future in long)
        assert second.submit(abs, -5).result(30) == 5
        wait_for(lambda: first.link.closed, timeout=30, message="the first client closed")


def a_piped_client_waiting(cluster):
    """A client of ``cluster`` over pipes, and the future of its task running for a minute."""
    client = cluster.client()
    assert client.transport == "pipes"
    future = client.submit(time.sleep, 60)
    wait_for(lambda: client.status()["tasks"]["running"] == 1, timeout=30, message="the task running")
    return client, future


def test_a_piped_client_fails_its_futures_at_once_when_its_driver_dies():
    # a silent driver is judged after an hour: only the pipe's end of file ends the wait
    with zsched.LocalCluster(1, executor_heartbeat_interval=600,
                             executor_heartbeat_timeout=3600) as cluster:
        client, future = a_piped_client_waiting(cluster)
        os.kill(cluster.driver_pid, signal.SIGKILL)
        with pytest.raises(zsched.DriverConnectionError, match="lost the connection"):
            future.result(30)
        with pytest.raises(zsched.DriverConnectionError):
            client.submit(abs, 1)
        # refused at the socket, or (the socket read just before the dying driver closed it)
        # by the pipes handed through it
        with pytest.raises(zsched.DriverConnectionError, match="cannot connect to (the cluster's )?driver"):
            cluster.client()
    wait_for(lambda: not executor_processes(), timeout=30, message="the executors gone")


FAST_LIVENESS = {"executor_heartbeat_interval": 0.2, "executor_heartbeat_timeout": 2.0}


def test_a_piped_client_fails_its_futures_when_its_driver_is_stopped():
    """Pipes have no heartbeats and a stopped driver keeps its end open: the client pings a
    silent driver while tasks wait, and gives up after executor_heartbeat_timeout."""
    timeout = FAST_LIVENESS["executor_heartbeat_timeout"]
    with zsched.LocalCluster(1, **FAST_LIVENESS) as cluster:
        client, future = a_piped_client_waiting(cluster)
        started = time.monotonic()
        os.kill(cluster.driver_pid, signal.SIGSTOP)
        try:
            with pytest.raises(zsched.DriverConnectionError, match=f"answered nothing for {timeout:g} s"):
                future.result(30)
            waited = time.monotonic() - started
        finally:
            os.kill(cluster.driver_pid, signal.SIGCONT)
        assert waited >= timeout, waited  # not before the timeout; the message names the silence
        with pytest.raises(zsched.DriverConnectionError):
            client.submit(abs, 1)
        # the driver, running again, answers another client (its executor, silent as long,
        # may have left: executors judge their driver by the same timeout)
        assert isinstance(cluster.client().status()["executors"], list)
    wait_for(lambda: not executor_processes(), timeout=30, message="the executors gone")


def test_a_piped_client_keeps_a_live_driver_through_a_task_longer_than_the_timeout():
    with zsched.LocalCluster(1, **FAST_LIVENESS) as cluster:
        client = cluster.client()
        assert client.transport == "pipes"
        timeout = FAST_LIVENESS["executor_heartbeat_timeout"]
        assert client.submit(sleep_then_return, 2.5 * timeout, "done").result(30) == "done"
        assert client.connection_error is None


def sleep_then_return(seconds, value):
    time.sleep(seconds)
    return value


class FakeClient:
    """The test as a client, with a pipe pair passed through a driver's ``client_pipes``."""

    def __init__(self, caplog):
        import socket
        from zsched.driver import Driver, DriverOptions
        self.pipes_socket, driver_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.driver = Driver(DriverOptions(Config(), client_pipes=driver_end.detach()))
        with caplog.at_level(logging.INFO, logger="zsched.driver"):
            self.driver.start_thread()
        self.link = self.connect()

    def connect(self):
        import socket
        ours, theirs = pipe_pair()
        socket.send_fds(self.pipes_socket, [b"p"], list(theirs))
        for fd in theirs:
            os.close(fd)
        return PipeLink(*ours, 1 << 30)

    def exchange(self, msg):
        """Send ``msg``; the first message the driver answers with."""
        self.link.send(p.encode(msg))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            select.select([self.link.read_fd], [], [], 1)
            frames = self.link.receive()
            if frames:
                return p.decode(frames[0])
        raise AssertionError("the driver did not answer")

    def close(self):
        self.driver.request_stop()
        self.driver.join(60)
        self.link.close()
        self.pipes_socket.close()
        assert not self.driver.is_running()


def test_junk_from_a_piped_client_is_dropped_and_an_oversized_frame_drops_the_client(caplog):
    client = FakeClient(caplog)
    try:
        welcome = client.exchange(p.ClientHello(os.getpid()))
        assert isinstance(welcome, p.ClientWelcome)
        assert len(client.driver.sessions.by_rid) == 1
        client.link.send(b"\x00\x01 not a message")
        wait_for(lambda: "dropped malformed input from peer" in caplog.text, timeout=30,
                 message="the junk warned of")
        assert len(client.driver.sessions.by_rid) == 1 and client.driver.is_running()
        os.write(client.link.write_fd, (1 << 40).to_bytes(HEADER_SIZE, "little"))
        wait_for(lambda: not client.driver.sessions.by_rid, timeout=30, message="the client dropped")
        assert "is cut off (it broke its link: a frame of 1099511627776 bytes" in caplog.text
        assert client.driver.is_running()
        # and the driver closed its end of the pipes
        wait_for(lambda: client.link.receive() == [] and client.link.closed_by_peer, timeout=30,
                 message="the end of the driver's pipe")
    finally:
        client.close()


def test_a_piped_client_whose_driver_breaks_the_link_fails_its_futures():
    from zsched.client import Client
    ours, theirs = pipe_pair()
    driver_end = PipeLink(*theirs, 1 << 30)  # the test as the driver
    try:
        hello = []

        def answer():  # the client's hello, then the welcome
            while not hello:
                select.select([driver_end.read_fd], [], [], 1)
                hello.extend(p.decode(frame) for frame in driver_end.receive())
            driver_end.send(p.encode(p.ClientWelcome(1, "app", {})))

        answering = threading.Thread(target=answer)
        answering.start()
        client = Client.over_pipes(PipeLink(*ours, 1 << 30), "pipes", timeout=30)
        answering.join(30)
        assert isinstance(hello[0], p.ClientHello)
        future = client.submit(abs, -1)
        wait_for(lambda: any(isinstance(p.decode(frame), p.SubmitTasks)
                             for frame in driver_end.receive()), timeout=30,
                 message="the task sent")
        os.write(driver_end.write_fd, (1 << 40).to_bytes(HEADER_SIZE, "little"))
        with pytest.raises(zsched.DriverConnectionError, match="broke the link: a frame of"):
            future.result(30)
        client.shutdown()
        assert client.link.closed
    finally:
        driver_end.close()


def test_the_client_pipes_ignores_junk_and_its_end_stops_no_client(caplog):
    client = FakeClient(caplog)
    try:
        client.pipes_socket.send(b"x")  # a message without descriptors
        wait_for(lambda: "ignored a message on the client-pipes socket without a pipe pair" in caplog.text,
                 timeout=30, message="the junk warned of")
        assert isinstance(client.exchange(p.ClientHello(os.getpid())), p.ClientWelcome)
        second = client.connect()  # a second client, through the same socket
        second.send(p.encode(p.ClientHello(os.getpid())))
        wait_for(lambda: len(client.driver.sessions.by_rid) == 2, timeout=30, message="two clients")
        client.pipes_socket.close()  # no more clients: the driver stops watching the socket
        wait_for(lambda: client.driver.client_pipes is None, timeout=30, message="the socket closed")
        client.link.send(p.encode(p.AdminExecutorIds(1)))
        wait_for(lambda: any(isinstance(p.decode(frame), p.AdminReply)
                             for frame in client.link.receive()), timeout=30,
                 message="the driver still serves its clients")
        second.close()
    finally:
        client.close()


@pytest.mark.parametrize("value", ["7", "a", "0"])
def test_a_bad_client_pipes_is_a_usage_error(value):
    done = subprocess.run([sys.executable, "-m", "zsched.driver", "--insecure", "--client-pipes", value],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "--client-pipes must be the descriptor of an open Unix socket" in done.stderr


def test_clients_made_at_once_in_several_threads_get_pipes_of_their_own():
    with zsched.LocalCluster(1) as cluster:
        clients = []
        threads = [threading.Thread(target=lambda: clients.append(cluster.client())) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(clients) == 6 and all(client.transport == "pipes" for client in clients)
        assert len({client.link.read_fd for client in clients}) == 6
        assert [client.submit(abs, -i).result(30) for i, client in enumerate(clients)] == list(range(6))


@pytest.mark.parametrize("driver", ["silent", "gone", "hangs-up"])
def test_a_piped_client_whose_driver_does_not_answer_fails_to_connect(driver):
    from zsched.client import Client
    ours, theirs = pipe_pair()
    driver_end = PipeLink(*theirs, 1 << 30)  # the test as a driver that never welcomes
    hanging_up = None
    try:
        if driver == "gone":
            driver_end.close()
        elif driver == "hangs-up":  # reads the hello, then closes its end
            def hang_up():
                select.select([driver_end.read_fd], [], [], 30)
                driver_end.close()
            hanging_up = threading.Thread(target=hang_up)
            hanging_up.start()
        # the message tells what ended the wait: the timeout (silent) or the end of file
        message = ("no answer within 1 s" if driver == "silent"
                   else "it closed its end of the pipes")
        with pytest.raises(zsched.DriverConnectionError, match=message):
            Client.over_pipes(PipeLink(*ours, 1 << 30), "pipes", timeout=1 if driver == "silent" else 3600)
    finally:
        if hanging_up is not None:
            hanging_up.join(30)
        driver_end.close()
