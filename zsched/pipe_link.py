"""Frames over a pair of pipes: how a driver and the executors it starts on its own host
talk.

The frames are the ones the ZeroMQ bus carries (``protocol.encode``), each preceded by its
length; only the carrier differs. A ZeroMQ message between two processes wakes three
threads (each side's I/O thread, then the receiver), and those wake-ups are most of a lone
task's latency. A pipe wakes only its reader, and Linux runs a reader woken by a writer
that is about to wait on the writer's own CPU. The pipes are inherited from the driver's
process by the executor it starts, so no other process can reach them: they need neither
addresses nor authentication.

Both ends are non-blocking. ``send`` writes what the pipe takes and keeps the rest, in
order, for ``flush`` (the owner polls ``write_fd`` for POLLOUT while ``wants_write``), so
a peer that stops reading never blocks its sender. ``receive`` reads what waits and
returns the whole frames; the end of the file (the peer closed its end or exited) sets
``closed_by_peer``. A frame longer than ``max_frame`` is a broken peer: the link returns the
frames before it, sets ``error`` and reads no more, and its owner drops it, as ZeroMQ drops
a connection over its MAXMSGSIZE.

Large frames are not copied on their way. ``send_parts`` sends one frame made of several
buffers (a pickle and its out-of-band buffers, say) without joining them: one ``writev`` of
the header and the parts, and what the pipe does not take waits as references to the parts,
which their owner leaves unchanged until they are written. ``receive`` reads frames into a
read buffer of ``BUFFER_SIZE`` bytes, but a frame longer than ``LARGE_FRAME`` (too long for
it) into an object of its own, made at its full size once its header has come, across as
many calls as it takes. That object is a ``bytearray`` when the frame's message type (its
second byte) is in ``WRITABLE_TYPES``, so arrays unpickled from it are writable; every other
frame is ``bytes``.

Reads and writes keep the GIL: the descriptors are non-blocking, so no call waits, and a
driver thread that let the GIL go at each read would wait for it behind a caller busy in
Python (up to the interpreter's switch interval) before it could go on.

This module is the chooser of ``_pipe_link``: ``PipeLink`` is the compiled link (its reads
and writes are C calls), unless ``ZSCHED_PUREPYTHON=1`` selects the twin ``_pipe_link_py``
(the C library's ``read`` and ``write`` through ``ctypes.PyDLL``). The tests run both.
Both branches import the same names: the link, and two system calls that keep the GIL,
for the wake-up pipe (``write_keeping_gil``) and the executor's timer (``set_timer``).

One thread uses a link at a time.
"""
import fcntl
import os

from ._pipe_link_py import (BUFFER_SIZE, HEADER_SIZE, LARGE_FRAME, MAX_PARTS, WRITABLE_TYPES,
                            close_fds)
from .fastpath import COMPILED

if COMPILED:
    from ._pipe_link import PipeLink, set_timer, write_keeping_gil
else:
    from ._pipe_link_py import PipeLink, set_timer, write_keeping_gil

__all__ = ["PipeLink", "set_timer", "write_keeping_gil", "pipe_pair", "close_fds", "HEADER_SIZE",
           "BUFFER_SIZE", "LARGE_FRAME", "MAX_PARTS", "WRITABLE_TYPES"]

# F_SETPIPE_SZ: a larger pipe takes a batch of launches or status updates in one write
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_PIPE_SIZE = 1 << 20


def pipe_pair():
    """Two pipes for a link: ``(this end, the child's end)``, each ``(read fd, write fd)``.
    The child's fds are for ``subprocess.Popen(pass_fds=...)``; the caller closes them once
    the child started."""
    to_child_read, to_child_write = os.pipe()
    try:
        from_child_read, from_child_write = os.pipe()
    except BaseException:  # out of descriptors (EMFILE): the first pipe does not leak
        os.close(to_child_read)
        os.close(to_child_write)
        raise
    for fd in (to_child_write, from_child_write):
        try:
            fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_SIZE)
        except OSError:  # above /proc/sys/fs/pipe-max-size: the default size will do
            pass
    return (from_child_read, to_child_write), (to_child_read, from_child_write)
