"""Credentials that do one job each: the client credential, executor keys, relief tokens.

Real drivers, executors and clients. A hostile holder of the client credential crafts the
messages an executor would send; executor keys are captured on their way to a host by a
stand-in for ``ssh`` (the driver's own hand-over, nothing faked in the driver).
"""
import os
import stat
import subprocess
import sys

import pytest
import zmq

import zsched
from conftest import BIN, FAKE_SSH, wait_for
from zsched import protocol as p
from zsched.credentials import CLIENT, ExecutorKeys, parse_credential
from zsched.errors import ConfigError
from zsched.security import ZAP_ENDPOINT, CurveKeys, HandshakeWatch, ZapHandler, load_keys, make_client

pytestmark = pytest.mark.timeout(120)
WAIT = 20.0


def square(x):
    return x * x


# ---------------------------------------------------------------- units

def test_a_credential_is_one_line_that_reads_back():
    keys = CurveKeys.from_secret(os.urandom(32))
    issued = ExecutorKeys(keys.server_public).issue("7")
    for credential in (keys.client_credential, issued):
        line = credential.line()
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert parse_credential(line) == credential
    assert issued.executor_id == "7" and keys.client_credential.role == CLIENT


@pytest.mark.parametrize("text", [b"", b"zsched-credential", b"zsched-credential client x y",
                                  b"zsched-credential admin " + b"a" * 40 + b" " + b"b" * 40,
                                  b"zsched-credential executor 1 " + b"a" * 40])
def test_a_malformed_credential_is_a_config_error(text):
    with pytest.raises(ConfigError, match="not a zsched credential"):
        parse_credential(text)


def test_the_zap_handler_names_each_credential_and_refuses_a_revoked_key(caplog):
    keys = CurveKeys.from_secret(os.urandom(32))
    book = ExecutorKeys(keys.server_public)
    first, second = book.issue("1"), book.issue("2")
    context = zmq.Context()
    handler = ZapHandler(context, keys, book)
    asker = context.socket(zmq.REQ)
    asker.connect(ZAP_ENDPOINT)

    def ask(public):
        asker.send_multipart([b"1.0", b"1", b"", b"10.0.0.1", b"", b"CURVE",
                              zmq.utils.z85.decode(public)])
        while not handler.socket.poll(0):
            asker.poll(10)
        handler.handle()
        reply = asker.recv_multipart()
        return reply[4] if reply[2] == b"200" else None

    try:
        assert ask(keys.client_public) == b"administrator"
        assert ask(keys.client_credential.public_key) == b"client"
        assert ask(first.public_key) == b"executor:1"
        assert ask(second.public_key) == b"executor:2"
        assert book.first_registration("1") and not book.first_registration("1")
        book.revoke("1")
        with caplog.at_level("WARNING", logger="zsched.security"):
            assert ask(first.public_key) is None
        assert "revoked" in caplog.text
        assert ask(zmq.curve_keypair()[0]) is None
        assert ask(second.public_key) == b"executor:2"
    finally:
        asker.close(linger=0)
        handler.close()
        context.term()


# ---------------------------------------------------------------- the client credential

