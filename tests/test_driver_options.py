"""The driver's options (``zsched/driver/options.py``): one frozen ``DriverOptions``, built
alike from ``bin/driver``'s command line and from ``LocalCluster``'s keyword arguments,
checked as at start-up (a bad value is a ``ConfigError`` naming the option), with the
secret file created if missing and the executors at start clamped to the dynamic
allocation bounds."""
import dataclasses
import os
import stat

import pytest

from zsched import LocalCluster
from zsched.config import Config
from zsched.driver.cli import build_parser, options_from_args
from zsched.driver.options import DriverOptions, check_ipc_path, local_manager, local_options
from zsched.dynamic_allocation import DynamicAllocationPolicy
from zsched.errors import ConfigError

pytestmark = pytest.mark.unit


def from_cli(*argv):
    """The options ``bin/driver ARGV`` runs with."""
    return options_from_args(build_parser().parse_args(["--host", "127.0.0.1", *argv]))


def from_keywords(n_executors=2, cores_per_executor=1, *, host="127.0.0.1", port=0,
                  secret_file=None, insecure=False, app_id=None, dynamic_allocation=False,
                  min_executors=0, max_executors=None, initial_executors=None,
                  backlog_timeout=1.0, executor_idle_timeout=60.0, **settings):
    """The options ``LocalCluster(...)`` gives the driver it runs, from the same keywords."""
    policy = None
    if dynamic_allocation:
        policy = DynamicAllocationPolicy(min_executors, max_executors, backlog_timeout,
                                         executor_idle_timeout)
    return local_options(Config.from_mapping(settings), n_executors, cores_per_executor,
                         host=host, dynamic_allocation=policy,
                         initial_executors=initial_executors, secret_file=secret_file,
                         insecure=insecure, port=port, app_id=app_id)


def summary(options):
    """What a driver is made from, comparable between two ``DriverOptions``."""
    manager, policy = options.cluster_manager, options.dynamic_allocation
    return {
        "config": options.config, "host": options.host, "port": options.port,
        "app_id": options.app_id, "secure": options.keys is not None,
        "secret_file": options.secret_file, "initial_executors": options.initial_executors,
        "manager": None if manager is None else (type(manager), manager.cores_per_executor,
                                                 manager.hostname),
        "dynamic": None if policy is None else (policy.min_executors, policy.max_executors,
                                                policy.backlog_timeout, policy.idle_timeout),
    }


def test_options_are_frozen():
    options = DriverOptions(Config())
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.port = 1


def test_cli_and_keywords_give_the_same_options(tmp_path):
    secret = str(tmp_path / "secret")
    cli = from_cli("--port", "0", "--app-id", "app-1", "--secret-file", secret, "--local", "3",
                   "--cores-per-executor", "2", "--conf", "max_message_size=1000000",
                   "--conf", "max_failures=7")
    keywords = from_keywords(3, 2, app_id="app-1", secret_file=secret,
                             max_message_size=1000000, max_failures=7)
    assert summary(cli) == summary(keywords)
    assert cli.config.max_message_size == 1000000
    assert cli.config.max_failures == 7
    assert cli.initial_executors == 3
    assert cli.keys is not None


def test_cli_and_keywords_agree_on_dynamic_allocation(tmp_path):
    secret = str(tmp_path / "secret")
    cli = from_cli("--secret-file", secret, "--local", "5", "--dynamic-allocation",
                   "--min-executors", "1", "--max-executors", "3", "--backlog-timeout", "2",
                   "--executor-idle-timeout", "30")
    keywords = from_keywords(5, secret_file=secret, dynamic_allocation=True, min_executors=1,
                             max_executors=3, backlog_timeout=2.0, executor_idle_timeout=30.0)
    assert summary(cli) == summary(keywords)
    assert cli.initial_executors == 3  # clamped to --max-executors


def test_cli_and_keywords_agree_when_insecure(tmp_path):
    cli = from_cli("--insecure", "--local", "1")
    keywords = from_keywords(1, insecure=True)
    assert summary(cli) == summary(keywords)
    assert cli.keys is None and cli.secret_file is None


def test_a_missing_secret_file_is_created_private(tmp_path):
    secret = tmp_path / "secret"
    options = DriverOptions.create(Config(), secret_file=str(secret))
    assert options.keys is not None
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    again = DriverOptions.create(Config(), secret_file=str(secret))
    assert again.keys == options.keys  # the same secret, read back


