"""The ZMTP heartbeat options of every zsched connection, in one place."""
import zmq


def heartbeat_options(config):
    """The socket options for ``config``'s ``zmq_heartbeat_*``: ping every interval, drop a
    silent peer after the timeout, and ask the peer to drop this side after as long."""
    timeout_ms = int(config.zmq_heartbeat_timeout * 1000)
    return {zmq.HEARTBEAT_IVL: int(config.zmq_heartbeat_interval * 1000),
            zmq.HEARTBEAT_TIMEOUT: timeout_ms,
            zmq.HEARTBEAT_TTL: timeout_ms}


def set_heartbeats(sock, config):
    """Give ``sock`` the heartbeats of ``config``, for the connections it makes from now."""
    for option, value in heartbeat_options(config).items():
        sock.set(option, value)
