"""Security of the bus, with real drivers, executors and clients on loopback.

Contract (DESIGN.md): authenticated and encrypted by default (CURVE keys derived from a
shared secret file, created mode 0600 by the driver when missing); only peers holding
the secret can register or submit; anything else is refused quickly and never stops the
driver; ``--insecure`` turns security off, loudly.
"""
import os
import re
import secrets
import stat

import psutil
import pytest
import zmq

import zsched
from zsched.credentials import ExecutorKeys
from conftest import run_executor, wait_for
from zsched import protocol as p
from zsched.security import CurveKeys

pytestmark = pytest.mark.timeout(120)

# Executors and clients would give up registering only after an hour: one that ends
# within its test's bounds was refused by the handshake, not by waiting.
REGISTRATION_TIMEOUT = 3600
SLOW_REGISTRATION = {"ZSCHED_REGISTRATION_TIMEOUT": str(REGISTRATION_TIMEOUT)}


@pytest.fixture(autouse=True)
def no_secret_in_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("ZSCHED_SECRET", raising=False)
    monkeypatch.delenv("ZSCHED_SECRET_FILE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def write_secret(path, content=None):
    content = content or secrets.token_hex(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(content + "\n")
    return content


def executor_args(url, executor_id="9", app_id=None, secret_file=None, insecure=False):
    args = ["--driver-url", url, "--executor-id", executor_id, "--hostname", "127.0.0.1",
            "--cores", "1", "--app-id", app_id or "sec-app"]
    if secret_file is not None:
        args += ["--secret-file", secret_file]
    if insecure:
        args.append("--insecure")
    return args


def assert_serves(url, secret_file, executors=(), insecure=False):
    """A client holding the secret (or, ``insecure``, none) connects, sees the executors
    and (if any) runs a task."""
    with zsched.Client(url, secret_file=secret_file, insecure=insecure, timeout=30) as client:
        assert client.executor_ids() == sorted(executors)
        if executors:
            assert client.submit(lambda a, b: a + b, 40, 2).result(timeout=30) == 42


def assert_refused_quickly(url, secret_file, insecure=False):
    """The client is refused by the handshake: with an hour to connect, only a refusal ends
    it within the test's bound, and its message says so."""
    with pytest.raises(zsched.DriverConnectionError) as info:
        client = zsched.Client(url, secret_file=secret_file, insecure=insecure,
                               timeout=REGISTRATION_TIMEOUT)
        client.shutdown()  # only reached when the test is failing
    assert "authentic" in str(info.value).lower(), info.value
    return info.value


@pytest.fixture
def secure_driver(driver_factory, tmp_path):
    """A secure driver with one local executor ("1"), and its secret file."""
    secret = str(tmp_path / "secret")
    driver = driver_factory("--local", "1", "--secret-file", secret, "--app-id", "sec-app")
    with zsched.Client(driver.url, secret_file=secret, timeout=30) as client:
        wait_for(lambda: client.executor_ids() == ["1"], timeout=20, message="executor 1")
    return driver, secret


# ---------------------------------------------------------------- the secret file

def test_driver_creates_secret_file_0600_and_keeps_it_off_command_lines(driver_factory, tmp_path):
    secret = tmp_path / "private" / "secret"
    assert not secret.exists()
    driver = driver_factory("--local", "2", "--secret-file", str(secret))
    assert driver.secret_file == str(secret)
    assert secret.is_file()
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    content = secret.read_text().strip()
    assert len(content) >= 32

    with zsched.Client(driver.url, secret_file=str(secret), timeout=30) as client:
        wait_for(lambda: client.executor_ids() == ["1", "2"], timeout=20,
                 message="both executors to register")
        pids = [e["pid"] for e in client.status()["executors"]]
        assert client.submit(lambda: "ok").result(timeout=30) == "ok"
    processes = [psutil.Process(driver.proc.pid)] + [psutil.Process(pid) for pid in pids]
    processes += psutil.Process(driver.proc.pid).children(recursive=True)
    for proc in processes:
        cmdline = " ".join(proc.cmdline())
        assert content not in cmdline, f"the secret is on the command line of {proc.pid}"
    assert content not in (driver.proc.args if isinstance(driver.proc.args, str)
                           else " ".join(driver.proc.args))
    assert secret.read_text().strip() == content  # not rewritten while in use


def test_existing_secret_file_is_used_not_replaced(driver_factory, tmp_path):
    secret = tmp_path / "secret"
    content = write_secret(secret)
    driver = driver_factory("--secret-file", str(secret))
    assert secret.read_text().strip() == content
    # Another file with the same secret is as good: the keys come from the content.
    copy = tmp_path / "copy"
    write_secret(copy, content)
    assert_serves(driver.url, str(copy))


def test_secret_through_environment(driver_factory, tmp_path, monkeypatch):
    secret = tmp_path / "secret"
    content = write_secret(secret)
    driver = driver_factory("--secret-file", str(secret))
    monkeypatch.setenv("ZSCHED_SECRET_FILE", str(secret))
    assert_serves(driver.url, None)
    monkeypatch.delenv("ZSCHED_SECRET_FILE")
    monkeypatch.setenv("ZSCHED_SECRET", content)
    assert_serves(driver.url, None)


# ---------------------------------------------------------------- clients

def test_client_with_wrong_secret_is_refused_quickly(secure_driver, tmp_path):
    driver, secret = secure_driver
    wrong = tmp_path / "wrong"
    write_secret(wrong)
    assert_refused_quickly(driver.url, str(wrong))
    assert driver.proc.poll() is None
    assert_serves(driver.url, secret, executors=["1"])


def test_client_without_secret_is_refused_quickly(secure_driver):
    driver, secret = secure_driver
    assert_refused_quickly(driver.url, None, insecure=True)
    assert driver.proc.poll() is None
    assert_serves(driver.url, secret, executors=["1"])


def test_client_with_secret_refuses_an_insecure_driver(driver_factory, tmp_path):
    # A client that expects security must not silently fall back to an open bus.
    driver = driver_factory("--insecure")
    secret = tmp_path / "secret"
    write_secret(secret)
    assert_refused_quickly(driver.url, str(secret))


def test_client_with_unreadable_secret_file_gets_a_clear_error(secure_driver, tmp_path):
    driver, _ = secure_driver
    missing = tmp_path / "missing"
    with pytest.raises(zsched.ConfigError, match=re.escape(str(missing))):
        zsched.Client(driver.url, secret_file=str(missing), timeout=10)
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(zsched.ConfigError, match="empty"):
        zsched.Client(driver.url, secret_file=str(empty), timeout=10)


def test_insecure_driver_accepts_client_without_secret_and_warns(driver_factory):
    driver = driver_factory("--insecure")
    assert driver.secret_file is None
    assert_serves(driver.url, None, insecure=True)
    assert driver.stop() == 0
    warning = driver.stderr.lower()
    assert "insecure" in warning and "not authenticated" in warning, driver.stderr


# ---------------------------------------------------------------- executors

@pytest.mark.parametrize("secret_kind", ["wrong", "none"])
def test_executor_with_wrong_or_no_secret_exits_1_quickly(secure_driver, tmp_path, secret_kind):
    driver, secret = secure_driver
    secret_file = None
    if secret_kind == "wrong":
        secret_file = str(tmp_path / "wrong")
        write_secret(secret_file)
    # run_executor fails the test if the executor is still registering after 60 s
    status, out, err = run_executor(*executor_args(driver.url, secret_file=secret_file,
                                                   insecure=secret_kind == "none"),
                                    env=SLOW_REGISTRATION, timeout=60)
    assert status == 1, (out, err)
    assert f"Cannot register with driver: {driver.url}" in err, err
    assert driver.proc.poll() is None
    assert_serves(driver.url, secret, executors=["1"])


def test_executor_with_missing_secret_file_exits_1_naming_it(secure_driver, tmp_path):
    driver, secret = secure_driver
    missing = str(tmp_path / "no-such-secret")
    status, out, err = run_executor(*executor_args(driver.url, secret_file=missing),
                                    env=SLOW_REGISTRATION, timeout=60)
    assert status == 1, (out, err)
    assert missing in err, err
    assert_serves(driver.url, secret, executors=["1"])


def test_executor_with_the_secret_registers(secure_driver, tmp_path):
    driver, secret = secure_driver
    # A wrong app id is refused by the driver's reason: proof the handshake passed.
    status, out, err = run_executor(*executor_args(driver.url, app_id="other",
                                                   secret_file=secret),
                                    env=SLOW_REGISTRATION, timeout=60)
    assert status == 1 and "other" in err and "Cannot register" not in err, err


# ---------------------------------------------------------------- strangers

def stranger_socket(context, url, keys=None):
    sock = context.socket(zmq.DEALER)
    sock.linger = 0
    if keys is not None:
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = keys
    sock.connect(url)
    return sock


JUNK = [
    [b"hello?"],
    [b"\x00" * 64],
    [os.urandom(1000)],
    [b"\x01", b"two frames"],
    [bytes([p.VERSION, p.MsgType.CLIENT_HELLO]) + b"\xc1"],      # broken msgpack
    [p.encode(p.ClientHello(os.getpid()))],                      # a well-formed hello
    [p.encode(p.RegisterExecutor("666", "evil", 1, "sec-app", os.getpid()))],
]


def send_junk_and_listen(sock, listen=2.0):
    for frames in JUNK:
        try:
            sock.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            pass  # no connection accepted: the stranger cannot even queue
    return sock.poll(int(listen * 1000), zmq.POLLIN)


def assert_stranger_hears_nothing(driver, secret, curve_keys=None):
    context = zmq.Context()
    try:
        sock = stranger_socket(context, driver.url, curve_keys)
        assert send_junk_and_listen(sock) == 0, "a stranger heard from a secure driver"
        sock.close()
    finally:
        context.term()
    assert driver.proc.poll() is None
    assert_serves(driver.url, secret, executors=["1"])


def test_stranger_with_plain_dealer_gets_nothing(secure_driver):
    driver, secret = secure_driver
    assert_stranger_hears_nothing(driver, secret)


def test_stranger_with_own_curve_keys_gets_nothing(secure_driver):
    # Even knowing the driver's public key, a peer with its own key pair is refused.
    driver, secret = secure_driver
    with open(secret, "rb") as f:
        server_public = CurveKeys.from_secret(f.read().strip()).server_public
    public, private = zmq.curve_keypair()
    assert_stranger_hears_nothing(driver, secret, (server_public, public, private))
    assert driver.stop() == 0
    assert "refused a connection" in driver.stderr, driver.stderr
    assert "evil" not in driver.stderr  # its RegisterExecutor never reached the driver


def test_insecure_driver_drops_junk_and_keeps_working(driver_factory):
    driver = driver_factory("--insecure")
    context = zmq.Context()
    try:
        sock = stranger_socket(context, driver.url)
        for frames in JUNK[:5]:
            sock.send_multipart(frames)
        assert sock.poll(1000, zmq.POLLIN) == 0  # malformed input gets no answer
        sock.close()
    finally:
        context.term()
    assert driver.proc.poll() is None
    assert_serves(driver.url, None, insecure=True)
    assert driver.stop() == 0
    assert "dropped malformed input" in driver.stderr, driver.stderr


def test_the_zap_handler_remembers_a_bounded_number_of_refused_addresses(monkeypatch, caplog):
    """Each refused address is warned about once; past the limit the handler forgets them
    all, so a flood of addresses cannot grow its memory without end."""
    from zsched import security
    monkeypatch.setattr(security, "REFUSED_ADDRESSES_LIMIT", 2)
    context = zmq.Context()
    keys = CurveKeys.from_secret(secrets.token_bytes(32))
    handler = security.ZapHandler(context, keys, ExecutorKeys(keys.server_public))
    asker = context.socket(zmq.REQ)
    asker.connect(security.ZAP_ENDPOINT)
    try:
        def refuse(address):
            asker.send_multipart([b"1.0", b"1", b"", address, b"", b"CURVE", bytes(32)])
            while not handler.socket.poll(0):
                asker.poll(10)
            handler.handle()
            assert asker.recv_multipart()[2] == b"400"
        with caplog.at_level("WARNING", logger="zsched.security"):
            for address in [b"a", b"b", b"a", b"c", b"a"]:
                refuse(address)
        warned = re.findall(r"refused a connection from (\w)", caplog.text)
        assert warned == ["a", "b", "c", "a"]  # a again once c made the handler forget
    finally:
        asker.close(linger=0)
        handler.close()
        context.term()


@pytest.mark.parametrize("secret", [b"x", b"hunter2", b"a" * 31])
def test_a_secret_shorter_than_32_bytes_is_stretched_with_scrypt(secret):
    from zsched.security import MIN_SECRET_BYTES, stretch
    assert len(secret) < MIN_SECRET_BYTES
    keys = CurveKeys.from_secret(secret)
    assert keys == CurveKeys.from_secret(stretch(secret))  # derived from the stretched form
    assert keys.client_secret != client_key_of(secret)    # not from the short secret itself


def client_key_of(secret):
    """The client's secret key as derived from ``secret`` without stretching."""
    import hashlib
    return zmq.utils.z85.encode(hashlib.sha256(b"zsched client key\0" + secret).digest())


def test_a_secret_of_32_bytes_or_more_keeps_its_keys():
    for secret in (secrets.token_hex(32).encode(), b"b" * 32):
        assert CurveKeys.from_secret(secret).client_secret == client_key_of(secret)
