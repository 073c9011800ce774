"""A driver whose settings do not parse here (another version of zsched): its executors and
clients say so and stop, with no traceback and no hang. The driver is a ROUTER in the test
that answers as a driver of another version would."""
import os
import subprocess
import sys
import threading

import pytest
import zmq

import zsched
from conftest import BIN
from zsched import protocol as p
from zsched.errors import ConfigError

pytestmark = pytest.mark.timeout(60)
FOREIGN = {"max_failures": 4, "a_setting_of_a_later_version": 1}


class ForeignDriver:
    """Answers each hello (a client's or an executor's) with a welcome of FOREIGN settings."""

    def __init__(self):
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.linger = 0
        port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.url = f"tcp://127.0.0.1:{port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            if not self.router.poll(50):
                continue
            rid, frame = self.router.recv_multipart()
            msg = p.decode(frame)
            if isinstance(msg, (p.ClientHello, p.ExecutorHello)):
                self.router.send_multipart([rid, p.encode(p.ClientWelcome(1, "app", FOREIGN))])

    def close(self):
        self._stop.set()
        self._thread.join(5)
        self.router.close(0)
        self.context.term()


@pytest.fixture
def foreign_driver():
    driver = ForeignDriver()
    yield driver
    driver.close()


def test_an_executor_of_another_version_exits_1_saying_why(foreign_driver):
    result = subprocess.run(
        [sys.executable, os.path.join(BIN, "executor"), "--driver-url", foreign_driver.url,
         "--executor-id", "1", "--hostname", "127.0.0.1", "--cores", "1", "--app-id", "app",
         "--insecure"],
        capture_output=True, text=True, timeout=30, env={**os.environ, "ZSCHED_REGISTRATION_TIMEOUT": "10"})
    assert result.returncode == 1, result.stderr
    assert "the driver's settings do not parse here" in result.stderr
    assert "a_setting_of_a_later_version" in result.stderr and "Traceback" not in result.stderr


def test_a_client_of_another_version_raises_a_config_error_and_leaves_no_thread(foreign_driver):
    before = set(threading.enumerate())
    with pytest.raises(ConfigError, match="the driver's settings do not parse here"):
        zsched.Client(foreign_driver.url, insecure=True, timeout=10)
    assert set(threading.enumerate()) <= before


@pytest.mark.parametrize("settings", [FOREIGN, {"max_failures": "many"}, []])
def test_config_from_driver_names_the_problem(settings):
    with pytest.raises(ConfigError, match="another version of zsched"):
        zsched.config.Config.from_driver(settings)