def test_an_uncreatable_secret_file_is_refused_naming_it(tmp_path):
    (tmp_path / "a-file").write_text("")
    secret = str(tmp_path / "a-file" / "secret")
    with pytest.raises(ConfigError, match="secret file"):
        DriverOptions.create(Config(), secret_file=secret)


def test_dynamic_allocation_needs_a_cluster_manager():
    policy = DynamicAllocationPolicy(0, 2, 1.0, 60.0)
    with pytest.raises(ConfigError, match="--dynamic-allocation"):
        DriverOptions.create(Config(), insecure=True, dynamic_allocation=policy)
    with pytest.raises(ConfigError, match="--dynamic-allocation"):
        from_cli("--insecure", "--dynamic-allocation")


@pytest.mark.parametrize("argv, named", [
    (["--port", "-1"], "--port"),
    (["--port", "70000"], "--port"),
    (["--local", "-2"], "--local"),
    (["--cores-per-executor", "0"], "--cores-per-executor"),
    (["--backlog-timeout", "nope"], "--backlog-timeout"),
    (["--bogus"], "--bogus"),
])
def test_the_cli_refuses_bad_values_naming_the_option(argv, named, capsys):
    with pytest.raises(SystemExit) as exc:
        from_cli("--insecure", *argv)
    assert exc.value.code == 1
    assert named in capsys.readouterr().err


@pytest.mark.parametrize("argv, named", [
    (["--conf", "max_message_size=-1"], "max_message_size"),
    (["--conf", "no_such_setting=1"], "no_such_setting"),
    (["--conf", "novalue"], "--conf"),
    (["--local", "1", "--dynamic-allocation", "--min-executors", "3", "--max-executors", "1"],
     "--min-executors"),
    (["--ssh-option", "A=b"], "--ssh-option"),
    (["--partition", "p"], "--partition"),
    (["--app-id", "a\nb"], "app id"),
    (["--app-id", "a;rm -rf x"], "app id"),
    (["--app-id", "x" * 65], "app id"),
])
def test_options_from_the_cli_refuse_bad_values_naming_them(argv, named):
    with pytest.raises(ConfigError, match=named):
        from_cli("--insecure", *argv)


@pytest.mark.parametrize("keywords, named", [
    ({"n_executors": -1}, "n_executors"),
    ({"cores_per_executor": 0}, "cores_per_executor"),
    ({"port": 70000}, "port"),
    ({"min_executors": 3, "max_executors": 1}, "min_executors"),
    ({"backlog_timeout": -1}, "backlog_timeout"),
    ({"max_message_size": -1}, "max_message_size"),
    ({"no_such_setting": 1}, "no_such_setting"),
])
def test_local_cluster_refuses_bad_keywords_naming_them(keywords, named):
    # refused before any process starts
    with pytest.raises(ConfigError, match=named):
        LocalCluster(insecure=True, **keywords)


def test_the_same_bad_setting_is_refused_alike_by_both(tmp_path):
    with pytest.raises(ConfigError) as cli:
        from_cli("--insecure", "--conf", "tasks_per_core=0")
    with pytest.raises(ConfigError) as keywords:
        from_keywords(insecure=True, tasks_per_core=0)
    assert str(cli.value).replace("'0'", "0") == str(keywords.value)


def test_an_ipc_path_too_long_or_without_a_directory_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="--ipc-path"):
        check_ipc_path(str(tmp_path / ("x" * 200)))
    with pytest.raises(ConfigError, match="--ipc-path"):
        check_ipc_path(str(tmp_path / "missing" / "s"))
    with pytest.raises(ConfigError, match="--ipc-path"):
        DriverOptions.create(Config(), insecure=True, ipc_path=str(tmp_path / "missing" / "s"))
    check_ipc_path(str(tmp_path / "s"))  # a free path in a directory: fine


def test_a_local_manager_on_every_interface_names_this_host():
    import socket
    assert local_manager("0.0.0.0", 1, "INFO").hostname == socket.gethostname()
    assert local_manager("127.0.0.1", 4, "INFO").cores_per_executor == 4


def test_a_secure_driver_needs_a_secret_file():
    with pytest.raises(ConfigError, match="secret file"):
        DriverOptions.create(Config())