@pytest.fixture
def start_executor_with(tmp_path):
    """Start ``bin/executor`` for a driver with these arguments; it must register."""
    started = []

    def start(driver, executor_id, *args):
        proc = subprocess.Popen(
            [sys.executable, os.path.join(BIN, "executor"), "--driver-url", driver.url,
             "--executor-id", executor_id, "--hostname", "127.0.0.1", "--cores", "1",
             "--app-id", "cred-app", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started.append(proc)
        with zsched.Client(driver.url, secret_file=driver.secret_file, timeout=WAIT) as client:
            wait_for(lambda: executor_id in client.executor_ids(), timeout=WAIT,
                     message=f"executor {executor_id} to register")
        return proc

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(WAIT)

@pytest.fixture
def secure_driver(driver_factory, tmp_path):
    credential = tmp_path / "client-credential"
    driver = driver_factory("--secret-file", str(tmp_path / "secret"), "--app-id", "cred-app",
                            "--client-credential", str(credential))
    driver.client_credential = str(credential)
    return driver


def test_bin_driver_writes_a_client_credential_that_submits_tasks(secure_driver, start_executor_with):
    path = secure_driver.client_credential
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert open(path).read().count("zsched-credential client ") == 1
    assert secure_driver.secret_file not in open(path).read()
    start_executor_with(secure_driver, "e1", "--secret-file", secure_driver.secret_file)
    with zsched.Client(secure_driver.url, secret_file=path, timeout=WAIT) as client:
        assert client.submit(square, 7).result(WAIT) == 49
        assert client.executor_ids() == ["e1"]
        assert client.status()["executors"][0]["id"] == "e1"


def test_an_executor_given_the_client_credential_is_refused_and_exits_non_zero(secure_driver):
    result = subprocess.run(
        [sys.executable, os.path.join(BIN, "executor"), "--driver-url", secure_driver.url,
         "--executor-id", "intruder", "--hostname", "127.0.0.1", "--cores", "1",
         "--app-id", "cred-app", "--secret-file", secure_driver.client_credential],
        capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "refused" in result.stderr and "client's" in result.stderr, result.stderr
    with zsched.Client(secure_driver.url, secret_file=secure_driver.secret_file, timeout=WAIT) as client:
        assert client.executor_ids() == []


class Raw:
    """A DEALER presenting ``keys``: it sends what it likes and records what comes back."""

    def __init__(self, context, url, keys):
        self.sock = context.socket(zmq.DEALER)
        self.sock.linger = 0
        make_client(self.sock, keys)
        self.sock.connect(url)

    def send(self, msg):
        self.sock.send(p.encode(msg))

    def answers(self, wait=0.5):
        got = []
        while self.sock.poll(int(wait * 1000)):
            got.append(p.decode(self.sock.recv()))
            wait = 0.05
        return got


def test_a_client_credential_can_neither_register_nor_attach_as_an_executors_relief(
        secure_driver, start_executor_with):
    """The messages a hostile client would craft: a registration (before and after its
    hello), an executor's hello, and an AttachRelief with every public fact of a running
    executor. None is taken; the executor keeps its tasks. (Two cores: an executor that
    attaches no relief connection of its own.)"""
    start_executor_with(secure_driver, "e1", "--secret-file", secure_driver.secret_file, "--cores", "2")
    with zsched.Client(secure_driver.url, secret_file=secure_driver.secret_file, timeout=WAIT) as admin:
        [executor] = admin.status()["executors"]
        context = zmq.Context()
        try:
            hostile = Raw(context, secure_driver.url, load_keys(secure_driver.client_credential))
            hostile.send(p.RegisterExecutor("intruder", "h", 1, "cred-app", os.getpid()))
            hostile.send(p.ExecutorHello(os.getpid()))
            refusals = [m for m in hostile.answers() if isinstance(m, p.RegisterExecutorFailed)]
            assert len(refusals) == 2 and all("client's" in m.reason for m in refusals), refusals
            hostile.send(p.ClientHello(os.getpid()))
            [welcome] = [m for m in hostile.answers() if isinstance(m, p.ClientWelcome)]
            for token in (b"", bytes(16), os.urandom(16)):
                hostile.send(p.AttachRelief(welcome.incarnation, executor["id"], executor["pid"], token))
            hostile.send(p.Heartbeat(welcome.incarnation, executor["id"], {}))
            hostile.send(p.StatusUpdates(welcome.incarnation, 0.0, [[1, 1, 1, b"x"]]))
            hostile.send(p.RegisterExecutor("intruder", "h", 1, "cred-app", os.getpid()))
            assert not [m for m in hostile.answers() if isinstance(m, (p.LaunchTasks, p.HeartbeatAck,
                                                                       p.RegisteredExecutor))]
            assert admin.status()["executors"][0]["relief"] is False
            assert admin.executor_ids() == ["e1"]
            assert [f.result(WAIT) for f in [admin.submit(square, x) for x in range(5)]] == \
                [x * x for x in range(5)]
        finally:
            context.destroy(linger=0)


def test_an_executors_credential_cannot_connect_a_client(tmp_path):
    keys = CurveKeys.from_secret(os.urandom(32))
    path = tmp_path / "executor-credential"
    path.write_bytes(ExecutorKeys(keys.server_public).issue("3").line())
    with pytest.raises(ConfigError, match="executor 3 cannot connect a client"):
        zsched.Client("tcp://127.0.0.1:9", secret_file=str(path), timeout=1)


def test_client_credential_needs_a_secure_driver(tmp_path):
    result = subprocess.run([sys.executable, os.path.join(BIN, "driver"), "--insecure",
                             "--client-credential", str(tmp_path / "c")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "--client-credential" in result.stderr
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("in_process", [False, True])
def test_local_cluster_gives_a_client_credential(in_process):
    with zsched.LocalCluster(n_executors=1, in_process=in_process) as cluster:
        path = cluster.client_credential()
        assert path == cluster.client_credential()
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        with zsched.Client(cluster.address, secret_file=path, timeout=WAIT) as client:
            assert client.submit(square, 3).result(WAIT) == 9
    with zsched.LocalCluster(n_executors=0, insecure=True) as cluster:
        with pytest.raises(ConfigError, match="insecure"):
            cluster.client_credential()


# ---------------------------------------------------------------- executor keys

@pytest.fixture
def keyed_driver(driver_factory, tmp_path):
    """A secure driver that starts two executors on a host over "ssh": the stand-in keeps
    each executor's credential (in ``driver.captured``) and starts nothing."""
    bin_dir, capture = tmp_path / "bin", tmp_path / "captured"
    bin_dir.mkdir()
    capture.mkdir()
    ssh = bin_dir / "ssh"
    ssh.write_text(FAKE_SSH)
    ssh.chmod(0o755)
    hosts = tmp_path / "hosts"
    hosts.write_text("somehost 2\n")
    driver = driver_factory(
        "--secret-file", str(tmp_path / "secret"), "--app-id", "keyed", "--host", "127.0.0.1",
        "--hosts", str(hosts), "--conf", "registration_timeout=60",
        env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CAPTURE": str(capture)})
    driver.captured = capture
    return driver


def captured_credentials(driver, n):
    def found():
        files = sorted(driver.captured.glob("*.credential"))
        return files if len(files) >= n else None
    files = wait_for(found, timeout=WAIT, message=f"{n} credentials handed over")
    return {c.executor_id: c for c in (parse_credential(f.read_bytes()) for f in files)}


def test_an_executor_key_registers_its_executor_once_and_dies_with_it(keyed_driver):
    credentials = captured_credentials(keyed_driver, 2)
    assert set(credentials) == {"1", "2"}
    secret = open(keyed_driver.secret_file, "rb").read().strip()
    assert all(secret not in c.line() for c in credentials.values())
    context = zmq.Context()
    try:
        one = CurveKeys.from_credential(credentials["1"])
        wrong_id = Raw(context, keyed_driver.url, one)
        wrong_id.send(p.RegisterExecutor("2", "somehost", 1, "keyed", 1))
        [refused] = wrong_id.answers()
        assert isinstance(refused, p.RegisterExecutorFailed) and "executor 1's" in refused.reason
        wrong_id.send(p.ClientHello(1))  # an executor key is no client's
        assert wrong_id.answers() == []
        first = Raw(context, keyed_driver.url, one)
        first.send(p.RegisterExecutor("1", "somehost", 1, "keyed", 1))
        [registered] = first.answers()
        assert isinstance(registered, p.RegisteredExecutor)
        again = Raw(context, keyed_driver.url, one)
        again.send(p.RegisterExecutor("1", "somehost", 1, "keyed", 1))
        [refused] = again.answers()
        assert isinstance(refused, p.RegisterExecutorFailed), refused
        # its relief connection: the same key, with the token it alone was given
        relief = Raw(context, keyed_driver.url, one)
        relief.send(p.AttachRelief(registered.incarnation, "1", 1, registered.relief_token))
        with zsched.Client(keyed_driver.url, secret_file=keyed_driver.secret_file, timeout=WAIT) as admin:
            wait_for(lambda: admin.status()["executors"][0]["relief"], timeout=WAIT,
                     message="the relief connection attached")
            first.send(p.RemoveExecutor("1", "leaving", False))
            wait_for(lambda: "1" not in admin.executor_ids(), timeout=WAIT, message="executor 1 gone")
        # the key is revoked: a new connection presenting it is refused at the handshake
        late = context.socket(zmq.DEALER)
        late.linger = 0
        make_client(late, one)
        watch = HandshakeWatch(late, has_secret=True)
        late.connect(keyed_driver.url)
        late.send(p.encode(p.RegisterExecutor("1", "somehost", 1, "keyed", 1)))
        wait_for(lambda: watch.check(), timeout=WAIT, message="the handshake refused")
        watch.close()
        assert not late.poll(200)
        wait_for(lambda: "executor key was revoked" in keyed_driver.stderr_so_far(), timeout=WAIT,
                 message="the driver to say why")
    finally:
        context.destroy(linger=0)


# ---------------------------------------------------------------- nothing secret where tasks run

def environ_and_cmdline(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        environ = f.read()
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = f.read()
    return environ + b"\0" + cmdline


def task_environment():
    return dict(os.environ)


@pytest.mark.parametrize("link", ["pipe", "socket"])
def test_local_executors_and_their_tasks_hold_nothing_secret(link, monkeypatch):
    monkeypatch.setenv("ZSCHED_SECRET", "a" * 40)  # the driver's environment: not passed on
    with zsched.LocalCluster(n_executors=2, local_executor_link=link) as cluster:
        secret = open(cluster.secret_file, "rb").read().strip()
        with cluster.client() as client:
            environ = client.submit(task_environment).result(WAIT)
            executors = client.status()["executors"]
        assert len(executors) == 2
        for executor in executors:
            seen = environ_and_cmdline(executor["pid"])
            assert secret not in seen and b"a" * 40 not in seen
            assert b"ZSCHED_SECRET" not in seen and b"zsched-credential" not in seen
            if link == "socket":
                assert b"--credential-fd" in seen
        assert not any(name.startswith("ZSCHED_SECRET") for name in environ)
        assert not any(secret.decode() in value or "zsched-credential" in value
                       for value in environ.values())


def test_a_socket_executor_reads_its_credential_once_and_closes_the_pipe():
    with zsched.LocalCluster(n_executors=1, local_executor_link="socket") as cluster:
        with cluster.client() as client:
            [executor] = client.status()["executors"]
        cmdline = open(f"/proc/{executor['pid']}/cmdline", "rb").read().split(b"\0")
        fd = cmdline[cmdline.index(b"--credential-fd") + 1].decode()
        assert not os.path.exists(f"/proc/{executor['pid']}/fd/{fd}") or \
            not os.readlink(f"/proc/{executor['pid']}/fd/{fd}").startswith("pipe:")


def test_a_task_holds_no_secret_in_its_subprocesses():
    def child_environment():
        return subprocess.run(["env"], capture_output=True, text=True).stdout
    with zsched.LocalCluster(n_executors=1) as cluster:
        secret = open(cluster.secret_file).read().strip()
        with cluster.client() as client:
            env = client.submit(child_environment).result(WAIT)
    assert secret not in env and "ZSCHED_SECRET" not in env and "zsched-credential" not in env
