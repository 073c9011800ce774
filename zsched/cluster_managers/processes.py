"""The processes of a cluster manager's executors, in the hands of one thread of the
manager's own, so that the driver's loop never waits for a process.

That thread starts them (fork and exec), runs the steps of their stops (a signal now,
SIGKILL later), reads what they print, and reaps them. The driver's thread only hands it
commands (``start``, ``stop``) and takes what it found (``take_exits``, ``exit_of``):
none of these calls waits. One thread serves every executor of a manager.
"""
import collections
import logging
import os
import selectors
import threading
import time

from ..wakeup import WakeupPipe

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.05  # seconds between looks for processes that ended
OUTPUT_GRACE = 1.0    # seconds the output of a process that ended is read before it is reported


def describe_error(exc):
    """An exception in a line: its type and message."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class Child:
    """One executor's process, as the manager's thread sees it. ``owner`` is what the
    manager gave ``start`` (its own record of the executor)."""

    __slots__ = ("executor_id", "owner", "process", "reading", "stopping", "steps", "partial",
                 "exited_at")

    def __init__(self, executor_id, owner, process):
        self.executor_id = executor_id
        self.owner = owner
        self.process = process
        self.reading = False   # its output is read, and not to its end yet
        self.stopping = False  # told to stop: no keepalive any more
        self.steps = []        # [(when, action)]: what its stop still has to do, in order
        self.partial = b""     # its output after the last end of line
        self.exited_at = None  # when its exit was seen (its output may still be read)


class ChildProcesses:
    """The processes of one manager's executors and the thread that handles them.

    Given ``reason(child)``: how a process that ended ended, in words; ``on_line(child,
    line)`` (None: output not read): a line it printed; ``keepalive`` (None, or
    ``(seconds, action)``): ``action(child)`` for every running process that often."""

    def __init__(self, name, reason, on_line=None, keepalive=None):
        self.name = name
        self._reason = reason
        self._on_line = on_line
        self._keepalive = keepalive
        self._commands = collections.deque()  # appended by the driver's thread, taken by ours
        self._lock = threading.Lock()
        self._ended = {}         # executor id -> how it ended, found and not yet taken
        self._unreaped = set()   # executor ids started and not yet ended
        self._idle = threading.Condition(self._lock)
        self._children = {}      # executor id -> Child: our thread's alone
        self._wakeup = None
        self._selector = None
        self._thread = None
        self._closed = False
        self._next_keepalive = 0.0
        self._next_reap = 0.0

    # -- what the driver's thread calls (none of it waits)

    def start(self, executor_id, spawn, owner=None):
        """Have ``spawn()`` run in the thread: it returns the executor's ``Popen`` (with a
        ``stdout`` pipe to read if ``on_line`` was given) or raises, which ends the executor
        as "could not start". Starts the thread first if needed (it may raise)."""
        self._ensure_thread()
        with self._lock:
            self._unreaped.add(executor_id)
        self._command(("start", executor_id, spawn, owner))

    def stop(self, executor_id, steps):
        """Have the thread stop an executor: ``steps`` are ``[(seconds from now, action)]``,
        each ``action(child)`` run then if its process still runs."""
        if self._thread is not None:
            self._command(("stop", executor_id, steps, None))

    def take_exits(self):
        """``[(executor id, how it ended)]`` for the executors that ended since last call."""
        with self._lock:
            exits, self._ended = list(self._ended.items()), {}
        return exits

    def exit_of(self, executor_id):
        """How an executor ended, if the thread found that it did and it was not taken yet."""
        with self._lock:
            return self._ended.get(executor_id)

    # -- for a manager that stops (these wait)

    def wait_idle(self, seconds):
        """Wait up to ``seconds`` for every executor started to have ended: True if so."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._unreaped, seconds)

    def close(self, seconds=5.0):
        """End the thread (the processes it has not reaped are left as they are)."""
        thread = self._thread
        if thread is None or self._closed:
            return
        self._command(("close", None, None, None))
        self._closed = True
        thread.join(seconds)
        if not thread.is_alive():
            self._wakeup.close()

    def _command(self, command):
        if not self._closed:
            self._commands.append(command)
            self._wakeup.wake()

    def _ensure_thread(self):
        if self._thread is not None:
            return
        wakeup = WakeupPipe()
        try:
            selector = selectors.DefaultSelector()
            selector.register(wakeup.fd, selectors.EVENT_READ, None)
            thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        except BaseException:
            wakeup.close()
            raise
        self._wakeup, self._selector, self._thread = wakeup, selector, thread
        try:
            thread.start()
        except BaseException:
            self._thread = None
            selector.close()
            wakeup.close()
            raise

    # -- the thread

    def _run(self):
        how = "closed"
        try:
            while self._obey():
                try:
                    self._turn()
                except Exception:  # a bug must not leave the executors unwatched
                    log.exception("%s: error handling the executors' processes", self.name)
                    time.sleep(POLL_INTERVAL)
        except BaseException:
            how = "ended by an error"
            log.exception("%s: thread ended by an error", self.name)
            raise
        finally:
            log.debug("%s thread %s", self.name, how)
            self._selector.close()

    def _turn(self):
        """Run the steps due, wait for output or a command (or the next poll), read it,
        and look for processes that ended once per ``POLL_INTERVAL``."""
        self._run_steps(time.monotonic())
        for key, _ in self._selector.select(self._timeout()):
            if key.data is None:
                self._wakeup.clear()
            else:
                self._read(key.data)
        now = time.monotonic()
        if now >= self._next_reap:
            self._next_reap = now + POLL_INTERVAL
            self._reap(now)

    def _obey(self):
        """Run the commands waiting: False once told to close."""
        while self._commands:
            kind, executor_id, what, owner = self._commands.popleft()
            if kind == "close":
                return False
            if kind == "start":
                self._start(executor_id, what, owner)
            else:
                child = self._children.get(executor_id)
                if child is not None:
                    child.stopping = True
                    now = time.monotonic()
                    child.steps = sorted(child.steps + [(now + delay, action) for delay, action in what],
                                         key=lambda step: step[0])
        return True

    def _start(self, executor_id, spawn, owner):
        try:
            process = spawn()
        except Exception as exc:
            self._found_ended(executor_id, f"could not start: {describe_error(exc)}")
            return
        child = self._children[executor_id] = Child(executor_id, owner, process)
        if self._on_line is not None and process.stdout is not None:
            os.set_blocking(process.stdout.fileno(), False)
            self._selector.register(process.stdout, selectors.EVENT_READ, child)
            child.reading = True

    def _run_steps(self, now):
        for child in self._children.values():
            while child.steps and child.steps[0][0] <= now and child.exited_at is None:
                _, action = child.steps.pop(0)
                try:
                    action(child)
                except Exception:
                    log.exception("executor %s: error while stopping it", child.executor_id)
        keepalive = self._keepalive
        if keepalive is not None and now >= self._next_keepalive:
            self._next_keepalive = now + keepalive[0]
            for child in self._children.values():
                if child.exited_at is None and not child.stopping:
                    keepalive[1](child)

    def _timeout(self):
        due = [child.steps[0][0] for child in self._children.values() if child.steps]
        if not due:
            return POLL_INTERVAL
        return max(0.0, min(POLL_INTERVAL, min(due) - time.monotonic()))

    def _read(self, child):
        stream = child.process.stdout
        try:
            data = os.read(stream.fileno(), 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            *lines, child.partial = (child.partial + data).split(b"\n")
            for line in lines:
                self._line(child, line)
            return
        if child.partial:  # its last line, without an end of line
            self._line(child, child.partial)
            child.partial = b""
        self._stop_reading(child)

    def _stop_reading(self, child):
        child.reading = False
        self._selector.unregister(child.process.stdout)
        child.process.stdout.close()

    def _line(self, child, line):
        try:
            self._on_line(child, line.decode(errors="replace"))
        except Exception:
            log.exception("executor %s: error handling its output", child.executor_id)

    def _reap(self, now):
        for executor_id, child in list(self._children.items()):
            process = child.process
            if child.exited_at is None:
                if process.poll() is None:
                    continue
                child.exited_at = now
            if child.reading:
                if now - child.exited_at < OUTPUT_GRACE:
                    continue  # its last words may still come
                self._stop_reading(child)
            if process.stdin is not None:
                try:
                    process.stdin.close()
                except OSError:
                    pass
            del self._children[executor_id]
            try:
                reason = self._reason(child)
            except Exception as exc:
                reason = f"ended ({describe_error(exc)})"
            self._found_ended(executor_id, reason)

    def _found_ended(self, executor_id, reason):
        with self._lock:
            self._ended[executor_id] = reason
            self._unreaped.discard(executor_id)
            if not self._unreaped:
                self._idle.notify_all()
