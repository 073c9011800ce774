"""The wake-up pipe: one byte per pending wake-up, and nothing written once closed."""
import os

import pytest

from zsched.wakeup import WakeupPipe

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("keep_gil", [False, True])
def test_a_flood_of_wake_ups_writes_one_byte_until_cleared(keep_gil):
    pipe = WakeupPipe(keep_gil)
    try:
        for _ in range(100):
            pipe.wake()
        assert os.read(pipe.fd, 4096) == b"x"
        pipe.clear()
        pipe.wake()
        assert os.read(pipe.fd, 4096) == b"x"
    finally:
        pipe.close()


@pytest.mark.parametrize("keep_gil", [False, True])
def test_once_closed_nothing_is_written_into_a_file_that_took_its_descriptor(keep_gil):
    pipe = WakeupPipe(keep_gil)
    write_fd = pipe._write_fd
    pipe.close()
    read_fd, reused = os.pipe()  # the lowest free numbers: most likely the closed ones
    try:
        if reused != write_fd:
            os.dup2(reused, write_fd)  # make sure the old number is in use again
        os.set_blocking(read_fd, False)
        pipe.wake()
        pipe.wake_always()  # a signal handler after close: never skipped before
        with pytest.raises(BlockingIOError):
            os.read(read_fd, 4096)
    finally:
        for fd in {read_fd, reused, write_fd}:
            os.close(fd)
